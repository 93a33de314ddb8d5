"""Object and bucket tagging with boto3: the x-amz-tagging header on PutObject, CopyObject (with
the tagging directive) and CreateMultipartUpload, Put/Get/DeleteObjectTagging,
Put/Get/DeleteBucketTagging, x-amz-tagging-count, and AWS's limits with their errors."""

import base64
import hashlib
import os

import pytest
import requests
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from conftest import ACCESS_KEY, REGION, SECRET_KEY


def err(e):
    r = e.value.response
    return r["Error"]["Code"], r["ResponseMetadata"]["HTTPStatusCode"]


def tags(s3, bucket, key):
    return s3.get_object_tagging(Bucket=bucket, Key=key)["TagSet"]


def ts(**kv):
    return [{"Key": k, "Value": v} for k, v in kv.items()]


def test_put_with_tagging_header_and_read_back(s3, bucket):
    # A key without '=' has the empty value; the set comes back sorted by key; '+' is a space.
    r = s3.put_object(Bucket=bucket, Key="a", Body=b"x", Tagging="foo=bar&bar&sp=a+b%2Bc")
    assert tags(s3, bucket, "a") == [
        {"Key": "bar", "Value": ""}, {"Key": "foo", "Value": "bar"}, {"Key": "sp", "Value": "a b+c"}]
    g = s3.get_object(Bucket=bucket, Key="a")
    assert g["TagCount"] == 3 and g["Body"].read() == b"x"
    h = s3.head_object(Bucket=bucket, Key="a")
    assert h["ResponseMetadata"]["HTTPHeaders"]["x-amz-tagging-count"] == "3"
    # An untagged object: an empty set, and no count header.
    s3.put_object(Bucket=bucket, Key="plain", Body=b"y")
    assert tags(s3, bucket, "plain") == []
    assert "TagCount" not in s3.get_object(Bucket=bucket, Key="plain")
    assert "x-amz-tagging-count" not in s3.head_object(Bucket=bucket, Key="plain")["ResponseMetadata"]["HTTPHeaders"]
    # An overwrite without the header has no tags (a new object).
    s3.put_object(Bucket=bucket, Key="a", Body=b"z")
    assert tags(s3, bucket, "a") == []
    assert r["ETag"]


