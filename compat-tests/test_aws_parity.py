"""Places where Lode used to differ from AWS S3 and broke real clients: retried multipart calls,
buckets with abandoned uploads, ListBuckets paging, listing details, chunked bodies, error
bodies, digests, presigned expiry, 304s, partNumber, conditional writes, GetObjectAttributes and
browser-form uploads. Each test drives a real `lode serve` with the latest boto3 (or a request
signed by botocore's own signer, where the point is the exact bytes on the wire)."""

import base64
import datetime
import hashlib
import os
import threading
import time
import uuid
import xml.etree.ElementTree as ET

import boto3
import pytest
import requests
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from conftest import ACCESS_KEY, CLUSTER_MODE, REGION, SECRET_KEY, Lode, empty_versions, local_only

MIB = 1024 * 1024


def code(e):
    return e.value.response["Error"]["Code"]


def status(e):
    return e.value.response["ResponseMetadata"]["HTTPStatusCode"]


def free_bytes(srv):
    m = requests.get(srv.admin + "/metrics").text
    return int(next(l.split()[1] for l in m.splitlines() if l.startswith("lode_datapath_free_bytes ")))


def signed(srv, method, path, body=b"", headers=None):
    """A request signed by botocore's S3 signer, sent with `requests` exactly as given (a
    generator body goes out as Transfer-Encoding: chunked)."""
    req = AWSRequest(method=method, url=srv.endpoint + path, data=body if isinstance(body, bytes) else b"", headers=headers or {})
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", REGION).add_auth(req)
    return requests.request(method, req.url, data=body, headers=dict(req.headers))


def unsigned_put(url, data, headers=None):
    """PUT with botocore's S3 signer and payload signing off (`x-amz-content-sha256:
    UNSIGNED-PAYLOAD`, as boto3 sends it with `payload_signing_enabled=False`); a generator body
    goes out as Transfer-Encoding: chunked."""
    req = AWSRequest(method="PUT", url=url, data=b"", headers=headers or {})
    req.context["client_config"] = Config(s3={"payload_signing_enabled": False})
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", REGION).add_auth(req)
    assert req.headers["X-Amz-Content-SHA256"] == "UNSIGNED-PAYLOAD"
    return requests.put(req.url, data=data, headers=dict(req.headers))


def xml_code(text):
    return text.split("<Code>", 1)[1].split("</Code>", 1)[0] if "<Code>" in text else None


def strip_ns(xml_text):
    root = ET.fromstring(xml_text)
    for el in root.iter():
        el.tag = el.tag.split("}", 1)[-1]
    return root


# 1 ------------------------------------------------------------------------------------------
@local_only  # the space check reads the node's free device bytes
def test_delete_bucket_takes_its_in_progress_uploads_and_their_space(lode_server, s3):
    name = "t-" + uuid.uuid4().hex[:12]
    s3.create_bucket(Bucket=name)
    before = free_bytes(lode_server)
    ups = []
    for k in ("a", "b/c"):
        up = s3.create_multipart_upload(Bucket=name, Key=k)["UploadId"]
        s3.upload_part(Bucket=name, Key=k, UploadId=up, PartNumber=1, Body=b"p" * (5 * MIB))
        s3.upload_part(Bucket=name, Key=k, UploadId=up, PartNumber=2, Body=b"q" * 100)
        ups.append((k, up))
    # Two 5 MiB parts, sealed (encryption at rest): each chunk holds whole 64 KiB segments and
    # their nonces and tags, 8 KiB more per part once rounded to 4 KiB blocks.
    assert before - free_bytes(lode_server) == 2 * (5 * MIB + 8 * 1024)
    s3.delete_bucket(Bucket=name)
    with pytest.raises(ClientError) as e:
        s3.head_bucket(Bucket=name)
    assert status(e) == 404
    assert free_bytes(lode_server) == before
    # The uploads went with it: their parts cannot be listed or completed, even after the name
    # is taken again.
    s3.create_bucket(Bucket=name)
    assert not s3.list_multipart_uploads(Bucket=name).get("Uploads")
    with pytest.raises(ClientError) as e:
        s3.list_parts(Bucket=name, Key="a", UploadId=ups[0][1])
    assert code(e) == "NoSuchUpload"
    s3.delete_bucket(Bucket=name)


def test_delete_bucket_with_objects_is_still_bucket_not_empty(s3, bucket):
    s3.put_object(Bucket=bucket, Key="x", Body=b"1")
    up = s3.create_multipart_upload(Bucket=bucket, Key="y")["UploadId"]
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket=bucket)
    assert (status(e), code(e)) == (409, "BucketNotEmpty")
    # Nothing was taken: the object and the upload are still there.
    assert s3.get_object(Bucket=bucket, Key="x")["Body"].read() == b"1"
    assert [u["UploadId"] for u in s3.list_multipart_uploads(Bucket=bucket)["Uploads"]] == [up]


# 2 ------------------------------------------------------------------------------------------
def _upload(s3, bucket, key, bodies):
    up = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts = []
    for n, b in bodies:
        parts.append({"PartNumber": n, "ETag": s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=n, Body=b)["ETag"]})
    return up, parts


def test_retried_complete_answers_200_with_the_same_result(s3, bucket):
    up, parts = _upload(s3, bucket, "mp", [(1, b"a" * (5 * MIB)), (3, b"tail")])
    first = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up, MultipartUpload={"Parts": parts})
    again = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up, MultipartUpload={"Parts": parts})
    assert again["ETag"] == first["ETag"] and again["Key"] == "mp"
    assert s3.get_object(Bucket=bucket, Key="mp")["Body"].read() == b"a" * (5 * MIB) + b"tail"
    # A retry with If-None-Match: * (the SDK's retry of a conditional complete) still succeeds.
    again = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up, MultipartUpload={"Parts": parts}, IfNoneMatch="*")
    assert again["ETag"] == first["ETag"]
    # A different part list is not a retry of that completion.
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up, MultipartUpload={"Parts": parts[:1]})
    assert code(e) == "NoSuchUpload"
    # Once the key holds another object, the upload is gone for good.
    s3.put_object(Bucket=bucket, Key="mp", Body=b"new")
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up, MultipartUpload={"Parts": parts})
    assert code(e) == "NoSuchUpload"
    assert s3.get_object(Bucket=bucket, Key="mp")["Body"].read() == b"new"


