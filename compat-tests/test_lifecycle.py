"""Bucket lifecycle with boto3: Put/Get/DeleteBucketLifecycleConfiguration (every filter form,
S3's checks and their errors) and the worker applying the rules: objects expired by age and by
date, filtered by prefix, tags and size; incomplete multipart uploads aborted. The servers run
with lifecycle "days" of 2 s, judged every second (conftest.LIFECYCLE_TOML)."""

import base64
import datetime
import re
import time

import pytest
import requests
from botocore.exceptions import ClientError



def err(e):
    r = e.value.response
    return r["Error"]["Code"], r["ResponseMetadata"]["HTTPStatusCode"]


def put(s3, bucket, *rules):
    return s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": list(rules)})


def get_rules(s3, bucket):
    return s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]


def keys(s3, bucket):
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))


def wait_for(what, fn, timeout=40):
    """Polls `fn` until it is true; fails with `what` after `timeout` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if fn():
            return
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout} s: {what}")


def metric(servers, name):
    total = 0.0
    for srv in servers:
        m = re.search(rf"^{name} (\S+)$", requests.get(srv.admin + "/metrics").text, re.M)
        total += float(m.group(1)) if m else 0.0
    return total


def test_configuration_round_trip_every_filter_form(s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.get_bucket_lifecycle_configuration(Bucket=bucket)
    assert err(e) == ("NoSuchLifecycleConfiguration", 404)
    rules = [
        {"ID": "prefix", "Status": "Enabled", "Filter": {"Prefix": "logs/"}, "Expiration": {"Days": 30}},
        {"ID": "tag", "Status": "Disabled", "Filter": {"Tag": {"Key": "tmp", "Value": "1"}},
         "Expiration": {"Date": datetime.datetime(2031, 1, 1, tzinfo=datetime.timezone.utc)}},
        {"ID": "and", "Status": "Enabled",
         "Filter": {"And": {"Prefix": "data/", "Tags": [{"Key": "a", "Value": "b"}, {"Key": "c", "Value": ""}],
                            "ObjectSizeGreaterThan": 10, "ObjectSizeLessThan": 1000}},
         "Expiration": {"Days": 7}, "NoncurrentVersionExpiration": {"NoncurrentDays": 3, "NewerNoncurrentVersions": 2}},
        {"ID": "small", "Status": "Enabled", "Filter": {"ObjectSizeLessThan": 5}, "Expiration": {"Days": 1}},
        {"ID": "mpu", "Status": "Enabled", "Filter": {}, "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 2}},
        {"Status": "Enabled", "Filter": {"Prefix": ""}, "Expiration": {"ExpiredObjectDeleteMarker": True}},
    ]
    r = put(s3, bucket, *rules)
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 200
    got = get_rules(s3, bucket)
    assert len(got) == len(rules)
    for want, have in zip(rules[:5], got[:5]):
        assert have == want, have
    # A rule sent without an ID gets one as S3 makes them: base64 of a v4 UUID.
    made = got[5]["ID"]
    assert len(made) == 48 and re.fullmatch(r"[0-9a-f-]{36}", base64.b64decode(made).decode())
    assert got[5]["Expiration"] == {"ExpiredObjectDeleteMarker": True}
    # Replaced whole by the next PUT, and the rule-level Prefix form answered back as sent.
    put(s3, bucket, {"ID": "old-style", "Status": "Enabled", "Prefix": "x/", "Expiration": {"Days": 2}})
    assert get_rules(s3, bucket) == [{"ID": "old-style", "Status": "Enabled", "Prefix": "x/", "Expiration": {"Days": 2}}]
    d = s3.delete_bucket_lifecycle(Bucket=bucket)
    assert d["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as e:
        s3.get_bucket_lifecycle_configuration(Bucket=bucket)
    assert err(e) == ("NoSuchLifecycleConfiguration", 404)
    s3.delete_bucket_lifecycle(Bucket=bucket)  # again: 204
    with pytest.raises(ClientError) as e:
        put(s3, bucket + "-none", rules[0])
    assert err(e) == ("NoSuchBucket", 404)


E = {"Days": 1}
BAD = [
    ({"ID": "x", "Status": "enabled", "Filter": {}, "Expiration": E}, ("MalformedXML", 400)),
    ({"ID": "x", "Status": "Enabled", "Expiration": E}, ("MalformedXML", 400)),
    ({"ID": "x", "Status": "Enabled", "Filter": {"Prefix": "a", "ObjectSizeGreaterThan": 1}, "Expiration": E},
     ("MalformedXML", 400)),
    ({"ID": "x", "Status": "Enabled", "Filter": {"And": {"Prefix": "a"}}, "Expiration": E}, ("MalformedXML", 400)),
    ({"ID": "x", "Status": "Enabled", "Filter": {}, "Expiration": {"Days": 0}}, ("InvalidArgument", 400)),
    ({"ID": "x", "Status": "Enabled", "Filter": {},
      "Expiration": {"Date": datetime.datetime(2031, 1, 1, 10, tzinfo=datetime.timezone.utc)}}, ("InvalidArgument", 400)),
    ({"ID": "x", "Status": "Enabled", "Filter": {}, "Expiration": {"Days": 1, "ExpiredObjectDeleteMarker": True}},
     ("MalformedXML", 400)),
    ({"ID": "x", "Status": "Enabled", "Filter": {}, "Expiration": {}}, ("MalformedXML", 400)),
    ({"ID": "x" * 256, "Status": "Enabled", "Filter": {}, "Expiration": E}, ("InvalidArgument", 400)),
    ({"ID": "x", "Status": "Enabled", "Filter": {}}, ("InvalidRequest", 400)),
    ({"ID": "x", "Status": "Enabled", "Filter": {"Tag": {"Key": "k", "Value": "v"}},
      "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}, ("InvalidRequest", 400)),
    ({"ID": "x", "Status": "Enabled", "Filter": {"ObjectSizeGreaterThan": 5},
      "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}, ("InvalidRequest", 400)),
    ({"ID": "x", "Status": "Enabled", "Filter": {}, "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 0}},
     ("InvalidArgument", 400)),
    ({"ID": "x", "Status": "Enabled", "Filter": {"And": {"ObjectSizeGreaterThan": 10, "ObjectSizeLessThan": 10}},
      "Expiration": E}, ("InvalidRequest", 400)),
    ({"ID": "x", "Status": "Enabled", "Filter": {"ObjectSizeLessThan": 0}, "Expiration": E}, ("InvalidRequest", 400)),
    ({"ID": "x", "Status": "Enabled",
      "Filter": {"And": {"Tags": [{"Key": "k", "Value": "1"}, {"Key": "k", "Value": "2"}]}}, "Expiration": E},
     ("InvalidRequest", 400)),
    ({"ID": "x", "Status": "Enabled", "Filter": {}, "NoncurrentVersionExpiration": {"NoncurrentDays": 0}},
     ("InvalidArgument", 400)),
    ({"ID": "x", "Status": "Enabled", "Filter": {"ObjectSizeGreaterThan": 1},
      "Expiration": {"ExpiredObjectDeleteMarker": True}}, ("InvalidRequest", 400)),
    ({"ID": "x", "Status": "Enabled", "Filter": {}, "Transitions": [{"Days": 30, "StorageClass": "GLACIER"}]},
     ("NotImplemented", 501)),
]


@pytest.mark.parametrize("rule,want", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_rules_are_refused_and_change_nothing(s3, bucket, rule, want):
    keep = {"ID": "keep", "Status": "Enabled", "Filter": {"Prefix": "k/"}, "Expiration": {"Days": 9}}
    put(s3, bucket, keep)
    with pytest.raises(ClientError) as e:
        put(s3, bucket, rule)
    assert err(e) == want
    assert get_rules(s3, bucket) == [keep]


def test_bad_configurations_as_a_whole(s3, bucket):
    r = {"Status": "Enabled", "Filter": {}, "Expiration": E}
    with pytest.raises(ClientError) as e:
        put(s3, bucket, {**r, "ID": "same"}, {**r, "ID": "same"})
    assert err(e) == ("InvalidArgument", 400)
    with pytest.raises(ClientError) as e:
        put(s3, bucket, {**r, "ID": "v2"}, {"ID": "v1", "Status": "Enabled", "Prefix": "p", "Expiration": E})
    assert err(e) == ("InvalidRequest", 400)
    with pytest.raises(ClientError) as e:
        put(s3, bucket, *[{**r, "ID": f"r{i}"} for i in range(1001)])
    assert err(e) == ("InvalidRequest", 400)
    put(s3, bucket, *[{**r, "ID": f"r{i}", "Filter": {"Prefix": f"p{i}/"}} for i in range(1000)])
    assert len(get_rules(s3, bucket)) == 1000


def test_expiry_by_age_date_prefix_tags_and_size(s3, bucket, lode_servers):
    before = metric(lode_servers, "lode_lifecycle_expired_objects_total")
    for k in ["old/a", "old/b", "keep/c", "tmp/untagged"]:
        s3.put_object(Bucket=bucket, Key=k, Body=b"x" * 100)
    s3.put_object(Bucket=bucket, Key="tmp/tagged", Body=b"x" * 100, Tagging="t=1&other=2")
    s3.put_object(Bucket=bucket, Key="tmp/wrong-value", Body=b"x" * 100, Tagging="t=2")
    s3.put_object(Bucket=bucket, Key="tiny/small", Body=b"xy")
    s3.put_object(Bucket=bucket, Key="tiny/big", Body=b"x" * 100)
    s3.put_object(Bucket=bucket, Key="off/x", Body=b"x")
    put(s3, bucket,
        {"ID": "age", "Status": "Enabled", "Filter": {"Prefix": "old/"}, "Expiration": {"Days": 1}},
        {"ID": "tags", "Status": "Enabled",
         "Filter": {"And": {"Prefix": "tmp/", "Tags": [{"Key": "t", "Value": "1"}]}}, "Expiration": {"Days": 1}},
        {"ID": "date", "Status": "Enabled", "Filter": {"And": {"Prefix": "tiny/", "ObjectSizeLessThan": 10}},
         "Expiration": {"Date": datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)}},
        {"ID": "off", "Status": "Disabled", "Filter": {"Prefix": "off/"}, "Expiration": {"Days": 1}})
    want = ["keep/c", "off/x", "tiny/big", "tmp/untagged", "tmp/wrong-value"]
    wait_for("expired objects removed", lambda: keys(s3, bucket) == want)
    assert metric(lode_servers, "lode_lifecycle_expired_objects_total") - before >= 4
    # A new object under an expiring prefix is judged by its own age: still there right after
    # the PUT, gone once a "day" (2 s, rounded up) has passed.
    s3.put_object(Bucket=bucket, Key="old/new", Body=b"fresh")
    assert s3.get_object(Bucket=bucket, Key="old/new")["Body"].read() == b"fresh"
    wait_for("old/new expired", lambda: "old/new" not in keys(s3, bucket))
    assert keys(s3, bucket) == want
    # With the rules removed nothing more goes.
    s3.delete_bucket_lifecycle(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="old/kept", Body=b"k")
    passes = metric(lode_servers, "lode_lifecycle_passes_total")
    wait_for("five more passes", lambda: metric(lode_servers, "lode_lifecycle_passes_total") >= passes + 5)
    assert "old/kept" in keys(s3, bucket), "a pass after the rules went removed an object"


def test_incomplete_uploads_are_aborted_by_prefix(s3, bucket, lode_servers):
    before = metric(lode_servers, "lode_lifecycle_aborted_uploads_total")
    a = s3.create_multipart_upload(Bucket=bucket, Key="up/a")["UploadId"]
    s3.upload_part(Bucket=bucket, Key="up/a", UploadId=a, PartNumber=1, Body=b"p" * 1000)
    s3.create_multipart_upload(Bucket=bucket, Key="other/b")
    put(s3, bucket, {"ID": "mpu", "Status": "Enabled", "Filter": {"Prefix": "up/"},
                     "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}})
    uploads = lambda: sorted(u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []))
    wait_for("up/a aborted", lambda: uploads() == ["other/b"])
    with pytest.raises(ClientError) as e:
        s3.list_parts(Bucket=bucket, Key="up/a", UploadId=a)
    assert err(e) == ("NoSuchUpload", 404)
    assert metric(lode_servers, "lode_lifecycle_aborted_uploads_total") - before >= 1


def test_noncurrent_versions_and_lone_delete_markers(s3, bucket, lode_servers):
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    ids = [s3.put_object(Bucket=bucket, Key="nc/k", Body=f"v{i}".encode())["VersionId"] for i in range(4)]
    s3.put_object(Bucket=bucket, Key="dm/k", Body=b"x")
    s3.delete_object(Bucket=bucket, Key="dm/k")
    s3.put_object(Bucket=bucket, Key="dm/kept", Body=b"y")
    s3.delete_object(Bucket=bucket, Key="dm/kept")
    only = s3.list_object_versions(Bucket=bucket, Prefix="dm/k")["Versions"]
    s3.delete_object(Bucket=bucket, Key="dm/k", VersionId=[v for v in only if v["Key"] == "dm/k"][0]["VersionId"])
    put(s3, bucket,
        {"ID": "nc", "Status": "Enabled", "Filter": {"Prefix": "nc/"},
         "NoncurrentVersionExpiration": {"NoncurrentDays": 1, "NewerNoncurrentVersions": 1}},
        {"ID": "dm", "Status": "Enabled", "Filter": {"Prefix": "dm/"}, "Expiration": {"ExpiredObjectDeleteMarker": True}})

    def nc_left():
        return [v["VersionId"] for v in s3.list_object_versions(Bucket=bucket, Prefix="nc/").get("Versions", [])]

    # The current version and the newest noncurrent one stay; the older two go.
    wait_for("old noncurrent versions removed", lambda: nc_left() == [ids[3], ids[2]])
    # dm/k's marker was its only version left: removed; dm/kept's marker guards a version.
    def dm():
        r = s3.list_object_versions(Bucket=bucket, Prefix="dm/")
        return sorted((x["Key"], "DM") for x in r.get("DeleteMarkers", [])) + \
            sorted((x["Key"], "V") for x in r.get("Versions", []))
    wait_for("lone marker removed", lambda: dm() == [("dm/kept", "DM"), ("dm/kept", "V")])
    assert s3.get_object(Bucket=bucket, Key="nc/k")["Body"].read() == b"v3"
    assert metric(lode_servers, "lode_lifecycle_noncurrent_versions_expired_total") >= 2
    assert metric(lode_servers, "lode_lifecycle_delete_markers_removed_total") >= 1
    s3.delete_bucket_lifecycle(Bucket=bucket)
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for v in page.get("Versions", []) + page.get("DeleteMarkers", []):
            s3.delete_object(Bucket=bucket, Key=v["Key"], VersionId=v["VersionId"])


def test_lifecycle_never_removes_a_locked_version(s3, lode_servers):
    """Object lock holds against lifecycle: a noncurrent version under retention stays (counted
    in lode_lifecycle_locked_versions_kept_total) while an unlocked one beside it goes."""
    import uuid

    b = "lk-" + uuid.uuid4().hex[:10]
    s3.create_bucket(Bucket=b, ObjectLockEnabledForBucket=True)
    far = datetime.datetime(2140, 1, 1, tzinfo=datetime.timezone.utc)
    try:
        locked = s3.put_object(Bucket=b, Key="k", Body=b"0", ObjectLockMode="GOVERNANCE", ObjectLockRetainUntilDate=far)["VersionId"]
        free = s3.put_object(Bucket=b, Key="k", Body=b"1")["VersionId"]
        cur = s3.put_object(Bucket=b, Key="k", Body=b"2")["VersionId"]
        kept_before = metric(lode_servers, "lode_lifecycle_locked_versions_kept_total")
        put(s3, b, {"ID": "nc", "Status": "Enabled", "Filter": {}, "NoncurrentVersionExpiration": {"NoncurrentDays": 1}})

        def left():
            return sorted(v["VersionId"] for v in s3.list_object_versions(Bucket=b).get("Versions", []))
        wait_for("the unlocked noncurrent version removed", lambda: left() == sorted([locked, cur]))
        wait_for("a refused removal counted",
                 lambda: metric(lode_servers, "lode_lifecycle_locked_versions_kept_total") > kept_before)
        assert left() == sorted([locked, cur]), free
        assert s3.get_object(Bucket=b, Key="k", VersionId=locked)["Body"].read() == b"0"
    finally:
        s3.delete_bucket_lifecycle(Bucket=b)
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=b):
            for v in page.get("Versions", []) + page.get("DeleteMarkers", []):
                s3.delete_object(Bucket=b, Key=v["Key"], VersionId=v["VersionId"], BypassGovernanceRetention=True)
        s3.delete_bucket(Bucket=b)


def test_expiration_and_abort_date_headers(s3, bucket):
    """x-amz-expiration on PUT, GET, HEAD, CopyObject and CompleteMultipartUpload of an object a
    rule expires (the earliest rule's date and id, as S3 sends them), none for others;
    x-amz-abort-date and x-amz-abort-rule-id on CreateMultipartUpload and ListParts."""
    put(s3, bucket,
        {"ID": "by-date", "Status": "Enabled", "Filter": {"Prefix": "d/"},
         "Expiration": {"Date": datetime.datetime(2031, 1, 1, tzinfo=datetime.timezone.utc)}},
        {"ID": "by-days", "Status": "Enabled", "Filter": {"Prefix": "n/"}, "Expiration": {"Days": 1000}},
        {"ID": "abort", "Status": "Enabled", "Filter": {"Prefix": "d/"},
         "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 500}})
    want = 'expiry-date="Wed, 01 Jan 2031 00:00:00 GMT", rule-id="by-date"'
    assert s3.put_object(Bucket=bucket, Key="d/a", Body=b"x")["Expiration"] == want
    assert s3.head_object(Bucket=bucket, Key="d/a")["Expiration"] == want
    assert s3.get_object(Bucket=bucket, Key="d/a")["Expiration"] == want
    assert s3.copy_object(Bucket=bucket, Key="d/b", CopySource={"Bucket": bucket, "Key": "d/a"})["Expiration"] == want
    assert "Expiration" not in s3.put_object(Bucket=bucket, Key="other", Body=b"x")
    assert "Expiration" not in s3.head_object(Bucket=bucket, Key="other")
    # By days: last-modified + 1000 "days" (2 s each here), rounded up to a "midnight".
    r = s3.put_object(Bucket=bucket, Key="n/a", Body=b"x")
    m = re.fullmatch(r'expiry-date="([^"]+)", rule-id="by-days"', r["Expiration"])
    assert m, r["Expiration"]
    due = datetime.datetime.strptime(m.group(1), "%a, %d %b %Y %H:%M:%S GMT").replace(tzinfo=datetime.timezone.utc)
    lm = s3.head_object(Bucket=bucket, Key="n/a")["LastModified"]
    assert datetime.timedelta(seconds=2000) <= due - lm <= datetime.timedelta(seconds=2003)
    up = s3.create_multipart_upload(Bucket=bucket, Key="d/up")
    assert up["AbortRuleId"] == "abort" and up["AbortDate"] > datetime.datetime.now(datetime.timezone.utc)
    e1 = s3.upload_part(Bucket=bucket, Key="d/up", UploadId=up["UploadId"], PartNumber=1, Body=b"p")["ETag"]
    lp = s3.list_parts(Bucket=bucket, Key="d/up", UploadId=up["UploadId"])
    assert (lp["AbortRuleId"], lp["AbortDate"]) == ("abort", up["AbortDate"])
    done = s3.complete_multipart_upload(Bucket=bucket, Key="d/up", UploadId=up["UploadId"],
                                        MultipartUpload={"Parts": [{"ETag": e1, "PartNumber": 1}]})
    assert done["Expiration"] == want
    other = s3.create_multipart_upload(Bucket=bucket, Key="x/up")
    assert "AbortRuleId" not in other and "AbortDate" not in other
    s3.abort_multipart_upload(Bucket=bucket, Key="x/up", UploadId=other["UploadId"])
    s3.delete_bucket_lifecycle(Bucket=bucket)
