"""The IO profile: a known mix of S3 and POSIX operations against a real lode, then
/api/profile, /metrics and `lode profile` must report exactly that mix."""

import os
import subprocess
import uuid

import pytest
import requests

from conftest import Lode, lode_bin, make_client


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs FUSE (root)")
def test_profile_reports_the_mix_of_both_doors(tmp_path):
    mnt = str(tmp_path / "mnt")
    srv = Lode(str(tmp_path / "data"), extra_args=["--mount", mnt], device_size="64MiB")
    srv.start()
    try:
        s3 = make_client(srv.endpoint)
        b = "prof-" + uuid.uuid4().hex[:8]
        s3.create_bucket(Bucket=b)
        sizes = [100, 4096, 70_000, 1 << 20, 3]
        for i, n in enumerate(sizes):
            s3.put_object(Bucket=b, Key=f"o{i}", Body=os.urandom(n))
        got = 0
        for i in range(7):
            got += len(s3.get_object(Bucket=b, Key=f"o{i % len(sizes)}")["Body"].read())
        for i in range(3):
            s3.head_object(Bucket=b, Key="o0")
        s3.list_objects_v2(Bucket=b)
        s3.list_objects_v2(Bucket=b, Prefix="o")
        data = os.urandom(300_000)
        with open(os.path.join(mnt, b, "posix.bin"), "wb") as f:
            f.write(data)
        with open(os.path.join(mnt, b, "posix.bin"), "rb") as f:
            assert f.read() == data

        p = requests.get(srv.admin + "/api/profile").json()
        # One node has no cluster to add up: a clear error, not an empty profile.
        r = requests.get(srv.admin + "/api/profile?scope=cluster")
        assert r.status_code == 400 and "cluster mode" in r.json()["error"]
        s3d = p["doors"]["s3"]
        assert s3d["write"]["ops"] == 5 and s3d["write"]["bytes"] == sum(sizes)
        assert s3d["read"]["ops"] == 7 and s3d["read"]["bytes"] == got
        assert s3d["meta"]["ops"] == 5  # 3 HEAD + 2 LIST
        # IO sizes land in their power-of-two buckets: 1 MiB is in (2^20, 2^21-1].
        assert s3d["write"]["size_hist"][21] == 1
        px = p["doors"]["posix"]
        assert px["write"]["bytes"] == len(data)
        assert px["read"]["bytes"] >= len(data)
        assert px["meta"]["ops"] >= 2
        assert p["buckets"][b]["read"][0] >= 7
        assert 0 < p["metadata_share"] < 1
        assert p["ops_per_sec_peak"] >= 1 or p["uptime_secs"] < 2
        assert len(p["series"]) >= 1 and sum(sum(s["ops"]) for s in p["series"]) >= 25
        m = requests.get(srv.admin + "/metrics").text
        assert 'lode_ops_total{door="s3",class="read"} 7' in m
        assert 'lode_op_latency_seconds_count{door="s3",class="write"} 5' in m
        out = subprocess.run([lode_bin(), "profile", "--endpoint", srv.admin], capture_output=True, check=True).stdout.decode()
        assert "Lode IO profile" in out and "metadata share" in out
        assert any(line.split()[:3] == ["s3", "read", "7"] for line in out.splitlines()), out
        assert b in out
    finally:
        srv.remove()
        subprocess.run(["umount", "-l", mnt], capture_output=True)
