"""Fixtures: a real `lode serve` process on a free port with a fresh data dir, and real clients
(boto3 and aws-cli from PyPI) in their default configuration pointed at it."""

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid

import boto3
import pytest
from botocore.config import Config

ACCESS_KEY = "LODETESTACCESSKEY01"
SECRET_KEY = "lode-test-secret-key-0123456789abcdefghij"
REGION = "us-east-1"


def lode_bin():
    b = os.environ.get("LODE_BIN")
    if b:
        return b
    target = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/lode-target"))
    return os.path.join(target, "release", "lode")


# Lifecycle "days" of 2 s, judged every second, so rules can be seen working (test_lifecycle.py).
LIFECYCLE_TOML = "[lifecycle]\nday_secs = 2\ninterval_secs = 1\n"


def small_config(directory, device_size="1GiB", extra_toml=""):
    """A lode.toml whose one device is small: the default 8 GiB device file is preallocated for
    real, and a test run starts many servers."""
    path = os.path.join(directory, "test-lode.toml")
    with open(path, "w") as f:
        f.write(f'[[datapath.devices]]\npath = "dev0.img"\nsize = "{device_size}"\n')
        f.write(LIFECYCLE_TOML)
        f.write(extra_toml)
    return path


class Lode:
    """One lode process. `restart()` stops it (SIGTERM, or SIGKILL with hard=True) and starts it
    again on the same data dir and port. Unless `extra_args` names a config, the device is
    `device_size` (1 GiB)."""

    def __init__(self, data_dir, extra_env=None, extra_args=None, device_size="1GiB", extra_toml=""):
        self.data_dir = data_dir
        self.extra_env = extra_env or {}
        self.extra_args = list(extra_args or [])
        if "--config" not in self.extra_args:
            parent = os.path.dirname(data_dir.rstrip("/"))
            os.makedirs(parent, exist_ok=True)
            self.extra_args += ["--config", small_config(parent, device_size, extra_toml)]
        self.port = None
        self.scheme = "http"
        self.proc = None
        self.log_path = data_dir.rstrip("/") + ".log"

    def start(self):
        listen = f"127.0.0.1:{self.port or 0}"
        env = dict(os.environ)
        env.update({"LODE_ACCESS_KEY": ACCESS_KEY, "LODE_SECRET_KEY": SECRET_KEY, "LODE_LOG": "info"})
        # Error reports without anyhow's backtraces (panics still get theirs).
        env["RUST_LIB_BACKTRACE"] = "0"
        env.update(self.extra_env)
        self.log = open(self.log_path, "ab")
        admin = [] if "--admin-listen" in self.extra_args else ["--admin-listen", "127.0.0.1:0"]
        self.proc = subprocess.Popen(
            [lode_bin(), "serve", "--listen", listen, "--data-dir", self.data_dir, *admin, *self.extra_args],
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=env,
        )
        deadline = time.time() + 60
        banner = []
        while time.time() < deadline:
            line = self.proc.stdout.readline().decode()
            if not line:
                break
            banner.append(line)
            m = re.search(r"S3 endpoint : (https?)://127\.0\.0\.1:(\d+)", line)
            if m:
                self.scheme, self.port = m.group(1), int(m.group(2))
            a = re.search(r"admin       : http://127\.0\.0\.1:(\d+)/healthz", line)
            if a:
                self.admin = f"http://127.0.0.1:{a.group(1)}"
            if "AWS_DEFAULT_REGION" in line and self.port:
                self.banner = banner
                return self
        self.proc.kill()
        raise RuntimeError("lode did not start: " + "".join(banner) + open(self.log_path).read()[-3000:])

    @property
    def endpoint(self):
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def stop(self, hard=False):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if hard else signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.proc.stdout.close()
        self.log.close()

    def remove(self):
        """Stops the server and deletes its data dir (device files are large)."""
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def restart(self, hard=False):
        self.stop(hard=hard)
        return self.start()


# LODE_COMPAT_MODE=cluster runs the modules (./test.sh runs most of them a second time this way)
# against two cluster-mode gateways over the Ceph cluster of LODE_CEPH_CONF, with every request
# of the `s3` client sent to the next gateway in turn. Their partitions split at 64 keys.
CLUSTER_MODE = os.environ.get("LODE_COMPAT_MODE") == "cluster"
local_only = pytest.mark.skipif(CLUSTER_MODE, reason="local by nature (one node's data dir, devices or mount)")


