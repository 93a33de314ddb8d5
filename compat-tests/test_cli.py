"""The real aws-cli (latest from PyPI), default configuration: mb, cp, sync, ls, rm, rb, presign."""

import hashlib
import os
import uuid

import pytest
import requests


MiB = 1024 * 1024


def digest(p):
    h = hashlib.md5()
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


@pytest.fixture
def cli_bucket(aws):
    name = "cli-" + uuid.uuid4().hex[:10]
    aws("s3", "mb", f"s3://{name}")
    yield name
    aws("s3", "rb", f"s3://{name}", "--force")


@pytest.mark.parametrize("size", [0, 1, 1000, 5 * MiB, 8 * MiB + 1, 33 * MiB, 200 * MiB])
def test_cp_roundtrip(aws, cli_bucket, tmp_path, size):
    src = tmp_path / "src.bin"
    with open(src, "wb") as f:
        left = size
        while left:
            n = min(left, 8 * MiB)
            f.write(os.urandom(n))
            left -= n
    aws("s3", "cp", str(src), f"s3://{cli_bucket}/f.bin")
    dst = tmp_path / "dst.bin"
    aws("s3", "cp", f"s3://{cli_bucket}/f.bin", str(dst))
    assert os.path.getsize(dst) == size
    assert digest(dst) == digest(src)
    out = aws("s3api", "head-object", "--bucket", cli_bucket, "--key", "f.bin").stdout.decode()
    assert f'"ContentLength": {size}' in out


def test_sync_ls_rm_rb(aws, tmp_path):
    name = "sync-" + uuid.uuid4().hex[:10]
    aws("s3", "mb", f"s3://{name}")
    tree = tmp_path / "tree"
    files = {}
    for i in range(30):
        p = tree / f"d{i % 3}" / f"f{i}.txt"
        p.parent.mkdir(parents=True, exist_ok=True)
        data = os.urandom(100 + i * 1000)
        p.write_bytes(data)
        files[f"d{i % 3}/f{i}.txt"] = data
    aws("s3", "sync", str(tree), f"s3://{name}/data")
    ls = aws("s3", "ls", f"s3://{name}/data/").stdout.decode()
    assert "PRE d0/" in ls and "PRE d1/" in ls and "PRE d2/" in ls
    rec = aws("s3", "ls", "--recursive", f"s3://{name}/").stdout.decode()
    assert len([l for l in rec.splitlines() if l.strip()]) == 30
    # A second sync uploads nothing; a changed file is re-uploaded.
    again = aws("s3", "sync", str(tree), f"s3://{name}/data").stdout.decode()
    assert "upload:" not in again
    (tree / "d0" / "f0.txt").write_bytes(b"changed and longer than before" * 10)
    again = aws("s3", "sync", str(tree), f"s3://{name}/data").stdout.decode()
    assert "d0/f0.txt" in again
    back = tmp_path / "back"
    aws("s3", "sync", f"s3://{name}/data", str(back))
    for rel, data in files.items():
        if rel != "d0/f0.txt":
            assert (back / rel).read_bytes() == data
    assert (back / "d0" / "f0.txt").read_bytes() == b"changed and longer than before" * 10
    aws("s3", "rm", f"s3://{name}/data/d1", "--recursive")
    rec = aws("s3", "ls", "--recursive", f"s3://{name}/").stdout.decode()
    assert "d1/" not in rec and len([l for l in rec.splitlines() if l.strip()]) == 20
    p = aws("s3", "rb", f"s3://{name}", check=False)
    assert p.returncode != 0 and b"BucketNotEmpty" in p.stderr
    aws("s3", "rb", f"s3://{name}", "--force")
    assert f"{name}" not in aws("s3", "ls").stdout.decode()


def test_presign_fetched_with_plain_http(aws, cli_bucket, tmp_path):
    src = tmp_path / "p.txt"
    src.write_bytes(b"fetched by a plain HTTP client")
    aws("s3", "cp", str(src), f"s3://{cli_bucket}/p.txt")
    url = aws("s3", "presign", f"s3://{cli_bucket}/p.txt", "--expires-in", "120").stdout.decode().strip()
    r = requests.get(url)
    assert r.status_code == 200 and r.content == b"fetched by a plain HTTP client"


