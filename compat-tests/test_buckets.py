"""Bucket operations with boto3 in its default configuration."""

import uuid

import pytest
from botocore.exceptions import ClientError


def code(e):
    return e.value.response["Error"]["Code"]


def status(e):
    return e.value.response["ResponseMetadata"]["HTTPStatusCode"]


def test_create_head_list_location_delete(s3):
    name = "b-" + uuid.uuid4().hex[:10]
    s3.create_bucket(Bucket=name)
    assert s3.head_bucket(Bucket=name)["ResponseMetadata"]["HTTPStatusCode"] == 200
    names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert name in names
    assert s3.get_bucket_location(Bucket=name).get("LocationConstraint") in (None, "")
    # Again, by its owner, in us-east-1: AWS's legacy 200 (409 in other regions:
    # test_aws_parity.py).
    assert s3.create_bucket(Bucket=name)["ResponseMetadata"]["HTTPStatusCode"] == 200
    s3.delete_bucket(Bucket=name)
    with pytest.raises(ClientError) as e:
        s3.head_bucket(Bucket=name)
    assert status(e) == 404
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket=name)
    assert code(e) == "NoSuchBucket"


@pytest.mark.parametrize(
    "bad", ["ab", "a" * 64, "Upper", "under_score", "-dash", "dash-", "a..b", "192.168.1.1", "xn--abc", "a.-b"]
)
def test_bucket_naming_rules(s3, bad):
    with pytest.raises(ClientError) as e:
        s3.create_bucket(Bucket=bad)
    assert code(e) == "InvalidBucketName" and status(e) == 400


def test_delete_non_empty_bucket_refused(s3, bucket):
    s3.put_object(Bucket=bucket, Key="x", Body=b"1")
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket=bucket)
    assert code(e) == "BucketNotEmpty" and status(e) == 409
    # Open multipart uploads do not keep a bucket (AWS deletes them with it):
    # test_aws_parity.py::test_delete_bucket_takes_its_in_progress_uploads_and_their_space.


def test_object_ops_on_missing_bucket(s3):
    # A small body (answered by the commit) and one that needs chunks (answered before any of
    # it is written) get the same answer.
    for body in (b"x", b"y" * (3 * 1024 * 1024)):
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket="no-such-bucket-xyz", Key="k", Body=body)
        assert code(e) == "NoSuchBucket" and status(e) == 404
    with pytest.raises(ClientError) as e:
        s3.list_objects_v2(Bucket="no-such-bucket-xyz")
    assert code(e) == "NoSuchBucket"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="no-such-bucket-xyz", Key="k")
    assert code(e) == "NoSuchBucket"