def test_retried_abort_succeeds_but_not_on_a_completed_upload(s3, bucket):
    up, _ = _upload(s3, bucket, "ab", [(1, b"x")])
    s3.abort_multipart_upload(Bucket=bucket, Key="ab", UploadId=up)
    r = s3.abort_multipart_upload(Bucket=bucket, Key="ab", UploadId=up)
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 204
    # Not under another key, and an unknown id is NoSuchUpload.
    with pytest.raises(ClientError) as e:
        s3.abort_multipart_upload(Bucket=bucket, Key="other", UploadId=up)
    assert (status(e), code(e)) == (404, "NoSuchUpload")
    with pytest.raises(ClientError) as e:
        s3.abort_multipart_upload(Bucket=bucket, Key="ab", UploadId="nope" + uuid.uuid4().hex)
    assert code(e) == "NoSuchUpload"
    up, parts = _upload(s3, bucket, "done", [(1, b"x")])
    s3.complete_multipart_upload(Bucket=bucket, Key="done", UploadId=up, MultipartUpload={"Parts": parts})
    with pytest.raises(ClientError) as e:
        s3.abort_multipart_upload(Bucket=bucket, Key="done", UploadId=up)
    assert code(e) == "NoSuchUpload"
    assert s3.get_object(Bucket=bucket, Key="done")["Body"].read() == b"x"


# 3 ------------------------------------------------------------------------------------------
def test_part_uploaded_twice_the_one_that_finishes_last_wins(lode_server, s3, bucket):
    up = s3.create_multipart_upload(Bucket=bucket, Key="race")["UploadId"]
    slow_body = b"S" * (6 * MIB)
    result = {}

    def slow():
        # A body that trickles in: this upload of part 1 starts first and finishes last.
        def gen():
            for i in range(0, len(slow_body), MIB):
                time.sleep(0.3)
                yield slow_body[i : i + MIB]

        result["slow"] = unsigned_put(f"{lode_server.endpoint}/{bucket}/race?partNumber=1&uploadId={up}", gen())

    t = threading.Thread(target=slow)
    t.start()
    time.sleep(0.5)
    fast = s3.upload_part(Bucket=bucket, Key="race", UploadId=up, PartNumber=1, Body=b"F" * (6 * MIB))["ETag"]
    t.join()
    assert result["slow"].status_code == 200, result["slow"].text
    slow_etag = result["slow"].headers["ETag"]
    assert slow_etag != fast
    parts = s3.list_parts(Bucket=bucket, Key="race", UploadId=up)["Parts"]
    assert [(p["PartNumber"], p["ETag"]) for p in parts] == [(1, slow_etag)]
    last = s3.upload_part(Bucket=bucket, Key="race", UploadId=up, PartNumber=2, Body=b"end")["ETag"]
    # The superseded ETag is refused; the one that finished last completes.
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket=bucket, Key="race", UploadId=up, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": fast}, {"PartNumber": 2, "ETag": last}]}
        )
    assert code(e) == "InvalidPart"
    s3.complete_multipart_upload(
        Bucket=bucket, Key="race", UploadId=up, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": slow_etag}, {"PartNumber": 2, "ETag": last}]}
    )
    assert s3.get_object(Bucket=bucket, Key="race")["Body"].read() == slow_body + b"end"


# 5 ------------------------------------------------------------------------------------------
def test_list_buckets_pages_filters_by_prefix_and_region(s3):
    tag = uuid.uuid4().hex[:8]
    names = sorted(f"lb-{tag}-{i}" for i in range(5))
    for n in names:
        s3.create_bucket(Bucket=n)
    try:
        r = s3.list_buckets(MaxBuckets=2, Prefix=f"lb-{tag}-")
        assert [b["Name"] for b in r["Buckets"]] == names[:2]
        assert r["Prefix"] == f"lb-{tag}-" and r.get("ContinuationToken")
        seen = [b["Name"] for b in r["Buckets"]]
        while r.get("ContinuationToken"):
            r = s3.list_buckets(MaxBuckets=2, Prefix=f"lb-{tag}-", ContinuationToken=r["ContinuationToken"])
            seen += [b["Name"] for b in r["Buckets"]]
        assert seen == names
        # boto3's paginator drives the same tokens.
        pages = s3.get_paginator("list_buckets").paginate(Prefix=f"lb-{tag}-", PaginationConfig={"PageSize": 3})
        assert [b["Name"] for p in pages for b in p["Buckets"]] == names
        assert [b["Name"] for b in s3.list_buckets(MaxBuckets=1, Prefix=f"lb-{tag}-")["Buckets"]] == names[:1]
        assert [b["Name"] for b in s3.list_buckets(Prefix=f"lb-{tag}-", BucketRegion=REGION)["Buckets"]] == names
        assert s3.list_buckets(Prefix=f"lb-{tag}-", BucketRegion="eu-west-3")["Buckets"] == []
        with pytest.raises(ClientError) as e:
            s3.list_buckets(MaxBuckets=10001)
        assert (status(e), code(e)) == (400, "InvalidArgument")
    finally:
        for n in names:
            s3.delete_bucket(Bucket=n)


