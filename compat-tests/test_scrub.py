"""Scrub and silent corruption: bytes flipped in a real device file under a real `lode serve`.
The next GET of that object fails (never wrong bytes), the background scrubber reports the
object in its log, its metrics and /api/scrub, and `lode scrub` (offline) exits 1 naming it."""

import json
import os
import subprocess
import time

import pytest
import requests
from botocore.exceptions import ClientError

from conftest import Lode, lode_bin, make_client


def scrub_config(directory):
    path = os.path.join(directory, "scrub-lode.toml")
    with open(path, "w") as f:
        f.write(
            '[[datapath.devices]]\npath = "dev0.img"\nsize = "64MiB"\n'
            "[scrub]\nenabled = true\nrate = \"256MiB\"\ninterval_secs = 1\nstart_delay_secs = 0\n"
        )
    return path


def test_flipped_bytes_fail_the_get_and_scrub_reports_the_object(tmp_path):
    data_dir = str(tmp_path / "data")
    cfg = scrub_config(str(tmp_path))
    srv = Lode(data_dir, extra_args=["--config", cfg])
    srv.start()
    try:
        s3 = make_client(srv.endpoint)
        s3.create_bucket(Bucket="scrubbed")
        victim = os.urandom(6 << 20)  # two chunks
        healthy = os.urandom(5 << 20)
        s3.put_object(Bucket="scrubbed", Key="healthy", Body=healthy)
        s3.put_object(Bucket="scrubbed", Key="tiny", Body=b"inline")
        # The victim is encrypted at rest (the default): its chunks are found as what its PUT
        # changed on the device (written with O_DIRECT and synced before the answer).
        dev = os.path.join(data_dir, "dev0.img")
        before = open(dev, "rb").read()
        s3.put_object(Bucket="scrubbed", Key="victim", Body=victim)

        # Flip one byte of the victim's first chunk.
        with open(dev, "r+b") as f:
            image = f.read()
            off = next((i for i in range(0, len(image), 4096) if image[i:i + 4096] != before[i:i + 4096]), -1)
            assert off >= 0, "the victim's PUT wrote to the device"
            assert image.find(victim[:4096]) < 0, "sealed: the plaintext is not on the device"
            f.seek(off + 1234)
            b = f.read(1)
            f.seek(off + 1234)
            f.write(bytes([b[0] ^ 0xFF]))
            f.flush()
            os.fsync(f.fileno())

        # The GET fails: an error status, or a cut body; never the wrong bytes.
        try:
            got = s3.get_object(Bucket="scrubbed", Key="victim")["Body"].read()
        except Exception:  # ClientError (500) or a body read error
            got = None
        assert got is None, "a corrupt chunk must not be served"
        assert s3.get_object(Bucket="scrubbed", Key="healthy")["Body"].read() == healthy
        assert s3.get_object(Bucket="scrubbed", Key="tiny")["Body"].read() == b"inline"

        # The scrubber (a pass a second here) reports it.
        deadline = time.time() + 30
        rep = {}
        while time.time() < deadline:
            rep = requests.get(srv.admin + "/api/scrub").json()
            if rep["passes"] >= 1 and rep["last_pass_bad"]:
                break
            time.sleep(0.2)
        bad = rep["last_pass_bad"]
        assert [(b["bucket"], b["key"]) for b in bad] == [("scrubbed", "victim")], rep
        assert rep["chunks"] >= 4
        metrics = requests.get(srv.admin + "/metrics").text
        corrupt = [l for l in metrics.splitlines() if l.startswith("lode_scrub_corrupt_chunks_total ")]
        assert corrupt and float(corrupt[0].split()[1]) >= 1, metrics
        log = open(srv.log_path).read()
        assert "scrub: chunk failed its check" in log and "victim" in log
    finally:
        srv.stop()

    # Offline: `lode scrub` reads everything once and exits 1, naming the object.
    p = subprocess.run(
        [lode_bin(), "scrub", "--config", cfg, "--data-dir", data_dir],
        capture_output=True,
        env=dict(os.environ, RUST_LIB_BACKTRACE="0"),
        timeout=120,
    )
    assert p.returncode == 1, p.stderr.decode()[-2000:]
    out = json.loads(p.stdout)
    assert [(b["bucket"], b["key"]) for b in out["bad"]] == [("scrubbed", "victim")]
    assert out["objects"] == 3
    srv.remove()


def test_scrub_of_a_clean_store_exits_0(tmp_path):
    data_dir = str(tmp_path / "data")
    cfg = scrub_config(str(tmp_path))
    srv = Lode(data_dir, extra_args=["--config", cfg])
    srv.start()
    s3 = make_client(srv.endpoint)
    s3.create_bucket(Bucket="clean")
    s3.put_object(Bucket="clean", Key="k", Body=os.urandom(5 << 20))
    srv.stop()
    p = subprocess.run([lode_bin(), "scrub", "--config", cfg, "--data-dir", data_dir], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    out = json.loads(p.stdout)
    # Sealed at rest: 80 segments of 64 KiB, each with its 12-byte nonce and 16-byte tag.
    assert out["bad"] == [] and out["chunks"] == 2 and out["bytes"] == (5 << 20) + 80 * 28
    srv.remove()
