"""ACLs and object ownership (issue 32, part 3): canned ACLs and x-amz-grant-* on CreateBucket,
PutObject, CopyObject, CreateMultipartUpload and form uploads; Put/GetBucketAcl and
Put/GetObjectAcl with AccessControlPolicy bodies (canonical ids, groups; per version);
canonical ids and display names as Owner in listings; ownership controls; Block Public
Access over ACLs; ACLs combined with policies. Runs against the session's server(s): in
cluster mode the clients spread their requests over both gateways, so an ACL set through one is
enforced by the other on the next request."""

import hashlib
import json
import tempfile
import uuid

import pytest
import requests
from botocore.exceptions import ClientError

from conftest import empty_versions
from test_policy import allow, deny, people, policy, status_code  # noqa: F401 (fixture)
from test_users import admin

ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"
AUTH_USERS = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers"


def cid(name):
    """A Lode user's canonical id."""
    return hashlib.sha256(f"lode-user:{name}".encode()).hexdigest()


def let_write(alice, bucket, bob_name):
    """A policy that lets bob upload to the bucket (announced to every gateway before it is
    acknowledged, where a grant takes up to 2 s to reach the others: SEMANTICS.md rule 18)."""
    alice.put_bucket_policy(Bucket=bucket, Policy=policy(bucket, allow(
        {"AWS": f"arn:aws:iam::000000000000:user/{bob_name}"},
        ["s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"], f"arn:aws:s3:::{bucket}/*")))


def refused(fn, *args, want=(403, "AccessDenied"), **kw):
    with pytest.raises(ClientError) as e:
        fn(*args, **kw)
    assert status_code(e) == want, e.value.response
    return e


def grants_of(acl):
    """(grantee, permission) pairs of a GetBucketAcl/GetObjectAcl answer, sorted."""
    out = []
    for g in acl["Grants"]:
        who = g["Grantee"]
        if who["Type"] == "CanonicalUser":
            out.append((who["ID"], g["Permission"]))
        else:
            assert who["Type"] == "Group", who
            out.append((who["URI"], g["Permission"]))
    return sorted(out)


@pytest.fixture
def owned(people):
    """A bucket alice owns, emptied (every version) and removed after the test."""
    _, alice = people["alice"]
    name = "acl-" + uuid.uuid4().hex[:12]
    alice.create_bucket(Bucket=name)
    yield name
    try:
        alice.delete_public_access_block(Bucket=name)
        alice.delete_bucket_policy(Bucket=name)
    except ClientError:
        pass
    empty_versions(alice, name)
    for u in alice.list_multipart_uploads(Bucket=name).get("Uploads", []):
        alice.abort_multipart_upload(Bucket=name, Key=u["Key"], UploadId=u["UploadId"])
    alice.delete_bucket(Bucket=name)


def test_owners_in_listings_are_canonical_ids_and_names(people, owned):
    alice_name, alice = people["alice"]
    bob_name, bob = people["bob"]
    b = owned
    me = alice.list_buckets()["Owner"]
    assert me == {"ID": cid(alice_name), "DisplayName": alice_name}
    let_write(alice, b, bob_name)
    alice.put_object(Bucket=b, Key="by-alice", Body=b"a")
    bob.put_object(Bucket=b, Key="by-bob", Body=b"b")
    want = {"by-alice": cid(alice_name), "by-bob": cid(bob_name)}
    v2 = alice.list_objects_v2(Bucket=b, FetchOwner=True)["Contents"]
    assert {o["Key"]: o["Owner"]["ID"] for o in v2} == want
    assert {o["Key"]: o["Owner"]["DisplayName"] for o in v2} == {"by-alice": alice_name, "by-bob": bob_name}
    assert all("Owner" not in o for o in alice.list_objects_v2(Bucket=b)["Contents"])
    v1 = alice.list_objects(Bucket=b)["Contents"]
    assert {o["Key"]: o["Owner"]["ID"] for o in v1} == want
    versions = alice.list_object_versions(Bucket=b)["Versions"]
    assert {o["Key"]: o["Owner"]["ID"] for o in versions} == want
    # A writer owns what it writes (ObjectWriter): it may read its own object's ACL.
    assert bob.get_object_acl(Bucket=b, Key="by-bob")["Owner"]["ID"] == cid(bob_name)
    up = bob.create_multipart_upload(Bucket=b, Key="mp")
    u = alice.list_multipart_uploads(Bucket=b)["Uploads"][0]
    assert u["Owner"] == {"ID": cid(bob_name), "DisplayName": bob_name}
    assert u["Initiator"]["ID"] == cid(bob_name)
    parts = bob.list_parts(Bucket=b, Key="mp", UploadId=up["UploadId"])
    assert parts["Owner"]["ID"] == cid(bob_name) and parts["Initiator"]["DisplayName"] == bob_name
    bob.abort_multipart_upload(Bucket=b, Key="mp", UploadId=up["UploadId"])


