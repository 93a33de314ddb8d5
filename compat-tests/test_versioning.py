"""Versioned buckets with boto3: Put/GetBucketVersioning, version ids on every write, reads,
deletes and copies by version, delete markers, ListObjectVersions (paged, with prefixes), the
Suspended state's null versions, tagging of a version, and the errors S3 answers. In cluster
mode the client sends each request to the other gateway in turn, so every test here also
checks that a version made through one gateway is read, listed and removed through the other,
and that a versioning change through one holds for the very next write through the other."""

import hashlib
import os

import pytest
from botocore.exceptions import ClientError

from conftest import empty_versions


def err(e):
    r = e.value.response
    return r["Error"]["Code"], r["ResponseMetadata"]["HTTPStatusCode"]


def headers(e):
    return e.value.response["ResponseMetadata"]["HTTPHeaders"]


@pytest.fixture
def vbucket(s3, bucket):
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    yield bucket
    empty_versions(s3, bucket)


def versions(s3, bucket, **kw):
    r = s3.list_object_versions(Bucket=bucket, **kw)
    out = [(v["Key"], v["VersionId"], v["IsLatest"], "V") for v in r.get("Versions", [])]
    out += [(m["Key"], m["VersionId"], m["IsLatest"], "DM") for m in r.get("DeleteMarkers", [])]
    return sorted(out, key=lambda x: x[0]), r


def test_bucket_versioning_states(s3, bucket):
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Suspended"
    with pytest.raises(ClientError) as e:
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Bogus"})
    assert err(e) == ("MalformedXML", 400)
    with pytest.raises(ClientError) as e:
        s3.put_bucket_versioning(Bucket=bucket + "-none", VersioningConfiguration={"Status": "Enabled"})
    assert err(e) == ("NoSuchBucket", 404)


def test_writes_make_versions_and_old_ones_read_back(s3, vbucket):
    b = vbucket
    big = os.urandom(6 * 1024 * 1024)
    v1 = s3.put_object(Bucket=b, Key="k", Body=b"one")["VersionId"]
    v2 = s3.put_object(Bucket=b, Key="k", Body=big)["VersionId"]
    up = s3.create_multipart_upload(Bucket=b, Key="k")["UploadId"]
    p = s3.upload_part(Bucket=b, Key="k", UploadId=up, PartNumber=1, Body=b"three")
    v3 = s3.complete_multipart_upload(Bucket=b, Key="k", UploadId=up,
                                      MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": p["ETag"]}]})["VersionId"]
    assert len({v1, v2, v3}) == 3 and "null" not in {v1, v2, v3}
    g = s3.get_object(Bucket=b, Key="k")
    assert g["Body"].read() == b"three" and g["VersionId"] == v3
    assert s3.get_object(Bucket=b, Key="k", VersionId=v1)["Body"].read() == b"one"
    assert s3.get_object(Bucket=b, Key="k", VersionId=v2, Range="bytes=5-9")["Body"].read() == big[5:10]
    h = s3.head_object(Bucket=b, Key="k", VersionId=v2)
    assert h["ContentLength"] == len(big) and h["VersionId"] == v2
    _, r = versions(s3, b)
    assert [(x["VersionId"], x["IsLatest"]) for x in r["Versions"]] == [(v3, True), (v2, False), (v1, False)]
    # Listings and the object's own reads show only the current version.
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=b)["Contents"]] == ["k"]


