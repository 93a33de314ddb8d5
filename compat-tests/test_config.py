"""`lode serve` configuration as a user meets it: generated credentials that persist, a config
file with several devices and non-default sizes, flags over env over file, and bad config
refused with a message that names the key (never a panic)."""

import os
import re
import subprocess
import textwrap

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from conftest import Lode, lode_bin, small_config


def client(endpoint, ak, sk):
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ak, aws_secret_access_key=sk,
                        region_name="us-east-1", config=Config(retries={"max_attempts": 1}))


def test_generated_credentials_are_printed_stored_and_kept(tmp_path):
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LODE_")}
    env["LODE_CONFIG"] = small_config(str(tmp_path))
    env["LODE_ADMIN_LISTEN"] = "127.0.0.1:0"
    p = subprocess.Popen([lode_bin(), "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data)],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        banner = ""
        while "AWS_DEFAULT_REGION" not in banner:
            line = p.stdout.readline().decode()
            assert line, "lode exited before printing its banner"
            banner += line
        assert f"data dir    : {data}" in banner
        ak = re.search(r"export AWS_ACCESS_KEY_ID=(\S+)", banner).group(1)
        sk = re.search(r"export AWS_SECRET_ACCESS_KEY=(\S+)", banner).group(1)
        ep = re.search(r"export AWS_ENDPOINT_URL=(\S+)", banner).group(1)
        c = client(ep, ak, sk)
        c.create_bucket(Bucket="gen-creds")
        assert (data / "credentials").exists()
        assert oct((data / "credentials").stat().st_mode & 0o777) == "0o600"
    finally:
        p.terminate()
        p.wait(timeout=30)
    # Second start: the same keys (nothing new generated) and the same data.
    p = subprocess.Popen([lode_bin(), "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data)],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        banner = ""
        while "AWS_DEFAULT_REGION" not in banner:
            banner += p.stdout.readline().decode()
        assert f"AWS_ACCESS_KEY_ID={ak}" in banner and "generated on first start" not in banner
        assert "credentials : kept in" in banner
        ep = re.search(r"export AWS_ENDPOINT_URL=(\S+)", banner).group(1)
        assert [b["Name"] for b in client(ep, ak, sk).list_buckets()["Buckets"]] == ["gen-creds"]
    finally:
        p.terminate()
        p.wait(timeout=30)


def test_config_file_devices_sizes_and_limits(tmp_path):
    data = tmp_path / "data"
    cfg = tmp_path / "lode.toml"
    cfg.write_text(textwrap.dedent(f"""
        data_dir = "{data}"
        [server]
        listen = "127.0.0.1:1"          # overridden by --listen below
        max_object_size = "3MiB"
        [datapath]
        inline_threshold = "1KiB"
        chunk_size = "256KiB"
        durability = "async"
        [[datapath.devices]]
        path = "d0.img"
        size = "64MiB"
        [[datapath.devices]]
        path = "{tmp_path}/elsewhere/d1.img"
        size = "32MiB"
    """))
    srv = Lode(str(data), extra_args=["--config", str(cfg)])
    srv.start()
    try:
        assert any("2 device(s), 96.0 MiB" in l for l in srv.banner), srv.banner
        from conftest import make_client

        s3 = make_client(srv.endpoint)
        s3.create_bucket(Bucket="cfg")
        body = os.urandom(2 * 1024 * 1024 + 5)
        s3.put_object(Bucket="cfg", Key="striped", Body=body)
        assert s3.get_object(Bucket="cfg", Key="striped")["Body"].read() == body
        # Chunks went to both devices (striping): both files hold non-zero data.
        for dev in (data / "d0.img", tmp_path / "elsewhere" / "d1.img"):
            assert dev.stat().st_size in (64 << 20, 32 << 20)
            with open(dev, "rb") as f:
                assert any(f.read(1 << 20)), f"{dev} got no chunk"
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket="cfg", Key="too-big", Body=b"x" * (3 * 1024 * 1024 + 1))
        assert e.value.response["Error"]["Code"] == "EntityTooLarge"
    finally:
        srv.remove()


@pytest.mark.parametrize(
    "text,key",
    [
        ('[server]\nlisten = "not-an-address"\n', "server.listen"),
        ('[datapath]\nchunk_size = "5KiB"\n', "datapath.chunk_size"),
        ('[datapath]\ndurability = "sometimes"\n', "durability"),
        ('[server]\nlisen = "127.0.0.1:9000"\n', "lisen"),
        ('[[datapath.devices]]\npath = "d"\nsize = "1MiB"\n', "datapath.devices[0].size"),
        ("this is not toml", "invalid"),
    ],
)
def test_bad_config_names_the_key(tmp_path, text, key):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    p = subprocess.run([lode_bin(), "serve", "--config", str(cfg), "--data-dir", str(tmp_path / "d")],
                       capture_output=True, timeout=60)
    err = p.stderr.decode()
    assert p.returncode != 0
    assert key in err, err
    assert "panicked" not in err


def test_flag_beats_env(tmp_path):
    env = dict(os.environ, LODE_LISTEN="not-valid")
    p = subprocess.run([lode_bin(), "check-config", "--listen", "127.0.0.1:9999", "--data-dir", str(tmp_path)],
                       capture_output=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr.decode()
    assert 'listen = "127.0.0.1:9999"' in p.stdout.decode()
    p = subprocess.run([lode_bin(), "check-config", "--data-dir", str(tmp_path)], capture_output=True, timeout=60, env=env)
    assert p.returncode != 0 and "server.listen" in p.stderr.decode()


def test_oversized_headers_are_refused(lode_server):
    import requests

    r = requests.get(lode_server.endpoint + "/", headers={"x-big": "a" * (200 * 1024)})
    assert r.status_code == 431


def test_slow_clients_time_out(tmp_path):
    """A body that stops mid-way gets 400 RequestTimeout and leaves nothing; a client that never
    finishes its headers is disconnected (slowloris)."""
    import socket
    import time as _time

    from conftest import make_client

    cfg = tmp_path / "lode.toml"
    cfg.write_text("[server]\nheader_timeout_secs = 2\nbody_idle_timeout_secs = 2\n"
                   '[[datapath.devices]]\npath = "dev0.img"\nsize = "256MiB"\n')
    srv = Lode(str(tmp_path / "data"), extra_args=["--config", str(cfg)])
    srv.start()
    try:
        s3 = make_client(srv.endpoint)
        s3.create_bucket(Bucket="slow")
        url = s3.generate_presigned_url("put_object", Params={"Bucket": "slow", "Key": "half"}, ExpiresIn=60)
        path = url.split(str(srv.port), 1)[1]
        sock = socket.create_connection(("127.0.0.1", srv.port))
        sock.sendall(f"PUT {path} HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\nContent-Length: 100000\r\n\r\n".encode() + b"x" * 1000)
        sock.settimeout(20)
        t0 = _time.time()
        resp = sock.recv(65536).decode(errors="replace")
        assert "400" in resp.split("\r\n")[0] and "RequestTimeout" in resp, resp
        assert 1.5 < _time.time() - t0 < 15
        sock.close()
        with pytest.raises(ClientError):
            s3.head_object(Bucket="slow", Key="half")
        sock = socket.create_connection(("127.0.0.1", srv.port))
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # never finishes the headers
        sock.settimeout(20)
        t0 = _time.time()
        data = sock.recv(65536)
        assert _time.time() - t0 < 15
        assert data == b"" or b"408" in data.split(b"\r\n")[0]
        sock.close()
    finally:
        srv.remove()


def test_overload_answers_503_slowdown(tmp_path):
    """Past `server.max_requests` requests in flight, a request waits its turn for up to
    `server.request_wait_ms`, then gets 503 SlowDown (which SDKs retry) instead of queueing
    without bound; capacity returns when requests finish."""
    import socket

    from conftest import make_client

    cfg = tmp_path / "lode.toml"
    cfg.write_text("[server]\nmax_requests = 2\nrequest_wait_ms = 400\nbody_idle_timeout_secs = 30\n"
                   '[[datapath.devices]]\npath = "dev0.img"\nsize = "256MiB"\n')
    srv = Lode(str(tmp_path / "data"), extra_args=["--config", str(cfg)])
    srv.start()
    try:
        s3 = make_client(srv.endpoint)
        s3.create_bucket(Bucket="busy")
        holders = []
        for i in range(2):  # two uploads that stall mid-body hold both slots
            url = s3.generate_presigned_url("put_object", Params={"Bucket": "busy", "Key": f"h{i}"}, ExpiresIn=60)
            sock = socket.create_connection(("127.0.0.1", srv.port))
            sock.sendall(f"PUT {url.split(str(srv.port), 1)[1]} HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\nContent-Length: 100\r\n\r\nxx".encode())
            holders.append(sock)
        import time as _time

        _time.sleep(0.5)
        t0 = _time.monotonic()
        with pytest.raises(ClientError) as e:
            s3.head_bucket(Bucket="busy")
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
        assert 0.4 <= _time.monotonic() - t0 < 3  # it waited its turn, then was refused
        with pytest.raises(ClientError) as e:
            s3.list_objects_v2(Bucket="busy")
        assert e.value.response["Error"]["Code"] == "SlowDown"
        for sock in holders:
            sock.close()
        deadline = _time.time() + 10
        while True:
            try:
                s3.list_objects_v2(Bucket="busy")
                break
            except ClientError:
                assert _time.time() < deadline, "capacity never came back"
                _time.sleep(0.1)
    finally:
        srv.remove()


def test_admin_healthz_and_metrics(lode_server, s3, bucket):
    import requests

    h = requests.get(lode_server.admin + "/healthz")
    assert h.status_code == 200
    j = h.json()
    assert j["status"] == "ok" and j["datapath_backend"] == "io_uring" and j["total_bytes"] == 3 << 30
    m = requests.get(lode_server.admin + "/metrics").text
    free = lambda text: int(next(l.split()[1] for l in text.splitlines() if l.startswith("lode_datapath_free_bytes ")))
    before = free(m)
    assert "lode_up 1" in m and "lode_datapath_write_poisoned 0" in m
    s3.put_object(Bucket=bucket, Key="space", Body=b"x" * (5 * 1024 * 1024))
    # Sealed at rest: two chunks of whole 64 KiB segments with their nonces and tags, 8 KiB
    # more than the plaintext once rounded to 4 KiB blocks.
    assert free(requests.get(lode_server.admin + "/metrics").text) == before - (5 * 1024 * 1024 + 8192)
    s3.delete_object(Bucket=bucket, Key="space")
    assert free(requests.get(lode_server.admin + "/metrics").text) == before
    assert requests.get(lode_server.admin + "/nope").status_code == 404


def test_raw_block_device(tmp_path):
    """A raw block device (a loop device here) as the datapath: its size is read from the device,
    objects round-trip through it, and they survive a restart."""
    backing = tmp_path / "disk.img"
    with open(backing, "wb") as f:
        f.truncate(96 * 1024 * 1024)
    p = subprocess.run(["losetup", "-f", "--show", str(backing)], capture_output=True, text=True)
    assert p.returncode == 0, f"losetup failed (needs root and loop devices): {p.stderr}"
    dev = p.stdout.strip()
    try:
        cfg = tmp_path / "lode.toml"
        cfg.write_text(f'[[datapath.devices]]\npath = "{dev}"\nsize = "16MiB"\n')
        srv = Lode(str(tmp_path / "data"), extra_args=["--config", str(cfg)])
        srv.start()
        try:
            assert any("1 device(s), 96.0 MiB" in l for l in srv.banner), srv.banner
            from conftest import make_client

            s3 = make_client(srv.endpoint)
            s3.create_bucket(Bucket="raw")
            data = os.urandom(9 * 1024 * 1024 + 17)
            s3.put_object(Bucket="raw", Key="k", Body=data)
            srv.restart(hard=True)
            s3 = make_client(srv.endpoint)
            assert s3.get_object(Bucket="raw", Key="k")["Body"].read() == data
        finally:
            srv.remove()
        with open(dev, "rb") as f:
            assert any(f.read(16 * 1024 * 1024)), "the chunks went to the block device"
    finally:
        subprocess.run(["losetup", "-d", dev], check=True)