def test_put_get_delete_object_tagging_keeps_the_object(s3, bucket):
    body = os.urandom(5 * 1024 * 1024 + 7)  # chunked, not inline
    s3.put_object(Bucket=bucket, Key="big", Body=body, ContentType="app/x", Metadata={"m": "1"})
    before = s3.head_object(Bucket=bucket, Key="big")
    s3.put_object_tagging(Bucket=bucket, Key="big", Tagging={"TagSet": ts(z="1", a="", **{"k k": "v/v"})})
    assert tags(s3, bucket, "big") == ts(a="", **{"k k": "v/v"}, z="1")
    after = s3.head_object(Bucket=bucket, Key="big")
    for f in ("ETag", "LastModified", "ContentType", "Metadata", "ContentLength"):
        assert after[f] == before[f], f
    assert s3.get_object(Bucket=bucket, Key="big")["Body"].read() == body
    # Replaced whole, not merged.
    s3.put_object_tagging(Bucket=bucket, Key="big", Tagging={"TagSet": ts(only="one")})
    assert tags(s3, bucket, "big") == ts(only="one")
    # An empty set removes them, as DeleteObjectTagging does (204).
    s3.put_object_tagging(Bucket=bucket, Key="big", Tagging={"TagSet": []})
    assert tags(s3, bucket, "big") == []
    s3.put_object_tagging(Bucket=bucket, Key="big", Tagging={"TagSet": ts(x="1")})
    d = s3.delete_object_tagging(Bucket=bucket, Key="big")
    assert d["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert tags(s3, bucket, "big") == []
    # The "null" version is the object; another version id is refused.
    s3.put_object_tagging(Bucket=bucket, Key="big", VersionId="null", Tagging={"TagSet": ts(v="n")})
    assert s3.get_object_tagging(Bucket=bucket, Key="big", VersionId="null")["TagSet"] == ts(v="n")
    with pytest.raises(ClientError) as e:
        s3.get_object_tagging(Bucket=bucket, Key="big", VersionId="3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY")
    assert err(e) == ("InvalidArgument", 400)


def test_object_tagging_of_missing_things(s3, bucket):
    for call in (
        lambda: s3.get_object_tagging(Bucket=bucket, Key="nope"),
        lambda: s3.put_object_tagging(Bucket=bucket, Key="nope", Tagging={"TagSet": ts(a="b")}),
        lambda: s3.delete_object_tagging(Bucket=bucket, Key="nope"),
    ):
        with pytest.raises(ClientError) as e:
            call()
        assert err(e) == ("NoSuchKey", 404)
    with pytest.raises(ClientError) as e:
        s3.get_object_tagging(Bucket=bucket + "-none", Key="k")
    assert err(e) == ("NoSuchBucket", 404)


@pytest.mark.parametrize("bad,want", [
    ({"TagSet": ts(**{f"k{i}": "v" for i in range(11)})}, ("BadRequest", 400)),
    ({"TagSet": ts(**{"k" * 129: "v"})}, ("InvalidTag", 400)),
    ({"TagSet": ts(k="v" * 257)}, ("InvalidTag", 400)),
    ({"TagSet": ts(**{"a,b": "v"})}, ("InvalidTag", 400)),
    ({"TagSet": ts(k="v#")}, ("InvalidTag", 400)),
    ({"TagSet": ts(**{"aws:x": "v"})}, ("InvalidTag", 400)),
    ({"TagSet": ts(k="1") + ts(k="2")}, ("InvalidTag", 400)),
])
def test_object_tag_limits(s3, bucket, bad, want):
    s3.put_object(Bucket=bucket, Key="t", Body=b"x", Tagging="keep=me")
    with pytest.raises(ClientError) as e:
        s3.put_object_tagging(Bucket=bucket, Key="t", Tagging=bad)
    assert err(e) == want
    assert tags(s3, bucket, "t") == ts(keep="me"), "a refused set changes nothing"


def test_object_tag_limits_at_the_edge_are_accepted(s3, bucket):
    s3.put_object(Bucket=bucket, Key="t", Body=b"x")
    edge = ts(**{f"{i:0128d}": "v" * 256 for i in range(10)})
    s3.put_object_tagging(Bucket=bucket, Key="t", Tagging={"TagSet": edge})
    assert tags(s3, bucket, "t") == edge
    uni = ts(**{"Zürich 日本 _.:/=+@-": "ünï cødé"})
    s3.put_object_tagging(Bucket=bucket, Key="t", Tagging={"TagSet": uni})
    assert tags(s3, bucket, "t") == uni


def test_bad_tagging_headers_refuse_the_put(s3, bucket):
    cases = [
        ("a=b=c", ("InvalidArgument", 400)),
        ("a=1&a=2", ("InvalidArgument", 400)),
        ("&".join(f"k{i}=v" for i in range(11)), ("BadRequest", 400)),
        ("k=" + "v" * 257, ("InvalidTag", 400)),
        ("aws%3Acreated=x", ("InvalidTag", 400)),
    ]
    for header, want in cases:
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=bucket, Key="h", Body=os.urandom(100_000), Tagging=header)
        assert err(e) == want, header
        with pytest.raises(ClientError) as e:
            s3.create_multipart_upload(Bucket=bucket, Key="h", Tagging=header)
        assert err(e) == want, header
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="h")
    assert err(e)[1] == 404, "a refused PUT leaves nothing"
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_copy_tagging_directive(s3, bucket):
    s3.put_object(Bucket=bucket, Key="src", Body=b"data", Tagging="a=1&b=2")
    s3.copy_object(Bucket=bucket, Key="c1", CopySource={"Bucket": bucket, "Key": "src"})
    assert tags(s3, bucket, "c1") == ts(a="1", b="2")
    s3.copy_object(Bucket=bucket, Key="c2", CopySource={"Bucket": bucket, "Key": "src"},
                   TaggingDirective="REPLACE", Tagging="n=new")
    assert tags(s3, bucket, "c2") == ts(n="new")
    s3.copy_object(Bucket=bucket, Key="c3", CopySource={"Bucket": bucket, "Key": "src"},
                   TaggingDirective="REPLACE")
    assert tags(s3, bucket, "c3") == []
    # The metadata directive does not touch the tags; the tagging directive not the metadata.
    s3.copy_object(Bucket=bucket, Key="c4", CopySource={"Bucket": bucket, "Key": "src"},
                   MetadataDirective="REPLACE", Metadata={"m": "x"})
    assert tags(s3, bucket, "c4") == ts(a="1", b="2")
    assert s3.head_object(Bucket=bucket, Key="c4")["Metadata"] == {"m": "x"}
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="c5", CopySource={"Bucket": bucket, "Key": "src"},
                       TaggingDirective="REPLACE", Tagging="a=b=c")
    assert err(e) == ("InvalidArgument", 400)
    assert s3.get_object(Bucket=bucket, Key="c2")["Body"].read() == b"data"


