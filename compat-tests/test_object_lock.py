"""S3 Object Lock with boto3, in both modes (in cluster mode each request goes to the other
gateway in turn): buckets created with object lock, Put/GetObjectLockConfiguration with a
default retention, Put/GetObjectRetention and Put/GetObjectLegalHold (by version too), the lock
headers on PUT, CreateMultipartUpload, GET and HEAD, and what a lock refuses: removing a locked
version (DeleteObject and DeleteObjects with a version id; GOVERNANCE yields to
x-amz-bypass-governance-retention, COMPLIANCE and legal holds do not), shortening or weakening a
retention, suspending versioning. The error codes are those S3 answers (as Ceph's s3-tests
check them)."""

import datetime
import uuid

import pytest
from botocore.exceptions import ClientError

UTC = datetime.timezone.utc
FAR = datetime.datetime(2140, 1, 1, tzinfo=UTC)


def err(e):
    r = e.value.response
    return r["Error"]["Code"], r["ResponseMetadata"]["HTTPStatusCode"]


def soon(seconds):
    return datetime.datetime.now(UTC).replace(microsecond=0) + datetime.timedelta(seconds=seconds)


@pytest.fixture
def lbucket(s3):
    """A bucket created with object lock; emptied at the end with bypass (holds released)."""
    name = "l-" + uuid.uuid4().hex[:12]
    s3.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    yield name
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=name):
        for v in page.get("Versions", []) + page.get("DeleteMarkers", []):
            try:
                if s3.get_object_legal_hold(Bucket=name, Key=v["Key"], VersionId=v["VersionId"])["LegalHold"]["Status"] == "ON":
                    s3.put_object_legal_hold(Bucket=name, Key=v["Key"], VersionId=v["VersionId"], LegalHold={"Status": "OFF"})
            except ClientError:
                pass  # a delete marker
            try:
                s3.delete_object(Bucket=name, Key=v["Key"], VersionId=v["VersionId"], BypassGovernanceRetention=True)
            except ClientError as e:
                # A COMPLIANCE retention holds until its date: wait it out (tests keep them short).
                assert e.response["Error"]["Code"] == "AccessDenied"
                until = s3.get_object_retention(Bucket=name, Key=v["Key"], VersionId=v["VersionId"])["Retention"]["RetainUntilDate"]
                import time
                time.sleep(max(0.0, (until - datetime.datetime.now(UTC)).total_seconds()) + 0.5)
                s3.delete_object(Bucket=name, Key=v["Key"], VersionId=v["VersionId"])
    s3.delete_bucket(Bucket=name)


