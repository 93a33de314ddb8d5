"""A restart of the server in the middle of the suite loses nothing: every object acknowledged
before a SIGTERM restart, and before a kill -9, reads back bit-exact afterwards."""

import hashlib
import json
import os
import subprocess

from conftest import lode_bin, make_client


def snapshot(s3):
    state = {}
    for b in s3.list_buckets()["Buckets"]:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=b["Name"]):
            for o in page.get("Contents", []):
                state[(b["Name"], o["Key"])] = (o["ETag"], o["Size"])
    return state


def test_restart_loses_nothing(lode_server, s3, bucket):
    acked = {}
    for i in range(40):
        size = [0, 10, 20_000, 300_000, 5_000_000][i % 5]
        body = os.urandom(size)
        s3.put_object(Bucket=bucket, Key=f"restart/{i}", Body=body)
        acked[f"restart/{i}"] = hashlib.md5(body).hexdigest()
    uid = s3.create_multipart_upload(Bucket=bucket, Key="restart/open-upload")["UploadId"]
    part = os.urandom(5 * 1024 * 1024)
    s3.upload_part(Bucket=bucket, Key="restart/open-upload", UploadId=uid, PartNumber=1, Body=part)
    before = snapshot(s3)
    assert len([k for k in before if k[0] == bucket]) == 40

    for hard in (False, True):
        lode_server.restart(hard=hard)
        c = make_client(lode_server.endpoint)
        assert snapshot(c) == before, f"listing changed across restart (hard={hard})"
        for k, want in acked.items():
            got = hashlib.md5(c.get_object(Bucket=bucket, Key=k)["Body"].read()).hexdigest()
            assert got == want, k
        parts = c.list_parts(Bucket=bucket, Key="restart/open-upload", UploadId=uid)["Parts"]
        assert [p["Size"] for p in parts] == [len(part)]
    c = make_client(lode_server.endpoint)
    c.abort_multipart_upload(Bucket=bucket, Key="restart/open-upload", UploadId=uid)
    # Offline, the used extents are exactly the referenced ones, and every chunk's crc32c holds.
    lode_server.stop()
    p = subprocess.run([lode_bin(), "fsck", "--data-dir", lode_server.data_dir, "--verify-data"],
                       capture_output=True, timeout=300)
    lode_server.start()
    assert p.returncode == 0, p.stdout.decode() + p.stderr.decode()
    rep = json.loads(p.stdout)
    assert rep["leaked"] == [] and rep["unrecorded"] == [] and rep["wrong_refs"] == [] and rep["corrupt"] == []
    assert rep["chunks_referenced"] > 0