def test_canned_object_acls_grant_what_s3_documents(people, owned):
    alice_name, alice = people["alice"]
    bob_name, bob = people["bob"]
    anon = people["anon"]
    b = owned
    alice.put_object(Bucket=b, Key="private", Body=b"p")
    alice.put_object(Bucket=b, Key="public", Body=b"pub", ACL="public-read")
    alice.put_object(Bucket=b, Key="signed-in", Body=b"auth", ACL="authenticated-read")
    assert anon.get_object(Bucket=b, Key="public")["Body"].read() == b"pub"
    assert anon.head_object(Bucket=b, Key="public")["ContentLength"] == 3
    assert bob.get_object(Bucket=b, Key="public")["Body"].read() == b"pub"
    refused(anon.get_object, Bucket=b, Key="private")
    refused(bob.get_object, Bucket=b, Key="private")
    refused(anon.get_object, Bucket=b, Key="signed-in")
    assert bob.get_object(Bucket=b, Key="signed-in")["Body"].read() == b"auth"
    # READ on an object is not READ_ACP, nor a listing, nor a write.
    refused(bob.get_object_acl, Bucket=b, Key="public")
    refused(anon.list_objects_v2, Bucket=b)
    refused(bob.put_object, Bucket=b, Key="public", Body=b"overwritten")
    assert alice.get_object(Bucket=b, Key="public")["Body"].read() == b"pub"
    acl = alice.get_object_acl(Bucket=b, Key="public")
    assert acl["Owner"] == {"ID": cid(alice_name), "DisplayName": alice_name}
    assert grants_of(acl) == sorted([(cid(alice_name), "FULL_CONTROL"), (ALL_USERS, "READ")])
    assert grants_of(alice.get_object_acl(Bucket=b, Key="private")) == [(cid(alice_name), "FULL_CONTROL")]
    assert grants_of(alice.get_object_acl(Bucket=b, Key="signed-in")) == sorted(
        [(cid(alice_name), "FULL_CONTROL"), (AUTH_USERS, "READ")])
    # Back to private: the public loses it at once (on every gateway).
    alice.put_object_acl(Bucket=b, Key="public", ACL="private")
    refused(anon.get_object, Bucket=b, Key="public")
    # A copy and a multipart upload take the ACL their request names, never the source's.
    alice.put_object_acl(Bucket=b, Key="public", ACL="public-read")
    alice.copy_object(Bucket=b, Key="copy", CopySource={"Bucket": b, "Key": "public"})
    refused(anon.get_object, Bucket=b, Key="copy")
    alice.copy_object(Bucket=b, Key="copy-pub", CopySource={"Bucket": b, "Key": "private"}, ACL="public-read")
    assert anon.get_object(Bucket=b, Key="copy-pub")["Body"].read() == b"p"
    up = alice.create_multipart_upload(Bucket=b, Key="mp", ACL="public-read")
    part = alice.upload_part(Bucket=b, Key="mp", UploadId=up["UploadId"], PartNumber=1, Body=b"mp-bytes")
    alice.complete_multipart_upload(Bucket=b, Key="mp", UploadId=up["UploadId"],
                                    MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert anon.get_object(Bucket=b, Key="mp")["Body"].read() == b"mp-bytes"
    # An overwrite without an ACL is private again.
    alice.put_object(Bucket=b, Key="mp", Body=b"new")
    refused(anon.get_object, Bucket=b, Key="mp")


def test_bucket_acls_open_listings_and_uploads(people, owned):
    alice_name, alice = people["alice"]
    bob_name, bob = people["bob"]
    anon = people["anon"]
    b = owned
    alice.put_object(Bucket=b, Key="k", Body=b"x")
    assert grants_of(alice.get_bucket_acl(Bucket=b)) == [(cid(alice_name), "FULL_CONTROL")]
    refused(anon.list_objects_v2, Bucket=b)
    alice.put_bucket_acl(Bucket=b, ACL="public-read")
    assert [o["Key"] for o in anon.list_objects_v2(Bucket=b)["Contents"]] == ["k"]
    # Bucket READ lists; it does not read objects (their own ACLs do) nor write.
    refused(anon.get_object, Bucket=b, Key="k")
    refused(anon.put_object, Bucket=b, Key="drop", Body=b"d")
    alice.put_bucket_acl(Bucket=b, ACL="public-read-write")
    anon.put_object(Bucket=b, Key="drop", Body=b"d")
    # An anonymous upload is the bucket owner's.
    assert alice.get_object_acl(Bucket=b, Key="drop")["Owner"]["ID"] == cid(alice_name)
    alice.put_bucket_acl(Bucket=b, ACL="authenticated-read")
    refused(anon.list_objects_v2, Bucket=b)
    assert bob.list_objects_v2(Bucket=b)["KeyCount"] == 2
    refused(bob.get_bucket_acl, Bucket=b)
    # Grant headers: bob may read the bucket's ACL (READ_ACP), and nothing else.
    alice.put_bucket_acl(Bucket=b, GrantReadACP=f'id="{cid(bob_name)}"', GrantFullControl=f'id="{cid(alice_name)}"')
    assert grants_of(bob.get_bucket_acl(Bucket=b)) == sorted(
        [(cid(bob_name), "READ_ACP"), (cid(alice_name), "FULL_CONTROL")])
    refused(bob.list_objects_v2, Bucket=b)
    refused(bob.put_bucket_acl, Bucket=b, ACL="public-read")
    # An AccessControlPolicy body, as aws-cli and the SDKs send it.
    alice.put_bucket_acl(Bucket=b, AccessControlPolicy={
        "Owner": {"ID": cid(alice_name)},
        "Grants": [
            {"Grantee": {"Type": "CanonicalUser", "ID": cid(alice_name)}, "Permission": "FULL_CONTROL"},
            {"Grantee": {"Type": "CanonicalUser", "ID": cid(bob_name)}, "Permission": "WRITE"},
            {"Grantee": {"Type": "Group", "URI": AUTH_USERS}, "Permission": "READ"},
        ]})
    bob.put_object(Bucket=b, Key="from-bob", Body=b"b")
    assert bob.list_objects_v2(Bucket=b)["KeyCount"] == 3
    alice.put_bucket_acl(Bucket=b, ACL="private")
    refused(bob.list_objects_v2, Bucket=b)
    refused(bob.put_object, Bucket=b, Key="again", Body=b"b")


def test_bad_acls_are_refused_with_s3s_codes_and_change_nothing(people, owned):
    alice_name, alice = people["alice"]
    b = owned
    alice.put_object(Bucket=b, Key="k", Body=b"x")
    body = lambda grantee, perm="READ", owner=cid(alice_name): {  # noqa: E731
        "Owner": {"ID": owner}, "Grants": [{"Grantee": grantee, "Permission": perm}]}
    cases = [
        (dict(AccessControlPolicy=body({"Type": "CanonicalUser", "ID": "0" * 64})), (400, "InvalidArgument")),
        (dict(AccessControlPolicy=body({"Type": "AmazonCustomerByEmail", "EmailAddress": "nobody@example.com"})),
         (400, "UnresolvableGrantByEmailAddress")),
        (dict(AccessControlPolicy=body({"Type": "Group", "URI": "http://example.com/everyone"})), (400, "InvalidArgument")),
        (dict(AccessControlPolicy=body({"Type": "CanonicalUser", "ID": cid(alice_name)}, owner="1" * 64)),
         (403, "AccessDenied")),
        (dict(GrantRead='id="' + "0" * 64 + '"'), (400, "InvalidArgument")),
        (dict(GrantRead="nonsense"), (400, "InvalidArgument")),
        (dict(ACL="public-read", GrantRead=f'uri="{ALL_USERS}"'), (400, "InvalidRequest")),
    ]
    for kw, want in cases:
        refused(alice.put_object_acl, Bucket=b, Key="k", want=want, **kw)
        refused(alice.put_bucket_acl, Bucket=b, want=want, **kw)
    refused(alice.put_object, Bucket=b, Key="k2", Body=b"x", GrantRead='id="' + "0" * 64 + '"',
            want=(400, "InvalidArgument"))
    refused(alice.put_object, Bucket=b, Key="k2", Body=b"x", ACL="public-read", GrantRead=f'uri="{ALL_USERS}"',
            want=(400, "InvalidRequest"))
    assert grants_of(alice.get_object_acl(Bucket=b, Key="k")) == [(cid(alice_name), "FULL_CONTROL")]
    assert grants_of(alice.get_bucket_acl(Bucket=b)) == [(cid(alice_name), "FULL_CONTROL")]
    assert [o["Key"] for o in alice.list_objects_v2(Bucket=b)["Contents"]] == ["k"]
    refused(alice.get_object_acl, Bucket=b, Key="missing", want=(404, "NoSuchKey"))


def test_object_acls_are_per_version(people, owned):
    alice_name, alice = people["alice"]
    anon = people["anon"]
    b = owned
    alice.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    v1 = alice.put_object(Bucket=b, Key="k", Body=b"one", ACL="public-read")["VersionId"]
    v2 = alice.put_object(Bucket=b, Key="k", Body=b"two")["VersionId"]
    refused(anon.get_object, Bucket=b, Key="k")
    assert anon.get_object(Bucket=b, Key="k", VersionId=v1)["Body"].read() == b"one"
    refused(anon.get_object, Bucket=b, Key="k", VersionId=v2)
    assert (ALL_USERS, "READ") in grants_of(alice.get_object_acl(Bucket=b, Key="k", VersionId=v1))
    assert grants_of(alice.get_object_acl(Bucket=b, Key="k")) == [(cid(alice_name), "FULL_CONTROL")]
    # Changing one version's ACL leaves the other's.
    alice.put_object_acl(Bucket=b, Key="k", VersionId=v2, ACL="public-read")
    alice.put_object_acl(Bucket=b, Key="k", VersionId=v1, ACL="private")
    assert anon.get_object(Bucket=b, Key="k")["Body"].read() == b"two"
    refused(anon.get_object, Bucket=b, Key="k", VersionId=v1)
    # ETag and content stay through an ACL change.
    assert alice.head_object(Bucket=b, Key="k", VersionId=v1)["ETag"] == '"%s"' % hashlib.md5(b"one").hexdigest()
    refused(alice.put_object_acl, Bucket=b, Key="k", VersionId="0" * 22, ACL="private", want=(404, "NoSuchVersion"))


def test_ownership_controls(people, owned):
    alice_name, alice = people["alice"]
    bob_name, bob = people["bob"]
    anon = people["anon"]
    b = owned
    refused(alice.get_bucket_ownership_controls, Bucket=b, want=(404, "OwnershipControlsNotFoundError"))
    rule = lambda o: {"Rules": [{"ObjectOwnership": o}]}  # noqa: E731
    let_write(alice, b, bob_name)
    alice.put_bucket_ownership_controls(Bucket=b, OwnershipControls=rule("BucketOwnerPreferred"))
    got = alice.get_bucket_ownership_controls(Bucket=b)["OwnershipControls"]["Rules"]
    assert got == [{"ObjectOwnership": "BucketOwnerPreferred"}]
    bob.put_object(Bucket=b, Key="handed", Body=b"h", ACL="bucket-owner-full-control")
    bob.put_object(Bucket=b, Key="kept", Body=b"k")
    owners = {o["Key"]: o["Owner"]["ID"] for o in alice.list_objects_v2(Bucket=b, FetchOwner=True)["Contents"]}
    assert owners == {"handed": cid(alice_name), "kept": cid(bob_name)}
    # Enforced: ACLs are disabled; only the owner's full control is accepted.
    alice.put_object(Bucket=b, Key="pub", Body=b"p", ACL="public-read")
    alice.put_bucket_ownership_controls(Bucket=b, OwnershipControls=rule("BucketOwnerEnforced"))
    refused(anon.get_object, Bucket=b, Key="pub")
    assert alice.get_object_acl(Bucket=b, Key="kept")["Owner"]["ID"] == cid(alice_name)
    assert grants_of(alice.get_object_acl(Bucket=b, Key="pub")) == [(cid(alice_name), "FULL_CONTROL")]
    nope = (400, "AccessControlListNotSupported")
    refused(alice.put_object, Bucket=b, Key="x", Body=b"x", ACL="public-read", want=nope)
    refused(bob.put_object, Bucket=b, Key="x", Body=b"x", ACL="bucket-owner-read", want=nope)
    refused(alice.put_object_acl, Bucket=b, Key="pub", ACL="public-read", want=nope)
    refused(alice.put_bucket_acl, Bucket=b, ACL="public-read", want=nope)
    bob.put_object(Bucket=b, Key="x", Body=b"x", ACL="bucket-owner-full-control")
    bob.put_object(Bucket=b, Key="y", Body=b"y")
    owners = {o["Key"]: o["Owner"]["ID"] for o in alice.list_objects_v2(Bucket=b, FetchOwner=True)["Contents"]}
    assert set(owners.values()) == {cid(alice_name)}
    # Only bucket-owner-full-control (or no ACL) is accepted, as S3 documents: not even
    # `private`.
    refused(alice.put_object, Bucket=b, Key="x", Body=b"x", ACL="private", want=nope)
    refused(alice.put_bucket_acl, Bucket=b, ACL="private", want=nope)
    alice.put_object_acl(Bucket=b, Key="x", ACL="bucket-owner-full-control")
    # Back to ObjectWriter: the stored ACLs hold again.
    alice.delete_bucket_ownership_controls(Bucket=b)
    refused(alice.get_bucket_ownership_controls, Bucket=b, want=(404, "OwnershipControlsNotFoundError"))
    assert anon.get_object(Bucket=b, Key="pub")["Body"].read() == b"p"
    # A bucket ACL that grants others forbids enforcing.
    alice.put_bucket_acl(Bucket=b, ACL="public-read")
    refused(alice.put_bucket_ownership_controls, Bucket=b, OwnershipControls=rule("BucketOwnerEnforced"),
            want=(400, "InvalidBucketAclWithObjectOwnership"))
    alice.put_bucket_acl(Bucket=b, ACL="private")
    refused(alice.put_bucket_ownership_controls, Bucket=b, OwnershipControls=rule("Nobody"),
            want=(400, "MalformedXML"))
    refused(bob.put_bucket_ownership_controls, Bucket=b, OwnershipControls=rule("ObjectWriter"))
    # Set at creation.
    name = "own-" + uuid.uuid4().hex[:10]
    alice.create_bucket(Bucket=name, ObjectOwnership="BucketOwnerEnforced")
    try:
        assert alice.get_bucket_ownership_controls(Bucket=name)["OwnershipControls"]["Rules"] == [
            {"ObjectOwnership": "BucketOwnerEnforced"}]
        refused(alice.put_object, Bucket=name, Key="x", Body=b"x", ACL="public-read",
                want=(400, "AccessControlListNotSupported"))
    finally:
        alice.delete_bucket(Bucket=name)
    refused(alice.create_bucket, Bucket=name, ObjectOwnership="BucketOwnerEnforced", ACL="public-read",
            want=(400, "InvalidBucketAclWithObjectOwnership"))
    refused(alice.head_bucket, Bucket=name, want=(404, "404"))


def test_canned_acl_on_create_bucket(people):
    alice_name, alice = people["alice"]
    anon = people["anon"]
    name = "cb-" + uuid.uuid4().hex[:10]
    alice.create_bucket(Bucket=name, ACL="public-read")
    try:
        assert grants_of(alice.get_bucket_acl(Bucket=name)) == sorted(
            [(cid(alice_name), "FULL_CONTROL"), (ALL_USERS, "READ")])
        assert anon.list_objects_v2(Bucket=name)["KeyCount"] == 0
    finally:
        alice.delete_bucket(Bucket=name)


def test_block_public_access_over_acls(people, owned):
    _, alice = people["alice"]
    anon = people["anon"]
    b = owned
    alice.put_object(Bucket=b, Key="pub", Body=b"p", ACL="public-read")
    alice.put_public_access_block(Bucket=b, PublicAccessBlockConfiguration={"BlockPublicAcls": True})
    refused(alice.put_object, Bucket=b, Key="new", Body=b"n", ACL="public-read")
    refused(alice.put_object, Bucket=b, Key="new", Body=b"n", GrantRead=f'uri="{ALL_USERS}"')
    refused(alice.put_object_acl, Bucket=b, Key="pub", ACL="authenticated-read")
    refused(alice.put_bucket_acl, Bucket=b, ACL="public-read")
    refused(alice.copy_object, Bucket=b, Key="new", CopySource={"Bucket": b, "Key": "pub"}, ACL="public-read")
    # BlockPublicAcls refuses new public ACLs; the existing one still serves.
    assert anon.get_object(Bucket=b, Key="pub")["Body"].read() == b"p"
    alice.put_public_access_block(Bucket=b, PublicAccessBlockConfiguration={"IgnorePublicAcls": True})
    refused(anon.get_object, Bucket=b, Key="pub")
    alice.put_object_acl(Bucket=b, Key="pub", ACL="public-read")  # stored, and ignored
    refused(anon.get_object, Bucket=b, Key="pub")
    alice.delete_public_access_block(Bucket=b)
    assert anon.get_object(Bucket=b, Key="pub")["Body"].read() == b"p"
    assert [o["Key"] for o in alice.list_objects_v2(Bucket=b)["Contents"]] == ["pub"]


def test_acls_and_policies_combined(people, owned):
    alice_name, alice = people["alice"]
    bob_name, bob = people["bob"]
    anon = people["anon"]
    b = owned
    alice.put_object(Bucket=b, Key="pub/a", Body=b"a", ACL="public-read")
    alice.put_object(Bucket=b, Key="priv/b", Body=b"b")
    # A policy's explicit Deny beats an ACL's grant.
    alice.put_bucket_policy(Bucket=b, Policy=policy(b, deny("*", "s3:GetObject", f"arn:aws:s3:::{b}/pub/*")))
    refused(anon.get_object, Bucket=b, Key="pub/a")
    refused(bob.get_object, Bucket=b, Key="pub/a")
    # An Allow from the policy serves what no ACL grants; the ACL serves what the policy does
    # not name.
    alice.put_bucket_policy(Bucket=b, Policy=policy(
        b, allow({"AWS": f"arn:aws:iam::000000000000:user/{bob_name}"}, "s3:GetObject", f"arn:aws:s3:::{b}/priv/*")))
    assert bob.get_object(Bucket=b, Key="priv/b")["Body"].read() == b"b"
    refused(anon.get_object, Bucket=b, Key="priv/b")
    assert anon.get_object(Bucket=b, Key="pub/a")["Body"].read() == b"a"
    # A policy can name ACL actions: a Deny of s3:PutObjectAcl refuses bob's grant to it.
    alice.put_object_acl(Bucket=b, Key="priv/b", GrantWriteACP=f'id="{cid(bob_name)}"',
                         GrantFullControl=f'id="{cid(alice_name)}"')
    bob.put_object_acl(Bucket=b, Key="priv/b", AccessControlPolicy={
        "Owner": {"ID": cid(alice_name)},
        "Grants": [{"Grantee": {"Type": "CanonicalUser", "ID": cid(alice_name)}, "Permission": "FULL_CONTROL"},
                   {"Grantee": {"Type": "CanonicalUser", "ID": cid(bob_name)}, "Permission": "WRITE_ACP"}]})
    alice.put_bucket_policy(Bucket=b, Policy=policy(b, deny("*", "s3:PutObjectAcl", f"arn:aws:s3:::{b}/*")))
    refused(bob.put_object_acl, Bucket=b, Key="priv/b", ACL="public-read")
    refused(anon.get_object, Bucket=b, Key="priv/b")


def test_form_upload_acl_field(people, owned):
    _, alice = people["alice"]
    anon = people["anon"]
    b = owned
    post = alice.generate_presigned_post(b, "form/${filename}", Fields={"acl": "public-read"},
                                         Conditions=[{"acl": "public-read"}, ["starts-with", "$key", "form/"]],
                                         ExpiresIn=600)
    r = requests.post(post["url"], data=post["fields"], files={"file": ("cat.txt", b"meow")})
    assert r.status_code == 204, r.text
    assert anon.get_object(Bucket=b, Key="form/cat.txt")["Body"].read() == b"meow"
    plain = alice.generate_presigned_post(b, "form/private", ExpiresIn=600)
    r = requests.post(plain["url"], data=plain["fields"], files={"file": ("f", b"secret")})
    assert r.status_code == 204, r.text
    refused(anon.get_object, Bucket=b, Key="form/private")
    # A client cannot smuggle an ACL in through Lode's own internal header.
    r = requests.post(plain["url"], data=plain["fields"], files={"file": ("f", b"secret")},
                      headers={"x-lode-form-acl": "public-read"})
    assert r.status_code == 204, r.text
    refused(anon.get_object, Bucket=b, Key="form/private")
    alice.put_public_access_block(Bucket=b, PublicAccessBlockConfiguration={"BlockPublicAcls": True})
    r = requests.post(post["url"], data=post["fields"], files={"file": ("dog.txt", b"woof")})
    assert r.status_code == 403, r.text
    refused(alice.head_object, Bucket=b, Key="form/dog.txt", want=(404, "404"))


def test_aws_cli_acls(aws, people):
    """aws-cli as a newcomer uses it: `s3 cp --acl`, `s3api put-object-acl`, `get-bucket-acl`
    (as root, on a bucket root owns)."""
    anon = people["anon"]
    name = "cli-" + uuid.uuid4().hex[:10]
    aws("s3api", "create-bucket", "--bucket", name)
    try:
        with tempfile.NamedTemporaryFile(suffix=".txt") as f:
            f.write(b"from the cli")
            f.flush()
            aws("s3", "cp", f.name, f"s3://{name}/shared.txt", "--acl", "public-read")
            aws("s3", "cp", f.name, f"s3://{name}/closed.txt")
        assert anon.get_object(Bucket=name, Key="shared.txt")["Body"].read() == b"from the cli"
        refused(anon.get_object, Bucket=name, Key="closed.txt")
        aws("s3api", "put-object-acl", "--bucket", name, "--key", "closed.txt", "--acl", "public-read")
        assert anon.get_object(Bucket=name, Key="closed.txt")["Body"].read() == b"from the cli"
        out = json.loads(aws("s3api", "get-object-acl", "--bucket", name, "--key", "closed.txt").stdout)
        assert {"Grantee": {"Type": "Group", "URI": ALL_USERS}, "Permission": "READ"} in out["Grants"]
        assert out["Owner"]["DisplayName"] == "root" and out["Owner"]["ID"] == cid("root")
        aws("s3api", "put-bucket-acl", "--bucket", name, "--acl", "public-read")
        out = json.loads(aws("s3api", "get-bucket-acl", "--bucket", name).stdout)
        assert {"Grantee": {"Type": "Group", "URI": ALL_USERS}, "Permission": "READ"} in out["Grants"]
        p = aws("s3api", "put-bucket-acl", "--bucket", name, "--grant-read", 'id="nobody"', check=False)
        assert p.returncode != 0 and b"InvalidArgument" in p.stderr
    finally:
        aws("s3", "rb", f"s3://{name}", "--force")


def test_grants_by_email_name_the_user_given_that_address(lode_servers, people, owned):
    """`lode admin user add NAME --email ADDR`: ACL grants may name the user by that address
    (stored, and answered, as the user's canonical id, as S3 does)."""
    alice_name, alice = people["alice"]
    srv = lode_servers[0]
    name = "carol-" + uuid.uuid4().hex[:6]
    addr = f"{name}@Example.COM"
    creds = json.loads(admin(srv, "user", "add", name, "--email", addr).stdout)
    try:
        listed = {u["name"]: u.get("email") for u in json.loads(admin(srv, "user", "list").stdout)}
        assert listed[name] == addr.lower()
        # An address is one user's.
        p = admin(srv, "user", "add", name + "-2", "--email", addr.upper(), check=False)
        assert p.returncode != 0 and b"another user" in p.stderr
        p = admin(srv, "user", "add", name + "-3", "--email", "not an address", check=False)
        assert p.returncode != 0 and b"invalid email" in p.stderr
        from test_users import client_for
        carol = client_for(srv, creds)
        b = owned
        alice.put_object(Bucket=b, Key="k", Body=b"for carol")
        refused(carol.get_object, Bucket=b, Key="k")
        alice.put_object_acl(Bucket=b, Key="k", GrantRead=f'emailAddress="{addr.lower()}"',
                             GrantFullControl=f'id="{cid(alice_name)}"')
        assert carol.get_object(Bucket=b, Key="k")["Body"].read() == b"for carol"
        assert (cid(name), "READ") in grants_of(alice.get_object_acl(Bucket=b, Key="k"))
        alice.put_bucket_acl(Bucket=b, AccessControlPolicy={
            "Owner": {"ID": cid(alice_name)},
            "Grants": [{"Grantee": {"Type": "AmazonCustomerByEmail", "EmailAddress": addr}, "Permission": "READ"}]})
        assert carol.list_objects_v2(Bucket=b)["KeyCount"] == 1
        alice.put_bucket_acl(Bucket=b, ACL="private")
    finally:
        admin(srv, "user", "remove", name)
    # The address names nobody once its user is gone: at once through the gateway that removed
    # the user, within 2 s through the others (SEMANTICS.md rule 18).
    import time
    deadline = time.monotonic() + 3
    while True:
        try:
            refused(alice.put_object_acl, Bucket=owned, Key="k", GrantRead=f'emailAddress="{addr}"',
                    want=(400, "UnresolvableGrantByEmailAddress"))
            break
        except BaseException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