def test_lock_enabled_bucket_is_versioned_and_configurable(s3, lbucket):
    assert s3.get_bucket_versioning(Bucket=lbucket)["Status"] == "Enabled"
    assert s3.get_object_lock_configuration(Bucket=lbucket)["ObjectLockConfiguration"] == {"ObjectLockEnabled": "Enabled"}
    conf = {"ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}}
    s3.put_object_lock_configuration(Bucket=lbucket, ObjectLockConfiguration=conf)
    assert s3.get_object_lock_configuration(Bucket=lbucket)["ObjectLockConfiguration"] == conf
    conf = {"ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "COMPLIANCE", "Years": 1}}}
    s3.put_object_lock_configuration(Bucket=lbucket, ObjectLockConfiguration=conf)
    assert s3.get_object_lock_configuration(Bucket=lbucket)["ObjectLockConfiguration"] == conf
    # Versioning cannot be suspended while object lock is on.
    with pytest.raises(ClientError) as e:
        s3.put_bucket_versioning(Bucket=lbucket, VersioningConfiguration={"Status": "Suspended"})
    assert err(e) == ("InvalidBucketState", 409)
    # Bad configurations, with S3's codes.
    for rule, code in [({"Mode": "GOVERNANCE", "Days": 1, "Years": 1}, ("MalformedXML", 400)),
                       ({"Mode": "GOVERNANCE", "Days": 0}, ("InvalidRetentionPeriod", 400)),
                       ({"Mode": "GOVERNANCE", "Years": -1}, ("InvalidRetentionPeriod", 400)),
                       ({"Mode": "abc", "Years": 1}, ("MalformedXML", 400)),
                       ({"Mode": "governance", "Years": 1}, ("MalformedXML", 400))]:
        with pytest.raises(ClientError) as e:
            s3.put_object_lock_configuration(Bucket=lbucket, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": rule}})
        assert err(e) == code, rule
    with pytest.raises(ClientError) as e:
        s3.put_object_lock_configuration(Bucket=lbucket, ObjectLockConfiguration={"ObjectLockEnabled": "Disabled", "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Years": 1}}})
    assert err(e) == ("MalformedXML", 400)


def test_lock_needs_a_versioned_bucket_and_is_refused_elsewhere(s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.get_object_lock_configuration(Bucket=bucket)
    assert err(e) == ("ObjectLockConfigurationNotFoundError", 404)
    conf = {"ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}}
    with pytest.raises(ClientError) as e:
        s3.put_object_lock_configuration(Bucket=bucket, ObjectLockConfiguration=conf)
    assert err(e) == ("InvalidBucketState", 409)
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    for call in (lambda: s3.put_object_retention(Bucket=bucket, Key="k", Retention={"Mode": "GOVERNANCE", "RetainUntilDate": FAR}),
                 lambda: s3.get_object_retention(Bucket=bucket, Key="k"),
                 lambda: s3.put_object_legal_hold(Bucket=bucket, Key="k", LegalHold={"Status": "ON"}),
                 lambda: s3.get_object_legal_hold(Bucket=bucket, Key="k"),
                 lambda: s3.put_object(Bucket=bucket, Key="k2", Body=b"x", ObjectLockLegalHoldStatus="ON")):
        with pytest.raises(ClientError) as e:
            call()
        assert err(e) == ("InvalidRequest", 400)
    # Enabling it on an existing bucket: once versioning is Enabled (S3 allows it since 2023).
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
    with pytest.raises(ClientError) as e:
        s3.put_object_lock_configuration(Bucket=bucket, ObjectLockConfiguration=conf)
    assert err(e) == ("InvalidBucketState", 409)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object_lock_configuration(Bucket=bucket, ObjectLockConfiguration=conf)
    v = s3.put_object(Bucket=bucket, Key="k3", Body=b"y")["VersionId"]
    assert s3.head_object(Bucket=bucket, Key="k3")["ObjectLockMode"] == "GOVERNANCE"
    s3.delete_object(Bucket=bucket, Key="k3", VersionId=v, BypassGovernanceRetention=True)
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for x in page.get("Versions", []) + page.get("DeleteMarkers", []):
            s3.delete_object(Bucket=bucket, Key=x["Key"], VersionId=x["VersionId"], BypassGovernanceRetention=True)


def test_retention_locks_a_version_until_bypassed(s3, lbucket):
    v = s3.put_object(Bucket=lbucket, Key="f", Body=b"abc")["VersionId"]
    with pytest.raises(ClientError) as e:
        s3.get_object_retention(Bucket=lbucket, Key="f")
    assert err(e) == ("NoSuchObjectLockConfiguration", 404)
    retention = {"Mode": "GOVERNANCE", "RetainUntilDate": FAR}
    s3.put_object_retention(Bucket=lbucket, Key="f", Retention=retention)
    assert s3.get_object_retention(Bucket=lbucket, Key="f")["Retention"] == retention
    assert s3.get_object_retention(Bucket=lbucket, Key="f", VersionId=v)["Retention"] == retention
    h = s3.head_object(Bucket=lbucket, Key="f")
    assert (h["ObjectLockMode"], h["ObjectLockRetainUntilDate"]) == ("GOVERNANCE", FAR)
    assert "x-amz-object-lock-retain-until-date" in h["ResponseMetadata"]["HTTPHeaders"]
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=lbucket, Key="f", VersionId=v)
    assert err(e) == ("AccessDenied", 403)
    # Nor does it leave its name by a rename.
    with pytest.raises(ClientError) as e:
        s3.rename_object(Bucket=lbucket, Key="g", RenameSource=f"{lbucket}/f")
    assert err(e) == ("AccessDenied", 403)
    assert s3.get_object(Bucket=lbucket, Key="f")["VersionId"] == v
    # A delete without a version id adds a marker (allowed); the version is still locked.
    m = s3.delete_object(Bucket=lbucket, Key="f")
    assert m["DeleteMarker"]
    s3.delete_object(Bucket=lbucket, Key="f", VersionId=m["VersionId"])
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=lbucket, Key="f", VersionId=v)
    assert err(e) == ("AccessDenied", 403)
    assert s3.get_object(Bucket=lbucket, Key="f", VersionId=v)["Body"].read() == b"abc"
    # Extending is allowed; shortening or weakening needs the bypass.
    later = {"Mode": "GOVERNANCE", "RetainUntilDate": FAR + datetime.timedelta(days=2)}
    s3.put_object_retention(Bucket=lbucket, Key="f", Retention=later)
    with pytest.raises(ClientError) as e:
        s3.put_object_retention(Bucket=lbucket, Key="f", Retention=retention)
    assert err(e) == ("AccessDenied", 403)
    s3.put_object_retention(Bucket=lbucket, Key="f", Retention=retention, BypassGovernanceRetention=True)
    assert s3.get_object_retention(Bucket=lbucket, Key="f")["Retention"] == retention
    for bad in ({"Mode": "governance", "RetainUntilDate": FAR}, {"Mode": "abc", "RetainUntilDate": FAR}):
        with pytest.raises(ClientError) as e:
            s3.put_object_retention(Bucket=lbucket, Key="f", Retention=bad)
        assert err(e) == ("MalformedXML", 400)
    d = s3.delete_object(Bucket=lbucket, Key="f", VersionId=v, BypassGovernanceRetention=True)
    assert d["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=lbucket, Key="f", VersionId=v)
    assert err(e)[1] == 404


def test_compliance_cannot_be_bypassed_or_weakened_and_ends_at_its_date(s3, lbucket):
    until = soon(4)
    v = s3.put_object(Bucket=lbucket, Key="c", Body=b"abc", ObjectLockMode="COMPLIANCE", ObjectLockRetainUntilDate=until)["VersionId"]
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=lbucket, Key="c", VersionId=v, BypassGovernanceRetention=True)
    assert err(e) == ("AccessDenied", 403)
    with pytest.raises(ClientError) as e:
        s3.put_object_retention(Bucket=lbucket, Key="c", Retention={"Mode": "GOVERNANCE", "RetainUntilDate": until}, BypassGovernanceRetention=True)
    assert err(e) == ("AccessDenied", 403)
    # GOVERNANCE to COMPLIANCE: with the bypass only.
    g = s3.put_object(Bucket=lbucket, Key="g", Body=b"x", ObjectLockMode="GOVERNANCE", ObjectLockRetainUntilDate=until)["VersionId"]
    with pytest.raises(ClientError) as e:
        s3.put_object_retention(Bucket=lbucket, Key="g", Retention={"Mode": "COMPLIANCE", "RetainUntilDate": until})
    assert err(e) == ("AccessDenied", 403)
    s3.put_object_retention(Bucket=lbucket, Key="g", Retention={"Mode": "COMPLIANCE", "RetainUntilDate": until}, BypassGovernanceRetention=True)
    # A date in the past is refused.
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=lbucket, Key="p", Body=b"x", ObjectLockMode="GOVERNANCE", ObjectLockRetainUntilDate=datetime.datetime(2000, 1, 1, tzinfo=UTC))
    assert err(e) == ("InvalidArgument", 400)
    # Once the date passed, the versions go without a bypass.
    import time
    while datetime.datetime.now(UTC) <= until + datetime.timedelta(seconds=1):
        time.sleep(0.25)
    s3.delete_object(Bucket=lbucket, Key="c", VersionId=v)
    s3.delete_object(Bucket=lbucket, Key="g", VersionId=g)