def test_cli_error_for_missing_key(aws, cli_bucket, tmp_path):
    p = aws("s3", "cp", f"s3://{cli_bucket}/nope", str(tmp_path / "x"), check=False)
    assert p.returncode != 0 and (b"404" in p.stderr or b"Not Found" in p.stderr)


def test_s3api_conditional_delete(aws, cli_bucket, tmp_path):
    src = tmp_path / "x.bin"
    src.write_bytes(os.urandom(1234))
    aws("s3", "cp", str(src), f"s3://{cli_bucket}/x.bin")
    bad = aws("s3api", "delete-object", "--bucket", cli_bucket, "--key", "x.bin", "--if-match", '"ffff"', check=False)
    assert bad.returncode != 0 and b"PreconditionFailed" in bad.stderr
    bad = aws("s3api", "delete-object", "--bucket", cli_bucket, "--key", "x.bin", "--if-match-size", "1233", check=False)
    assert bad.returncode != 0 and b"PreconditionFailed" in bad.stderr
    aws("s3api", "head-object", "--bucket", cli_bucket, "--key", "x.bin")
    aws("s3api", "delete-object", "--bucket", cli_bucket, "--key", "x.bin", "--if-match", digest(src), "--if-match-size", "1234")
    gone = aws("s3api", "head-object", "--bucket", cli_bucket, "--key", "x.bin", check=False)
    assert gone.returncode != 0 and b"404" in gone.stderr
    absent = aws("s3api", "delete-object", "--bucket", cli_bucket, "--key", "x.bin", "--if-match", "*", check=False)
    assert absent.returncode != 0 and b"NoSuchKey" in absent.stderr


def test_s3api_tagging(aws, cli_bucket, tmp_path):
    import json
    src = tmp_path / "t.bin"
    src.write_bytes(os.urandom(3000))
    aws("s3api", "put-object", "--bucket", cli_bucket, "--key", "t.bin", "--body", str(src), "--tagging", "a=1&b=two")
    got = json.loads(aws("s3api", "get-object-tagging", "--bucket", cli_bucket, "--key", "t.bin").stdout)
    assert got["TagSet"] == [{"Key": "a", "Value": "1"}, {"Key": "b", "Value": "two"}]
    aws("s3api", "put-object-tagging", "--bucket", cli_bucket, "--key", "t.bin",
        "--tagging", "TagSet=[{Key=stage,Value=clean}]")
    got = json.loads(aws("s3api", "get-object-tagging", "--bucket", cli_bucket, "--key", "t.bin").stdout)
    assert got["TagSet"] == [{"Key": "stage", "Value": "clean"}]
    head = json.loads(aws("s3api", "get-object", "--bucket", cli_bucket, "--key", "t.bin", str(tmp_path / "o")).stdout)
    assert head["TagCount"] == 1
    aws("s3api", "delete-object-tagging", "--bucket", cli_bucket, "--key", "t.bin")
    got = json.loads(aws("s3api", "get-object-tagging", "--bucket", cli_bucket, "--key", "t.bin").stdout)
    assert got["TagSet"] == []
    # The header form the CLI's shorthand is not: one pair with three '=' (S3's answer).
    bad = aws("s3api", "put-object", "--bucket", cli_bucket, "--key", "u", "--body", str(src),
              "--tagging", "TagSet=[{Key=string,Value=string}]", check=False)
    assert bad.returncode != 0 and b"InvalidArgument" in bad.stderr
    aws("s3api", "put-bucket-tagging", "--bucket", cli_bucket, "--tagging", "TagSet=[{Key=team,Value=ml}]")
    got = json.loads(aws("s3api", "get-bucket-tagging", "--bucket", cli_bucket).stdout)
    assert got["TagSet"] == [{"Key": "team", "Value": "ml"}]
    aws("s3api", "delete-bucket-tagging", "--bucket", cli_bucket)
    none = aws("s3api", "get-bucket-tagging", "--bucket", cli_bucket, check=False)
    assert none.returncode != 0 and b"NoSuchTagSet" in none.stderr


