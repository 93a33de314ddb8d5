"""Bad input: each case gets its S3 error code and HTTP status, and leaves nothing behind (no
object, no listing entry). Requests are built by hand (raw sockets or botocore's signer) so the
bad part is exactly what the test says."""

import base64
import hashlib
import socket

import pytest
import requests
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from conftest import ACCESS_KEY, REGION, SECRET_KEY, make_client


def signed(lode_server, method, path, body=b"", headers=None):
    req = AWSRequest(method=method, url=lode_server.endpoint + path, data=body, headers=headers or {})
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", REGION).add_auth(req)
    return requests.request(method, req.url, data=body, headers=dict(req.headers))


def raw(lode_server, head, body=b""):
    """Sends bytes as they are and returns (status, response text)."""
    with socket.create_connection(("127.0.0.1", lode_server.port), timeout=10) as sock:
        sock.sendall(head.encode() + body)
        out = b""
        try:
            while b"\r\n\r\n" not in out or (b"<Error>" in out and b"</Error>" not in out):
                d = sock.recv(65536)
                if not d:
                    break
                out += d
        except socket.timeout:
            pass
    status = int(out.split(b" ", 2)[1]) if out.startswith(b"HTTP/1.1") else 0
    return status, out.decode(errors="replace")


def code(text):
    return text.split("<Code>", 1)[1].split("</Code>", 1)[0] if "<Code>" in text else None


def keys(s3, bucket):
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


def test_malformed_xml_bodies(lode_server, s3, bucket):
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    s3.upload_part(Bucket=bucket, Key="mp", UploadId=up, PartNumber=1, Body=b"x")
    r = signed(lode_server, "POST", f"/{bucket}/mp?uploadId={up}", b"<CompleteMultipartUpload><Part><PartNumber>1</Part>")
    assert (r.status_code, code(r.text)) == (400, "MalformedXML")
    body = b"garbage<<"
    md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
    r = signed(lode_server, "POST", f"/{bucket}?delete", body, {"Content-MD5": md5})
    assert (r.status_code, code(r.text)) == (400, "MalformedXML")
    # The upload is untouched and can still complete; no object appeared meanwhile.
    assert keys(s3, bucket) == []
    s3.abort_multipart_upload(Bucket=bucket, Key="mp", UploadId=up)


def test_missing_content_length_is_411_and_stores_nothing(lode_server, s3, bucket):
    # Presigned for this server (the session client may spread requests over gateways).
    url = make_client(lode_server.endpoint).generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "nolen"}, ExpiresIn=60)
    path = url.split(str(lode_server.port), 1)[1]
    status, text = raw(lode_server, f"PUT {path} HTTP/1.1\r\nHost: 127.0.0.1:{lode_server.port}\r\n\r\n")
    assert (status, code(text)) == (411, "MissingContentLength")
    assert keys(s3, bucket) == []


@pytest.mark.parametrize("value", ["abc", "-5", "1, 2"])
def test_unparseable_content_length_is_400(lode_server, s3, bucket, value):
    url = make_client(lode_server.endpoint).generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "badlen"}, ExpiresIn=60)
    path = url.split(str(lode_server.port), 1)[1]
    status, _ = raw(lode_server, f"PUT {path} HTTP/1.1\r\nHost: 127.0.0.1:{lode_server.port}\r\nContent-Length: {value}\r\n\r\n", b"hello")
    assert status == 400
    assert keys(s3, bucket) == []


def test_part_numbers_outside_1_to_10000(s3, bucket):
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    try:
        for n in (0, 10_001):
            with pytest.raises(ClientError) as e:
                s3.upload_part(Bucket=bucket, Key="mp", UploadId=up, PartNumber=n, Body=b"x")
            assert e.value.response["Error"]["Code"] == "InvalidArgument"
            assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
        s3.upload_part(Bucket=bucket, Key="mp", UploadId=up, PartNumber=10_000, Body=b"x")
        assert [p["PartNumber"] for p in s3.list_parts(Bucket=bucket, Key="mp", UploadId=up)["Parts"]] == [10_000]
    finally:
        s3.abort_multipart_upload(Bucket=bucket, Key="mp", UploadId=up)


def test_key_over_1024_bytes(s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="k" * 1025, Body=b"x")
    assert e.value.response["Error"]["Code"] == "KeyTooLongError"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    s3.put_object(Bucket=bucket, Key="k" * 1024, Body=b"x")  # the limit itself is fine
    assert keys(s3, bucket) == ["k" * 1024]
    s3.delete_object(Bucket=bucket, Key="k" * 1024)


def test_old_header_signature_is_request_time_too_skewed(lode_server, bucket):
    """A captured header-signed request replayed later than 15 minutes is refused."""
    import datetime
    from unittest import mock

    req = AWSRequest(method="GET", url=f"{lode_server.endpoint}/{bucket}?list-type=2")
    with mock.patch("botocore.auth.get_current_datetime", return_value=datetime.datetime(2020, 1, 1)):
        S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", REGION).add_auth(req)
    assert req.headers["X-Amz-Date"] == "20200101T000000Z"
    r = requests.get(req.url, headers=dict(req.headers))
    assert (r.status_code, code(r.text)) == (403, "RequestTimeTooSkewed")