def test_delete_markers_hide_and_removing_them_restores(s3, vbucket):
    b = vbucket
    v1 = s3.put_object(Bucket=b, Key="k", Body=b"one")["VersionId"]
    d = s3.delete_object(Bucket=b, Key="k")
    assert d["DeleteMarker"] is True and d["VersionId"] not in (v1, "null")
    marker = d["VersionId"]
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=b, Key="k")
    assert err(e) == ("NoSuchKey", 404)
    assert headers(e)["x-amz-delete-marker"] == "true" and headers(e)["x-amz-version-id"] == marker
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=b, Key="k")
    assert err(e)[1] == 404
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=b, Key="k", VersionId=marker)
    assert err(e) == ("MethodNotAllowed", 405)
    assert headers(e)["x-amz-delete-marker"] == "true"
    assert s3.list_objects_v2(Bucket=b).get("KeyCount") == 0
    vs, r = versions(s3, b)
    assert r["DeleteMarkers"][0]["IsLatest"] and r["DeleteMarkers"][0]["VersionId"] == marker
    assert not r["Versions"][0]["IsLatest"]
    # Removing the marker brings the object back.
    d = s3.delete_object(Bucket=b, Key="k", VersionId=marker)
    assert d["DeleteMarker"] is True and d["VersionId"] == marker
    assert s3.get_object(Bucket=b, Key="k")["Body"].read() == b"one"
    # Removing the current version makes the previous one current.
    v2 = s3.put_object(Bucket=b, Key="k", Body=b"two")["VersionId"]
    s3.delete_object(Bucket=b, Key="k", VersionId=v2)
    g = s3.get_object(Bucket=b, Key="k")
    assert g["Body"].read() == b"one" and g["VersionId"] == v1
    # A bucket whose objects are all deleted still holds versions: not empty.
    s3.delete_object(Bucket=b, Key="k")
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket=b)
    assert err(e) == ("BucketNotEmpty", 409)


def test_suspended_writes_the_null_version(s3, bucket):
    b = bucket
    s3.put_object(Bucket=b, Key="k", Body=b"before")  # unversioned: the null version
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    v1 = s3.put_object(Bucket=b, Key="k", Body=b"v1")["VersionId"]
    assert s3.get_object(Bucket=b, Key="k", VersionId="null")["Body"].read() == b"before"
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Suspended"})
    r = s3.put_object(Bucket=b, Key="k", Body=b"s1")
    assert r.get("VersionId") == "null"
    vs, _ = versions(s3, b)
    assert [(v[1], v[2]) for v in vs] == [("null", True), (v1, False)], "the old null version was replaced"
    assert s3.get_object(Bucket=b, Key="k", VersionId="null")["Body"].read() == b"s1"
    d = s3.delete_object(Bucket=b, Key="k")
    assert d["DeleteMarker"] is True and d["VersionId"] == "null"
    vs, _ = versions(s3, b)
    assert sorted((v[1], v[3]) for v in vs) == sorted([("null", "DM"), (v1, "V")])
    empty_versions(s3, b)


def test_list_object_versions_pages_and_prefixes(s3, vbucket):
    b = vbucket
    want = []
    for k in ["a", "d/1", "d/2", "e"]:
        for i in range(3):
            want.append((k, s3.put_object(Bucket=b, Key=k, Body=f"{k}{i}".encode())["VersionId"]))
    s3.delete_object(Bucket=b, Key="e")
    got = []
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=b, PaginationConfig={"PageSize": 2}):
        got += [(v["Key"], v["VersionId"]) for v in page.get("Versions", [])]
    assert sorted(got) == sorted(want)
    r = s3.list_object_versions(Bucket=b, Delimiter="/")
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["d/"]
    assert {v["Key"] for v in r["Versions"]} == {"a", "e"}
    r = s3.list_object_versions(Bucket=b, Prefix="d/", KeyMarker="d/1")
    assert {v["Key"] for v in r["Versions"]} == {"d/2"}
    # After one version of a key: the rest of that key, newest first.
    a_ids = [v for k, v in want if k == "a"][::-1]
    r = s3.list_object_versions(Bucket=b, Prefix="a", KeyMarker="a", VersionIdMarker=a_ids[0])
    assert [v["VersionId"] for v in r["Versions"]] == a_ids[1:]
    with pytest.raises(ClientError) as e:
        s3.list_object_versions(Bucket=b, VersionIdMarker=a_ids[0])
    assert err(e) == ("InvalidArgument", 400)


def test_copy_from_a_version_and_tag_a_version(s3, vbucket):
    b = vbucket
    v1 = s3.put_object(Bucket=b, Key="k", Body=b"old", Tagging="gen=1")["VersionId"]
    s3.put_object(Bucket=b, Key="k", Body=b"new")
    r = s3.copy_object(Bucket=b, Key="k", CopySource={"Bucket": b, "Key": "k", "VersionId": v1})
    assert r["CopySourceVersionId"] == v1 and r["VersionId"] not in (v1, "null")
    assert s3.get_object(Bucket=b, Key="k")["Body"].read() == b"old", "a version restored by copying it"
    s3.put_object_tagging(Bucket=b, Key="k", VersionId=v1, Tagging={"TagSet": [{"Key": "gen", "Value": "0"}]})
    assert s3.get_object_tagging(Bucket=b, Key="k", VersionId=v1)["TagSet"] == [{"Key": "gen", "Value": "0"}]
    assert s3.get_object_tagging(Bucket=b, Key="k")["TagSet"] == [{"Key": "gen", "Value": "1"}], \
        "the copy kept the source version's tags; the current version's are its own"


