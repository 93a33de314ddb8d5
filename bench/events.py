#!/usr/bin/env python3
"""Issue 35's speed figures for bucket events, on one fresh single-node server:

* small PUT ops/s into a bucket with a webhook configured (every PUT makes an event) against a
  bucket without one, same server, same client (`lode bench small`), runs alternating;
* the time from a PUT to its event arriving at a local webhook receiver
  (`compat-tests/webhook_receiver.py`, its own process): during the bursts (arrival minus the
  record's `eventTime`, the commit's time: the backlog a burst builds shows here), and for PUTs
  paced at 200/s through boto3 (arrival minus the PUT's acknowledgement), p50 and p99.

    python3 bench/events.py [--rounds 3] [--objects 5000] [--ceph-conf DIR/ceph.conf]

With --nginx the webhook is Debian's nginx answering 200 to every POST (one worker process, an
access log line per event): Lode's own delivery cost, with a receiver that costs little CPU;
only the PUT rates and CPU are reported then.

With --ceph-conf the server is a cluster-mode gateway over that Ceph cluster (a fresh RADOS
namespace of the pools lode-bench-index and lode-bench-data).

Check `uptime` and `vmstat 1 5` before (a quiet machine), and run nothing else meanwhile.
"""

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LODE = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/lode-target")), "release", "lode")
AK, SK = "EVENTSBENCHKEY", "events-bench-secret-0123456789"


def start(tmp, receiver_port, ceph_conf=None):
    cfg = os.path.join(tmp, "lode.toml")
    with open(cfg, "w") as f:
        if not ceph_conf:
            f.write('[[datapath.devices]]\npath = "dev0.img"\nsize = "4GiB"\n')
        f.write(f'[notify.hook]\ntype = "webhook"\nurl = "http://127.0.0.1:{receiver_port}/"\n')
    env = dict(os.environ, LODE_ACCESS_KEY=AK, LODE_SECRET_KEY=SK, LODE_LOG="warn")
    cluster = []
    if ceph_conf:
        env["LODE_MASTER_KEY"] = os.urandom(32).hex()
        cluster = ["--cluster", "ceph", "--ceph-conf", ceph_conf, "--index-pool", "lode-bench-index",
                   "--data-pool", "lode-bench-data", "--namespace", f"events-{os.getpid()}-{int(time.time())}"]
    p = subprocess.Popen([LODE, "serve", "--config", cfg, "--data-dir", os.path.join(tmp, "data"),
                          "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", *cluster],
                         stdout=subprocess.PIPE, stderr=open(os.path.join(tmp, "lode.log"), "wb"), env=env)
    for line in p.stdout:
        m = re.search(r"S3 endpoint : (http://127\.0\.0\.1:\d+)", line.decode())
        if m:
            endpoint = m.group(1)
        if "AWS_DEFAULT_REGION" in line.decode():
            return p, endpoint
    raise RuntimeError("lode did not start")


def bench(endpoint, bucket, objects, out):
    env = dict(os.environ, AWS_ACCESS_KEY_ID=AK, AWS_SECRET_ACCESS_KEY=SK)
    subprocess.run([LODE, "bench", "small", "--endpoint", endpoint, "--bucket", bucket, "--objects", str(objects),
                    "--json", out], env=env, check=True, capture_output=True)
    with open(out) as f:
        r = json.load(f)
    return r["classes"]["put"]["ops_per_sec"]


def cpu(pid):
    """CPU seconds (user + system) process `pid` and its children (nginx's worker) used so
    far (0 once it is gone)."""
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        kids = open(f"/proc/{pid}/task/{pid}/children").read().split()
    except OSError:
        return 0.0
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK") + sum(cpu(int(k)) for k in kids)


def rate_summary(rates, cpu_s):
    """The PUT rates of both arms, their medians and ratio, and the median CPU per run."""
    mp, me = statistics.median(rates["plain"]), statistics.median(rates["evented"])
    return {
        "put_ops_per_sec_plain": rates["plain"], "put_ops_per_sec_evented": rates["evented"],
        "median_plain": round(mp), "median_evented": round(me), "ratio": round(me / mp, 3),
        "cpu_s_per_run_server_receiver_median": {
            b: [round(statistics.median(x[0] for x in v), 2), round(statistics.median(x[1] for x in v), 2)]
            for b, v in cpu_s.items()},
    }


