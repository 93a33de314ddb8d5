"""Several hosts on one machine (issue 37 section 2): a Ceph cluster from scripts/ceph-netns.sh
(mon, three OSD hosts, gateways and a client in network namespaces of their own, every packet
delayed), Lode gateways in the gateway namespaces, PUT load through them, and faults injected
under that load. Used by test_netns.py (one profile, two faults) and bench/netns.sh (both
profiles, every fault), which runs it as a script:

    python3 netns.py faults DIR [FAULT ...]    the cluster of DIR must be up (ceph-netns.sh up)

prints one JSON line per fault: how long PUTs failed or stalled, the time to recovery, and
whether every acknowledged PUT reads back (through each gateway)."""

import hashlib
import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid

import boto3
from botocore.config import Config

HERE = os.path.dirname(os.path.abspath(__file__))
NETNS = os.path.join(HERE, "..", "scripts", "ceph-netns.sh")
PREFIX = os.environ.get("LODE_NETNS_PREFIX", "lnx")
ACCESS_KEY = "NETNSACCESSKEY01"
SECRET_KEY = "netns-secret-key-0123456789abcdefghijkl"
PORT = 19401
MASTER = "6a" * 32
FAULTS = ("kill-host", "cut-host", "oneway-host", "cut-gateway")


def lode_bin():
    target = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/lode-target"))
    return os.environ.get("LODE_BIN") or os.path.join(target, "release", "lode")


def netns(directory, *args, check=True, timeout=300):
    return subprocess.run(["bash", NETNS, args[0], directory, *args[1:]], check=check,
                          capture_output=True, text=True, timeout=timeout)


def front(name):
    return f"10.77.2.{20 + int(name[2:])}"


class Gateway:
    """`lode serve` in cluster mode inside gateway namespace `name` (gw1, gw2), listening on its
    front address. Only the network namespace is its own: its data dir and mount are here."""

    def __init__(self, directory, name, namespace, op_timeout=10, mount=None):
        self.dir, self.name, self.namespace, self.mount = directory, name, namespace, mount
        self.work = os.path.join(directory, f"lode-{name}")
        os.makedirs(self.work, exist_ok=True)
        self.cfg = os.path.join(self.work, "lode.toml")
        with open(self.cfg, "w") as f:
            # Released chunks go after 10 s (the faults' buckets are emptied after each run).
            f.write(f"[cluster]\nop_timeout_secs = {op_timeout}\nrelease_grace_secs = 10\n")
        self.proc = None
        self.endpoint = f"http://{front(name)}:{PORT}"

    def start(self):
        args = ["nsenter", f"--net=/run/netns/{PREFIX}-{self.name}", lode_bin(), "serve",
                "--listen", f"{front(self.name)}:{PORT}", "--admin-listen", "",
                "--data-dir", os.path.join(self.work, "data"), "--config", self.cfg,
                "--cluster", "ceph", "--ceph-conf", os.path.join(self.dir, "ceph.conf"),
                "--index-pool", "lode-netns-index", "--data-pool", "lode-netns-data",
                "--namespace", self.namespace]
        if self.mount:
            os.makedirs(self.mount, exist_ok=True)
            args += ["--mount", self.mount]
        env = dict(os.environ, LODE_ACCESS_KEY=ACCESS_KEY, LODE_SECRET_KEY=SECRET_KEY,
                   LODE_MASTER_KEY=MASTER, LODE_LOG="info", RUST_LIB_BACKTRACE="0")
        self.log = open(os.path.join(self.work, "lode.log"), "ab")
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self.log, env=env)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"lode in {self.name} exited: " + self.tail())
            try:
                client(self.endpoint, timeout=5).list_buckets()
                return self
            except Exception:
                time.sleep(0.3)
        raise RuntimeError(f"lode in {self.name} did not answer in 90 s: " + self.tail())

    def tail(self):
        with open(os.path.join(self.work, "lode.log"), errors="replace") as f:
            return f.read()[-3000:]

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.mount:
            subprocess.run(["fusermount3", "-u", "-z", self.mount], capture_output=True)


