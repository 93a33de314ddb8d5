"""`lode bench` against a real lode: it runs each workload with no failed request and writes
the JSON result in the documented shape."""

import json
import subprocess

import pytest

from conftest import ACCESS_KEY, SECRET_KEY, lode_bin


@pytest.mark.parametrize(
    "workload,args,classes",
    [
        ("small", ["--objects", "200", "--size", "4KiB"], {"put", "get"}),
        ("losf-ingest", ["--objects", "100"], {"put"}),
        ("train-read", ["--objects", "20"], {"get", "head"}),
        ("stat-storm", ["--objects", "50", "--ops", "500"], {"head"}),
    ],
)
def test_bench_workloads(lode_server, tmp_path, workload, args, classes):
    out = tmp_path / "r.json"
    p = subprocess.run(
        [lode_bin(), "bench", workload, "--endpoint", lode_server.endpoint, "--access-key", ACCESS_KEY,
         "--secret-key", SECRET_KEY, "--concurrency", "8", "--bucket", "bench-" + workload, "--json", str(out), *args],
        capture_output=True, timeout=300,
    )
    assert p.returncode == 0, p.stderr.decode() + p.stdout.decode()
    r = json.loads(out.read_text())
    assert r["workload"] == workload and r["params"]["concurrency"] == 8
    assert set(r["classes"]) >= classes
    for c in classes:
        x = r["classes"][c]
        assert x["errors"] == 0 and x["ops"] > 0 and x["ops_per_sec"] > 0
        assert 0 < x["p50_ms"] <= x["p99_ms"] <= x["p999_ms"]


def test_bench_reports_failures(lode_server, tmp_path):
    p = subprocess.run(
        [lode_bin(), "bench", "small", "--endpoint", lode_server.endpoint, "--access-key", ACCESS_KEY,
         "--secret-key", "wrong-secret-wrong", "--objects", "5"],
        capture_output=True, timeout=60,
    )
    assert p.returncode != 0


def test_bench_list_workload(lode_server, tmp_path):
    out = tmp_path / "l.json"
    p = subprocess.run(
        [lode_bin(), "bench", "list", "--endpoint", lode_server.endpoint, "--access-key", ACCESS_KEY,
         "--secret-key", SECRET_KEY, "--objects", "2500", "--ops", "20", "--bucket", "bench-list", "--json", str(out)],
        capture_output=True, timeout=300,
    )
    assert p.returncode == 0, p.stderr.decode() + p.stdout.decode()
    assert "full listing: 2500 keys" in p.stdout.decode()
    r = json.loads(out.read_text())
    assert set(r["classes"]) == {"first", "delim", "page"}
    assert r["classes"]["page"]["ops"] == 3 and r["classes"]["first"]["ops"] == 20
