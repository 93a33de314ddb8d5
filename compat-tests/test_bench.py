"""`lode bench` against a real lode: it runs each workload with no failed request and writes
the JSON result in the documented shape."""

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from conftest import ACCESS_KEY, SECRET_KEY, local_only, lode_bin


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
    assert set(r["classes"]) == {"first-1k", "first", "delim", "delim-touch", "delim-changed", "page"}
    assert r["classes"]["page"]["ops"] == 3 and r["classes"]["first"]["ops"] == 20
    assert r["classes"]["delim-changed"]["ops"] == 20 == r["classes"]["delim-touch"]["ops"]


def bench(lode_server, workload, *args, timeout=600):
    p = subprocess.run(
        [lode_bin(), "bench", workload, "--endpoint", lode_server.endpoint, "--access-key", ACCESS_KEY,
         "--secret-key", SECRET_KEY, *args],
        capture_output=True, timeout=timeout,
    )
    assert p.returncode == 0, p.stderr.decode() + p.stdout.decode()
    return p.stdout.decode()


def test_bench_stream_read_and_checkpoint(lode_server, s3, tmp_path):
    out = tmp_path / "s.json"
    bench(lode_server, "stream-read", "--bucket", "bench-stream", "--size", "40MiB", "--part-size", "8MiB",
          "--range-size", "3MiB", "--concurrency", "4", "--json", str(out))
    r = json.loads(out.read_text())
    g = r["classes"]["get"]
    assert g["ops"] == 14 and g["errors"] == 0 and g["mib_per_sec"] > 0  # ceil(40/3) ranges
    # The setup object is really there, whole, written as 5 parts.
    objs = s3.list_objects_v2(Bucket="bench-stream")["Contents"]
    shard = [o for o in objs if o["Key"].endswith("/shard.bin")]
    assert len(shard) == 1 and shard[0]["Size"] == 40 << 20 and shard[0]["ETag"].endswith('-5"')

    out = tmp_path / "c.json"
    chart = tmp_path / "c.svg"
    bench(lode_server, "checkpoint", "--bucket", "bench-ckpt", "--size", "20MiB", "--part-size", "5MiB",
          "--saves", "12", "--concurrency", "3", "--json", str(out), "--chart", str(chart))
    r = json.loads(out.read_text())
    assert r["classes"]["part"]["ops"] == 4 and r["classes"]["checkpoint"]["ops"] == 1
    assert r["classes"]["save"]["ops"] == 12
    assert r["extra"]["checkpoint_secs"] > 0
    ck = [o for o in s3.list_objects_v2(Bucket="bench-ckpt")["Contents"] if o["Key"].endswith("checkpoint.pt")]
    assert ck[0]["Size"] == 20 << 20
    svg = ET.parse(chart).getroot()  # well-formed SVG
    assert svg.tag.endswith("svg")
    lines = [e for e in svg.iter() if e.tag.endswith("polyline")]
    assert len(lines) == 3  # one CDF per class: checkpoint, part, save