def client(endpoint, timeout=60):
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY,
                        aws_secret_access_key=SECRET_KEY, region_name="us-east-1",
                        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}, connect_timeout=5,
                                      read_timeout=timeout, s3={"addressing_style": "path"}))


_BLOCK = os.urandom(2 << 20)
# Inline, one small chunk, several chunks: about 0.3 MB a PUT on average (the OSDs are small).
SIZES = [1000, 4096, 64 << 10, 256 << 10, 1 << 20]


class Load:
    """PUTs of fresh keys (1 KB - 1 MiB) through every endpoint, `threads` writers each, until
    stopped. Records each PUT's start, end, outcome and, if acknowledged, the body's MD5."""

    def __init__(self, endpoints, bucket, threads=3):
        self.endpoints, self.bucket, self.threads = endpoints, bucket, threads
        self.ops = []  # (endpoint, start, end, ok, key, md5, error code)
        self.lock = threading.Lock()
        self.stop_ev = threading.Event()
        self.workers = []

    def _run(self, endpoint, n):
        rng = random.Random(n)
        s3 = client(endpoint)
        i = 0
        while not self.stop_ev.is_set():
            size = rng.choice(SIZES)
            off = rng.randrange(0, len(_BLOCK) - size + 1)
            data = _BLOCK[off: off + size]
            key = f"w{n}/{i:06d}"
            i += 1
            t0 = time.monotonic()
            err = None
            try:
                s3.put_object(Bucket=self.bucket, Key=key, Body=data)
            except Exception as e:
                resp = getattr(e, "response", None)
                err = (f"{resp['ResponseMetadata'].get('HTTPStatusCode')} {resp['Error'].get('Code')}"
                       if resp else type(e).__name__)
            ok = err is None
            t1 = time.monotonic()
            with self.lock:
                self.ops.append((endpoint, t0, t1, ok, key, hashlib.md5(data).hexdigest(), err))
            if not ok:
                time.sleep(0.2)

    def start(self):
        for e_i, e in enumerate(self.endpoints):
            for t in range(self.threads):
                th = threading.Thread(target=self._run, args=(e, e_i * 100 + t), daemon=True)
                th.start()
                self.workers.append(th)

    def stop(self):
        self.stop_ev.set()
        for th in self.workers:
            th.join(timeout=120)

    def summary(self, t_fault, t_heal, endpoints=None):
        """Outage (longest gap between acknowledged PUTs after the fault), errors, the longest
        PUT, and the recovery: the time from the fault (and from the heal) to the end of the
        last PUT after it that failed or took over 2 s."""
        with self.lock:
            ops = [o for o in self.ops if endpoints is None or o[0] in endpoints]
        after = [o for o in ops if o[2] >= t_fault]
        acked = sorted(o[2] for o in after if o[3])
        gaps, prev = [], t_fault
        for t in acked:
            gaps.append(t - prev)
            prev = t
        bad = [o for o in after if not o[3] or o[2] - o[1] > 2.0]
        last_bad = max((o[2] for o in bad), default=t_fault)
        errors = {}
        for o in after:
            if not o[3]:
                errors[o[6]] = errors.get(o[6], 0) + 1
        return {
            "puts": len(after), "acked": len(acked), "failed": sum(1 for o in after if not o[3]),
            "errors": errors,
            "slow_over_2s": sum(1 for o in after if o[3] and o[2] - o[1] > 2.0),
            "longest_put_s": round(max((o[2] - o[1] for o in after), default=0), 2),
            # How long a PUT waited while the fault held (a PUT still waiting at the heal goes on
            # until the connections it waits on retransmit: TCP's backoff, seconds after a cut).
            "longest_in_fault_s": round(max((min(o[2], t_heal or o[2]) - o[1] for o in after), default=0), 2),
            "outage_s": round(max(gaps, default=0), 2),
            "recovered_after_fault_s": round(last_bad - t_fault, 2),
            "recovered_after_heal_s": round(max(0.0, last_bad - t_heal), 2) if t_heal else None,
        }

    def verify(self, endpoint):
        """Every acknowledged PUT reads back bit-exact through `endpoint`: the keys that did not."""
        s3 = client(endpoint)
        with self.lock:
            acked = [(o[4], o[5]) for o in self.ops if o[3]]
        bad = []
        for key, md5 in acked:
            try:
                got = hashlib.md5(s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()).hexdigest()
            except Exception as e:
                got = repr(e)[:80]
            if got != md5:
                bad.append((key, got))
        return len(acked), bad