def test_version_errors_and_unbuilt_combinations(s3, vbucket):
    b = vbucket
    s3.put_object(Bucket=b, Key="k", Body=b"x")
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=b, Key="k", VersionId="not-a-version")
    assert err(e) == ("InvalidArgument", 400)
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=b, Key="k", VersionId="0000000000000000000000")
    assert err(e) == ("NoSuchVersion", 404)
    # A wrong append offset in a versioned bucket makes no version.
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=b, Key="k", Body=b"y", WriteOffsetBytes=7)
    assert err(e) == ("InvalidWriteOffset", 400)
    assert len(versions(s3, b)[0]) == 1
    assert s3.get_object(Bucket=b, Key="k")["Body"].read() == b"x"


def md5(b):
    return hashlib.md5(b).hexdigest()


def test_appends_make_versions_that_share_the_old_bytes(s3, vbucket):
    """Each append makes a new version; the version it extended still reads as it was, and
    removing the older versions leaves the newer one whole, even once new writes have taken
    the space that was freed."""
    b = vbucket
    base, add, more = os.urandom(300_000), os.urandom(70_000), os.urandom(5)
    v1 = s3.put_object(Bucket=b, Key="log", Body=base)["VersionId"]
    r = s3.put_object(Bucket=b, Key="log", Body=add, WriteOffsetBytes=len(base))
    v2 = r["VersionId"]
    assert v2 not in (v1, "null")
    assert r["ETag"] == '"%s-2"' % md5(bytes.fromhex(md5(base)) + bytes.fromhex(md5(add)))
    assert s3.get_object(Bucket=b, Key="log")["Body"].read() == base + add
    assert s3.get_object(Bucket=b, Key="log", VersionId=v1)["Body"].read() == base
    v3 = s3.put_object(Bucket=b, Key="log", Body=more, WriteOffsetBytes=len(base + add))["VersionId"]
    got, _ = versions(s3, b)
    assert [(v[1], v[2]) for v in got] == [(v3, True), (v2, False), (v1, False)]
    # Removing the older versions leaves the current one's bytes (shared with them) whole.
    for v in (v1, v2):
        s3.delete_object(Bucket=b, Key="log", VersionId=v)
    for i in range(8):
        s3.put_object(Bucket=b, Key=f"filler{i}", Body=os.urandom(400_000))
    g = s3.get_object(Bucket=b, Key="log", ChecksumMode="ENABLED")
    assert g["Body"].read() == base + add + more and g["VersionId"] == v3
    # A delete hides it behind a marker; an append at offset 0 then makes a fresh object.
    s3.delete_object(Bucket=b, Key="log")
    new = os.urandom(20_000)
    v4 = s3.put_object(Bucket=b, Key="log", Body=new, WriteOffsetBytes=0)["VersionId"]
    assert s3.get_object(Bucket=b, Key="log")["Body"].read() == new
    assert s3.get_object(Bucket=b, Key="log", VersionId=v3)["Body"].read() == base + add + more
    # Suspended: the append is the null version, and the next one replaces it (sharing its
    # bytes); a delete then replaces the null version with a marker.
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Suspended"})
    p1, p2 = os.urandom(30_000), os.urandom(30_000)
    r = s3.put_object(Bucket=b, Key="log", Body=p1, WriteOffsetBytes=len(new))
    assert r.get("VersionId", "null") == "null"
    s3.put_object(Bucket=b, Key="log", Body=p2, WriteOffsetBytes=len(new + p1))
    got, _ = versions(s3, b, Prefix="log")
    assert [v[1] for v in got].count("null") == 1
    assert s3.get_object(Bucket=b, Key="log", VersionId="null")["Body"].read() == new + p1 + p2
    s3.delete_object(Bucket=b, Key="log")
    for i in range(8):
        s3.put_object(Bucket=b, Key=f"filler{i}", Body=os.urandom(400_000))
    assert s3.get_object(Bucket=b, Key="log", VersionId=v3)["Body"].read() == base + add + more
    # v4's bytes were shared with the null version the delete replaced: they stay.
    g = s3.get_object(Bucket=b, Key="log", VersionId=v4, ChecksumMode="ENABLED")
    assert g["Body"].read() == new
    got, _ = versions(s3, b, Prefix="log")
    assert sum(1 for v in got if v[3] == "V" and v[0] == "log") == 2