# 6 ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", ["1", "2"])
def test_listing_details_delimiter_max_keys_zero_and_escaping(lode_server, s3, bucket, version):
    s3.put_object(Bucket=bucket, Key="line\nbreak/x", Body=b"1")
    s3.put_object(Bucket=bucket, Key="plain", Body=b"2")
    lt = "list-type=2&" if version == "2" else ""
    r = signed(lode_server, "GET", f"/{bucket}?{lt}delimiter=")
    assert r.status_code == 200
    root = strip_ns(r.text)
    assert root.find("Delimiter") is None
    assert [c.find("Key").text for c in root.findall("Contents")] == ["line\nbreak/x", "plain"]
    r = signed(lode_server, "GET", f"/{bucket}?{lt}max-keys=0")
    root = strip_ns(r.text)
    assert root.find("IsTruncated").text == "false" and root.findall("Contents") == []
    # A prefix that needs escaping: as sent without encoding-type, %-encoded with it.
    r = signed(lode_server, "GET", f"/{bucket}?{lt}prefix=line%0Abreak%2F&delimiter=%2F")
    root = strip_ns(r.text)
    assert root.find("Prefix").text == "line\nbreak/"
    assert [c.find("Key").text for c in root.findall("Contents")] == ["line\nbreak/x"]
    r = signed(lode_server, "GET", f"/{bucket}?{lt}prefix=line%0A&delimiter=%2F&encoding-type=url")
    root = strip_ns(r.text)
    # V2 encodes Prefix with encoding-type=url; V1 does not (botocore decodes it only for V2).
    assert root.find("Prefix").text == ("line%0A" if version == "2" else "line\n")
    assert [c.find("Prefix").text for c in root.findall("CommonPrefixes")] == ["line%0Abreak/"]
    assert root.find("EncodingType").text == "url"
    # boto3 (which asks for encoding-type=url and decodes) sees the real key.
    got = s3.list_objects_v2(Bucket=bucket, Prefix="line\n") if version == "2" else s3.list_objects(Bucket=bucket, Prefix="line\n")
    assert [o["Key"] for o in got["Contents"]] == ["line\nbreak/x"] and got["Prefix"] == "line\n"


# 7 ------------------------------------------------------------------------------------------
def test_plain_chunked_put_through_the_sdk_signer_is_stored(lode_server, s3, bucket):
    body = bytes(range(256)) * 40_000  # 10 MB: spills past the in-memory spool

    def gen():
        for i in range(0, len(body), 1 << 20):
            yield body[i : i + (1 << 20)]

    for key, data in (("chunked-small", [b"hello ", b"chunked"]), ("chunked-big", None)):
        r = unsigned_put(f"{lode_server.endpoint}/{bucket}/{key}", iter(data) if data else gen())
        assert r.request.headers.get("Transfer-Encoding") == "chunked" and "Content-Length" not in r.request.headers
        assert r.status_code == 200, r.text
        want = b"".join(data) if data else body
        got = s3.get_object(Bucket=bucket, Key=key)
        assert got["Body"].read() == want and got["ETag"] == '"%s"' % hashlib.md5(want).hexdigest()
    # A signed payload hash is still verified on such a body.
    good = b"signed chunked"
    req = AWSRequest(method="PUT", url=f"{lode_server.endpoint}/{bucket}/signed", data=good)
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", REGION).add_auth(req)
    h = {k: v for k, v in req.headers.items() if k.lower() != "content-length"}
    r = requests.put(req.url, data=iter([b"signed ", b"chunked"]), headers=h)
    assert r.status_code == 200, r.text
    r = requests.put(req.url, data=iter([b"tampered", b"!"]), headers=h)
    assert (r.status_code, xml_code(r.text)) == (400, "XAmzContentSHA256Mismatch")
    assert s3.get_object(Bucket=bucket, Key="signed")["Body"].read() == good


# 8 ------------------------------------------------------------------------------------------
def test_error_bodies_carry_the_request_id(lode_server, s3, bucket):
    r = signed(lode_server, "GET", f"/{bucket}/missing")
    assert r.status_code == 404
    rid = r.headers["x-amz-request-id"]
    assert strip_ns(r.text).find("RequestId").text == rid
    # Errors s3s raises itself (auth) carry it too.
    r = requests.get(f"{lode_server.endpoint}/{bucket}/missing", headers={"Authorization": "AWS4-HMAC-SHA256 Credential=bogus"})
    assert r.status_code in (400, 403)
    assert strip_ns(r.text).find("RequestId").text == r.headers["x-amz-request-id"]
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="missing")
    assert e.value.response["Error"]["Code"] == "NoSuchKey"
    assert e.value.response["ResponseMetadata"]["RequestId"] == e.value.response["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"]


# 9 ------------------------------------------------------------------------------------------
def test_empty_or_malformed_content_md5_is_invalid_digest(lode_server, s3, bucket):
    for bad in ("", "not-base64!", base64.b64encode(b"short").decode()):
        r = signed(lode_server, "PUT", f"/{bucket}/md5", b"data", {"Content-MD5": bad})
        assert (r.status_code, xml_code(r.text)) == (400, "InvalidDigest"), bad
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)
    ok = base64.b64encode(hashlib.md5(b"data").digest()).decode()
    assert signed(lode_server, "PUT", f"/{bucket}/md5", b"data", {"Content-MD5": ok}).status_code == 200


# 10 -----------------------------------------------------------------------------------------
def test_presigned_expiry_beyond_a_week_or_negative_is_403(lode_server, bucket):
    from conftest import make_client

    s3 = make_client(lode_server.endpoint, signature_version="s3v4")
    s3.put_object(Bucket=bucket, Key="p", Body=b"x")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "p"}, ExpiresIn=604800)
    assert requests.get(url).content == b"x"
    for bad in (604801, -5):
        url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "p"}, ExpiresIn=3600)
        assert "X-Amz-Expires=3600" in url
        url = url.replace("X-Amz-Expires=3600", f"X-Amz-Expires={bad}")
        r = requests.get(url)
        assert (r.status_code, xml_code(r.text)) == (403, "AuthorizationQueryParametersError"), bad