def drain(events, n, timeout=600):
    deadline = time.time() + timeout
    while time.time() < deadline and sum(1 for _ in open(events)) < n:
        time.sleep(0.2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--objects", type=int, default=5000)
    ap.add_argument("--ceph-conf", help="run a cluster-mode gateway over this Ceph cluster")
    ap.add_argument("--nginx", action="store_true", help="nginx as the webhook (see above)")
    ap.add_argument("--receiver-down", action="store_true",
                    help="stop the receiver during the PUT runs (the write path's own cost: events "
                         "wait in the outbox; they are delivered once it is back)")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="lode-events-bench.")
    events = os.path.join(tmp, "events.jsonl")
    if a.nginx:
        import socket
        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            port = sk.getsockname()[1]
        conf = os.path.join(tmp, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"daemon off; worker_processes 1; pid {tmp}/nginx.pid; error_log {tmp}/nginx.err;\n"
                    "events { worker_connections 1024; }\n"
                    f"http {{ log_format one '$request_length'; access_log {events} one;\n"
                    f"  client_body_temp_path {tmp}; proxy_temp_path {tmp}; fastcgi_temp_path {tmp};\n"
                    f"  uwsgi_temp_path {tmp}; scgi_temp_path {tmp};\n"
                    f"  server {{ listen 127.0.0.1:{port}; location / {{ return 200; }} }} }}\n")
        open(events, "w").close()
        rcv = subprocess.Popen(["/usr/sbin/nginx", "-c", conf, "-p", tmp])
        time.sleep(0.5)
    else:
        rcv = subprocess.Popen([sys.executable, os.path.join(ROOT, "compat-tests", "webhook_receiver.py"), events, "0"])
        while not (os.path.exists(events + ".port") and open(events + ".port").read()):
            time.sleep(0.05)
        port = int(open(events + ".port").read())
    srv, endpoint = start(tmp, port, a.ceph_conf)
    try:
        import boto3
        s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=AK, aws_secret_access_key=SK,
                          region_name="us-east-1")
        # A fresh pair of buckets per round: every run writes new keys (a second run over the
        # same keys would measure overwrites, a slower path in cluster mode).
        for r in range(a.rounds):
            for b in ("plain", "evented"):
                s3.create_bucket(Bucket=f"{b}-{r}")
            s3.put_bucket_notification_configuration(Bucket=f"evented-{r}", NotificationConfiguration={
                "QueueConfigurations": [{"QueueArn": "arn:lode:sqs:::hook", "Events": ["s3:ObjectCreated:*"]}]})
        s3.create_bucket(Bucket="evented")
        s3.put_bucket_notification_configuration(Bucket="evented", NotificationConfiguration={
            "QueueConfigurations": [{"QueueArn": "arn:lode:sqs:::hook", "Events": ["s3:ObjectCreated:*"]}]})
        if a.receiver_down:
            time.sleep(1)  # the test event in first
            rcv.kill()
            rcv.wait()
        rates = {"plain": [], "evented": []}
        cpu_s = {"plain": [], "evented": []}
        for r in range(a.rounds):
            order = ("plain", "evented") if r % 2 == 0 else ("evented", "plain")
            for b in order:
                c0 = (cpu(srv.pid), cpu(rcv.pid))
                rates[b].append(bench(endpoint, f"{b}-{r}", a.objects, os.path.join(tmp, f"{b}-{r}.json")))
                if not a.receiver_down:
                    drain(events, a.rounds + 1 + (len(rates["evented"])) * a.objects)
                c1 = (cpu(srv.pid), cpu(rcv.pid))
                cpu_s[b].append((c1[0] - c0[0], c1[1] - c0[1]))
                print(f"round {r} {b}: {rates[b][-1]:,.0f} PUT/s", flush=True)
                # Every run starts with the backlog of the one before delivered (above), so
                # that delivery's work counts in the run that made it.
        if a.nginx:
            print(json.dumps(dict(rate_summary(rates, cpu_s), deliveries=sum(1 for _ in open(events))), indent=2))
            return
        if a.receiver_down:
            rcv = subprocess.Popen([sys.executable, os.path.join(ROOT, "compat-tests", "webhook_receiver.py"),
                                    events, str(port)])
        # Every event in, then the latencies.
        want = a.rounds * a.objects + a.rounds  # and a test event per evented bucket
        deadline = time.time() + 120
        while time.time() < deadline:
            n = sum(1 for _ in open(events))
            if n >= want + 1:
                break
            time.sleep(0.5)
        deadline = time.time() + 600
        while time.time() < deadline and sum(1 for _ in open(events)) < want + 1:
            time.sleep(0.5)
        # Paced: 200 PUT/s for 10 s (below what delivery keeps up with), each PUT timed from its
        # acknowledgement to its event's arrival.
        acked = {}
        t0 = time.time()
        for i in range(2000):
            wait = t0 + i / 200 - time.time()
            if wait > 0:
                time.sleep(wait)
            k = f"paced/{i:05d}"
            s3.put_object(Bucket="evented", Key=k, Body=b"x" * 4096)
            acked[k.replace("/", "%2F")] = time.time()
        deadline = time.time() + 60
        while time.time() < deadline and sum(1 for _ in open(events)) < want + 1 + len(acked):
            time.sleep(0.2)
        burst, paced = [], []
        for line in open(events):
            m = json.loads(line)
            for rec in m["body"].get("Records", []):
                k = rec["s3"]["object"]["key"]
                if k in acked:
                    paced.append((m["arrived"] - acked[k]) * 1000)
                else:
                    t = datetime.datetime.strptime(rec["eventTime"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
                        tzinfo=datetime.timezone.utc).timestamp()
                    burst.append((m["arrived"] - t) * 1000)
        burst.sort()
        paced.sort()
        p = lambda lat, q: lat[min(len(lat) - 1, int(q * len(lat)))]
        print(json.dumps(dict(rate_summary(rates, cpu_s), **{
            "events": len(burst), "events_expected": a.rounds * a.objects,
            "burst_commit_to_event_ms": {"p50": round(p(burst, 0.5), 2), "p99": round(p(burst, 0.99), 2)},
            "paced_200_per_s_ack_to_event_ms": {"n": len(paced), "p50": round(p(paced, 0.5), 2),
                                                "p99": round(p(paced, 0.99), 2), "max": round(paced[-1], 2)},
        }), indent=2))
    finally:
        srv.terminate()
        srv.wait()
        rcv.terminate()  # nginx's master stops its worker
        rcv.wait()
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
