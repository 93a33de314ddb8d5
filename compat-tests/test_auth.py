"""SigV4: header auth, presigned URLs fetched with plain HTTP, every x-amz-content-sha256 mode,
refusals with the right code, and path- and virtual-hosted-style addressing."""

import datetime
import hashlib
import hmac
import time
import urllib.parse

import boto3
import pytest
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from conftest import ACCESS_KEY, REGION, SECRET_KEY, make_client


def err_code(resp):
    import re

    m = re.search(r"<Code>([^<]+)</Code>", resp.text)
    return m.group(1) if m else None


def test_anonymous_request_is_denied(lode_server, s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"secret")
    r = requests.get(f"{lode_server.endpoint}/{bucket}/k")
    assert r.status_code == 403 and err_code(r) == "AccessDenied"
    assert r.headers.get("x-amz-request-id")
    r = requests.put(f"{lode_server.endpoint}/{bucket}/anon", data=b"x")
    assert r.status_code == 403
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 1


def test_wrong_secret_and_unknown_key(lode_server, bucket):
    bad = boto3.client("s3", endpoint_url=lode_server.endpoint, aws_access_key_id=ACCESS_KEY,
                       aws_secret_access_key="wrong-secret-wrong-secret", region_name=REGION)
    with pytest.raises(ClientError) as e:
        bad.list_objects_v2(Bucket=bucket)
    assert e.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    unknown = boto3.client("s3", endpoint_url=lode_server.endpoint, aws_access_key_id="NOSUCHKEY123",
                           aws_secret_access_key=SECRET_KEY, region_name=REGION)
    with pytest.raises(ClientError) as e:
        unknown.list_buckets()
    assert e.value.response["Error"]["Code"] == "InvalidAccessKeyId"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_presigned_get_and_put_over_plain_http(s3, bucket):
    s3.put_object(Bucket=bucket, Key="p", Body=b"presigned body")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "p"}, ExpiresIn=60)
    r = requests.get(url)
    assert r.status_code == 200 and r.content == b"presigned body"
    put = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "up"}, ExpiresIn=60)
    assert requests.put(put, data=b"via presigned put").status_code == 200
    assert s3.get_object(Bucket=bucket, Key="up")["Body"].read() == b"via presigned put"
    # Tampering with the URL breaks the signature.
    r = requests.get(url.replace("/p?", "/q?"))
    assert r.status_code == 403 and err_code(r) == "SignatureDoesNotMatch"


def test_presigned_url_expiry_is_enforced(s3, bucket):
    s3.put_object(Bucket=bucket, Key="e", Body=b"x")
    # Two seconds, not one: the expiry is whole seconds (SigV2 `Expires` truncates), so a URL
    # for one second made late in a second has expired before its first use.
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "e"}, ExpiresIn=2)
    assert requests.get(url).status_code == 200
    deadline = time.time() + 6
    while time.time() < deadline and requests.get(url).status_code == 200:
        time.sleep(0.25)
    r = requests.get(url)
    assert r.status_code == 403 and err_code(r) == "AccessDenied"


def _signed(method, url, host, body=b"", headers=None, payload_hash=None):
    """A SigV4-signed request built with botocore's signer, sent with `requests` so the Host
    header can name a virtual host while the TCP connection goes to 127.0.0.1."""
    headers = dict(headers or {})
    headers["Host"] = host
    headers["x-amz-content-sha256"] = payload_hash or hashlib.sha256(body).hexdigest()
    req = AWSRequest(method=method, url=url, data=body, headers=headers)
    SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", REGION).add_auth(req)
    return requests.request(method, url, data=body, headers=dict(req.headers.items()))


def test_virtual_hosted_style(lode_server, s3, bucket):
    host = f"{bucket}.localhost:{lode_server.port}"
    r = _signed("PUT", f"{lode_server.endpoint}/vh/key", host, body=b"virtual")
    assert r.status_code == 200, r.text
    assert s3.get_object(Bucket=bucket, Key="vh/key")["Body"].read() == b"virtual"
    r = _signed("GET", f"{lode_server.endpoint}/vh/key", host)
    assert r.status_code == 200 and r.content == b"virtual"
    r = _signed("GET", f"{lode_server.endpoint}/?list-type=2", host)
    assert r.status_code == 200 and "<Key>vh/key</Key>" in r.text


def test_unsigned_payload(lode_server, s3, bucket):
    r = _signed("PUT", f"{lode_server.endpoint}/{bucket}/unsigned", f"127.0.0.1:{lode_server.port}",
                body=b"unsigned payload", payload_hash="UNSIGNED-PAYLOAD")
    assert r.status_code == 200, r.text
    assert s3.get_object(Bucket=bucket, Key="unsigned")["Body"].read() == b"unsigned payload"
    # A signed payload hash that does not match the body is refused.
    r = _signed("PUT", f"{lode_server.endpoint}/{bucket}/lie", f"127.0.0.1:{lode_server.port}",
                body=b"real body", payload_hash=hashlib.sha256(b"other").hexdigest())
    assert r.status_code in (400, 403), r.text
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="lie")