# 11 -----------------------------------------------------------------------------------------
def test_not_modified_carries_etag_and_last_modified(lode_server, s3, bucket):
    put = s3.put_object(Bucket=bucket, Key="c", Body=b"x")
    head = s3.head_object(Bucket=bucket, Key="c")
    for h in ({"If-None-Match": put["ETag"]}, {"If-Modified-Since": "Fri, 01 Jan 2100 00:00:00 GMT"}):
        for method in ("GET", "HEAD"):
            r = signed(lode_server, method, f"/{bucket}/c", headers=h)
            assert r.status_code == 304, (method, h)
            assert r.headers["ETag"] == put["ETag"]
            assert r.headers["Last-Modified"] == head["ResponseMetadata"]["HTTPHeaders"]["last-modified"]
            assert r.content == b""


# 12 -----------------------------------------------------------------------------------------
def test_part_number_beyond_the_parts_is_400_invalid_part(s3, bucket):
    s3.put_object(Bucket=bucket, Key="single", Body=b"abc")
    assert s3.get_object(Bucket=bucket, Key="single", PartNumber=1)["Body"].read() == b"abc"
    for n in (2, 10000):
        for call in (s3.get_object, s3.head_object):
            with pytest.raises(ClientError) as e:
                call(Bucket=bucket, Key="single", PartNumber=n)
            assert status(e) == 400
            if call is s3.get_object:
                assert code(e) == "InvalidPart"
    # Parts are addressed by the numbers they were uploaded with (here 2 and 5).
    up, parts = _upload(s3, bucket, "sparse", [(2, b"a" * (5 * MIB)), (5, b"bb")])
    s3.complete_multipart_upload(Bucket=bucket, Key="sparse", UploadId=up, MultipartUpload={"Parts": parts})
    g = s3.get_object(Bucket=bucket, Key="sparse", PartNumber=5)
    assert g["Body"].read() == b"bb" and g["PartsCount"] == 2
    for n in (1, 3):
        with pytest.raises(ClientError) as e:
            s3.get_object(Bucket=bucket, Key="sparse", PartNumber=n)
        assert (status(e), code(e)) == (400, "InvalidPart")


# 13 -----------------------------------------------------------------------------------------
def test_conditional_writes_if_match_and_if_none_match_etag(s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="cw", Body=b"1", IfMatch='"00000000000000000000000000000000"')
    assert (status(e), code(e)) == (404, "NoSuchKey")
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)
    e1 = s3.put_object(Bucket=bucket, Key="cw", Body=b"1")["ETag"]
    e2 = '"%s"' % hashlib.md5(b"2").hexdigest()
    # If-None-Match with the current ETag: 412; with another ETag (or on a missing key): written.
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="cw", Body=b"2", IfNoneMatch=e1)
    assert (status(e), code(e)) == (412, "PreconditionFailed")
    assert s3.put_object(Bucket=bucket, Key="cw", Body=b"2", IfNoneMatch=e2 if e2 != e1 else '"x"')["ETag"] == e2
    assert s3.put_object(Bucket=bucket, Key="fresh", Body=b"f", IfNoneMatch=e1)["ETag"]
    assert s3.put_object(Bucket=bucket, Key="cw", Body=b"3", IfMatch=e2)
    # The same rules on CompleteMultipartUpload.
    up, parts = _upload(s3, bucket, "cm", [(1, b"m")])
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="cm", UploadId=up, MultipartUpload={"Parts": parts}, IfMatch=e1)
    assert (status(e), code(e)) == (404, "NoSuchKey")
    s3.put_object(Bucket=bucket, Key="cm", Body=b"old")
    old = s3.head_object(Bucket=bucket, Key="cm")["ETag"]
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="cm", UploadId=up, MultipartUpload={"Parts": parts}, IfNoneMatch=old)
    assert code(e) == "PreconditionFailed"
    s3.complete_multipart_upload(Bucket=bucket, Key="cm", UploadId=up, MultipartUpload={"Parts": parts}, IfMatch=old)
    assert s3.get_object(Bucket=bucket, Key="cm")["Body"].read() == b"m"


# 14 -----------------------------------------------------------------------------------------
def test_get_object_attributes(s3, bucket):
    s3.put_object(Bucket=bucket, Key="one", Body=b"hello", ChecksumAlgorithm="SHA256")
    a = s3.get_object_attributes(Bucket=bucket, Key="one", ObjectAttributes=["ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"])
    assert a["ETag"].strip('"') == hashlib.md5(b"hello").hexdigest()
    assert a["ObjectSize"] == 5 and a["StorageClass"] == "STANDARD"
    assert a["Checksum"]["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(b"hello").digest()).decode()
    assert "ObjectParts" not in a and a["LastModified"]
    only = s3.get_object_attributes(Bucket=bucket, Key="one", ObjectAttributes=["ObjectSize"])
    assert only["ObjectSize"] == 5 and "ETag" not in only and "Checksum" not in only
    # A multipart object: its parts, paged.
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp", ChecksumAlgorithm="CRC32")["UploadId"]
    bodies = [b"a" * (5 * MIB), b"b" * (5 * MIB), b"c"]
    parts = []
    for n, b in enumerate(bodies, 1):
        r = s3.upload_part(Bucket=bucket, Key="mp", UploadId=up, PartNumber=n, Body=b, ChecksumAlgorithm="CRC32")
        parts.append({"PartNumber": n, "ETag": r["ETag"], "ChecksumCRC32": r["ChecksumCRC32"]})
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up, MultipartUpload={"Parts": parts})
    a = s3.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=["ObjectParts", "ObjectSize", "ETag"], MaxParts=2)
    op = a["ObjectParts"]
    assert a["ObjectSize"] == sum(map(len, bodies)) and a["ETag"].strip('"').endswith("-3")
    assert op["TotalPartsCount"] == 3 and op["IsTruncated"] is True and op["MaxParts"] == 2
    assert [(p["PartNumber"], p["Size"], p["ChecksumCRC32"]) for p in op["Parts"]] == [(1, 5 * MIB, parts[0]["ChecksumCRC32"]), (2, 5 * MIB, parts[1]["ChecksumCRC32"])]
    rest = s3.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=["ObjectParts"], PartNumberMarker=op["NextPartNumberMarker"])
    assert [p["PartNumber"] for p in rest["ObjectParts"]["Parts"]] == [3] and rest["ObjectParts"]["IsTruncated"] is False
    with pytest.raises(ClientError) as e:
        s3.get_object_attributes(Bucket=bucket, Key="missing", ObjectAttributes=["ETag"])
    assert (status(e), code(e)) == (404, "NoSuchKey")