def test_multipart_and_rename_and_append_keep_tags(s3, bucket):
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp", Tagging="stage=raw&n=1")
    part = os.urandom(5 * 1024 * 1024)
    p1 = s3.upload_part(Bucket=bucket, Key="mp", UploadId=up["UploadId"], PartNumber=1, Body=part)
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up["UploadId"],
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": p1["ETag"]}]})
    assert tags(s3, bucket, "mp") == ts(n="1", stage="raw")
    s3.rename_object(Bucket=bucket, Key="mp2", RenameSource=f"{bucket}/mp")
    assert tags(s3, bucket, "mp2") == ts(n="1", stage="raw")
    s3.put_object(Bucket=bucket, Key="log", Body=b"abc", Tagging="kind=log")
    s3.put_object(Bucket=bucket, Key="log", Body=b"def", WriteOffsetBytes=3)
    assert tags(s3, bucket, "log") == ts(kind="log")
    assert s3.get_object(Bucket=bucket, Key="log")["Body"].read() == b"abcdef"


def test_bucket_tagging(s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.get_bucket_tagging(Bucket=bucket)
    assert err(e) == ("NoSuchTagSet", 404)
    s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": ts(team="ml", cost="42")})
    assert s3.get_bucket_tagging(Bucket=bucket)["TagSet"] == ts(cost="42", team="ml")
    fifty = ts(**{f"k{i:02}": str(i) for i in range(50)})
    s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": fifty})
    assert s3.get_bucket_tagging(Bucket=bucket)["TagSet"] == fifty
    for bad in (ts(**{f"k{i:02}": "v" for i in range(51)}), ts(**{"aws:x": "1"}), ts(k="a") + ts(k="b")):
        with pytest.raises(ClientError) as e:
            s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": bad})
        assert err(e) == ("InvalidTag", 400)
    assert s3.get_bucket_tagging(Bucket=bucket)["TagSet"] == fifty
    d = s3.delete_bucket_tagging(Bucket=bucket)
    assert d["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as e:
        s3.get_bucket_tagging(Bucket=bucket)
    assert err(e) == ("NoSuchTagSet", 404)
    s3.delete_bucket_tagging(Bucket=bucket)  # again: still 204
    with pytest.raises(ClientError) as e:
        s3.put_bucket_tagging(Bucket=bucket + "-none", Tagging={"TagSet": ts(a="b")})
    assert err(e) == ("NoSuchBucket", 404)


def test_bucket_tags_go_with_the_bucket(s3):
    name = "tag-gone-" + os.urandom(4).hex()
    s3.create_bucket(Bucket=name)
    s3.put_bucket_tagging(Bucket=name, Tagging={"TagSet": ts(a="1")})
    s3.delete_bucket(Bucket=name)
    s3.create_bucket(Bucket=name)
    with pytest.raises(ClientError) as e:
        s3.get_bucket_tagging(Bucket=name)
    assert err(e) == ("NoSuchTagSet", 404)
    s3.delete_bucket(Bucket=name)


def test_tagging_xml_without_value_is_malformed(s3, bucket, lode_server):
    """A Tag needs Key and Value (Required: Yes): botocore always sends both, so the request
    is signed by hand."""
    s3.put_object(Bucket=bucket, Key="m", Body=b"x", Tagging="keep=1")
    body = b"<Tagging><TagSet><Tag><Key>k</Key></Tag></TagSet></Tagging>"
    md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
    req = AWSRequest(method="PUT", url=f"{lode_server.endpoint}/{bucket}/m?tagging", data=body,
                     headers={"Content-MD5": md5})
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", REGION).add_auth(req)
    r = requests.put(req.url, data=body, headers=dict(req.headers))
    assert r.status_code == 400 and "<Code>MalformedXML</Code>" in r.text, r.text
    assert tags(s3, bucket, "m") == ts(keep="1")
