"""Thousands of clients (issue 37, section 3): 2,000 keep-alive connections held open at once
against the session's server(s) (spread over both gateways in cluster mode), every request
answered; past `server.max_connections` a client gets a fast 503 SlowDown, never a silent wait;
past `server.max_requests` a request waits its turn for up to `server.request_wait_ms`."""

import json
import os
import socket
import subprocess
import time

import pytest
from botocore.exceptions import ClientError

from conftest import ACCESS_KEY, CLUSTER_MODE, SECRET_KEY, Lode, lode_bin, make_client


def test_two_thousand_connections_are_all_answered(lode_servers, tmp_path):
    out = tmp_path / "conns.json"
    endpoints = ",".join(s.endpoint for s in lode_servers)
    pids = [a for s in lode_servers for a in ("--server-pid", str(s.proc.pid))]
    p = subprocess.run(
        [lode_bin(), "bench", "conns", "--endpoint", endpoints, "--access-key", ACCESS_KEY,
         "--secret-key", SECRET_KEY, "--bucket", "conns-test", "--connections", "2000", "--rate", "1500",
         "--duration", "4", "--objects", "300", "--json", str(out), *pids],
        capture_output=True, timeout=300)
    assert p.returncode == 0, p.stdout.decode() + p.stderr.decode()
    r = json.loads(out.read_text())
    c = r["extra"]["conns"]
    assert c["connections"] == 2000 and c["open_errors"] == 0
    assert c["endpoints"] == len(lode_servers)
    classes = r["classes"]
    assert set(classes) == {"get", "head", "list", "put"}
    assert all(v["errors"] == 0 for v in classes.values()), classes
    # Every connection was served (about 4 s x 1500/s requests in all).
    assert sum(v["ops"] for v in classes.values()) >= 4 * 1500 * 0.9
    assert c["server_rss_kib_per_connection"] is not None


def raw_request(port, path="/"):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    return s


@pytest.mark.skipif(CLUSTER_MODE, reason="its own server, with a small connection limit")
def test_past_the_connection_limit_a_client_gets_a_fast_503(tmp_path):
    cfg = tmp_path / "lode.toml"
    cfg.write_text('[server]\nmax_connections = 20\n[[datapath.devices]]\npath = "dev0.img"\nsize = "256MiB"\n')
    srv = Lode(str(tmp_path / "data"), extra_args=["--config", str(cfg)]).start()
    try:
        # 20 idle keep-alive connections hold every slot.
        held = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(20)]
        time.sleep(0.3)
        t0 = time.monotonic()
        s = raw_request(srv.port)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        took = time.monotonic() - t0
        head = data.decode(errors="replace")
        assert head.startswith("HTTP/1.1 503"), head
        assert "<Code>SlowDown</Code>" in head and "connection: close" in head.lower()
        assert took < 2, took  # answered at once, and closed
        s.close()
        # A slot freed is a slot served.
        held.pop().close()
        deadline = time.time() + 5
        while True:
            try:
                make_client(srv.endpoint).list_buckets()
                break
            except ClientError:
                assert time.time() < deadline
                time.sleep(0.1)
        for h in held:
            h.close()
    finally:
        srv.remove()


@pytest.mark.skipif(CLUSTER_MODE, reason="its own server")
def test_server_raises_its_open_file_limit(tmp_path):
    """At start Lode raises its soft open-file limit to the hard one (a connection is a file);
    with a hard limit too low for server.max_connections it says so and serves fewer."""
    soft = "ulimit -Sn 256; ulimit -Hn 4096; exec " + lode_bin()
    cfg = tmp_path / "lode.toml"
    cfg.write_text('[[datapath.devices]]\npath = "dev0.img"\nsize = "256MiB"\n')
    env = dict(os.environ, LODE_ACCESS_KEY=ACCESS_KEY, LODE_SECRET_KEY=SECRET_KEY, LODE_LOG="info")
    p = subprocess.Popen(["bash", "-c", soft + f" serve --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0"
                          f" --data-dir {tmp_path}/data --config {cfg}"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.time() + 60
        started = False
        while time.time() < deadline and not started:
            line = p.stdout.readline().decode()
            started = "AWS_DEFAULT_REGION" in line
            if not line:
                break
        assert started, "lode did not start"
        limits = open(f"/proc/{p.pid}/limits").read()
        row = next(l for l in limits.splitlines() if l.startswith("Max open files"))
        assert row.split()[3:5] == ["4096", "4096"], row
    finally:
        p.terminate()
        err = p.communicate(timeout=30)[1].decode()
    assert "open-file limit is too low for server.max_connections" in err, err[-2000:]
    assert "needed=13072" in err and "serving=1024" in err, err[-2000:]
