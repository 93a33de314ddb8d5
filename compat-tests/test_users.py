"""Several users: `lode admin` adds them to a running lode, each gets keys, buckets belong to
their creator, others need a grant. User A cannot read, list, overwrite or delete user B's
objects through S3 (boto3, aws-cli) nor through the POSIX mount; grants and revocations take
effect at once; removed users' keys stop working; secrets are never logged or stored in clear."""

import json
import os
import subprocess
import uuid

import pytest
from botocore.exceptions import ClientError

from conftest import ACCESS_KEY, SECRET_KEY, Lode, lode_bin, make_client
import boto3
from botocore.config import Config


def admin(srv, *args, check=True):
    env = dict(os.environ, LODE_SECRET_KEY=SECRET_KEY, RUST_LIB_BACKTRACE="0")
    p = subprocess.run([lode_bin(), "admin", "--admin-url", srv.admin, *args], capture_output=True, env=env, timeout=30)
    if check and p.returncode != 0:
        raise AssertionError(f"lode admin {args}: {p.stderr.decode()}")
    return p


def client_for(srv, creds):
    return boto3.client("s3", endpoint_url=srv.endpoint, aws_access_key_id=creds["access_key"],
                        aws_secret_access_key=creds["secret_key"], region_name="us-east-1",
                        config=Config(retries={"max_attempts": 1}))


def denied(fn, *args, **kw):
    with pytest.raises(ClientError) as e:
        fn(*args, **kw)
    assert e.value.response["Error"]["Code"] in ("AccessDenied", "403"), e.value.response  # HEAD has no body
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


@pytest.fixture(scope="module")
def multi(tmp_path_factory):
    d = tmp_path_factory.mktemp("users")
    mnt = f"/tmp/lode-users-{uuid.uuid4().hex[:8]}"
    cfg = d / "users.toml"
    cfg.write_text('[[datapath.devices]]\npath = "dev0.img"\nsize = "128MiB"\n[posix]\nallow_other = true\n')
    srv = Lode(str(d / "data"), extra_args=["--config", str(cfg), "--mount", mnt])
    srv.start()
    os.chmod(mnt, 0o755)
    srv.mnt = mnt
    srv.alice = json.loads(admin(srv, "user", "add", "alice", "--uid", "1001").stdout)
    srv.bob = json.loads(admin(srv, "user", "add", "bob", "--uid", "1002").stdout)
    yield srv
    srv.remove()
    subprocess.run(["umount", "-l", mnt], capture_output=True)
    os.rmdir(mnt)


def test_admin_cli_adds_lists_and_refuses_bad_calls(multi):
    assert multi.alice["access_key"].startswith("LODE") and len(multi.alice["secret_key"]) == 40
    listed = json.loads(admin(multi, "user", "list").stdout)
    assert {u["name"] for u in listed} >= {"alice", "bob"}
    assert all("secret_key" not in u for u in listed)
    p = admin(multi, "user", "add", "alice", check=False)
    assert p.returncode != 0 and b"already exists" in p.stderr
    p = admin(multi, "user", "add", "Bad Name", check=False)
    assert p.returncode != 0 and b"invalid user name" in p.stderr
    # Without the root secret the admin API refuses.
    env = dict(os.environ, LODE_SECRET_KEY="wrong-secret-wrong-secret", RUST_LIB_BACKTRACE="0")
    p = subprocess.run([lode_bin(), "admin", "--admin-url", multi.admin, "user", "list"], capture_output=True, env=env)
    assert p.returncode != 0 and b"401" in p.stderr


def test_a_user_cannot_touch_another_users_bucket_through_s3(multi):
    a, b = client_for(multi, multi.alice), client_for(multi, multi.bob)
    bucket = "alice-" + uuid.uuid4().hex[:8]
    a.create_bucket(Bucket=bucket)
    a.put_object(Bucket=bucket, Key="secret.txt", Body=b"alice only")
    denied(b.get_object, Bucket=bucket, Key="secret.txt")
    denied(b.head_object, Bucket=bucket, Key="secret.txt")
    denied(b.list_objects_v2, Bucket=bucket)
    denied(b.put_object, Bucket=bucket, Key="secret.txt", Body=b"overwritten")
    denied(b.delete_object, Bucket=bucket, Key="secret.txt")
    denied(b.delete_objects, Bucket=bucket, Delete={"Objects": [{"Key": "secret.txt"}]})
    denied(b.create_multipart_upload, Bucket=bucket, Key="mp")
    denied(b.delete_bucket, Bucket=bucket)
    # Copying out of alice's bucket into bob's own is a read of alice's: denied too.
    mine = "bob-" + uuid.uuid4().hex[:8]
    b.create_bucket(Bucket=mine)
    denied(b.copy_object, Bucket=mine, Key="stolen", CopySource={"Bucket": bucket, "Key": "secret.txt"})
    # Bob does not even see the bucket; alice and root do.
    assert bucket not in [x["Name"] for x in b.list_buckets()["Buckets"]]
    assert mine in [x["Name"] for x in b.list_buckets()["Buckets"]]
    assert bucket in [x["Name"] for x in a.list_buckets()["Buckets"]]
    root = make_client(multi.endpoint)
    assert root.get_object(Bucket=bucket, Key="secret.txt")["Body"].read() == b"alice only"
    assert a.get_object(Bucket=bucket, Key="secret.txt")["Body"].read() == b"alice only"


