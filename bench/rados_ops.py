#!/usr/bin/env python3
"""RADOS operations per S3 operation of one cluster-mode gateway, measured from its own
counters (`lode_rados_ops_total{pool,kind}` on the admin endpoint's /metrics: every compound
read or write op librados sends counts once).

Usage: bench/rados_ops.py S3_ENDPOINT ADMIN_URL   (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY set)
Runs each S3 operation N times in a fresh bucket and prints the ops per S3 op, per pool. The
gateway's background work (users refresh and profile publishing every 2 s, the GC collector)
is measured first over a quiet interval and subtracted at its rate; what is left of it shows
as a few hundredths."""

import os
import re
import sys
import uuid

import boto3
import requests
from botocore.config import Config

MIB = 1 << 20


def rados_ops(admin):
    text = requests.get(admin + "/metrics", timeout=10).text
    return {(m.group(1), m.group(2)): int(m.group(3))
            for m in re.finditer(r'lode_rados_ops_total\{pool="([^"]+)",kind="(\w+)"\} (\d+)', text)}


def measure(s3, admin, quiet=3.0):
    """{operation: {(pool, kind): ops per S3 op}}. The gateway's own background ops (users
    refresh, profile publishing, GC) are measured over `quiet` seconds without traffic first,
    and subtracted at that rate from each measurement."""
    import time

    out = {}
    a = rados_ops(admin)
    time.sleep(quiet)
    b = rados_ops(admin)
    background = {k: (b.get(k, 0) - a.get(k, 0)) / quiet for k in b}

    def cost(name, f, n):
        a = rados_ops(admin)
        t0 = time.monotonic()
        for i in range(n):
            f(i)
        took = time.monotonic() - t0
        b = rados_ops(admin)
        out[name] = {k: (b.get(k, 0) - a.get(k, 0) - background.get(k, 0) * took) / n for k in b}

    b = "rops-" + uuid.uuid4().hex[:8]
    s3.create_bucket(Bucket=b)
    big = os.urandom(5 * MIB)
    cost("PUT 1 KiB (inline)", lambda i: s3.put_object(Bucket=b, Key=f"s{i:03}", Body=b"x" * 1024), 100)
    cost("PUT 5 MiB (2 chunks)", lambda i: s3.put_object(Bucket=b, Key=f"b{i:03}", Body=big), 20)
    cost("GET 1 KiB", lambda i: s3.get_object(Bucket=b, Key=f"s{i:03}")["Body"].read(), 100)
    cost("GET 5 MiB", lambda i: s3.get_object(Bucket=b, Key=f"b{i:03}")["Body"].read(), 20)
    cost("HEAD", lambda i: s3.head_object(Bucket=b, Key=f"s{i:03}"), 100)
    cost("LIST page (120 keys)", lambda i: s3.list_objects_v2(Bucket=b), 50)
    cost("overwrite 1 KiB", lambda i: s3.put_object(Bucket=b, Key=f"s{i:03}", Body=b"y" * 1024), 100)
    cost("DELETE 5 MiB", lambda i: s3.delete_object(Bucket=b, Key=f"b{i:03}"), 20)
    for i in range(100):
        s3.delete_object(Bucket=b, Key=f"s{i:03}")
    s3.delete_bucket(Bucket=b)
    return out


def main():
    ep, admin = sys.argv[1], sys.argv[2]
    s3 = boto3.client("s3", endpoint_url=ep, region_name="us-east-1", config=Config(retries={"max_attempts": 0}))
    for name, d in measure(s3, admin).items():
        cells = "  ".join(f"{pool}/{kind} {v:.2f}" for (pool, kind), v in sorted(d.items()) if v >= 0.005)
        print(f"{name:<22} {cells}")


if __name__ == "__main__":
    main()
