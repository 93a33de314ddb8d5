#!/usr/bin/env python3
"""What bounds a small PUT's p99 under the blend: the device, or the CPU it shares.

Runs, in one go on this machine:

  fio idle    the device traffic of the blender's `put`, `stream` and `ckpt` classes without
              Lode: 1 MiB O_DIRECT reads at 48 MiB/s and 1 MiB O_DIRECT writes at 134 MiB/s,
              two in flight each (the ring's bulk lane), beside 128 KiB O_DIRECT writes at
              100/s, each followed by an fdatasync (a small PUT's chunk write and data sync),
              in one preallocated file like Lode's device file
  fio busy    the same, with two processes each busy 60% of every 10 ms (the blend keeps both
              cores about that busy: `vmstat` during it)
  lode        `lode bench blender --objects 2000` on a fresh `lode serve` (every class)
  ceiling     the same on `lode bench-ceiling` (no disk)

and prints the p99s side by side. A small PUT makes three durable steps one after the other
(its chunk write, the data fdatasync, the catalog's WAL fsync); when fio's own two steps reach
Lode's tails only once the CPU is busy, the tail is the kernel's IO work waiting for a core, not
the device and not Lode's queueing.

Usage (needs fio):  bench/put_tail.py [--lode BIN] [--seconds 15] [--objects 2000] [--json put-tail.json]
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

from lodeproc import exports


def hog(frac, seconds):
    """A process busy `frac` of every 10 ms for `seconds`."""
    code = ("import time\nend=time.time()+%f\nwhile time.time()<end:\n"
            "    t=time.perf_counter()\n    while time.perf_counter()-t<%f: pass\n    time.sleep(%f)\n"
            % (seconds, 0.01 * frac, 0.01 * (1 - frac)))
    return subprocess.Popen([sys.executable, "-c", code])


def fio(path, seconds, busy):
    job = f"""[global]
filename={path}
ioengine=io_uring
direct=1
time_based=1
runtime={seconds}
[stream]
rw=read
bs=1M
iodepth=2
offset=0
size=1G
rate=48m
[ckpt]
rw=write
bs=1M
iodepth=2
offset=2G
size=1G
rate=134m
[put]
rw=randwrite
bs=128k
iodepth=1
offset=1G
size=1G
rate_iops=100
fdatasync=1
"""
    hogs = [hog(0.6, seconds + 2) for _ in range(2)] if busy else []
    try:
        out = subprocess.run(["fio", "--output-format=json", "-"], input=job.encode(),
                             capture_output=True, check=True).stdout
    finally:
        for h in hogs:
            h.wait()
    jobs = {j["jobname"]: j for j in json.loads(out)["jobs"]}
    p99 = lambda lat: lat["percentile"]["99.000000"] / 1e6
    return {
        "write_p99_ms": p99(jobs["put"]["write"]["clat_ns"]),
        "sync_p99_ms": p99(jobs["put"]["sync"]["lat_ns"]),
        "read_p99_ms": p99(jobs["stream"]["read"]["clat_ns"]),
        "bulk_write_p99_ms": p99(jobs["ckpt"]["write"]["clat_ns"]),
    }


def blender(lode, endpoint, ak, sk, seconds, objects, work):
    out = os.path.join(work, "blend.json")
    subprocess.run([lode, "bench", "blender", "--endpoint", endpoint, "--access-key", ak,
                    "--secret-key", sk, "--objects", str(objects), "--duration", str(seconds),
                    "--json", out],
                   check=True, stdout=subprocess.DEVNULL)
    c = json.load(open(out))["classes"]
    return {"put_p99_ms": c["put"]["p99_ms"], "put_alone_p99_ms": c["put"]["alone"]["p99_ms"],
            "stream_mib_s": c["stream"]["mib_per_sec"], "ckpt_mib_s": c["ckpt"]["mib_per_sec"]}


def lode_run(lode, seconds, objects, work):
    data = os.path.join(work, "data")
    cfg = os.path.join(work, "lode.toml")
    with open(cfg, "w") as f:
        f.write('[[datapath.devices]]\npath = "dev0.img"\nsize = "4GiB"\n')
    p = subprocess.Popen([lode, "serve", "--config", cfg, "--data-dir", data, "--listen",
                          "127.0.0.1:0", "--admin-listen", ""], stdout=subprocess.PIPE,
                         env=dict(os.environ, LODE_LOG="warn"))
    try:
        env = exports(p.stdout)
        return blender(lode, env["AWS_ENDPOINT_URL"], env["AWS_ACCESS_KEY_ID"],
                       env["AWS_SECRET_ACCESS_KEY"], seconds, objects, work)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=60)
        shutil.rmtree(data, ignore_errors=True)


def ceiling_run(lode, seconds, objects, work):
    p = subprocess.Popen([lode, "bench-ceiling", "--listen", "127.0.0.1:0"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        # `bench-ceiling: in-memory S3 handler on http://127.0.0.1:<port>`
        line = p.stdout.readline()
        m = re.search(rb"in-memory S3 handler on (http://\S+)", line)
        if not m:
            raise RuntimeError(f"bench-ceiling did not start: {line!r}")
        return blender(lode, m.group(1).decode(), "x", "y", seconds, objects, work)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lode", default=os.path.join(os.environ.get(
        "CARGO_TARGET_DIR", os.path.expanduser("~/.cache/lode-target")), "release", "lode"))
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--objects", type=int, default=2000, help="the blender's --objects")
    ap.add_argument("--json", default="put-tail.json")
    a = ap.parse_args()
    if shutil.which("fio") is None:
        sys.exit("put_tail.py needs fio (apt install fio)")
    work = tempfile.mkdtemp(prefix="lode-put-tail-", dir="/var/tmp")
    try:
        dev = os.path.join(work, "dev.img")
        fd = os.open(dev, os.O_RDWR | os.O_CREAT)
        try:
            # Like Lode's device file: preallocated; the read half holds data.
            os.posix_fallocate(fd, 0, 3 << 30)
            block = os.urandom(1 << 20)
            for i in range(1024):
                os.pwrite(fd, block, i << 20)
            os.fsync(fd)
        finally:
            os.close(fd)
        res = {
            "fio_idle": fio(dev, a.seconds, False),
            "fio_busy": fio(dev, a.seconds, True),
            "lode": lode_run(a.lode, a.seconds, a.objects, work),
            "ceiling": ceiling_run(a.lode, a.seconds, a.objects, work),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for k in ("fio_idle", "fio_busy"):
        r = res[k]
        print(f"{k:9} 128 KiB write p99 {r['write_p99_ms']:6.2f} ms   fdatasync p99 {r['sync_p99_ms']:6.2f} ms"
              f"   (1 MiB reads p99 {r['read_p99_ms']:.2f}, writes {r['bulk_write_p99_ms']:.2f} ms)")
    for k in ("lode", "ceiling"):
        r = res[k]
        print(f"{k:9} put p99 alone {r['put_alone_p99_ms']:6.2f} ms   under the blend {r['put_p99_ms']:6.2f} ms"
              f"   (stream {r['stream_mib_s']:.0f}, ckpt {r['ckpt_mib_s']:.0f} MiB/s)")
    print(f"put p99 under the blend, lode / ceiling: {res['lode']['put_p99_ms'] / res['ceiling']['put_p99_ms']:.2f}x")
    with open(a.json, "w") as f:
        json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