# ---- aws-chunked streaming (SigV4 chunk signatures), written from the AWS specification ----

def _hmac(k, m):
    return hmac.new(k, m.encode() if isinstance(m, str) else m, hashlib.sha256).digest()


def _signing_key(date):
    k = _hmac(("AWS4" + SECRET_KEY).encode(), date)
    k = _hmac(k, REGION)
    k = _hmac(k, "s3")
    return _hmac(k, "aws4_request")


def _streaming_put(lode_server, bucket, key, data, mode, chunk=64 * 1024, trailer=None, corrupt=False):
    """PUT with x-amz-content-sha256 = `mode` (one of the STREAMING-* modes)."""
    import base64
    import zlib

    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    date = now.strftime("%Y%m%d")
    host = f"127.0.0.1:{lode_server.port}"
    path = f"/{bucket}/{urllib.parse.quote(key)}"
    scope = f"{date}/{REGION}/s3/aws4_request"
    headers = {
        "host": host,
        "x-amz-content-sha256": mode,
        "x-amz-date": amz_date,
        "x-amz-decoded-content-length": str(len(data)),
        "content-encoding": "aws-chunked",
    }
    crc = base64.b64encode((zlib.crc32(data) & 0xFFFFFFFF).to_bytes(4, "big")).decode()
    if trailer:
        headers["x-amz-trailer"] = "x-amz-checksum-crc32"
    signed = sorted(headers)
    canonical = "\n".join(
        ["PUT", path, "", "".join(f"{h}:{headers[h]}\n" for h in signed), ";".join(signed), mode]
    )
    sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key_ = _signing_key(date)
    seed = hmac.new(key_, sts.encode(), hashlib.sha256).hexdigest()
    signed_chunks = mode.startswith("STREAMING-AWS4-HMAC-SHA256-PAYLOAD")
    body = b""
    prev = seed
    pieces = [data[i : i + chunk] for i in range(0, len(data), chunk)] + [b""]
    empty_hash = hashlib.sha256(b"").hexdigest()
    for p in pieces:
        if signed_chunks:
            csts = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", amz_date, scope, prev, empty_hash, hashlib.sha256(p).hexdigest()])
            sig = hmac.new(key_, csts.encode(), hashlib.sha256).hexdigest()
            if corrupt and p:
                sig = "0" * 64
            body += f"{len(p):x};chunk-signature={sig}\r\n".encode() + p + b"\r\n"
            prev = sig
        else:
            body += f"{len(p):x}\r\n".encode() + p + b"\r\n"
    if trailer:
        # The final 0-chunk above ends the data; a trailer follows it.
        body = body[: -2]  # the trailer replaces the final CRLF
        tline = f"x-amz-checksum-crc32:{trailer if trailer != 'good' else crc}"
        body += (tline + "\r\n").encode()
        if signed_chunks:
            tsts = "\n".join(["AWS4-HMAC-SHA256-TRAILER", amz_date, scope, prev, hashlib.sha256((tline + "\n").encode()).hexdigest()])
            tsig = hmac.new(key_, tsts.encode(), hashlib.sha256).hexdigest()
            body += f"x-amz-trailer-signature:{tsig}\r\n".encode()
        body += b"\r\n"
    auth = f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/{scope}, SignedHeaders={';'.join(signed)}, Signature={seed}"
    send = {k: v for k, v in headers.items() if k != "host"}
    send["Authorization"] = auth
    send["Content-Length"] = str(len(body))
    return requests.put(f"{lode_server.endpoint}{path}", data=body, headers=send)


@pytest.mark.parametrize(
    "mode,trailer",
    [
        ("STREAMING-AWS4-HMAC-SHA256-PAYLOAD", None),
        ("STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER", "good"),
        ("STREAMING-UNSIGNED-PAYLOAD-TRAILER", "good"),
    ],
)
def test_streaming_modes(lode_server, s3, bucket, mode, trailer):
    import os

    data = os.urandom(200_000)
    r = _streaming_put(lode_server, bucket, "stream/" + mode, data, mode, trailer=trailer)
    assert r.status_code == 200, r.text
    assert s3.get_object(Bucket=bucket, Key="stream/" + mode)["Body"].read() == data


def test_streaming_bad_chunk_signature_and_bad_trailer(lode_server, s3, bucket):
    import os

    data = os.urandom(100_000)
    r = _streaming_put(lode_server, bucket, "bad-sig", data, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", corrupt=True)
    assert r.status_code == 403, r.text
    r = _streaming_put(lode_server, bucket, "bad-crc", data, "STREAMING-UNSIGNED-PAYLOAD-TRAILER", trailer="AAAAAA==")
    assert r.status_code == 400 and err_code(r) == "BadDigest", r.text
    for k in ("bad-sig", "bad-crc"):
        with pytest.raises(ClientError):
            s3.head_object(Bucket=bucket, Key=k)


def test_boto3_virtual_addressing_config_is_accepted(lode_server):
    # With virtual addressing and an IP endpoint botocore falls back to path-style; still works.
    c = make_client(lode_server.endpoint, addressing="virtual")
    assert "Buckets" in c.list_buckets()
