"""Start-up failures of the metadata store at the CLI: a data dir locked by a running lode, and
a damaged RocksDB. Each must end with a clear message and a non-zero exit, never a panic."""

import glob
import os
import subprocess

from conftest import Lode, lode_bin, small_config


def serve(data_dir, cfg):
    return subprocess.run(
        [lode_bin(), "serve", "--config", cfg, "--data-dir", data_dir, "--listen", "127.0.0.1:0", "--admin-listen", ""],
        capture_output=True,
        timeout=60,
        env=dict(os.environ, RUST_LIB_BACKTRACE="0", RUST_BACKTRACE="0"),
    )


def test_locked_data_dir_is_a_clear_error(tmp_path):
    srv = Lode(str(tmp_path / "data"), device_size="64MiB")
    srv.start()
    try:
        p = serve(srv.data_dir, small_config(str(tmp_path), "64MiB"))
        err = p.stderr.decode()
        assert p.returncode != 0
        assert "is another lode process using this data dir?" in err and "LOCK" in err, err
        assert "panicked" not in err
    finally:
        srv.remove()


def test_damaged_metadata_is_a_clear_error(tmp_path):
    cfg = small_config(str(tmp_path), "64MiB")
    srv = Lode(str(tmp_path / "data"), device_size="64MiB")
    srv.start()
    srv.stop()
    meta = os.path.join(srv.data_dir, "meta")
    # CURRENT names a manifest that is not there.
    with open(os.path.join(meta, "CURRENT"), "w") as f:
        f.write("MANIFEST-999999\n")
    p = serve(srv.data_dir, cfg)
    err = p.stderr.decode()
    assert p.returncode != 0
    assert "opening the metadata store" in err and "MANIFEST-999999" in err, err
    assert "panicked" not in err
    # A manifest full of garbage.
    for m in glob.glob(os.path.join(meta, "MANIFEST-*")):
        with open(m, "r+b") as f:
            f.write(b"\xde\xad\xbe\xef" * 64)
    with open(os.path.join(meta, "CURRENT"), "w") as f:
        f.write(os.path.basename(sorted(glob.glob(os.path.join(meta, "MANIFEST-*")))[-1]) + "\n")
    p = serve(srv.data_dir, cfg)
    err = p.stderr.decode()
    assert p.returncode != 0 and "opening the metadata store" in err and "panicked" not in err, err
    srv.remove()