def test_bench_compare_prints_ratios(lode_server, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    bench(lode_server, "stat-storm", "--bucket", "bench-cmp", "--objects", "20", "--ops", "200", "--json", str(a))
    text = bench(lode_server, "stat-storm", "--bucket", "bench-cmp", "--objects", "20", "--ops", "200",
                 "--json", str(b), "--compare", str(a))
    ra, rb = json.loads(a.read_text()), json.loads(b.read_text())
    line = [x for x in text.splitlines() if x.startswith("head ")][-1].split()
    want = rb["classes"]["head"]["ops_per_sec"] / ra["classes"]["head"]["ops_per_sec"]
    assert abs(float(line[3].rstrip("x")) - want) < 0.01 + want * 0.01, (line, want)


def test_bench_blender_reports_interference(lode_server, tmp_path):
    out = tmp_path / "b.json"
    text = bench(lode_server, "blender", "--bucket", "bench-blend", "--objects", "60", "--duration", "1.5",
                 "--rate-scale", "0.3", "--classes", "get,head,put", "--json", str(out))
    r = json.loads(out.read_text())
    assert set(r["classes"]) == {"get", "head", "put"}
    for c, x in r["classes"].items():
        assert x["errors"] == 0 and x["ops"] > 0 and x["alone"]["ops"] > 0
        assert abs(x["p99_vs_alone"] - x["p99_ms"] / x["alone"]["p99_ms"]) < 1e-6
    assert "read/write by bytes" in text


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs FUSE (root)")
@local_only
def test_bench_posix_variant_over_the_mount(tmp_path):
    from conftest import Lode
    mnt = str(tmp_path / "mnt")
    srv = Lode(str(tmp_path / "data"), extra_args=["--mount", mnt], device_size="256MiB")
    srv.start()
    try:
        import boto3  # noqa: F401
        from conftest import make_client
        make_client(srv.endpoint).create_bucket(Bucket="posix-bench")
        out = tmp_path / "p.json"
        p = subprocess.run([lode_bin(), "bench", "train-read", "--posix", mnt, "--bucket", "posix-bench",
                            "--objects", "30", "--concurrency", "4", "--json", str(out)], capture_output=True, timeout=300)
        assert p.returncode == 0, p.stderr.decode() + p.stdout.decode()
        r = json.loads(out.read_text())
        assert r["params"]["target"] == f"posix {mnt}/posix-bench"
        assert r["classes"]["get"]["ops"] == 30 and r["classes"]["get"]["errors"] == 0
        # The files written through the mount are objects on the S3 side.
        keys = make_client(srv.endpoint).list_objects_v2(Bucket="posix-bench")["Contents"]
        files = [k for k in keys if not k["Key"].endswith("/")]  # mkdir made a directory marker
        assert len(keys) == 31 and len(files) == 30
        assert all(400_000 <= k["Size"] < 500_000 for k in files)
    finally:
        srv.stop()


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs FUSE (root)")
@local_only
def test_posix_vs_local_benchmark_runs_every_row(tmp_path):
    """A short `bench/posix_vs_local.py`: the mount, the local disk, the FUSE ceiling and the same
    writes through the S3 door (one PUT, a torch.save through S3Checkpoint) each measured."""
    pytest.importorskip("torch")
    pytest.importorskip("s3torchconnector")
    out = tmp_path / "pvl.json"
    script = os.path.join(os.path.dirname(__file__), "..", "bench", "posix_vs_local.py")
    p = subprocess.run([sys.executable, script, "--files", "200", "--threads", "4", "--big-mib", "8",
                        "--ckpt-mib", "16", "--lode", lode_bin(), "--workdir", str(tmp_path / "w"),
                        "--json", str(out)], capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr.decode()[-3000:] + p.stdout.decode()[-3000:]
    r = json.loads(out.read_text())
    for side in ("local", "lode"):
        for k in ("creates_per_s", "creates_fsync_per_s", "readdir_entries_per_s", "stat_cold_per_s",
                  "ls_l_entries_per_s", "seq_write_mib_s", "seq_read_mib_s", "torch_save_mib_s"):
            assert r[side][k] > 0, (side, k)
    assert r["lode_s3"]["s3_put_mib_s"] > 0 and r["lode_s3"]["torch_save_mib_s"] > 0
    assert r["fuse_ceiling"]["readdir_entries_per_s"] > 0 and r["fuse_ceiling"]["ls_l_entries_per_s"] > 0
    assert b"torch.save 16 MiB vs S3Checkpoint" in p.stdout


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs FUSE (root)")
@local_only
def test_posix_vs_local_write_rounds_alternate_the_mount_and_one_put(tmp_path):
    """`bench/posix_vs_local.py --write-rounds`: each round measures the mount's sequential write
    and one S3 PUT of the same size, and the medians are of the rounds."""
    out = tmp_path / "wr.json"
    script = os.path.join(os.path.dirname(__file__), "..", "bench", "posix_vs_local.py")
    p = subprocess.run([sys.executable, script, "--big-mib", "8", "--write-rounds", "3", "--lode", lode_bin(),
                        "--workdir", str(tmp_path / "w"), "--json", str(out)], capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr.decode()[-3000:] + p.stdout.decode()[-3000:]
    r = json.loads(out.read_text())
    assert len(r["rounds"]) == 3
    for x in r["rounds"]:
        assert x["mount_mib_s"] > 0 and x["s3_put_mib_s"] > 0
        assert abs(x["ratio"] - x["mount_mib_s"] / x["s3_put_mib_s"]) < 1e-9
    assert r["median"]["ratio"] == sorted(x["ratio"] for x in r["rounds"])[1]
    assert p.stdout.count(b"round ") == 3 and b"median of 3 rounds" in p.stdout


@local_only
def test_put_tail_benchmark_runs_every_row(tmp_path):
    """A short `bench/put_tail.py`: fio idle and beside the CPU hogs, then the blender on a fresh
    `lode serve` and on `lode bench-ceiling`, each with its p99s in the JSON and the ratio printed."""
    out = tmp_path / "pt.json"
    script = os.path.join(os.path.dirname(__file__), "..", "bench", "put_tail.py")
    p = subprocess.run([sys.executable, script, "--seconds", "2", "--objects", "100", "--lode", lode_bin(),
                        "--json", str(out)], capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr.decode()[-3000:] + p.stdout.decode()[-3000:]
    r = json.loads(out.read_text())
    for side in ("fio_idle", "fio_busy"):
        for k in ("write_p99_ms", "sync_p99_ms", "read_p99_ms", "bulk_write_p99_ms"):
            assert r[side][k] > 0, (side, k)
    for side in ("lode", "ceiling"):
        for k in ("put_p99_ms", "put_alone_p99_ms", "stream_mib_s", "ckpt_mib_s"):
            assert r[side][k] > 0, (side, k)
    assert b"put p99 under the blend, lode / ceiling:" in p.stdout


def test_bench_ceiling_serves_the_workloads(tmp_path):
    """`lode bench-ceiling` (the bare in-memory handler) answers every op the workloads send."""
    import socket
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    srv = subprocess.Popen([lode_bin(), "bench-ceiling", "--listen", f"127.0.0.1:{port}"], stdout=subprocess.PIPE)
    try:
        assert b"in-memory S3 handler" in srv.stdout.readline()
        for w, args in [("small", ["--objects", "50"]), ("stream-read", ["--size", "12MiB", "--part-size", "5MiB",
                                                                          "--range-size", "1MiB"])]:
            out = tmp_path / f"{w}.json"
            p = subprocess.run([lode_bin(), "bench", w, "--endpoint", f"http://127.0.0.1:{port}", "--access-key", "x",
                                "--secret-key", "y", "--json", str(out), *args], capture_output=True, timeout=120)
            assert p.returncode == 0, p.stderr.decode() + p.stdout.decode()
            r = json.loads(out.read_text())
            assert all(c["errors"] == 0 and c["ops"] > 0 for c in r["classes"].values())
        assert r["classes"]["get"]["ops"] == 12  # the 12 MiB object came back whole, range by range
    finally:
        srv.kill()
        srv.wait()


def test_bench_ceiling_fuse_serves_a_copy_of_a_tree(tmp_path):
    """`lode bench-ceiling --fuse-source --fuse-mount` (the bare FUSE ceiling the train-epoch
    and posix benchmarks compare the mount with) serves the same bytes and names as the source
    tree, and keeps files created on it in memory."""
    import hashlib
    import random
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    rng = random.Random(5)
    want = {}
    for i in range(40):
        p = src / f"class_{i % 3}" / f"{i:04d}.jpg"
        p.parent.mkdir(parents=True, exist_ok=True)
        data = rng.randbytes(rng.randint(0, 700_000))
        p.write_bytes(data)
        want[str(p.relative_to(src))] = hashlib.sha256(data).hexdigest()
    srv = subprocess.Popen([lode_bin(), "bench-ceiling", "--fuse-source", str(src), "--fuse-mount", str(mnt)],
                           stdout=subprocess.PIPE)
    try:
        line = srv.stdout.readline().decode()
        assert "40 files" in line and "FUSE on" in line, line
        got = {}
        for d, _, fs in os.walk(mnt):
            for f in fs:
                with open(os.path.join(d, f), "rb") as fh:
                    got[os.path.relpath(os.path.join(d, f), mnt)] = hashlib.sha256(fh.read()).hexdigest()
        assert got == want
        with open(mnt / "class_1" / "0001.jpg", "rb") as fh:
            fh.seek(100_000)
            assert fh.read(10) == (src / "class_1" / "0001.jpg").read_bytes()[100_000:100_010]
        # A file created there (what the creates benchmark measures) is kept in memory beside
        # the tree: readable by name, not listed; the tree's own files are not written.
        with open(mnt / "class_0" / "new.bin", "wb") as fh:
            fh.write(b"made here")
        assert (mnt / "class_0" / "new.bin").read_bytes() == b"made here"
        assert "new.bin" not in os.listdir(mnt / "class_0")
        with pytest.raises(PermissionError):
            with open(mnt / "class_1" / "0001.jpg", "r+b") as fh:
                fh.write(b"x")
                fh.flush()
    finally:
        srv.terminate()
        srv.wait(timeout=30)
    assert not os.path.ismount(mnt)