def cluster_gateways(tmp_path_factory, n=2, first_args=(), extra_env=None, extra_toml="", all_args=(), cluster_toml=""):
    """`n` gateways on one fresh namespace of the cluster, started; the first one also gets
    `first_args` (a mount), every one `all_args` and `extra_toml` in its config."""
    conf = os.environ["LODE_CEPH_CONF"]
    ns = "compat-" + uuid.uuid4().hex[:10]
    cfg = tmp_path_factory.mktemp("cluster-cfg") / "lode.toml"
    cfg.write_text("[cluster]\nindex_split_keys = 64\n" + cluster_toml + LIFECYCLE_TOML + extra_toml)
    args = ["--cluster", "ceph", "--ceph-conf", conf, "--index-pool", "lode-compat-index",
            "--data-pool", "lode-compat-data", "--namespace", ns, "--config", str(cfg)]
    env = {"LODE_DOMAIN": "localhost", "LODE_MASTER_KEY": "5e" * 32, **(extra_env or {})}
    gws = [Lode(str(tmp_path_factory.mktemp("gw") / "data"), extra_env=env,
                extra_args=args + list(all_args) + (list(first_args) if i == 0 else [])) for i in range(n)]
    for g in gws:
        g.start()
    return gws


@pytest.fixture(scope="session")
def lode_servers(tmp_path_factory):
    """Every gateway of the session: one local server, or two cluster gateways."""
    if CLUSTER_MODE:
        gws = cluster_gateways(tmp_path_factory)
    else:
        d = tmp_path_factory.mktemp("lode")
        gws = [Lode(str(d / "data"), extra_env={"LODE_DOMAIN": "localhost"}, device_size="3GiB")]
        gws[0].start()
    yield gws
    for g in gws:
        g.remove()


@pytest.fixture(scope="session")
def lode_server(lode_servers):
    return lode_servers[0]


def spread(client, endpoints):
    """Sends each request of `client` to the next of `endpoints` in turn (signed for it)."""
    import itertools
    import urllib.parse

    nxt = itertools.cycle([urllib.parse.urlsplit(e).netloc for e in endpoints])

    def hook(request, **_):
        u = urllib.parse.urlsplit(request.url)
        request.url = urllib.parse.urlunsplit(u._replace(netloc=next(nxt)))

    client.meta.events.register("before-sign.s3", hook)
    return client


def make_client(endpoint, addressing="path", **cfg):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
        config=Config(s3={"addressing_style": addressing}, retries={"max_attempts": 1}, **cfg),
    )


@pytest.fixture(scope="session")
def s3(lode_servers):
    client = make_client(lode_servers[0].endpoint)
    if len(lode_servers) > 1:
        spread(client, [g.endpoint for g in lode_servers])
    return client


@pytest.fixture
def bucket(s3):
    name = "t-" + uuid.uuid4().hex[:12]
    s3.create_bucket(Bucket=name)
    yield name
    # Empty and remove it (also checks that cleanup works).
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=name, Delete={"Objects": keys, "Quiet": True})
    for u in s3.list_multipart_uploads(Bucket=name).get("Uploads", []):
        s3.abort_multipart_upload(Bucket=name, Key=u["Key"], UploadId=u["UploadId"])
    s3.delete_bucket(Bucket=name)


@pytest.fixture
def aws(lode_server, tmp_path):
    """Runs the real aws-cli (from the venv) against lode, with default settings."""
    env = dict(os.environ)
    env.update(
        {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ENDPOINT_URL": lode_server.endpoint,
            "AWS_CONFIG_FILE": str(tmp_path / "nonexistent-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "nonexistent-creds"),
        }
    )
    exe = os.path.join(os.path.dirname(__import__("sys").executable), "aws")

    def run(*args, check=True, input=None):
        p = subprocess.run([exe, *args], env=env, capture_output=True, input=input, timeout=600)
        if check and p.returncode != 0:
            raise AssertionError(f"aws {' '.join(args)} failed ({p.returncode}):\n{p.stdout.decode()}\n{p.stderr.decode()}")
        return p

    return run


def empty_versions(s3, bucket):
    """What tools do to empty a versioned bucket: every version and marker, by id."""
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        objs = [{"Key": v["Key"], "VersionId": v["VersionId"]}
                for v in page.get("Versions", []) + page.get("DeleteMarkers", [])]
        if objs:
            r = s3.delete_objects(Bucket=bucket, Delete={"Objects": objs})
            assert not r.get("Errors"), r["Errors"]
