"""Bucket policies (issue 32, part 1): Put/Get/DeleteBucketPolicy and GetBucketPolicyStatus with
AWS's grammar and checks, evaluated on every request with AWS's logic (an explicit Deny wins, then
an Allow from the policy or the caller's own rights, else 403), anonymous callers served only
where a policy allows it. A matrix of anonymous, another user and the owner; Allow and Deny; each
condition family. Runs against the session's server(s): in cluster mode the clients spread
their requests over both gateways, so every change made through one is enforced by the other
on the next request."""

import json
import os
import subprocess
import uuid

import boto3
import pytest
import requests
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

from conftest import CLUSTER_MODE, REGION, make_client, spread
from test_users import admin

ARN = "arn:aws:iam::000000000000:user/"


def status_code(e):
    r = e.value.response
    return r["ResponseMetadata"]["HTTPStatusCode"], r["Error"]["Code"]


def refused(fn, *args, **kw):
    with pytest.raises(ClientError) as e:
        fn(*args, **kw)
    assert status_code(e) in ((403, "AccessDenied"), (403, "403")), e.value.response


@pytest.fixture(scope="module")
def people(lode_servers):
    """alice and bob, users of the session's server(s), each with a client (spread over the
    gateways in cluster mode), and an unsigned client."""
    srv = lode_servers[0]
    tag = uuid.uuid4().hex[:6]
    out = {}
    for name in ("alice", "bob"):
        user = f"{name}-{tag}"
        creds = json.loads(admin(srv, "user", "add", user).stdout)
        c = boto3.client("s3", endpoint_url=srv.endpoint, aws_access_key_id=creds["access_key"],
                         aws_secret_access_key=creds["secret_key"], region_name=REGION,
                         config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
        if len(lode_servers) > 1:
            spread(c, [g.endpoint for g in lode_servers])
        out[name] = (user, c)
        out[name + "_creds"] = creds
    anon = make_client(srv.endpoint, signature_version=UNSIGNED)
    if len(lode_servers) > 1:
        spread(anon, [g.endpoint for g in lode_servers])
    out["anon"] = anon
    yield out
    for name in ("alice", "bob"):
        admin(srv, "user", "remove", out[name][0], check=False)


@pytest.fixture
def owned(people):
    """A bucket alice owns, emptied and removed after the test (by alice, policy removed
    first)."""
    _, alice = people["alice"]
    name = "pol-" + uuid.uuid4().hex[:12]
    alice.create_bucket(Bucket=name)
    yield name
    alice.delete_bucket_policy(Bucket=name)
    for page in alice.get_paginator("list_objects_v2").paginate(Bucket=name):
        for o in page.get("Contents", []):
            alice.delete_object(Bucket=name, Key=o["Key"])
    alice.delete_bucket(Bucket=name)


def policy(bucket, *statements, version="2012-10-17"):
    return json.dumps({"Version": version, "Statement": list(statements)})


def allow(principal, action, resource, **extra):
    return {"Effect": "Allow", "Principal": principal, "Action": action, "Resource": resource, **extra}


def deny(principal, action, resource, **extra):
    return {"Effect": "Deny", "Principal": principal, "Action": action, "Resource": resource, **extra}


def test_policy_calls_store_return_and_remove_a_policy(people, owned):
    _, alice = people["alice"]
    b = owned
    with pytest.raises(ClientError) as e:
        alice.get_bucket_policy(Bucket=b)
    assert status_code(e) == (404, "NoSuchBucketPolicy")
    text = policy(b, allow("*", "s3:GetObject", f"arn:aws:s3:::{b}/*"))
    alice.put_bucket_policy(Bucket=b, Policy=text)
    assert alice.get_bucket_policy(Bucket=b)["Policy"] == text
    assert alice.get_bucket_policy_status(Bucket=b)["PolicyStatus"]["IsPublic"] is True
    # Pinned to an address: not public.
    private = policy(b, allow("*", "s3:GetObject", f"arn:aws:s3:::{b}/*",
                              Condition={"IpAddress": {"aws:SourceIp": "10.9.8.0/24"}}))
    alice.put_bucket_policy(Bucket=b, Policy=private)
    assert alice.get_bucket_policy_status(Bucket=b)["PolicyStatus"]["IsPublic"] is False
    alice.delete_bucket_policy(Bucket=b)
    with pytest.raises(ClientError) as e:
        alice.get_bucket_policy(Bucket=b)
    assert status_code(e) == (404, "NoSuchBucketPolicy")
    with pytest.raises(ClientError) as e:
        alice.get_bucket_policy_status(Bucket=b)
    assert status_code(e) == (404, "NoSuchBucketPolicy")
    # A policy on a bucket that does not exist.
    with pytest.raises(ClientError) as e:
        alice.put_bucket_policy(Bucket=b + "-none", Policy=text)
    assert status_code(e) == (404, "NoSuchBucket")


def test_malformed_policies_are_400_naming_the_problem_and_store_nothing(people, owned):
    _, alice = people["alice"]
    b = owned
    kept = policy(b, allow("*", "s3:GetObject", f"arn:aws:s3:::{b}/*"))
    alice.put_bucket_policy(Bucket=b, Policy=kept)
    res = f"arn:aws:s3:::{b}/*"
    cases = [
        ("{not json", "invalid Json"),
        (policy(b, allow("*", "s3:GetObjekt", res)), "invalid action"),
        (policy(b, allow("*", "s3:GetObject", "arn:aws:s3:::some-other-bucket/*")), "invalid resource"),
        (policy(b, {"Effect": "Allow", "Action": "s3:GetObject", "Resource": res}), "Principal"),
        (policy(b, allow("*", "s3:GetObject", res, Condition={"StringRoughly": {"s3:prefix": "a"}})), "Invalid Condition type"),
        (policy(b, allow("*", "s3:GetObject", res, Condition={"StringEquals": {"s3:colour": "a"}})), "invalid condition key"),
        (policy(b, allow({"AWS": "arn:aws:iam::123456789012:user/x"}, "s3:GetObject", res)), "Invalid principal"),
        (policy(b, {"Sid": "x" * 21000, **allow("*", "s3:GetObject", res)}), "too large"),
    ]
    for text, why in cases:
        with pytest.raises(ClientError) as e:
            alice.put_bucket_policy(Bucket=b, Policy=text)
        assert status_code(e) == (400, "MalformedPolicy"), text[:80]
        assert why in e.value.response["Error"]["Message"], (why, e.value.response["Error"]["Message"])
        assert alice.get_bucket_policy(Bucket=b)["Policy"] == kept


def test_anonymous_callers_get_only_what_a_policy_allows(lode_server, people, owned):
    _, alice = people["alice"]
    anon = people["anon"]
    b = owned
    alice.put_object(Bucket=b, Key="pub/cat.jpg", Body=b"meow")
    alice.put_object(Bucket=b, Key="priv/key.txt", Body=b"secret")
    # No policy: every anonymous call is 403.
    refused(anon.get_object, Bucket=b, Key="pub/cat.jpg")
    refused(anon.list_objects_v2, Bucket=b)
    # A public dataset: GET of pub/* for anyone, plain HTTP (a browser, curl) included.
    alice.put_bucket_policy(Bucket=b, Policy=policy(b, allow("*", "s3:GetObject", f"arn:aws:s3:::{b}/pub/*")))
    assert anon.get_object(Bucket=b, Key="pub/cat.jpg")["Body"].read() == b"meow"
    r = requests.get(f"{lode_server.endpoint}/{b}/pub/cat.jpg")
    assert r.status_code == 200 and r.content == b"meow"
    assert anon.head_object(Bucket=b, Key="pub/cat.jpg")["ContentLength"] == 4
    refused(anon.get_object, Bucket=b, Key="priv/key.txt")
    refused(anon.list_objects_v2, Bucket=b)
    refused(anon.put_object, Bucket=b, Key="pub/new", Body=b"x")
    refused(anon.delete_object, Bucket=b, Key="pub/cat.jpg")
    # Anonymous callers never reach bucket configuration, whatever the policy says.
    alice.put_bucket_policy(Bucket=b, Policy=policy(
        b, allow("*", "s3:*", [f"arn:aws:s3:::{b}", f"arn:aws:s3:::{b}/*"])))
    refused(anon.get_bucket_policy, Bucket=b)
    refused(anon.put_bucket_policy, Bucket=b, Policy=policy(b, allow("*", "s3:*", f"arn:aws:s3:::{b}/*")))
    refused(anon.delete_bucket, Bucket=b)
    refused(anon.list_buckets)
    assert [o["Key"] for o in anon.list_objects_v2(Bucket=b)["Contents"]] == ["priv/key.txt", "pub/cat.jpg"]
    # A bad signature stays a bad signature.
    bad = boto3.client("s3", endpoint_url=lode_server.endpoint, aws_access_key_id=people["alice"][0].upper()[:20].ljust(20, "X"),
                       aws_secret_access_key="wrong", region_name=REGION, config=Config(retries={"max_attempts": 1}))
    with pytest.raises(ClientError) as e:
        bad.get_object(Bucket=b, Key="pub/cat.jpg")
    assert status_code(e)[0] == 403 and status_code(e)[1] in ("InvalidAccessKeyId", "SignatureDoesNotMatch")


def test_a_public_upload_drop(people, owned):
    _, alice = people["alice"]
    anon = people["anon"]
    b = owned
    alice.put_bucket_policy(Bucket=b, Policy=policy(b, allow("*", "s3:PutObject", f"arn:aws:s3:::{b}/drop/*")))
    anon.put_object(Bucket=b, Key="drop/report.csv", Body=b"1,2,3")
    assert alice.get_object(Bucket=b, Key="drop/report.csv")["Body"].read() == b"1,2,3"
    refused(anon.put_object, Bucket=b, Key="elsewhere.csv", Body=b"x")
    refused(anon.get_object, Bucket=b, Key="drop/report.csv")


def test_users_allow_and_deny_with_owner_and_grants(lode_server, people, owned):
    alice_name, alice = people["alice"]
    bob_name, bob = people["bob"]
    b = owned
    alice.put_object(Bucket=b, Key="shared/a", Body=b"a")
    alice.put_object(Bucket=b, Key="keep/k", Body=b"k")
    # bob has no grant: 403 everywhere.
    refused(bob.get_object, Bucket=b, Key="shared/a")
    # An Allow for bob by ARN: his reads of shared/* work, nothing else.
    alice.put_bucket_policy(Bucket=b, Policy=policy(
        b, allow({"AWS": ARN + bob_name}, ["s3:GetObject"], f"arn:aws:s3:::{b}/shared/*")))
    assert bob.get_object(Bucket=b, Key="shared/a")["Body"].read() == b"a"
    refused(bob.get_object, Bucket=b, Key="keep/k")
    refused(bob.put_object, Bucket=b, Key="shared/b", Body=b"b")
    # A grant gives bob write; a Deny in the policy still wins over it, and over the owner.
    admin(lode_server, "grant", b, bob_name, "write")
    try:
        alice.put_bucket_policy(Bucket=b, Policy=policy(
            b, deny("*", ["s3:PutObject", "s3:DeleteObject"], f"arn:aws:s3:::{b}/keep/*")))
        bob.put_object(Bucket=b, Key="shared/b", Body=b"b")
        refused(bob.put_object, Bucket=b, Key="keep/k", Body=b"overwrite")
        refused(alice.delete_object, Bucket=b, Key="keep/k")
        # DeleteObjects judges each key: keep/k is refused, shared/b goes.
        r = bob.delete_objects(Bucket=b, Delete={"Objects": [{"Key": "keep/k"}, {"Key": "shared/b"}]})
        assert [d["Key"] for d in r["Deleted"]] == ["shared/b"]
        assert [(e["Key"], e["Code"]) for e in r["Errors"]] == [("keep/k", "AccessDenied")]
        assert alice.get_object(Bucket=b, Key="keep/k")["Body"].read() == b"k"
    finally:
        admin(lode_server, "revoke", b, bob_name)
    # A policy that denies everything to everyone: the owner can still read, change and
    # remove it (as on AWS); root is not bound by it.
    alice.put_bucket_policy(Bucket=b, Policy=policy(b, deny("*", "s3:*", [f"arn:aws:s3:::{b}", f"arn:aws:s3:::{b}/*"])))
    refused(alice.get_object, Bucket=b, Key="keep/k")
    refused(alice.list_objects_v2, Bucket=b)
    assert "Deny" in alice.get_bucket_policy(Bucket=b)["Policy"]
    root = make_client(lode_server.endpoint)
    assert root.get_object(Bucket=b, Key="keep/k")["Body"].read() == b"k"
    alice.delete_bucket_policy(Bucket=b)
    assert alice.get_object(Bucket=b, Key="keep/k")["Body"].read() == b"k"


def test_each_condition_family(lode_server, people, owned):
    alice_name, alice = people["alice"]
    bob_name, bob = people["bob"]
    b = owned
    bucket_arn, objs = f"arn:aws:s3:::{b}", f"arn:aws:s3:::{b}/*"
    bob_p = {"AWS": ARN + bob_name}
    alice.put_object(Bucket=b, Key="home/x", Body=b"x")
    alice.put_object(Bucket=b, Key="tagged", Body=b"t", Tagging="class=public")
    alice.put_object(Bucket=b, Key="untagged", Body=b"u")

    def put(*statements):
        alice.put_bucket_policy(Bucket=b, Policy=policy(b, *statements))

    # IpAddress / NotIpAddress (the test's requests come from 127.0.0.1).
    put(allow(bob_p, "s3:GetObject", objs, Condition={"IpAddress": {"aws:SourceIp": "127.0.0.0/8"}}))
    assert bob.get_object(Bucket=b, Key="home/x")["Body"].read() == b"x"
    put(allow(bob_p, "s3:GetObject", objs, Condition={"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}))
    refused(bob.get_object, Bucket=b, Key="home/x")
    put(allow(bob_p, "s3:GetObject", objs), deny(bob_p, "s3:GetObject", objs, Condition={"NotIpAddress": {"aws:SourceIp": "192.0.2.0/24"}}))
    refused(bob.get_object, Bucket=b, Key="home/x")
    # Bool: aws:SecureTransport (plain HTTP here): the usual "deny without TLS" statement.
    put(allow(bob_p, "s3:GetObject", objs), deny("*", "s3:*", [bucket_arn, objs], Condition={"Bool": {"aws:SecureTransport": "false"}}))
    refused(bob.get_object, Bucket=b, Key="home/x")
    put(allow(bob_p, "s3:GetObject", objs, Condition={"Bool": {"aws:SecureTransport": "false"}}))
    assert bob.get_object(Bucket=b, Key="home/x")["Body"].read() == b"x"
    # String: s3:prefix on listings, with a policy variable.
    put(allow({"AWS": "000000000000"}, "s3:ListBucket", bucket_arn, Condition={"StringLike": {"s3:prefix": ["${aws:username}/*", "home/*"]}}))
    assert bob.list_objects_v2(Bucket=b, Prefix="home/")["KeyCount"] == 1
    assert bob.list_objects_v2(Bucket=b, Prefix=f"{bob_name}/")["KeyCount"] == 0
    refused(bob.list_objects_v2, Bucket=b, Prefix="other/")
    refused(bob.list_objects_v2, Bucket=b)
    # Numeric: s3:max-keys.
    put(allow(bob_p, "s3:ListBucket", bucket_arn, Condition={"NumericLessThanEquals": {"s3:max-keys": "10"}}))
    assert bob.list_objects_v2(Bucket=b, MaxKeys=5)["KeyCount"] == 3
    refused(bob.list_objects_v2, Bucket=b, MaxKeys=50)
    # Date: aws:CurrentTime, before and after now.
    put(allow(bob_p, "s3:GetObject", objs, Condition={"DateLessThan": {"aws:CurrentTime": "2099-01-01T00:00:00Z"}}))
    assert bob.get_object(Bucket=b, Key="home/x")["Body"].read() == b"x"
    put(allow(bob_p, "s3:GetObject", objs, Condition={"DateGreaterThan": {"aws:EpochTime": "4070908800"}}))
    refused(bob.get_object, Bucket=b, Key="home/x")
    # Arn: aws:PrincipalArn.
    put(allow({"AWS": "000000000000"}, "s3:GetObject", objs, Condition={"ArnLike": {"aws:PrincipalArn": ARN + bob_name[:3] + "*"}}))
    assert bob.get_object(Bucket=b, Key="home/x")["Body"].read() == b"x"
    put(allow({"AWS": "000000000000"}, "s3:GetObject", objs, Condition={"ArnEquals": {"aws:PrincipalArn": ARN + alice_name}}))
    refused(bob.get_object, Bucket=b, Key="home/x")
    # Null and tags: uploads only with a team tag; reads only of objects tagged public.
    put(allow(bob_p, "s3:PutObject", objs, Condition={"Null": {"s3:RequestObjectTag/team": "false"}}),
        allow(bob_p, "s3:GetObject", objs, Condition={"StringEquals": {"s3:ExistingObjectTag/class": "public"}}))
    bob.put_object(Bucket=b, Key="up/1", Body=b"1", Tagging="team=ml")
    refused(bob.put_object, Bucket=b, Key="up/2", Body=b"2")
    assert bob.get_object(Bucket=b, Key="tagged")["Body"].read() == b"t"
    refused(bob.get_object, Bucket=b, Key="untagged")
    # ForAllValues / ForAnyValue over the request's tag keys.
    put(allow(bob_p, "s3:PutObject", objs, Condition={"ForAllValues:StringEquals": {"s3:RequestObjectTagKeys": ["team", "stage"]},
                                                     "ForAnyValue:StringEquals": {"s3:RequestObjectTagKeys": "team"}}))
    bob.put_object(Bucket=b, Key="up/3", Body=b"3", Tagging="team=ml&stage=dev")
    refused(bob.put_object, Bucket=b, Key="up/4", Body=b"4", Tagging="team=ml&secret=1")
    refused(bob.put_object, Bucket=b, Key="up/5", Body=b"5", Tagging="stage=dev")
    # IfExists: a condition on a header the request may leave out.
    put(allow(bob_p, "s3:PutObject", objs, Condition={"StringEqualsIfExists": {"s3:x-amz-storage-class": "STANDARD"}}))
    bob.put_object(Bucket=b, Key="up/6", Body=b"6")
    bob.put_object(Bucket=b, Key="up/7", Body=b"7", StorageClass="STANDARD")
    refused(bob.put_object, Bucket=b, Key="up/8", Body=b"8", StorageClass="GLACIER")
    # UserAgent (aws:UserAgent carries botocore's name).
    put(allow(bob_p, "s3:GetObject", objs, Condition={"StringLike": {"aws:UserAgent": "*Botocore*"}}))
    assert bob.get_object(Bucket=b, Key="home/x")["Body"].read() == b"x"
    # Resource variables: ${aws:username} in the resource.
    put(allow({"AWS": "000000000000"}, ["s3:PutObject", "s3:GetObject"], f"arn:aws:s3:::{b}/users/${{aws:username}}/*"))
    bob.put_object(Bucket=b, Key=f"users/{bob_name}/notes", Body=b"n")
    refused(bob.put_object, Bucket=b, Key=f"users/{alice_name}/notes", Body=b"n")


def test_copy_needs_the_sources_read_under_its_policy(people, owned):
    alice_name, alice = people["alice"]
    bob_name, bob = people["bob"]
    b = owned
    alice.put_object(Bucket=b, Key="src", Body=b"source")
    mine = "bobs-" + uuid.uuid4().hex[:10]
    bob.create_bucket(Bucket=mine)
    try:
        refused(bob.copy_object, Bucket=mine, Key="c", CopySource={"Bucket": b, "Key": "src"})
        alice.put_bucket_policy(Bucket=b, Policy=policy(b, allow({"AWS": ARN + bob_name}, "s3:GetObject", f"arn:aws:s3:::{b}/*")))
        bob.copy_object(Bucket=mine, Key="c", CopySource={"Bucket": b, "Key": "src"})
        assert bob.get_object(Bucket=mine, Key="c")["Body"].read() == b"source"
    finally:
        bob.delete_object(Bucket=mine, Key="c")
        bob.delete_bucket(Bucket=mine)


@pytest.mark.skipif(not CLUSTER_MODE, reason="two gateways")
def test_a_policy_set_through_one_gateway_holds_on_the_other_at_once(lode_servers, people, owned):
    _, alice = people["alice"]
    b = owned
    alice.put_object(Bucket=b, Key="o", Body=b"o")
    a, z = (make_client(g.endpoint, signature_version=UNSIGNED) for g in lode_servers[:2])
    creds = people["alice_creds"]
    for i in range(5):
        via = lode_servers[i % 2]
        owner = boto3.client("s3", endpoint_url=via.endpoint, aws_access_key_id=creds["access_key"],
                             aws_secret_access_key=creds["secret_key"], region_name=REGION,
                             config=Config(retries={"max_attempts": 1}))
        other = z if i % 2 == 0 else a
        owner.put_bucket_policy(Bucket=b, Policy=policy(b, allow("*", "s3:GetObject", f"arn:aws:s3:::{b}/*")))
        assert other.get_object(Bucket=b, Key="o")["Body"].read() == b"o"
        owner.delete_bucket_policy(Bucket=b)
        refused(other.get_object, Bucket=b, Key="o")


def test_block_public_access_per_bucket(people, owned):
    alice_name, alice = people["alice"]
    bob_name, bob = people["bob"]
    anon = people["anon"]
    b = owned
    alice.put_object(Bucket=b, Key="o", Body=b"o")
    public = policy(b, allow("*", "s3:GetObject", f"arn:aws:s3:::{b}/*"))
    with pytest.raises(ClientError) as e:
        alice.get_public_access_block(Bucket=b)
    assert status_code(e) == (404, "NoSuchPublicAccessBlockConfiguration")
    # BlockPublicPolicy: a public policy is refused, a pinned one is not.
    alice.put_public_access_block(Bucket=b, PublicAccessBlockConfiguration={"BlockPublicPolicy": True})
    got = alice.get_public_access_block(Bucket=b)["PublicAccessBlockConfiguration"]
    assert got == {"BlockPublicAcls": False, "IgnorePublicAcls": False, "BlockPublicPolicy": True, "RestrictPublicBuckets": False}
    with pytest.raises(ClientError) as e:
        alice.put_bucket_policy(Bucket=b, Policy=public)
    assert status_code(e) == (403, "AccessDenied") and "BlockPublicPolicy" in e.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as e:
        alice.get_bucket_policy(Bucket=b)
    assert status_code(e) == (404, "NoSuchBucketPolicy")
    alice.put_bucket_policy(Bucket=b, Policy=policy(b, allow({"AWS": ARN + bob_name}, "s3:GetObject", f"arn:aws:s3:::{b}/*")))
    # RestrictPublicBuckets: a public policy then serves the account's users only.
    alice.delete_public_access_block(Bucket=b)
    alice.put_bucket_policy(Bucket=b, Policy=public)
    assert anon.get_object(Bucket=b, Key="o")["Body"].read() == b"o"
    alice.put_public_access_block(Bucket=b, PublicAccessBlockConfiguration={"RestrictPublicBuckets": True})
    refused(anon.get_object, Bucket=b, Key="o")
    assert bob.get_object(Bucket=b, Key="o")["Body"].read() == b"o"
    alice.delete_public_access_block(Bucket=b)
    assert anon.get_object(Bucket=b, Key="o")["Body"].read() == b"o"
    with pytest.raises(ClientError) as e:
        alice.get_public_access_block(Bucket=b)
    assert status_code(e) == (404, "NoSuchPublicAccessBlockConfiguration")
    # Not the owner's: bob cannot change it.
    refused(bob.put_public_access_block, Bucket=b, PublicAccessBlockConfiguration={"BlockPublicPolicy": False})


@pytest.mark.skipif(CLUSTER_MODE, reason="its own server, with an account-wide block in lode.toml")
def test_an_account_wide_block_in_lode_toml_holds_for_every_bucket(tmp_path):
    from conftest import Lode
    d = tmp_path / "acct"
    d.mkdir()
    cfg = d / "lode.toml"
    cfg.write_text('[access]\nblock_public_policy = true\n[[datapath.devices]]\npath = "dev0.img"\nsize = "256MiB"\n')
    srv = Lode(str(d / "data"), extra_args=["--config", str(cfg)]).start()
    try:
        c = make_client(srv.endpoint)
        c.create_bucket(Bucket="open-data")
        with pytest.raises(ClientError) as e:
            c.put_bucket_policy(Bucket="open-data", Policy=policy("open-data", allow("*", "s3:GetObject", "arn:aws:s3:::open-data/*")))
        assert status_code(e) == (403, "AccessDenied")
        # The bucket's own configuration cannot lift the account's.
        c.put_public_access_block(Bucket="open-data", PublicAccessBlockConfiguration={"BlockPublicPolicy": False})
        with pytest.raises(ClientError) as e:
            c.put_bucket_policy(Bucket="open-data", Policy=policy("open-data", allow("*", "s3:GetObject", "arn:aws:s3:::open-data/*")))
        assert status_code(e) == (403, "AccessDenied")
    finally:
        srv.remove()


def test_lode_admin_shows_a_buckets_effective_access(lode_server, people, owned):
    alice_name, alice = people["alice"]
    bob_name, _ = people["bob"]
    b = owned
    show = lambda: json.loads(admin(lode_server, "access", b).stdout)  # noqa: E731
    got = show()
    assert (got["owner"], got["grants"], got["policy"], got["policy_is_public"], got["anonymous_access"], got["cors"]) == (
        alice_name, [], None, False, False, None)
    assert (got["acl"], got["acl_is_public"], got["object_ownership"], got["acls_enabled"]) == (
        [{"grantee": alice_name, "permission": "FULL_CONTROL"}], False, "ObjectWriter", True)
    # A public-read bucket ACL opens the bucket to anonymous callers; IgnorePublicAcls and
    # BucketOwnerEnforced close it again.
    alice.put_bucket_acl(Bucket=b, ACL="public-read")
    got = show()
    assert got["acl_is_public"] is True and got["anonymous_access"] is True
    assert {"grantee": "http://acs.amazonaws.com/groups/global/AllUsers", "permission": "READ"} in got["acl"]
    alice.put_public_access_block(Bucket=b, PublicAccessBlockConfiguration={"IgnorePublicAcls": True})
    assert show()["anonymous_access"] is False
    alice.delete_public_access_block(Bucket=b)
    alice.put_bucket_acl(Bucket=b, ACL="private")
    alice.put_bucket_ownership_controls(Bucket=b, OwnershipControls={"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]})
    got = show()
    assert (got["object_ownership"], got["acls_enabled"]) == ("BucketOwnerEnforced", False)
    alice.delete_bucket_ownership_controls(Bucket=b)
    admin(lode_server, "grant", b, bob_name, "read")
    public = {"Version": "2012-10-17", "Statement": [allow("*", "s3:GetObject", f"arn:aws:s3:::{b}/*")]}
    alice.put_bucket_policy(Bucket=b, Policy=json.dumps(public))
    alice.put_bucket_cors(Bucket=b, CORSConfiguration={"CORSRules": [{"AllowedMethods": ["GET"], "AllowedOrigins": ["*"]}]})
    try:
        got = show()
        assert got["grants"] == [{"user": bob_name, "perm": "read"}]
        assert got["policy"] == public and got["policy_is_public"] is True and got["anonymous_access"] is True
        assert got["cors"]["rules"][0]["allowed_origins"] == ["*"]
        alice.put_public_access_block(Bucket=b, PublicAccessBlockConfiguration={"RestrictPublicBuckets": True})
        got = show()
        assert got["public_access_block"]["restrict_public_buckets"] is True
        assert got["effective_public_access_block"]["restrict_public_buckets"] is True
        assert got["anonymous_access"] is False
    finally:
        admin(lode_server, "revoke", b, bob_name)
        alice.delete_public_access_block(Bucket=b)
        alice.delete_bucket_cors(Bucket=b)
    # Only with root's key, and never a secret in it.
    r = requests.get(f"{lode_server.admin}/api/access?bucket={b}")
    assert r.status_code == 401
    assert "secret" not in admin(lode_server, "access", b).stdout.decode().lower()
    p = admin(lode_server, "access", b + "-none", check=False)
    assert p.returncode != 0


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="FUSE mounts need root and /dev/fuse here")
def test_an_explicit_deny_holds_on_the_mount(tmp_path_factory):
    """The mount acts as its configured Lode user (posix.user, LODE_POSIX_USER): a Deny of the
    bucket's policy for that user refuses reads, writes, removals, renames and listings there
    with EACCES; what the policy does not deny works as before."""
    from conftest import Lode, cluster_gateways
    d = tmp_path_factory.mktemp("policy-mount")
    mnt = str(d / "mnt")
    env = {"LODE_POSIX_USER": "carol"}
    if CLUSTER_MODE:
        gws = cluster_gateways(tmp_path_factory, n=1, first_args=["--mount", mnt], extra_env=env)
    else:
        gws = [Lode(str(d / "data"), extra_args=["--mount", mnt], extra_env=env, device_size="256MiB")]
        gws[0].start()
    srv = gws[0]
    try:
        root = make_client(srv.endpoint)
        b = "mnt-" + uuid.uuid4().hex[:10]
        root.create_bucket(Bucket=b)
        root.put_object(Bucket=b, Key="locked/a.txt", Body=b"a")
        root.put_object(Bucket=b, Key="open/b.txt", Body=b"b")
        carol = {"AWS": ARN + "carol"}
        root.put_bucket_policy(Bucket=b, Policy=policy(
            b,
            deny(carol, ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"], f"arn:aws:s3:::{b}/locked/*"),
            deny(carol, "s3:ListBucket", f"arn:aws:s3:::{b}", Condition={"StringLike": {"s3:prefix": "locked/*"}}),
        ))
        base = os.path.join(mnt, b)
        with open(os.path.join(base, "open", "b.txt")) as f:
            assert f.read() == "b"
        assert sorted(os.listdir(base)) == ["locked", "open"]
        for attempt in (
            lambda: open(os.path.join(base, "locked", "a.txt")).read(),
            lambda: open(os.path.join(base, "locked", "new.txt"), "w").close(),
            lambda: os.unlink(os.path.join(base, "locked", "a.txt")),
            lambda: os.rename(os.path.join(base, "open", "b.txt"), os.path.join(base, "locked", "b.txt")),
            lambda: os.listdir(os.path.join(base, "locked")),
            lambda: os.mkdir(os.path.join(base, "locked", "sub")),
        ):
            with pytest.raises(PermissionError):
                attempt()
        # Nothing changed behind the refusals; the rest of the bucket works.
        with open(os.path.join(base, "open", "c.txt"), "w") as f:
            f.write("c")
        keys = sorted(o["Key"] for o in root.list_objects_v2(Bucket=b)["Contents"])
        assert keys == ["locked/a.txt", "open/b.txt", "open/c.txt"]
        root.delete_bucket_policy(Bucket=b)
        with open(os.path.join(base, "locked", "a.txt")) as f:
            assert f.read() == "a"
        assert os.listdir(os.path.join(base, "locked")) == ["a.txt"]
        for k in keys:
            root.delete_object(Bucket=b, Key=k)
        root.delete_bucket(Bucket=b)
    finally:
        for g in gws:
            g.remove()
        subprocess.run(["umount", "-l", mnt], capture_output=True)


def test_a_bucket_made_through_one_gateway_is_never_open_on_another(lode_servers, people):
    """The other gateway may have just seen the name as absent: its next request must still find
    the new bucket's owner, never judge it as absent (and so open to everyone)."""
    def pinned(who, gw):
        creds = people[who + "_creds"]
        return boto3.client("s3", endpoint_url=gw.endpoint, aws_access_key_id=creds["access_key"],
                            aws_secret_access_key=creds["secret_key"], region_name=REGION,
                            config=Config(retries={"max_attempts": 1}))

    # alice creates through the first gateway, bob tries through the last (in cluster mode,
    # the other one).
    alice = pinned("alice", lode_servers[0])
    bob_there = pinned("bob", lode_servers[-1])
    for _ in range(5):
        name = "race-" + uuid.uuid4().hex[:10]
        with pytest.raises(ClientError) as e:
            bob_there.put_object(Bucket=name, Key="k", Body=b"x")
        assert status_code(e) == (404, "NoSuchBucket")
        alice.create_bucket(Bucket=name)
        try:
            refused(bob_there.put_object, Bucket=name, Key="k", Body=b"x")
            refused(bob_there.list_objects_v2, Bucket=name)
        finally:
            alice.delete_bucket(Bucket=name)