def test_s3api_versioning(aws, cli_bucket, tmp_path):
    import json
    one, two = tmp_path / "1", tmp_path / "2"
    one.write_bytes(b"first")
    two.write_bytes(b"second")
    aws("s3api", "put-bucket-versioning", "--bucket", cli_bucket, "--versioning-configuration", "Status=Enabled")
    st = json.loads(aws("s3api", "get-bucket-versioning", "--bucket", cli_bucket).stdout)
    assert st["Status"] == "Enabled"
    v1 = json.loads(aws("s3api", "put-object", "--bucket", cli_bucket, "--key", "k", "--body", str(one)).stdout)["VersionId"]
    aws("s3", "cp", str(two), f"s3://{cli_bucket}/k")
    out = tmp_path / "o"
    aws("s3api", "get-object", "--bucket", cli_bucket, "--key", "k", "--version-id", v1, str(out))
    assert out.read_bytes() == b"first"
    aws("s3", "rm", f"s3://{cli_bucket}/k")
    lv = json.loads(aws("s3api", "list-object-versions", "--bucket", cli_bucket).stdout)
    assert len(lv["Versions"]) == 2 and lv["DeleteMarkers"][0]["IsLatest"]
    gone = aws("s3api", "head-object", "--bucket", cli_bucket, "--key", "k", check=False)
    assert gone.returncode != 0 and b"404" in gone.stderr
    bad = aws("s3api", "get-object", "--bucket", cli_bucket, "--key", "k", "--version-id", "nope", str(out), check=False)
    assert bad.returncode != 0 and b"InvalidArgument" in bad.stderr
    # Emptying it the way the docs say: every version and marker by id; then rb works.
    for v in lv["Versions"] + lv["DeleteMarkers"]:
        aws("s3api", "delete-object", "--bucket", cli_bucket, "--key", v["Key"], "--version-id", v["VersionId"])
    lv = json.loads(aws("s3api", "list-object-versions", "--bucket", cli_bucket).stdout or "{}")
    assert not lv.get("Versions") and not lv.get("DeleteMarkers")