def until(pred, what, timeout=180, every=0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout} s")


def cluster_healthy(directory):
    """Every OSD up and in, and no PG anything but active+clean."""
    conf = os.path.join(directory, "ceph.conf")
    p = subprocess.run(["ceph", "-c", conf, "osd", "stat", "-f", "json"], capture_output=True, text=True, timeout=30)
    if p.returncode:
        return False
    s = json.loads(p.stdout)
    if not (s["num_osds"] == s["num_up_osds"] == s["num_in_osds"]):
        return False
    p = subprocess.run(["ceph", "-c", conf, "pg", "dump", "pgs_brief", "-f", "json"], capture_output=True, text=True, timeout=30)
    if p.returncode:
        return False
    pgs = json.loads(p.stdout)
    pgs = pgs.get("pg_stats", pgs) if isinstance(pgs, dict) else pgs
    return all(pg["state"] == "active+clean" for pg in pgs)


def run_fault(directory, gateways, fault, hold=None, warm=4.0, after=8.0, host="h2"):
    """Runs PUT load through `gateways`, injects `fault` after `warm` seconds, heals it after
    `hold` seconds, goes on `after` seconds past the recovery, then checks every acknowledged PUT
    through every gateway. Returns the report (a dict)."""
    hold = hold if hold is not None else {"kill-host": 20, "cut-host": 40, "oneway-host": 40, "cut-gateway": 25}[fault]
    bucket = "f-" + fault + "-" + uuid.uuid4().hex[:6]
    client(gateways[-1].endpoint).create_bucket(Bucket=bucket)
    load = Load([g.endpoint for g in gateways], bucket)
    load.start()
    time.sleep(warm)
    target = gateways[0].name if fault == "cut-gateway" else host
    t_fault = time.monotonic()
    cmd = {"kill-host": "kill-host", "cut-host": "cut", "oneway-host": "oneway", "cut-gateway": "cut"}[fault]
    netns(directory, cmd, target)
    time.sleep(hold)
    t_heal = time.monotonic()
    netns(directory, "start-host" if fault == "kill-host" else "heal", target)
    # Past the heal: until a whole `after` seconds go by with no failed or slow PUT.
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        time.sleep(1)
        s = load.summary(t_fault, t_heal)
        if time.monotonic() - (t_fault + s["recovered_after_fault_s"]) >= after:
            break
    load.stop()
    report = {"fault": fault, "target": target, "held_s": round(t_heal - t_fault, 1),
              **load.summary(t_fault, t_heal)}
    if fault == "cut-gateway":
        cut = [gateways[0].endpoint]
        report["cut_gateway"] = load.summary(t_fault, t_heal, cut)
        report["other_gateways"] = load.summary(t_fault, t_heal, [g.endpoint for g in gateways[1:]])
    report["verified"] = {}
    for g in gateways:
        n, bad = load.verify(g.endpoint)
        report["verified"][g.name] = {"acked": n, "lost": bad[:5], "lost_count": len(bad)}
    empty_bucket(client(gateways[-1].endpoint), bucket)
    return report


def empty_bucket(s3, bucket):
    """Deletes every object and the bucket (the OSDs of the simulated hosts are small)."""
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
    s3.delete_bucket(Bucket=bucket)


def main():
    if len(sys.argv) < 3 or sys.argv[1] != "faults":
        sys.exit(__doc__)
    directory = os.path.abspath(sys.argv[2])
    faults = sys.argv[3:] or list(FAULTS)
    gws = [Gateway(directory, f"gw{i}", "bench-" + uuid.uuid4().hex[:6]) for i in (1, 2)]
    gws[1].namespace = gws[0].namespace
    try:
        for g in gws:
            g.start()
        for f in faults:
            until(lambda: cluster_healthy(directory), "the cluster is healthy before the fault", 300, 2)
            print(json.dumps(run_fault(directory, gws, f)), flush=True)
    finally:
        for g in gws:
            g.stop()


if __name__ == "__main__":
    main()
