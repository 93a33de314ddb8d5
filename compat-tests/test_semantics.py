"""Every rule in SEMANTICS.md where Lode differs from AWS S3, each pinned by a test here (or by
the Rust test the document names)."""

import uuid

import pytest
import requests
from botocore.exceptions import ClientError


def code(e):
    return e.value.response["Error"]["Code"]


def test_nul_in_key_is_refused(s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="a\x00b", Body=b"x")
    assert code(e) == "InvalidArgument"
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_location_constraint_must_match_the_region(s3):
    name = "lc-" + uuid.uuid4().hex[:10]
    with pytest.raises(ClientError) as e:
        s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    assert code(e) == "IllegalLocationConstraintException"


def test_owner_is_the_users_canonical_id(s3, bucket):
    """Owner IDs are per user (AWS: per account): 64 hex digits derived from the user's name,
    with the name as display name (root's is `root`)."""
    import hashlib
    root = {"ID": hashlib.sha256(b"lode-user:root").hexdigest(), "DisplayName": "root"}
    assert s3.list_buckets()["Owner"] == root
    s3.put_object(Bucket=bucket, Key="o", Body=b"x")
    o = s3.list_objects_v2(Bucket=bucket, FetchOwner=True)["Contents"][0]
    assert o["Owner"] == root
    assert s3.get_bucket_acl(Bucket=bucket)["Owner"] == root


def test_start_after_inside_a_common_prefix_skips_it(s3, bucket):
    for k in ["a/1", "a/2", "b"]:
        s3.put_object(Bucket=bucket, Key=k, Body=b"x")
    r = s3.list_objects_v2(Bucket=bucket, Delimiter="/", StartAfter="a/1")
    assert [p["Prefix"] for p in r.get("CommonPrefixes", [])] == []
    assert [o["Key"] for o in r["Contents"]] == ["b"]


def test_request_id_on_every_response(lode_server, s3, bucket):
    ok = s3.list_objects_v2(Bucket=bucket)
    assert ok["ResponseMetadata"]["RequestId"]
    r = requests.get(lode_server.endpoint + "/")
    assert r.status_code == 403 and r.headers["x-amz-request-id"]