def test_default_retention_and_multipart_and_legal_hold(s3, lbucket):
    s3.put_object_lock_configuration(Bucket=lbucket, ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}})
    before = datetime.datetime.now(UTC)
    v = s3.put_object(Bucket=lbucket, Key="d", Body=b"x")["VersionId"]
    r = s3.get_object_retention(Bucket=lbucket, Key="d", VersionId=v)["Retention"]
    assert r["Mode"] == "GOVERNANCE"
    assert before + datetime.timedelta(days=1) - datetime.timedelta(seconds=5) <= r["RetainUntilDate"] <= datetime.datetime.now(UTC) + datetime.timedelta(days=1, seconds=5)
    # An explicit retention overrides the default.
    s3.put_object_retention(Bucket=lbucket, Key="d", Retention={"Mode": "GOVERNANCE", "RetainUntilDate": FAR})
    assert s3.get_object_retention(Bucket=lbucket, Key="d")["Retention"]["RetainUntilDate"] == FAR
    # Multipart: the lock asked at create is the object's.
    up = s3.create_multipart_upload(Bucket=lbucket, Key="mp", ObjectLockLegalHoldStatus="ON")["UploadId"]
    e1 = s3.upload_part(Bucket=lbucket, Key="mp", UploadId=up, PartNumber=1, Body=b"abc")["ETag"]
    done = s3.complete_multipart_upload(Bucket=lbucket, Key="mp", UploadId=up, MultipartUpload={"Parts": [{"ETag": e1, "PartNumber": 1}]})
    mv = done["VersionId"]
    assert s3.get_object_legal_hold(Bucket=lbucket, Key="mp")["LegalHold"] == {"Status": "ON"}
    g = s3.get_object(Bucket=lbucket, Key="mp")
    assert g["ObjectLockLegalHoldStatus"] == "ON" and g["Body"].read() == b"abc"
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=lbucket, Key="mp", VersionId=mv, BypassGovernanceRetention=True)
    assert err(e) == ("AccessDenied", 403)
    with pytest.raises(ClientError) as e:
        s3.put_object_legal_hold(Bucket=lbucket, Key="mp", LegalHold={"Status": "abc"})
    assert err(e) == ("MalformedXML", 400)
    s3.put_object_legal_hold(Bucket=lbucket, Key="mp", VersionId=mv, LegalHold={"Status": "OFF"})
    assert s3.get_object_legal_hold(Bucket=lbucket, Key="mp", VersionId=mv)["LegalHold"] == {"Status": "OFF"}
    # The default retention still holds it (GOVERNANCE): bypass.
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=lbucket, Key="mp", VersionId=mv)
    assert err(e) == ("AccessDenied", 403)
    s3.delete_object(Bucket=lbucket, Key="mp", VersionId=mv, BypassGovernanceRetention=True)
    # A new version does not inherit the old one's lock; a copy neither.
    s3.put_object_lock_configuration(Bucket=lbucket, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"})
    h1 = s3.put_object(Bucket=lbucket, Key="h", Body=b"1", ObjectLockLegalHoldStatus="ON")["VersionId"]
    h2 = s3.put_object(Bucket=lbucket, Key="h", Body=b"2")["VersionId"]
    assert s3.get_object_legal_hold(Bucket=lbucket, Key="h", VersionId=h2)["LegalHold"] == {"Status": "OFF"}
    cp = s3.copy_object(Bucket=lbucket, Key="h-copy", CopySource={"Bucket": lbucket, "Key": "h", "VersionId": h1})
    with pytest.raises(ClientError) as e:
        s3.get_object_retention(Bucket=lbucket, Key="h-copy")
    assert err(e) == ("NoSuchObjectLockConfiguration", 404)
    assert s3.get_object_legal_hold(Bucket=lbucket, Key="h-copy", VersionId=cp["VersionId"])["LegalHold"] == {"Status": "OFF"}
    # Tags may change on a locked version.
    s3.put_object_tagging(Bucket=lbucket, Key="h", VersionId=h1, Tagging={"TagSet": [{"Key": "a", "Value": "1"}]})


def test_delete_objects_reports_locked_versions_per_key(s3, lbucket):
    v1 = s3.put_object(Bucket=lbucket, Key="file1", Body=b"abc")["VersionId"]
    v2 = s3.put_object(Bucket=lbucket, Key="file2", Body=b"abc")["VersionId"]
    s3.put_object_retention(Bucket=lbucket, Key="file1", Retention={"Mode": "GOVERNANCE", "RetainUntilDate": FAR})
    r = s3.delete_objects(Bucket=lbucket, Delete={"Objects": [{"Key": "file1", "VersionId": v1}, {"Key": "file2", "VersionId": v2}]})
    assert [(d["Key"], d["VersionId"]) for d in r["Deleted"]] == [("file2", v2)]
    assert [(x["Key"], x["VersionId"], x["Code"]) for x in r["Errors"]] == [("file1", v1, "AccessDenied")]
    r = s3.delete_objects(Bucket=lbucket, Delete={"Objects": [{"Key": "file1", "VersionId": v1}]}, BypassGovernanceRetention=True)
    assert not r.get("Errors") and [(d["Key"], d["VersionId"]) for d in r["Deleted"]] == [("file1", v1)]


def test_copy_takes_its_own_lock_headers(s3, lbucket, bucket):
    """A copy is a new version: the source's lock stays behind, the copy's own headers apply;
    asked of a bucket without object lock they are InvalidRequest."""
    s3.put_object(Bucket=lbucket, Key="src", Body=b"x", ObjectLockLegalHoldStatus="ON")
    c = s3.copy_object(Bucket=lbucket, Key="dst", CopySource={"Bucket": lbucket, "Key": "src"},
                       ObjectLockMode="GOVERNANCE", ObjectLockRetainUntilDate=FAR)
    assert s3.get_object_retention(Bucket=lbucket, Key="dst", VersionId=c["VersionId"])["Retention"] == \
        {"Mode": "GOVERNANCE", "RetainUntilDate": FAR}
    assert s3.get_object_legal_hold(Bucket=lbucket, Key="dst")["LegalHold"] == {"Status": "OFF"}
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="x", CopySource={"Bucket": lbucket, "Key": "src"}, ObjectLockLegalHoldStatus="ON")
    assert err(e) == ("InvalidRequest", 400)
    s3.copy_object(Bucket=bucket, Key="x", CopySource={"Bucket": lbucket, "Key": "src"})
    assert s3.get_object(Bucket=bucket, Key="x")["Body"].read() == b"x"