# 15 -----------------------------------------------------------------------------------------
def test_browser_form_upload_filename_status_and_policy(s3, bucket):
    post = s3.generate_presigned_post(
        bucket,
        "uploads/${filename}",
        Fields={"success_action_status": "201"},
        Conditions=[["starts-with", "$key", "uploads/"], {"success_action_status": "201"}, ["content-length-range", 1, 1000]],
        ExpiresIn=600,
    )
    r = requests.post(post["url"], data=post["fields"], files={"file": ("cat.txt", b"meow")})
    assert r.status_code == 201, r.text
    root = strip_ns(r.text)
    assert root.find("Key").text == "uploads/cat.txt" and root.find("Bucket").text == bucket
    assert root.find("ETag").text.strip('"') == hashlib.md5(b"meow").hexdigest()
    assert s3.get_object(Bucket=bucket, Key="uploads/cat.txt")["Body"].read() == b"meow"
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["uploads/cat.txt"]
    # Policy conditions: too large a file, and a key outside the allowed prefix.
    r = requests.post(post["url"], data=post["fields"], files={"file": ("big.bin", b"x" * 2000)})
    assert r.status_code in (400, 403), r.text
    bad = dict(post["fields"], key="elsewhere/${filename}")
    r = requests.post(post["url"], data=bad, files={"file": ("dog.txt", b"woof")})
    assert r.status_code == 403, r.text
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["uploads/cat.txt"]
    # Without success_action_status: 204.
    plain = s3.generate_presigned_post(bucket, "plain", ExpiresIn=600)
    r = requests.post(plain["url"], data=plain["fields"], files={"file": ("f", b"data")})
    assert r.status_code == 204 and s3.get_object(Bucket=bucket, Key="plain")["Body"].read() == b"data"


def test_an_early_refusal_of_a_body_closes_the_connection(lode_server, bucket):
    """A PUT refused before its body is read (here: a bad signature, with `Expect:
    100-continue`, as botocore sends it) answers with `Connection: close`: a client that held the
    body back must not reuse the connection, or its next request would be read as that body."""
    import socket

    head = (
        f"PUT /{bucket}/x HTTP/1.1\r\nHost: 127.0.0.1:{lode_server.port}\r\nContent-Length: 11\r\n"
        "Expect: 100-continue\r\nAuthorization: AWS4-HMAC-SHA256 Credential=nobody/20260101/us-east-1/s3/aws4_request, "
        "SignedHeaders=host, Signature=00\r\nx-amz-date: 20260101T000000Z\r\nx-amz-content-sha256: UNSIGNED-PAYLOAD\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", lode_server.port), timeout=10) as s:
        s.sendall(head.encode())
        reply = b""
        while b"\r\n\r\n" not in reply:
            reply += s.recv(65536)
        status = int(reply.split(b" ", 2)[1])
        headers = reply.split(b"\r\n\r\n", 1)[0].decode().lower()
        assert status in (400, 403), reply
        assert "connection: close" in headers, headers


# Issue 31 -----------------------------------------------------------------------------------
@pytest.fixture
def vbucket(s3, bucket):
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    yield bucket
    empty_versions(s3, bucket)


def _version_ids(s3, bucket, key):
    r = s3.list_object_versions(Bucket=bucket, Prefix=key)
    return {v["VersionId"] for v in r.get("Versions", []) if v["Key"] == key}


