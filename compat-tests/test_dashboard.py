"""The dashboard page in headless Chromium (Debian's chromium, driven over the DevTools
protocol): after a real run of S3 and POSIX traffic it loads from Lode's admin listener, draws
every chart from that run's profile, and logs no console error, exception or failed load.

`LODE_DASHBOARD_SCREENSHOT=path.png` keeps the screenshot (the docs' picture is made this way)."""

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid

import pytest
import requests

from conftest import Lode, make_client

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (setup.sh installs it)")


class DevTools:
    """A minimal DevTools-protocol client over one page's websocket."""

    def __init__(self, ws_url):
        import websocket

        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self.next_id = 0
        self.events = []

    def call(self, method, **params):
        self.next_id += 1
        me = self.next_id
        self.ws.send(json.dumps({"id": me, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == me:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]
            if "method" in msg:
                self.events.append(msg)

    def evaluate(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in r, r
        return r["result"].get("value")

    def problems(self):
        """Console errors/warnings, uncaught exceptions and failed loads seen so far."""
        out = []
        for e in self.events:
            m, p = e["method"], e["params"]
            if m == "Runtime.exceptionThrown":
                out.append(("exception", p["exceptionDetails"].get("text"), p["exceptionDetails"]))
            elif m == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert", "warning"):
                out.append(("console." + p["type"], [a.get("value", a.get("description")) for a in p["args"]]))
            elif m == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                out.append(("log", p["entry"]["text"], p["entry"].get("url")))
            elif m == "Network.loadingFailed":
                out.append(("load failed", p.get("errorText")))
            elif m == "Network.responseReceived" and p["response"]["status"] >= 400:
                out.append(("http", p["response"]["status"], p["response"]["url"]))
        return out


@pytest.fixture
def chromium(tmp_path):
    profile = tempfile.mkdtemp(prefix="lode-chromium-")
    proc = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
         "--window-size=1400,1000", f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "chromium.log", "wb"),
    )
    try:
        port_file = os.path.join(profile, "DevToolsActivePort")
        deadline = time.time() + 60
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            assert proc.poll() is None, (tmp_path / "chromium.log").read_text()[-3000:]
            assert time.time() < deadline, "chromium did not open its DevTools port"
            time.sleep(0.1)
        port = int(open(port_file).read().split()[0])
        pages = [t for t in requests.get(f"http://127.0.0.1:{port}/json/list").json() if t["type"] == "page"]
        dt = DevTools(pages[0]["webSocketDebuggerUrl"])
        yield dt
        dt.ws.close()
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


def run_traffic(srv, mnt):
    s3 = make_client(srv.endpoint)
    b = "dash-" + uuid.uuid4().hex[:6]
    s3.create_bucket(Bucket=b)
    for i in range(40):
        s3.put_object(Bucket=b, Key=f"small/{i}", Body=os.urandom(100 + i * 500))
    s3.put_object(Bucket=b, Key="big", Body=os.urandom(3 << 20))
    for i in range(120):
        s3.get_object(Bucket=b, Key=f"small/{i % 40}")["Body"].read()
        if i % 3 == 0:
            s3.head_object(Bucket=b, Key=f"small/{i % 40}")
    s3.get_object(Bucket=b, Key="big")["Body"].read()
    s3.list_objects_v2(Bucket=b, Prefix="small/")
    if mnt:
        with open(os.path.join(mnt, b, "from-posix.bin"), "wb") as f:
            f.write(os.urandom(200_000))
        os.listdir(os.path.join(mnt, b, "small"))
        with open(os.path.join(mnt, b, "big"), "rb") as f:
            while f.read(1 << 20):
                pass
    return b


def test_dashboard_draws_a_real_run_without_console_errors(tmp_path, chromium):
    use_mount = os.geteuid() == 0 and os.path.exists("/dev/fuse")
    mnt = str(tmp_path / "mnt") if use_mount else None
    srv = Lode(str(tmp_path / "data"), extra_args=["--mount", mnt] if mnt else [], device_size="128MiB")
    srv.start()
    try:
        bucket = run_traffic(srv, mnt)
        time.sleep(1.1)  # let the traffic's last second complete, so the series has a finished second
        more = run_traffic(srv, None)  # a second burst: the series must show two active seconds or more
        time.sleep(1.1)
        profile = requests.get(srv.admin + "/api/profile").json()
        assert profile["total"]["read"]["ops"] > 0 and profile["total"]["write"]["ops"] > 0

        dt = chromium
        for domain in ("Runtime", "Log", "Network", "Page"):
            dt.call(domain + ".enable")
        dt.call("Page.navigate", url=srv.admin + "/dashboard")
        deadline = time.time() + 30
        while (dt.evaluate("Number(document.body && document.body.dataset.rendered || 0)") or 0) < 2:
            assert time.time() < deadline, dt.problems() or dt.evaluate("document.body.innerText")
            time.sleep(0.2)

        got = dt.evaluate("""(() => {
          const q = (sel) => document.querySelectorAll(sel);
          const lines = [...q('[data-chart=ops] polyline')];
          const pts = (c) => lines.filter(l => l.dataset.class === c)
              .map(l => l.getAttribute('points').split(' ').length)[0] || 0;
          return {
            ops_lines: lines.map(l => l.dataset.class),
            read_points: pts('read'),
            peak_marks: q('[data-chart=ops] [data-mark=peak], [data-chart=mib] [data-mark=peak]').length,
            avg_marks: q('[data-chart=ops] [data-mark=avg], [data-chart=mib] [data-mark=avg]').length,
            size_bars: [...q('[data-chart=sizes] rect')].map(r => r.dataset.class),
            mix_bars: [...q('[data-chart=mix] rect[data-class]')].map(r => r.dataset.class),
            lat_bars: [...q('[data-chart=latency] rect')].map(r => r.dataset.class + ':' + r.dataset.pct),
            buckets: [...q('#buckets td:first-child')].map(td => td.textContent),
            meta_share: document.getElementById('meta-share').textContent,
            ops_total: document.getElementById('ops').textContent,
            status: document.getElementById('status').className,
            text: document.body.innerText,
          };
        })()""")
        assert got["status"] == "", got["text"]
        assert got["ops_lines"] == ["read", "write", "meta", "other"]
        assert got["read_points"] >= 2
        assert got["peak_marks"] == 2 and got["avg_marks"] == 2
        assert {"read", "write"} <= set(got["size_bars"])
        assert {"read", "write", "meta"} <= set(got["mix_bars"])
        for c in ("read", "write", "meta"):
            for p in ("p50", "p99", "p99.9"):
                assert f"{c}:{p}" in got["lat_bars"], got["lat_bars"]
        assert bucket in got["buckets"] and more in got["buckets"]
        assert got["meta_share"] == f"{100 * profile['metadata_share']:.1f}%"  # no traffic since
        assert "no ops recorded yet" not in got["text"]

        shot = dt.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        png = base64.b64decode(shot["data"])
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
        keep = os.environ.get("LODE_DASHBOARD_SCREENSHOT")
        if keep:
            with open(keep, "wb") as f:
                f.write(png)
        assert dt.problems() == []
    finally:
        srv.stop()


def test_dashboard_says_when_lode_is_gone(tmp_path, chromium):
    """The page reports a lost admin endpoint instead of failing silently."""
    srv = Lode(str(tmp_path / "data"), device_size="64MiB")
    srv.start()
    dt = chromium
    try:
        dt.call("Runtime.enable")
        dt.call("Page.navigate", url=srv.admin + "/")
        deadline = time.time() + 30
        while (dt.evaluate("Number(document.body && document.body.dataset.rendered || 0)") or 0) < 1:
            assert time.time() < deadline
            time.sleep(0.2)
        assert "no ops recorded yet" in dt.evaluate("document.body.innerText")
    finally:
        srv.stop()
    deadline = time.time() + 30
    while "cannot reach Lode" not in (dt.evaluate("document.getElementById('status').textContent") or ""):
        assert time.time() < deadline, dt.evaluate("document.getElementById('status').textContent")
        time.sleep(0.2)
    assert dt.evaluate("document.getElementById('status').className") == "err"