def test_rename_moves_the_current_version(s3, vbucket):
    """RenameObject in a versioned bucket: the target gets the source's current version as a
    new version (its own is kept), the source gets a delete marker and keeps its older
    versions."""
    b = vbucket
    old, cur, target = os.urandom(40_000), os.urandom(50_000), b"target"
    s_old = s3.put_object(Bucket=b, Key="src", Body=old)["VersionId"]
    s_cur = s3.put_object(Bucket=b, Key="src", Body=cur)["VersionId"]
    t0 = s3.put_object(Bucket=b, Key="dst", Body=target)["VersionId"]
    s3.rename_object(Bucket=b, Key="dst", RenameSource=f"{b}/src")
    g = s3.get_object(Bucket=b, Key="dst")
    assert g["Body"].read() == cur and g["ETag"] == f'"{md5(cur)}"'
    assert g["VersionId"] not in (s_cur, t0, "null")
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=b, Key="src")
    assert err(e) == ("NoSuchKey", 404) and headers(e).get("x-amz-delete-marker") == "true"
    got, _ = versions(s3, b)
    assert [(v[0], v[3], v[2]) for v in got] == [
        ("dst", "V", True), ("dst", "V", False), ("src", "V", False), ("src", "DM", True)]
    assert s3.get_object(Bucket=b, Key="dst", VersionId=t0)["Body"].read() == target
    assert s3.get_object(Bucket=b, Key="src", VersionId=s_old)["Body"].read() == old
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=b, Key="src", VersionId=s_cur)
    assert err(e) == ("NoSuchVersion", 404)
    # Its conditions hold as in any bucket.
    with pytest.raises(ClientError) as e:
        s3.rename_object(Bucket=b, Key="dst", RenameSource=f"{b}/src")
    assert err(e) == ("NoSuchKey", 404)
    s3.put_object(Bucket=b, Key="src", Body=b"again")
    with pytest.raises(ClientError) as e:
        s3.rename_object(Bucket=b, Key="dst", RenameSource=f"{b}/src", DestinationIfNoneMatch="*")
    assert err(e) == ("PreconditionFailed", 412)
    assert s3.get_object(Bucket=b, Key="src")["Body"].read() == b"again"
    # A key whose versions share bytes (made by an append): the cluster's index counts shared
    # bytes per key, so there such a rename is refused (501, and EXDEV on a mount).
    first = os.urandom(20_000)
    s3.put_object(Bucket=b, Key="ap", Body=first)
    s3.put_object(Bucket=b, Key="ap", Body=b"b", WriteOffsetBytes=len(first))
    if os.environ.get("LODE_COMPAT_MODE") == "cluster":
        with pytest.raises(ClientError) as e:
            s3.rename_object(Bucket=b, Key="ap2", RenameSource=f"{b}/ap")
        assert err(e) == ("NotImplemented", 501)
        assert s3.get_object(Bucket=b, Key="ap")["Body"].read() == first + b"b"
    else:
        s3.rename_object(Bucket=b, Key="ap2", RenameSource=f"{b}/ap")
        assert s3.get_object(Bucket=b, Key="ap2")["Body"].read() == first + b"b"


def test_unversioned_bucket_lists_null_versions(s3, bucket):
    s3.put_object(Bucket=bucket, Key="a", Body=b"1")
    s3.put_object(Bucket=bucket, Key="b/c", Body=b"2")
    r = s3.list_object_versions(Bucket=bucket)
    assert [(v["Key"], v["VersionId"], v["IsLatest"]) for v in r["Versions"]] == [("a", "null", True), ("b/c", "null", True)]
    assert "x-amz-version-id" not in s3.put_object(Bucket=bucket, Key="a", Body=b"3")["ResponseMetadata"]["HTTPHeaders"]
    d = s3.delete_object(Bucket=bucket, Key="a", VersionId="null")
    assert d["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["b/c"]