def test_s3api_lifecycle(aws, cli_bucket, tmp_path):
    import json
    cfg = tmp_path / "lc.json"
    cfg.write_text(json.dumps({"Rules": [
        {"ID": "logs", "Status": "Enabled", "Filter": {"Prefix": "logs/"}, "Expiration": {"Days": 30}},
        {"ID": "mpu", "Status": "Enabled", "Filter": {}, "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7}},
    ]}))
    aws("s3api", "put-bucket-lifecycle-configuration", "--bucket", cli_bucket, "--lifecycle-configuration", f"file://{cfg}")
    got = json.loads(aws("s3api", "get-bucket-lifecycle-configuration", "--bucket", cli_bucket).stdout)
    assert [r["ID"] for r in got["Rules"]] == ["logs", "mpu"]
    assert got["Rules"][0]["Expiration"] == {"Days": 30}
    cfg.write_text(json.dumps({"Rules": [{"ID": "bad", "Status": "Enabled", "Filter": {}, "Expiration": {"Days": 0}}]}))
    bad = aws("s3api", "put-bucket-lifecycle-configuration", "--bucket", cli_bucket, "--lifecycle-configuration", f"file://{cfg}", check=False)
    assert bad.returncode != 0 and b"InvalidArgument" in bad.stderr
    aws("s3api", "delete-bucket-lifecycle", "--bucket", cli_bucket)
    none = aws("s3api", "get-bucket-lifecycle-configuration", "--bucket", cli_bucket, check=False)
    assert none.returncode != 0 and b"NoSuchLifecycleConfiguration" in none.stderr


def test_s3api_rename_object(aws, cli_bucket, tmp_path):
    src = tmp_path / "r.bin"
    src.write_bytes(os.urandom(2000))
    aws("s3", "cp", str(src), f"s3://{cli_bucket}/a/r.bin")
    aws("s3api", "rename-object", "--bucket", cli_bucket, "--key", "b/r.bin", "--rename-source", f"{cli_bucket}/a/r.bin")
    dst = tmp_path / "back.bin"
    aws("s3", "cp", f"s3://{cli_bucket}/b/r.bin", str(dst))
    assert dst.read_bytes() == src.read_bytes()
    gone = aws("s3api", "head-object", "--bucket", cli_bucket, "--key", "a/r.bin", check=False)
    assert gone.returncode != 0 and b"404" in gone.stderr
    again = aws("s3api", "rename-object", "--bucket", cli_bucket, "--key", "c", "--rename-source", f"{cli_bucket}/b/r.bin",
                "--destination-if-none-match", "*", "--source-if-match", '"ffff"', check=False)
    assert again.returncode != 0 and b"PreconditionFailed" in again.stderr


def test_s3api_object_lock(aws, tmp_path):
    """aws s3api: a bucket made with object lock, its default retention, a version's retention
    and legal hold, and a locked version's removal refused until bypassed."""
    import json
    name = "cli-lock-" + uuid.uuid4().hex[:8]
    aws("s3api", "create-bucket", "--bucket", name, "--object-lock-enabled-for-bucket")
    try:
        aws("s3api", "put-object-lock-configuration", "--bucket", name, "--object-lock-configuration",
            '{"ObjectLockEnabled":"Enabled","Rule":{"DefaultRetention":{"Mode":"GOVERNANCE","Days":1}}}')
        conf = json.loads(aws("s3api", "get-object-lock-configuration", "--bucket", name).stdout)
        assert conf["ObjectLockConfiguration"]["Rule"]["DefaultRetention"] == {"Mode": "GOVERNANCE", "Days": 1}
        src = tmp_path / "f"
        src.write_bytes(b"locked")
        v = json.loads(aws("s3api", "put-object", "--bucket", name, "--key", "k", "--body", str(src),
                           "--object-lock-mode", "GOVERNANCE", "--object-lock-retain-until-date", "2140-01-01T00:00:00Z").stdout)["VersionId"]
        ret = json.loads(aws("s3api", "get-object-retention", "--bucket", name, "--key", "k").stdout)["Retention"]
        assert ret["Mode"] == "GOVERNANCE" and ret["RetainUntilDate"].startswith("2140-01-01T00:00:00")
        aws("s3api", "put-object-legal-hold", "--bucket", name, "--key", "k", "--legal-hold", "Status=ON")
        hold = json.loads(aws("s3api", "get-object-legal-hold", "--bucket", name, "--key", "k").stdout)
        assert hold["LegalHold"]["Status"] == "ON"
        denied = aws("s3api", "delete-object", "--bucket", name, "--key", "k", "--version-id", v,
                     "--bypass-governance-retention", check=False)
        assert denied.returncode != 0 and b"AccessDenied" in denied.stderr
        aws("s3api", "put-object-legal-hold", "--bucket", name, "--key", "k", "--legal-hold", "Status=OFF")
        denied = aws("s3api", "delete-object", "--bucket", name, "--key", "k", "--version-id", v, check=False)
        assert denied.returncode != 0 and b"AccessDenied" in denied.stderr
        aws("s3api", "delete-object", "--bucket", name, "--key", "k", "--version-id", v, "--bypass-governance-retention")
    finally:
        lv = json.loads(aws("s3api", "list-object-versions", "--bucket", name).stdout)
        for x in lv.get("Versions", []) + lv.get("DeleteMarkers", []):
            aws("s3api", "delete-object", "--bucket", name, "--key", x["Key"], "--version-id", x["VersionId"],
                "--bypass-governance-retention")
        aws("s3api", "delete-bucket", "--bucket", name)