def test_a_versioned_delete_checks_its_conditions_against_the_version(s3, vbucket):
    b = vbucket
    body1, body2 = os.urandom(3000), os.urandom(2000)
    p1 = s3.put_object(Bucket=b, Key="k", Body=body1)
    p2 = s3.put_object(Bucket=b, Key="k", Body=body2)
    v1, v2 = p1["VersionId"], p2["VersionId"]
    mtime1 = s3.head_object(Bucket=b, Key="k", VersionId=v1)["LastModified"]
    # Each condition that is false for v1 (some of them true for the current v2): 412 and v1
    # stays.
    for kw in (
        {"IfMatch": p2["ETag"]},
        {"IfMatch": '"0123456789abcdef0123456789abcdef"'},
        {"IfMatchSize": 2000},
        {"IfMatchLastModifiedTime": mtime1 + datetime.timedelta(seconds=1)},
        {"IfMatch": p1["ETag"], "IfMatchSize": 2999},
    ):
        with pytest.raises(ClientError) as e:
            s3.delete_object(Bucket=b, Key="k", VersionId=v1, **kw)
        assert (status(e), code(e)) == (412, "PreconditionFailed"), kw
        assert _version_ids(s3, b, "k") == {v1, v2}, kw
    assert s3.get_object(Bucket=b, Key="k", VersionId=v1)["Body"].read() == body1
    # True for v1: it goes, and v2 stays current.
    r = s3.delete_object(Bucket=b, Key="k", VersionId=v1, IfMatch=p1["ETag"], IfMatchSize=3000, IfMatchLastModifiedTime=mtime1)
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 204 and r["VersionId"] == v1
    assert _version_ids(s3, b, "k") == {v2}
    # The current version by id, conditioned on its own ETag; `*` matches any version.
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=b, Key="k", VersionId=v2, IfMatch=p1["ETag"])
    assert (status(e), code(e)) == (412, "PreconditionFailed")
    assert s3.get_object(Bucket=b, Key="k")["Body"].read() == body2
    s3.delete_object(Bucket=b, Key="k", VersionId=v2, IfMatch="*")
    assert _version_ids(s3, b, "k") == set()
    # An id no version has: If-Match is NoSuchKey (as for an absent key); the size and time
    # conditions hold for it (nothing to delete: 204).
    for m in (p2["ETag"], "*"):
        with pytest.raises(ClientError) as e:
            s3.delete_object(Bucket=b, Key="k", VersionId=v2, IfMatch=m)
        assert (status(e), code(e)) == (404, "NoSuchKey")
    assert s3.delete_object(Bucket=b, Key="k", VersionId=v2, IfMatchSize=1)["ResponseMetadata"]["HTTPStatusCode"] == 204


def test_delete_objects_conditions_hold_for_versions_and_in_versioned_buckets(s3, vbucket):
    b = vbucket
    put = {k: s3.put_object(Bucket=b, Key=k, Body=k.encode() * 10) for k in ("a", "b", "c", "d", "e")}
    cur = {k: s3.put_object(Bucket=b, Key=k, Body=k.encode() * 20) for k in ("a", "b", "c", "d", "e")}
    mtime = {k: s3.head_object(Bucket=b, Key=k, VersionId=put[k]["VersionId"])["LastModified"] for k in put}
    # By version id: each entry's conditions judge the version it names.
    r = s3.delete_objects(
        Bucket=b,
        Delete={
            "Objects": [
                {"Key": "a", "VersionId": put["a"]["VersionId"], "ETag": put["a"]["ETag"]},
                {"Key": "b", "VersionId": put["b"]["VersionId"], "ETag": cur["b"]["ETag"]},
                {"Key": "c", "VersionId": put["c"]["VersionId"], "Size": 20},
                {"Key": "d", "VersionId": put["d"]["VersionId"], "Size": 10, "ETag": "*"},
                {"Key": "e", "VersionId": put["e"]["VersionId"], "LastModifiedTime": mtime["e"] - datetime.timedelta(seconds=5)},
            ]
        },
    )
    assert sorted((d["Key"], d["VersionId"]) for d in r["Deleted"]) == [("a", put["a"]["VersionId"]), ("d", put["d"]["VersionId"])]
    errs = {(e["Key"], e["VersionId"], e["Code"]) for e in r["Errors"]}
    assert errs == {(k, put[k]["VersionId"], "PreconditionFailed") for k in ("b", "c", "e")}
    for k in ("a", "d"):
        assert _version_ids(s3, b, k) == {cur[k]["VersionId"]}
    for k in ("b", "c", "e"):
        assert _version_ids(s3, b, k) == {put[k]["VersionId"], cur[k]["VersionId"]}
    # Without version ids, in the versioned bucket: the conditions judge the current version;
    # a false one is an Errors entry and no delete marker is made.
    r = s3.delete_objects(
        Bucket=b,
        Delete={
            "Objects": [
                {"Key": "b", "ETag": cur["b"]["ETag"]},
                {"Key": "c", "ETag": put["c"]["ETag"]},
                {"Key": "e", "Size": 10},
            ]
        },
    )
    assert [(d["Key"], d["DeleteMarker"]) for d in r["Deleted"]] == [("b", True)]
    assert {(e["Key"], e["Code"]) for e in r["Errors"]} == {("c", "PreconditionFailed"), ("e", "PreconditionFailed")}
    markers = {m["Key"] for m in s3.list_object_versions(Bucket=b).get("DeleteMarkers", [])}
    assert markers == {"b"}


