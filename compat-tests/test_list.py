"""ListObjectsV2 and ListObjects (v1): S3 ordering, prefixes, delimiters and paging."""

import urllib.parse

import pytest
import requests
from botocore.exceptions import ClientError

KEYS = [
    "a", "a/b", "a/b/c", "a/c", "a0", "b", "b/x/y", "b/y", "c/", "dir/f1", "dir/f2", "dir/sub/f3",
    "photos/2024/1.jpg", "photos/2024/2.jpg", "photos/2025/1.jpg", "z", "ü-unicode", "sp ace",
]


@pytest.fixture
def filled(s3, bucket):
    for k in KEYS:
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())
    return bucket


def model(prefix="", delimiter=None, after=None):
    out = []
    for k in sorted(KEYS, key=lambda s: s.encode()):
        if not k.startswith(prefix):
            continue
        e = k
        if delimiter:
            i = k.find(delimiter, len(prefix))
            if i >= 0:
                e = k[: i + len(delimiter)]
        if after is not None and e.encode() <= after.encode():
            continue
        if not out or out[-1] != e:
            out.append(e)
    return out


def v2_all(s3, bucket, **kw):
    got, pages = [], 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, **kw):
        pages += 1
        entries = [o["Key"] for o in page.get("Contents", [])] + [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        assert page["KeyCount"] == len(entries)
        got.extend(sorted(entries, key=lambda s: s.encode()))
    return got, pages


@pytest.mark.parametrize("prefix", ["", "a", "a/", "photos/", "dir/", "zz"])
@pytest.mark.parametrize("delimiter", [None, "/"])
@pytest.mark.parametrize("page", [1, 2, 1000])
def test_v2_matches_model(s3, filled, prefix, delimiter, page):
    kw = {"Prefix": prefix, "PaginationConfig": {"PageSize": page}}
    if delimiter:
        kw["Delimiter"] = delimiter
    got, pages = v2_all(s3, filled, **kw)
    want = model(prefix, delimiter)
    assert got == want
    if page == 1:
        assert pages >= len(want)


def test_v2_start_after_owner_and_max_keys(s3, filled):
    r = s3.list_objects_v2(Bucket=filled, StartAfter="b/y", FetchOwner=True)
    assert [o["Key"] for o in r["Contents"]] == model(after="b/y")
    assert all("Owner" in o for o in r["Contents"])
    assert "Owner" not in s3.list_objects_v2(Bucket=filled)["Contents"][0]
    r = s3.list_objects_v2(Bucket=filled, MaxKeys=3)
    assert r["IsTruncated"] and r["KeyCount"] == 3 and r["MaxKeys"] == 3
    r2 = s3.list_objects_v2(Bucket=filled, MaxKeys=3, ContinuationToken=r["NextContinuationToken"])
    assert [o["Key"] for o in r2["Contents"]] == model()[3:6]
    o = r["Contents"][0]
    assert o["Size"] == 1 and o["ETag"].startswith('"') and o["StorageClass"] == "STANDARD"
    with pytest.raises(ClientError) as e:
        s3.list_objects_v2(Bucket=filled, ContinuationToken="!!!garbage")
    assert e.value.response["Error"]["Code"] == "InvalidArgument"


def test_v2_encoding_type_url(s3, filled):
    # boto3 asks for encoding-type=url by default and decodes the keys itself.
    r = s3.list_objects_v2(Bucket=filled, Prefix="s")
    assert [o["Key"] for o in r["Contents"]] == ["sp ace"]
    raw = s3.list_objects_v2(Bucket=filled, Prefix="ü", EncodingType="url")
    assert urllib.parse.unquote(raw["Contents"][0]["Key"]) == "ü-unicode"


def test_v1_marker_and_next_marker(s3, filled):
    got, marker = [], ""
    while True:
        r = s3.list_objects(Bucket=filled, Marker=marker, MaxKeys=4, Delimiter="/")
        entries = [o["Key"] for o in r.get("Contents", [])] + [p["Prefix"] for p in r.get("CommonPrefixes", [])]
        got.extend(sorted(entries, key=lambda s: s.encode()))
        if not r["IsTruncated"]:
            break
        marker = r["NextMarker"]
    assert got == model(delimiter="/")
    # Paginator (uses NextMarker / last key) agrees.
    keys = [o["Key"] for p in s3.get_paginator("list_objects").paginate(Bucket=filled, PaginationConfig={"PageSize": 5}) for o in p.get("Contents", [])]
    assert keys == model()


def test_negative_max_keys(s3, filled):
    with pytest.raises(ClientError) as e:
        s3.list_objects_v2(Bucket=filled, MaxKeys=-1)
    assert e.value.response["Error"]["Code"] == "InvalidArgument"


def test_listings_name_each_objects_checksum(s3, bucket):
    """ListObjectsV2, ListObjects and ListObjectVersions name each object's checksum algorithm
    and type, as S3 does since it gives every new object a checksum (CRC64NVME when the upload
    sent none): the same algorithm HEAD with checksum mode returns."""
    s3.put_object(Bucket=bucket, Key="sha", Body=b"x" * 100, ChecksumAlgorithm="SHA256")
    s3.put_object(Bucket=bucket, Key="c32c", Body=b"y" * 100, ChecksumAlgorithm="CRC32C")
    url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "plain"}, ExpiresIn=60)
    assert requests.put(url, data=b"no checksum sent").status_code == 200
    part = b"p" * (5 << 20)
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp", ChecksumAlgorithm="CRC32")
    parts = []
    for n in (1, 2):
        r = s3.upload_part(Bucket=bucket, Key="mp", UploadId=up["UploadId"], PartNumber=n, Body=part, ChecksumAlgorithm="CRC32")
        parts.append({"PartNumber": n, "ETag": r["ETag"], "ChecksumCRC32": r["ChecksumCRC32"]})
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up["UploadId"], MultipartUpload={"Parts": parts})
    want = {
        "c32c": (["CRC32C"], "FULL_OBJECT"),
        "mp": (["CRC32"], "COMPOSITE"),
        "plain": (["CRC64NVME"], "FULL_OBJECT"),
        "sha": (["SHA256"], "FULL_OBJECT"),
    }
    for key, (algos, kind) in want.items():
        h = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        assert [a for a in ("CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256") if f"Checksum{a}" in h] == algos, key
        assert h["ChecksumType"] == kind, key

    def named(entries):
        return {o["Key"]: (o.get("ChecksumAlgorithm"), o.get("ChecksumType")) for o in entries}

    assert named(s3.list_objects_v2(Bucket=bucket)["Contents"]) == want
    assert named(s3.list_objects(Bucket=bucket)["Contents"]) == want
    assert named(s3.list_objects_v2(Bucket=bucket, MaxKeys=1, StartAfter="mp")["Contents"]) == {"plain": want["plain"]}
    assert named(s3.list_object_versions(Bucket=bucket)["Versions"]) == want
