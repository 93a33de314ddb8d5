#!/usr/bin/env python3
"""RADOS operations per S3 operation, counted in one of two places:

* a cluster-mode Lode gateway's own counters (`lode_rados_ops_total{pool,kind}` on the admin
  endpoint's /metrics: every compound read or write op librados sends counts once), per pool;
* the OSDs' counters of client ops (`op_r`, `op_w`, `op_rw` of `perf dump` through each OSD's
  admin socket; a client op counts once, at its primary, replication not included), all pools
  together. This works for any S3 server on the cluster: bench/vs-rgw.sh counts Lode and
  radosgw this way, the same way.

Usage: bench/rados_ops.py S3_ENDPOINT ADMIN_URL
       bench/rados_ops.py S3_ENDPOINT --osd-asok-dir DIR    (DIR/osd.*.asok)
(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY set.) Runs each S3 operation N times in a fresh
bucket and prints the ops per S3 op. The server's background work (Lode: users refresh and
profile publishing every 2 s, the GC collector; radosgw: its own threads) is measured first
over a quiet interval and subtracted at its rate; what is left of it shows as a few
hundredths."""

import glob
import json
import os
import re
import subprocess
import sys
import uuid

import boto3
import requests
from botocore.config import Config

MIB = 1 << 20
# Runs of each 5 MiB operation. One background op that the subtraction misses adds 1/BIG_N to a
# figure: at 20 runs a slow machine pushed a figure 0.23 off its integer; at 50, 0.02 an op.
BIG_N = 50


def rados_ops(admin):
    text = requests.get(admin + "/metrics", timeout=10).text
    return {(m.group(1), m.group(2)): int(m.group(3))
            for m in re.finditer(r'lode_rados_ops_total\{pool="([^"]+)",kind="(\w+)"\} (\d+)', text)}


def osd_ops(asok_dir):
    """Client ops the OSDs served, {("all pools", kind): n}: read, write, and read-modify-write
    (a write op with a read or compare step in it, or a class call)."""
    out = {("all pools", "read"): 0, ("all pools", "write"): 0, ("all pools", "rmw"): 0}
    for sock in sorted(glob.glob(os.path.join(asok_dir, "osd.*.asok"))):
        dump = json.loads(subprocess.run(["ceph", "--admin-daemon", sock, "perf", "dump"],
                                         check=True, capture_output=True, text=True).stdout)
        osd = dump["osd"]
        out[("all pools", "read")] += osd["op_r"]
        out[("all pools", "write")] += osd["op_w"]
        out[("all pools", "rmw")] += osd["op_rw"]
    return out


def measure(s3, admin, quiet=5.0, counters=None, seconds=None):
    """{operation: {(pool, kind): ops per S3 op}}, counted by `counters()` (default: the
    gateway's own at `admin`). The background ops are measured over `quiet` seconds without
    traffic first, and subtracted at that rate from each measurement. `seconds`, a dict if
    given, gets each operation's seconds per S3 op."""
    import time

    rados_ops_now = counters or (lambda: rados_ops(admin))
    out = {}
    a = rados_ops_now()
    time.sleep(quiet)
    b = rados_ops_now()
    background = {k: (b.get(k, 0) - a.get(k, 0)) / quiet for k in b}

    def cost(name, f, n):
        a = rados_ops_now()
        t0 = time.monotonic()
        for i in range(n):
            f(i)
        took = time.monotonic() - t0
        b = rados_ops_now()
        if seconds is not None:
            seconds[name] = took / n
        out[name] = {k: (b.get(k, 0) - a.get(k, 0) - background.get(k, 0) * took) / n for k in b}

    b = "rops-" + uuid.uuid4().hex[:8]
    s3.create_bucket(Bucket=b)
    big = os.urandom(5 * MIB)
    cost("PUT 1 KiB (inline)", lambda i: s3.put_object(Bucket=b, Key=f"s{i:03}", Body=b"x" * 1024), 100)
    cost("PUT 5 MiB (2 chunks)", lambda i: s3.put_object(Bucket=b, Key=f"b{i:03}", Body=big), BIG_N)
    cost("GET 1 KiB", lambda i: s3.get_object(Bucket=b, Key=f"s{i:03}")["Body"].read(), 100)
    cost("GET 5 MiB", lambda i: s3.get_object(Bucket=b, Key=f"b{i:03}")["Body"].read(), BIG_N)
    cost("HEAD", lambda i: s3.head_object(Bucket=b, Key=f"s{i:03}"), 100)
    cost("LIST page (120 keys)", lambda i: s3.list_objects_v2(Bucket=b), 50)
    cost("overwrite 1 KiB", lambda i: s3.put_object(Bucket=b, Key=f"s{i:03}", Body=b"y" * 1024), 100)
    cost("DELETE 5 MiB", lambda i: s3.delete_object(Bucket=b, Key=f"b{i:03}"), BIG_N)
    for i in range(100):
        s3.delete_object(Bucket=b, Key=f"s{i:03}")
    s3.delete_bucket(Bucket=b)
    return out


def main():
    ep = sys.argv[1]
    if sys.argv[2] == "--osd-asok-dir":
        asok_dir = sys.argv[3]
        got = measure(make_s3(ep), None, counters=lambda: osd_ops(asok_dir))
    else:
        got = measure(make_s3(ep), sys.argv[2])
    for name, d in got.items():
        cells = "  ".join(f"{pool}/{kind} {v:.2f}" for (pool, kind), v in sorted(d.items()) if v >= 0.005)
        print(f"{name:<22} {cells}")


def make_s3(ep):
    return boto3.client("s3", endpoint_url=ep, region_name="us-east-1",
                        config=Config(retries={"max_attempts": 0}, s3={"addressing_style": "path"}))


if __name__ == "__main__":
    main()