def test_racing_conditional_deletes_judge_what_they_remove(s3, vbucket):
    b = vbucket
    # (1) A conditional delete without an id places its marker on exactly the version it
    # judged, while writers keep adding versions.
    stop = threading.Event()
    made = []

    def writer():
        i = 0
        while not stop.is_set() and i < 40:
            made.append(s3.put_object(Bucket=b, Key="r", Body=f"body-{i}".encode())["ETag"])
            i += 1

    outcomes, refused = [], []

    def deleter():
        for _ in range(15):
            try:
                etag = s3.head_object(Bucket=b, Key="r")["ETag"]
            except ClientError:
                continue
            try:
                d = s3.delete_object(Bucket=b, Key="r", IfMatch=etag)
                outcomes.append((d["VersionId"], etag))
            except ClientError as e:
                refused.append(e.response["Error"]["Code"])
    s3.put_object(Bucket=b, Key="r", Body=b"first")
    threads = [threading.Thread(target=writer)] + [threading.Thread(target=deleter) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    assert outcomes, "no conditional delete succeeded"
    assert set(refused) <= {"PreconditionFailed", "NoSuchKey"}, refused
    r = s3.list_object_versions(Bucket=b, Prefix="r")
    entries = [(v["VersionId"], v.get("ETag"), False) for v in r.get("Versions", [])]
    entries += [(m["VersionId"], None, True) for m in r.get("DeleteMarkers", [])]
    # Newest first: version ids order a key's versions.
    entries.sort(key=lambda e: e[0])
    by_id = {e[0]: i for i, e in enumerate(entries)}
    for marker, etag in outcomes:
        i = by_id[marker]
        older = entries[i + 1]
        assert not older[2] and older[1] == etag, (marker, etag, entries[i : i + 2])
    # (2) Deletes of one version by id race, only one of them with the right ETag: the
    # version goes once, through that one; the others are 412 (or 404 once it is gone).
    v = s3.put_object(Bucket=b, Key="v", Body=b"target")
    wrong = '"00000000000000000000000000000000"'
    results = []

    def one(etag):
        try:
            s3.delete_object(Bucket=b, Key="v", VersionId=v["VersionId"], IfMatch=etag)
            results.append((etag, 204))
        except ClientError as e:
            results.append((etag, e.response["Error"]["Code"]))

    threads = [threading.Thread(target=one, args=(wrong,)) for _ in range(6)] + [threading.Thread(target=one, args=(v["ETag"],))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (v["ETag"], 204) in results
    assert all(c in ("PreconditionFailed", "NoSuchKey") for e, c in results if e == wrong), results
    assert _version_ids(s3, b, "v") == set()


def _server_with_region(tmp_path, region):
    d = tmp_path / "region-srv"
    d.mkdir()
    cfg = d / "lode.toml"
    cfg.write_text(f'[server]\nregion = "{region}"\n[[datapath.devices]]\npath = "dev0.img"\nsize = "256MiB"\n')
    return Lode(str(d / "data"), extra_args=["--config", str(cfg)]).start()


def test_create_bucket_you_own_is_200_in_us_east_1_and_409_elsewhere(s3, bucket, tmp_path):
    # The suite's servers are in us-east-1: AWS's legacy 200, and nothing changes.
    s3.put_object(Bucket=bucket, Key="kept", Body=b"x")
    r = s3.create_bucket(Bucket=bucket)
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["kept"]
    # Another user's bucket is still 409 BucketAlreadyExists there.
    # (test_users.py covers other users; here: a server in another region answers 409.)
    if CLUSTER_MODE:
        return
    srv = _server_with_region(tmp_path, "eu-west-1")
    try:
        c = boto3.client("s3", endpoint_url=srv.endpoint, aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
                         region_name="eu-west-1", config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
        c.create_bucket(Bucket="mine", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
        with pytest.raises(ClientError) as e:
            c.create_bucket(Bucket="mine", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
        assert (status(e), code(e)) == (409, "BucketAlreadyOwnedByYou")
    finally:
        srv.remove()


def test_get_object_attributes_etag_unquoted_and_version_id(lode_server, s3, bucket):
    body = b"attributes"
    md5 = hashlib.md5(body).hexdigest()
    s3.put_object(Bucket=bucket, Key="plain", Body=body)
    # On the wire: <ETag> without quotes; no version header in a bucket never versioned.
    r = signed(lode_server, "GET", f"/{bucket}/plain?attributes", headers={"x-amz-object-attributes": "ETag,ObjectSize"})
    assert r.status_code == 200, r.text
    assert strip_ns(r.text).find("ETag").text == md5
    assert "x-amz-version-id" not in r.headers
    a = s3.get_object_attributes(Bucket=bucket, Key="plain", ObjectAttributes=["ETag"])
    assert a["ETag"] == md5 and "VersionId" not in a
    # Versioned: the current version's id, and any version by id.
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    try:
        v1 = s3.put_object(Bucket=bucket, Key="v", Body=b"one")["VersionId"]
        v2 = s3.put_object(Bucket=bucket, Key="v", Body=b"second")["VersionId"]
        a = s3.get_object_attributes(Bucket=bucket, Key="v", ObjectAttributes=["ETag", "ObjectSize"])
        assert (a["VersionId"], a["ObjectSize"], a["ETag"]) == (v2, 6, hashlib.md5(b"second").hexdigest())
        a = s3.get_object_attributes(Bucket=bucket, Key="v", VersionId=v1, ObjectAttributes=["ETag", "ObjectSize"])
        assert (a["VersionId"], a["ObjectSize"], a["ETag"]) == (v1, 3, hashlib.md5(b"one").hexdigest())
        # The object made before versioning is the null version.
        a = s3.get_object_attributes(Bucket=bucket, Key="plain", ObjectAttributes=["ObjectSize"])
        assert a["VersionId"] == "null"
        # A key hidden by a delete marker: 404 with the marker's headers; the marker by id: 405.
        marker = s3.delete_object(Bucket=bucket, Key="v")["VersionId"]
        with pytest.raises(ClientError) as e:
            s3.get_object_attributes(Bucket=bucket, Key="v", ObjectAttributes=["ETag"])
        h = e.value.response["ResponseMetadata"]["HTTPHeaders"]
        assert (status(e), code(e)) == (404, "NoSuchKey") and h["x-amz-delete-marker"] == "true"
        with pytest.raises(ClientError) as e:
            s3.get_object_attributes(Bucket=bucket, Key="v", VersionId=marker, ObjectAttributes=["ETag"])
        assert status(e) == 405
    finally:
        empty_versions(s3, bucket)


def test_upload_part_copy_from_a_version(s3, vbucket):
    b = vbucket
    old = os.urandom(5 * MIB + 7)
    v1 = s3.put_object(Bucket=b, Key="src", Body=old)["VersionId"]
    v2 = s3.put_object(Bucket=b, Key="src", Body=b"newer")["VersionId"]
    up = s3.create_multipart_upload(Bucket=b, Key="dst")["UploadId"]
    src = f"{b}/src?versionId={v1}"
    p1 = s3.upload_part_copy(Bucket=b, Key="dst", UploadId=up, PartNumber=1, CopySource=src)
    assert p1["CopySourceVersionId"] == v1
    p2 = s3.upload_part_copy(Bucket=b, Key="dst", UploadId=up, PartNumber=2, CopySource={"Bucket": b, "Key": "src", "VersionId": v1}, CopySourceRange=f"bytes=7-{len(old) - 1}")
    assert p2["CopySourceVersionId"] == v1
    # The current version, named or not, reports its id.
    p3 = s3.upload_part_copy(Bucket=b, Key="dst", UploadId=up, PartNumber=3, CopySource=f"{b}/src")
    assert p3["CopySourceVersionId"] == v2
    parts = [{"PartNumber": n, "ETag": p["CopyPartResult"]["ETag"]} for n, p in ((1, p1), (2, p2), (3, p3))]
    s3.complete_multipart_upload(Bucket=b, Key="dst", UploadId=up, MultipartUpload={"Parts": parts})
    assert s3.get_object(Bucket=b, Key="dst")["Body"].read() == old + old[7:] + b"newer"
    # The source's conditions judge the version; a delete marker by id is 400, an id no
    # version has 404.
    up = s3.create_multipart_upload(Bucket=b, Key="dst2")["UploadId"]
    with pytest.raises(ClientError) as e:
        s3.upload_part_copy(Bucket=b, Key="dst2", UploadId=up, PartNumber=1, CopySource=src, CopySourceIfMatch='"0000"')
    assert (status(e), code(e)) == (412, "PreconditionFailed")
    marker = s3.delete_object(Bucket=b, Key="src")["VersionId"]
    for call in ("upload_part_copy", "copy_object"):
        with pytest.raises(ClientError) as e:
            if call == "upload_part_copy":
                s3.upload_part_copy(Bucket=b, Key="dst2", UploadId=up, PartNumber=1, CopySource=f"{b}/src?versionId={marker}")
            else:
                s3.copy_object(Bucket=b, Key="dst3", CopySource=f"{b}/src?versionId={marker}")
        assert (status(e), code(e)) == (400, "InvalidRequest"), call
    with pytest.raises(ClientError) as e:
        s3.upload_part_copy(Bucket=b, Key="dst2", UploadId=up, PartNumber=1, CopySource=f"{b}/src")
    assert (status(e), code(e)) == (404, "NoSuchKey")
    s3.abort_multipart_upload(Bucket=b, Key="dst2", UploadId=up)


def test_part_number_reads_of_a_composite_object_report_composite(s3, bucket):
    bodies = [os.urandom(5 * MIB), os.urandom(1234)]
    for algo in ("CRC32", "CRC32C", "SHA1", "SHA256"):
        key = "comp-" + algo
        up = s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm=algo)["UploadId"]
        parts = []
        for n, body in enumerate(bodies, 1):
            r = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=n, Body=body, ChecksumAlgorithm=algo)
            parts.append({"PartNumber": n, "ETag": r["ETag"], "Checksum" + algo: r["Checksum" + algo]})
        done = s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up, MultipartUpload={"Parts": parts})
        assert done["ChecksumType"] == "COMPOSITE"
        for n in (1, 2):
            for call in (s3.get_object, s3.head_object):
                r = call(Bucket=bucket, Key=key, PartNumber=n, ChecksumMode="ENABLED")
                assert r["ChecksumType"] == "COMPOSITE", (algo, n, call)
                assert r["Checksum" + algo] == parts[n - 1]["Checksum" + algo], (algo, n, call)
        # The whole object: its checksum of checksums.
        whole = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        assert whole["ChecksumType"] == "COMPOSITE" and whole["Checksum" + algo].endswith("-2")


def test_delete_marker_header_by_versioning_state(s3, bucket):
    """`x-amz-delete-marker` as AWS sends it: absent where no marker is made or removed
    (unversioned; a version that is not a marker), `true` with the marker's id where a simple
    DELETE makes one (Enabled: a new id; Suspended: `null`) or a delete by id removes one. S3's
    reference: "If false, this response header does not appear in the response"."""
    def hdrs(r):
        return r["ResponseMetadata"]["HTTPHeaders"]

    s3.put_object(Bucket=bucket, Key="k", Body=b"1")
    r = s3.delete_object(Bucket=bucket, Key="k")
    assert "x-amz-delete-marker" not in hdrs(r) and "x-amz-version-id" not in hdrs(r)
    assert "x-amz-delete-marker" not in hdrs(s3.delete_object(Bucket=bucket, Key="never"))
    s3.put_object(Bucket=bucket, Key="m", Body=b"1")
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "m"}, {"Key": "never"}]})
    assert [sorted(d) for d in r["Deleted"]] == [["Key"], ["Key"]]
    try:
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        v = s3.put_object(Bucket=bucket, Key="k", Body=b"2")["VersionId"]
        r = s3.delete_object(Bucket=bucket, Key="k")
        assert hdrs(r)["x-amz-delete-marker"] == "true" and r["VersionId"] not in (v, "null")
        marker = r["VersionId"]
        # Removing the marker by id says it was one; removing a version by id says nothing.
        r = s3.delete_object(Bucket=bucket, Key="k", VersionId=marker)
        assert hdrs(r)["x-amz-delete-marker"] == "true" and r["VersionId"] == marker
        r = s3.delete_object(Bucket=bucket, Key="k", VersionId=v)
        assert "x-amz-delete-marker" not in hdrs(r) and r["VersionId"] == v
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
        s3.put_object(Bucket=bucket, Key="s", Body=b"3")
        r = s3.delete_object(Bucket=bucket, Key="s")
        assert (hdrs(r)["x-amz-delete-marker"], hdrs(r)["x-amz-version-id"]) == ("true", "null")
        r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "t"}]})
        assert r["Deleted"] == [{"Key": "t", "DeleteMarker": True, "DeleteMarkerVersionId": "null"}]
    finally:
        empty_versions(s3, bucket)
