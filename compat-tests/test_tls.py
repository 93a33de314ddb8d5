"""TLS on the S3 port: a self-signed CA made with the openssl CLI, a server certificate for
127.0.0.1 signed by it, and the real boto3 and aws-cli trusting that CA (and only that CA)."""

import os
import socket
import ssl
import subprocess
import warnings

import boto3
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import SSLError

from conftest import ACCESS_KEY, REGION, SECRET_KEY, Lode


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=Lode test CA", cwd=d)
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "server.key",
            "-out", "server.csr", "-subj", "/CN=127.0.0.1", cwd=d)
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf", cwd=d)
    return d


@pytest.fixture(scope="module")
def tls_server(pki, tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    srv = Lode(str(d / "data"), extra_args=["--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key")],
               device_size="64MiB")
    srv.start()
    yield srv
    srv.remove()


def client(endpoint, verify):
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY,
                        aws_secret_access_key=SECRET_KEY, region_name=REGION, verify=verify,
                        config=Config(retries={"max_attempts": 1}))


def test_boto3_over_tls_with_the_test_ca(tls_server, pki):
    assert tls_server.endpoint.startswith("https://")
    s3 = client(tls_server.endpoint, str(pki / "ca.pem"))
    s3.create_bucket(Bucket="tls")
    body = os.urandom(6 << 20)  # multi-chunk, default CRC checksums, aws-chunked trailer
    s3.put_object(Bucket="tls", Key="k", Body=body)
    assert s3.get_object(Bucket="tls", Key="k")["Body"].read() == body
    s3.upload_fileobj(__import__("io").BytesIO(body * 2), "tls", "big")  # multipart
    assert s3.head_object(Bucket="tls", Key="big")["ContentLength"] == len(body) * 2


def test_aws_cli_over_tls_with_ca_bundle(tls_server, pki, tmp_path):
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(100_000))
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
               AWS_DEFAULT_REGION=REGION, AWS_ENDPOINT_URL=tls_server.endpoint,
               AWS_CA_BUNDLE=str(pki / "ca.pem"), AWS_CONFIG_FILE=str(tmp_path / "none"))
    exe = os.path.join(os.path.dirname(__import__("sys").executable), "aws")
    subprocess.run([exe, "s3", "mb", "s3://tls-cli"], env=env, check=True, capture_output=True)
    subprocess.run([exe, "s3", "cp", str(src), "s3://tls-cli/f.bin"], env=env, check=True, capture_output=True)
    out = subprocess.run([exe, "s3", "ls", "s3://tls-cli/"], env=env, check=True, capture_output=True).stdout
    assert b"f.bin" in out and b"100000" in out


def test_untrusted_clients_and_plain_http_are_refused(tls_server):
    # Default trust store: the self-signed CA is unknown.
    with pytest.raises(SSLError):
        client(tls_server.endpoint, True).list_buckets()
    # Plain HTTP to the TLS port gets no HTTP answer.
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(f"http://127.0.0.1:{tls_server.port}/", timeout=5)


def test_tls_versions_and_alpn(tls_server, pki):
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    with socket.create_connection(("127.0.0.1", tls_server.port)) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            assert s.version() in ("TLSv1.2", "TLSv1.3")
            assert s.selected_alpn_protocol() == "http/1.1"
    # A client that can only speak TLS 1.1 (OpenSSL's own floor lowered, so the refusal is an
    # alert sent by the server, not the client's policy).
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.load_verify_locations(str(pki / "ca.pem"))
    old.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old.minimum_version = ssl.TLSVersion.TLSv1_1
        old.maximum_version = ssl.TLSVersion.TLSv1_1
    with socket.create_connection(("127.0.0.1", tls_server.port)) as raw:
        with pytest.raises(ssl.SSLError) as e:
            old.wrap_socket(raw, server_hostname="127.0.0.1")
    msg = str(e.value).upper()
    assert "ALERT_HANDSHAKE_FAILURE" in msg or "ALERT_PROTOCOL_VERSION" in msg, e.value


def test_bad_tls_config_is_a_clear_start_error(tmp_path, pki):
    srv = Lode(str(tmp_path / "data"), extra_args=["--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "ca.key")],
               device_size="64MiB")
    with pytest.raises(RuntimeError, match="do not match"):
        srv.start()
    srv.remove()
    srv = Lode(str(tmp_path / "data2"), extra_args=["--tls-cert", str(tmp_path / "missing.pem"), "--tls-key", str(pki / "server.key")],
               device_size="64MiB")
    with pytest.raises(RuntimeError, match="reading TLS certificate"):
        srv.start()
    srv.remove()