def test_creating_another_users_bucket_is_bucket_already_exists(multi):
    a, b = client_for(multi, multi.alice), client_for(multi, multi.bob)
    bucket = "taken-" + uuid.uuid4().hex[:8]
    a.create_bucket(Bucket=bucket)
    with pytest.raises(ClientError) as e:
        b.create_bucket(Bucket=bucket)
    assert (e.value.response["ResponseMetadata"]["HTTPStatusCode"], e.value.response["Error"]["Code"]) == (409, "BucketAlreadyExists")
    # The owner again: 200 in us-east-1 (AWS's legacy rule), and nothing changes.
    assert a.create_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] == 200
    # The owner did not change: bob still cannot write there.
    denied(b.put_object, Bucket=bucket, Key="x", Body=b"x")
    a.delete_bucket(Bucket=bucket)


def test_grants_and_revocation_take_effect_at_once(multi):
    a, b = client_for(multi, multi.alice), client_for(multi, multi.bob)
    bucket = "shared-" + uuid.uuid4().hex[:8]
    a.create_bucket(Bucket=bucket)
    a.put_object(Bucket=bucket, Key="k", Body=b"v")
    admin(multi, "grant", bucket, "bob", "read")
    assert b.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"
    assert [o["Key"] for o in b.list_objects_v2(Bucket=bucket)["Contents"]] == ["k"]
    denied(b.put_object, Bucket=bucket, Key="k2", Body=b"x")
    admin(multi, "grant", bucket, "bob", "write")
    b.put_object(Bucket=bucket, Key="k2", Body=b"x")
    b.delete_object(Bucket=bucket, Key="k2")
    denied(b.delete_bucket, Bucket=bucket)  # only the owner deletes the bucket
    admin(multi, "revoke", bucket, "bob")
    denied(b.get_object, Bucket=bucket, Key="k")


def test_deleted_bucket_forgets_its_grants(multi):
    a, b = client_for(multi, multi.alice), client_for(multi, multi.bob)
    bucket = "gone-" + uuid.uuid4().hex[:8]
    a.create_bucket(Bucket=bucket)
    admin(multi, "grant", bucket, "bob", "write")
    a.delete_bucket(Bucket=bucket)
    # Someone else makes a bucket of the same name: bob's old grant must not apply.
    carol = json.loads(admin(multi, "user", "add", "carol-" + uuid.uuid4().hex[:6]).stdout)
    c = client_for(multi, carol)
    c.create_bucket(Bucket=bucket)
    c.put_object(Bucket=bucket, Key="c", Body=b"carol")
    denied(b.get_object, Bucket=bucket, Key="c")


def test_removed_users_keys_stop_working(multi):
    dave = json.loads(admin(multi, "user", "add", "dave").stdout)
    d = client_for(multi, dave)
    d.list_buckets()
    admin(multi, "user", "remove", "dave")
    with pytest.raises(ClientError) as e:
        d.list_buckets()
    assert e.value.response["Error"]["Code"] == "InvalidAccessKeyId"


def test_the_mount_keeps_other_users_out_of_a_users_bucket(multi):
    a = client_for(multi, multi.alice)
    bucket = "posix-" + uuid.uuid4().hex[:8]
    a.create_bucket(Bucket=bucket)
    a.put_object(Bucket=bucket, Key="private.txt", Body=b"alice's")
    path = os.path.join(multi.mnt, bucket)
    st = os.stat(path)
    assert (st.st_uid, st.st_mode & 0o777) == (1001, 0o700)

    def as_uid(uid, *cmd):
        return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *cmd],
                              capture_output=True, timeout=30)

    assert as_uid(1001, "cat", os.path.join(path, "private.txt")).stdout == b"alice's"
    for cmd in (["cat", os.path.join(path, "private.txt")], ["ls", path],
                ["sh", "-c", f"echo x > {path}/private.txt"], ["rm", "-f", f"{path}/private.txt"]):
        p = as_uid(1002, *cmd)
        assert p.returncode != 0 and b"Permission denied" in p.stderr, (cmd, p)
    assert a.get_object(Bucket=bucket, Key="private.txt")["Body"].read() == b"alice's"


def test_secrets_are_not_in_the_log_nor_in_clear_in_the_metadata(multi):
    log = open(multi.log_path).read()
    for u in (multi.alice, multi.bob):
        assert u["secret_key"] not in log
        assert u["access_key"] in log  # access keys are not secret
    meta = os.path.join(multi.data_dir, "meta")
    blob = b"".join(open(os.path.join(meta, f), "rb").read() for f in os.listdir(meta)
                    if os.path.isfile(os.path.join(meta, f)))
    assert multi.alice["secret_key"].encode() not in blob
    assert os.stat(os.path.join(multi.data_dir, "master.key")).st_mode & 0o777 == 0o600
