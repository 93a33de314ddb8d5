"""Encryption at rest (issue 33): SSE-S3 by default, SSE-KMS with Lode's own key ring, SSE-C,
bucket default encryption, through boto3 and aws-cli, on the session's server(s) (in cluster mode
the requests alternate between two gateways, so a key made or disabled through one is used by
the other). The raw bytes under Lode (the device file and metadata store on one node, the RADOS
objects with the `rados` CLI in cluster mode) hold no plaintext of encrypted objects, and do hold
the plaintext of objects written in clear, so the scan can fail."""

import base64
import hashlib
import json
import os
import subprocess
import uuid

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from conftest import ACCESS_KEY, CLUSTER_MODE, REGION, SECRET_KEY, Lode, cluster_gateways, local_only
from test_tls import pki  # noqa: F401 (fixture)
from test_users import admin


def code_of(e):
    r = e.value.response
    return r["ResponseMetadata"]["HTTPStatusCode"], r["Error"]["Code"]


def refused(fn, *args, **kw):
    with pytest.raises(ClientError) as e:
        fn(*args, **kw)
    return code_of(e)


def within(seconds, ok):
    """`ok()` holds within `seconds` (a documented propagation bound), polled."""
    import time
    deadline = time.time() + seconds
    while not ok():
        assert time.time() < deadline, f"not within {seconds} s"
        time.sleep(0.05)


def new_key(srv, description="test"):
    p = admin(srv, "kms", "create-key", "--description", description)
    return json.loads(p.stdout)["id"]


def body_of(n, seed=b"lode-sse"):
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.sha256(seed + i.to_bytes(8, "big")).digest()
        i += 1
    return bytes(out[:n])


SIZES = [0, 1000, 70_000, 5 * 1024 * 1024 + 123]


@pytest.mark.parametrize("size", SIZES)
def test_sse_s3_is_the_default_and_reads_back(s3, bucket, size):
    body = body_of(size)
    put = s3.put_object(Bucket=bucket, Key="k", Body=body)
    assert put["ServerSideEncryption"] == "AES256"
    got = s3.get_object(Bucket=bucket, Key="k")
    assert got["ServerSideEncryption"] == "AES256"
    assert got["Body"].read() == body
    # ETag stays the plaintext's MD5, as on AWS for SSE-S3.
    assert got["ETag"] == '"%s"' % hashlib.md5(body).hexdigest()
    assert s3.head_object(Bucket=bucket, Key="k")["ServerSideEncryption"] == "AES256"
    if size > 10:
        for a, b in [(0, 0), (size // 3, size // 2), (size - 1, size - 1), (65535, 65537)]:
            if b >= size:
                continue
            r = s3.get_object(Bucket=bucket, Key="k", Range=f"bytes={a}-{b}")["Body"].read()
            assert r == body[a:b + 1], (a, b)


def test_explicit_aes256_copy_and_multipart(s3, bucket):
    body = body_of(12 << 20, b"mp")
    cr = s3.create_multipart_upload(Bucket=bucket, Key="mp", ServerSideEncryption="AES256")
    assert cr["ServerSideEncryption"] == "AES256"
    parts = []
    for n, at in enumerate(range(0, len(body), 5 << 20), start=1):
        p = s3.upload_part(Bucket=bucket, Key="mp", UploadId=cr["UploadId"], PartNumber=n,
                           Body=body[at:at + (5 << 20)])
        assert p["ServerSideEncryption"] == "AES256"
        parts.append({"PartNumber": n, "ETag": p["ETag"]})
    done = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=cr["UploadId"],
                                        MultipartUpload={"Parts": parts})
    assert done["ServerSideEncryption"] == "AES256"
    assert s3.get_object(Bucket=bucket, Key="mp")["Body"].read() == body
    # Reads that cross part and chunk boundaries.
    for a, b in [((5 << 20) - 10, (5 << 20) + 10), (4 << 20, (10 << 20) + 5)]:
        r = s3.get_object(Bucket=bucket, Key="mp", Range=f"bytes={a}-{b}")["Body"].read()
        assert r == body[a:b + 1]
    assert s3.get_object(Bucket=bucket, Key="mp", PartNumber=2)["Body"].read() == body[5 << 20:10 << 20]
    cp = s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "mp"})
    assert cp["ServerSideEncryption"] == "AES256"
    assert s3.get_object(Bucket=bucket, Key="copy")["Body"].read() == body
    # UploadPartCopy from an encrypted source into an encrypted upload.
    up = s3.create_multipart_upload(Bucket=bucket, Key="upc")
    p = s3.upload_part_copy(Bucket=bucket, Key="upc", UploadId=up["UploadId"], PartNumber=1,
                            CopySource={"Bucket": bucket, "Key": "mp"}, CopySourceRange="bytes=100-200099")
    s3.complete_multipart_upload(Bucket=bucket, Key="upc", UploadId=up["UploadId"],
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": p["CopyPartResult"]["ETag"]}]})
    assert s3.get_object(Bucket=bucket, Key="upc")["Body"].read() == body[100:200100]


def test_sse_kms_with_the_key_ring(s3, bucket, lode_servers):
    srv = lode_servers[0]
    key = new_key(srv, "team a")
    listed = json.loads(admin(srv, "kms", "list-keys").stdout)
    assert key in [k["id"] for k in listed]
    assert "material" not in json.dumps(listed) and "sealed" not in json.dumps(listed)
    ctx = base64.b64encode(json.dumps({"team": "a"}).encode()).decode()
    body = body_of(300_000, b"kms")
    put = s3.put_object(Bucket=bucket, Key="k", Body=body, ServerSideEncryption="aws:kms",
                        SSEKMSKeyId=key, SSEKMSEncryptionContext=ctx, BucketKeyEnabled=True)
    assert put["ServerSideEncryption"] == "aws:kms"
    assert put["SSEKMSKeyId"].endswith(f":key/{key}")
    assert put["BucketKeyEnabled"] is True
    got = s3.get_object(Bucket=bucket, Key="k")
    assert got["Body"].read() == body
    assert (got["ServerSideEncryption"], got["SSEKMSKeyId"].rsplit("/", 1)[1]) == ("aws:kms", key)
    # DSSE, and no key named: the key ring's default key.
    d = s3.put_object(Bucket=bucket, Key="dsse", Body=b"x", ServerSideEncryption="aws:kms:dsse")
    assert d["ServerSideEncryption"] == "aws:kms:dsse" and d["SSEKMSKeyId"]
    assert s3.get_object(Bucket=bucket, Key="dsse")["Body"].read() == b"x"
    # A disabled key: its objects do not open until it is enabled: through the gateway that
    # changed it at once, through the others within the key ring's 1 s (SEMANTICS.md rule 29).
    admin(srv, "kms", "disable-key", key)
    one = boto3.client("s3", endpoint_url=srv.endpoint, aws_access_key_id=ACCESS_KEY,
                       aws_secret_access_key=SECRET_KEY, region_name=REGION)
    assert refused(one.get_object, Bucket=bucket, Key="k") == (403, "KMS.DisabledException")
    def disabled_everywhere():
        for _ in lode_servers:
            try:
                s3.get_object(Bucket=bucket, Key="k")
                return False
            except ClientError as e:
                r = e.response
                assert (r["ResponseMetadata"]["HTTPStatusCode"], r["Error"]["Code"]) == (403, "KMS.DisabledException")
        return True
    within(1.5, disabled_everywhere)
    assert refused(s3.put_object, Bucket=bucket, Key="k2", Body=b"y", ServerSideEncryption="aws:kms",
                   SSEKMSKeyId=key) == (403, "KMS.DisabledException")
    admin(srv, "kms", "enable-key", key)
    assert one.get_object(Bucket=bucket, Key="k")["Body"].read() == body

    def readable():
        try:
            return all(s3.get_object(Bucket=bucket, Key="k")["Body"].read() == body for _ in lode_servers)
        except ClientError:
            return False
    within(1.5, readable)
    # A browser form upload (POST) under the key.
    import requests
    form = {"x-amz-server-side-encryption": "aws:kms", "x-amz-server-side-encryption-aws-kms-key-id": key}
    post = s3.generate_presigned_post(bucket, "form", Fields=form, Conditions=[{k: v} for k, v in form.items()],
                                      ExpiresIn=600)
    r = requests.post(post["url"], data=post["fields"], files={"file": ("f", b"posted")})
    assert r.status_code == 204, r.text
    h = s3.head_object(Bucket=bucket, Key="form")
    assert (h["ServerSideEncryption"], h["SSEKMSKeyId"].rsplit("/", 1)[1]) == ("aws:kms", key)
    assert s3.get_object(Bucket=bucket, Key="form")["Body"].read() == b"posted"
    # An unknown key.
    assert refused(s3.put_object, Bucket=bucket, Key="k3", Body=b"z", ServerSideEncryption="aws:kms",
                   SSEKMSKeyId=str(uuid.uuid4())) == (400, "KMS.NotFoundException")
    # Copy to SSE-S3 and back to KMS re-seals the key (same bytes read back).
    s3.copy_object(Bucket=bucket, Key="s3copy", CopySource={"Bucket": bucket, "Key": "k"},
                   ServerSideEncryption="AES256")
    h = s3.head_object(Bucket=bucket, Key="s3copy")
    assert h["ServerSideEncryption"] == "AES256"
    assert s3.get_object(Bucket=bucket, Key="s3copy")["Body"].read() == body
    admin(srv, "kms", "schedule-deletion", key, "--days", "7")
    assert refused(one.get_object, Bucket=bucket, Key="k")[1] == "KMS.KMSInvalidStateException"
    # The copy holds its own key: unaffected.
    assert s3.get_object(Bucket=bucket, Key="s3copy")["Body"].read() == body


def test_bucket_default_encryption(s3, bucket, lode_servers):
    srv = lode_servers[0]
    got = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert got["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    assert got["BlockedEncryptionTypes"]["EncryptionType"] == ["SSE-C"]
    key = new_key(srv)
    s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={"Rules": [{
        "ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": key},
        "BucketKeyEnabled": True}]})
    rule = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert rule["ApplyServerSideEncryptionByDefault"]["KMSMasterKeyID"].endswith(key)
    assert rule["BucketKeyEnabled"] is True
    put = s3.put_object(Bucket=bucket, Key="d", Body=b"default")
    assert (put["ServerSideEncryption"], put["SSEKMSKeyId"].rsplit("/", 1)[1]) == ("aws:kms", key)
    # A request's own headers win over the default.
    assert s3.put_object(Bucket=bucket, Key="e", Body=b"own", ServerSideEncryption="AES256")[
        "ServerSideEncryption"] == "AES256"
    assert refused(s3.put_bucket_encryption, Bucket=bucket, ServerSideEncryptionConfiguration={"Rules": [{
        "ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256", "KMSMasterKeyID": key}}]})[0] == 400
    s3.delete_bucket_encryption(Bucket=bucket)
    assert s3.put_object(Bucket=bucket, Key="f", Body=b"x")["ServerSideEncryption"] == "AES256"
    assert s3.get_object(Bucket=bucket, Key="d")["Body"].read() == b"default"


def ssec(key):
    return {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": key}


def raw_ssec_put(endpoint, bucket, key, body, k):
    """A PUT with SSE-C headers signed by hand (botocore will not send an SSE-C key over plain
    HTTP): the server's own answer."""
    import requests
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    headers = {
        "x-amz-server-side-encryption-customer-algorithm": "AES256",
        "x-amz-server-side-encryption-customer-key": base64.b64encode(k).decode(),
        "x-amz-server-side-encryption-customer-key-MD5": base64.b64encode(hashlib.md5(k).digest()).decode(),
        "x-amz-content-sha256": hashlib.sha256(body).hexdigest(),
    }
    url = f"{endpoint}/{bucket}/{key}"
    req = AWSRequest(method="PUT", url=url, data=body, headers=headers)
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", REGION).add_auth(req)
    return requests.put(url, data=body, headers=dict(req.headers))


def test_sse_c_is_refused_over_plain_http(s3, bucket):
    assert s3.meta.endpoint_url.startswith("http://")
    k = os.urandom(32)
    r = raw_ssec_put(s3.meta.endpoint_url, bucket, "c", b"x", k)
    assert r.status_code == 400 and b"secure connection" in r.content, r.content
    assert base64.b64encode(k) not in r.content


@pytest.fixture(scope="module")
def tls(pki, tmp_path_factory):  # noqa: F811
    """A server (cluster mode: a gateway) over TLS, for SSE-C."""
    args = ["--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key")]
    if CLUSTER_MODE:
        gws = cluster_gateways(tmp_path_factory, n=1, first_args=args)
    else:
        d = tmp_path_factory.mktemp("sse-tls")
        gws = [Lode(str(d / "data"), extra_args=args, device_size="256MiB")]
        gws[0].start()
    c = boto3.client("s3", endpoint_url=gws[0].endpoint, aws_access_key_id=ACCESS_KEY,
                     aws_secret_access_key=SECRET_KEY, region_name=REGION, verify=str(pki / "ca.pem"),
                     config=Config(retries={"max_attempts": 1}))
    yield gws[0], c
    for g in gws:
        g.remove()


def test_sse_c_round_trip_and_errors(tls, pki):  # noqa: F811
    srv, s3 = tls
    b = "ssec-" + uuid.uuid4().hex[:8]
    s3.create_bucket(Bucket=b)
    k1, k2 = os.urandom(32), os.urandom(32)
    # Blocked on a new bucket (AWS's default since April 2026) until BlockedEncryptionTypes NONE.
    assert refused(s3.put_object, Bucket=b, Key="c", Body=b"x", **ssec(k1)) == (403, "AccessDenied")
    s3.put_bucket_encryption(Bucket=b, ServerSideEncryptionConfiguration={"Rules": [{
        "ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"},
        "BlockedEncryptionTypes": {"EncryptionType": ["NONE"]}}]})
    rule = s3.get_bucket_encryption(Bucket=b)["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert rule["BlockedEncryptionTypes"]["EncryptionType"] == ["NONE"]
    body = body_of(5 * 1024 * 1024 + 7, b"ssec")
    put = s3.put_object(Bucket=b, Key="c", Body=body, **ssec(k1))
    assert put["SSECustomerAlgorithm"] == "AES256"
    assert put["SSECustomerKeyMD5"] == base64.b64encode(hashlib.md5(k1).digest()).decode()
    assert "ServerSideEncryption" not in put
    got = s3.get_object(Bucket=b, Key="c", **ssec(k1))
    assert got["Body"].read() == body and got["SSECustomerAlgorithm"] == "AES256"
    assert s3.get_object(Bucket=b, Key="c", Range="bytes=70000-70010", **ssec(k1))["Body"].read() == body[70000:70011]
    assert s3.head_object(Bucket=b, Key="c", **ssec(k1))["ContentLength"] == len(body)
    # No key: 400; another key: 403 (HEAD too, without a body).
    assert refused(s3.get_object, Bucket=b, Key="c") == (400, "InvalidRequest")
    assert refused(s3.get_object, Bucket=b, Key="c", **ssec(k2)) == (403, "AccessDenied")
    assert refused(s3.head_object, Bucket=b, Key="c", **ssec(k2))[0] == 403
    assert refused(s3.head_object, Bucket=b, Key="c")[0] == 400
    # GetObjectAttributes too needs the key (AWS lists the SSE-C headers among its parameters).
    # (botocore encodes the key for GET and HEAD only: here it is sent encoded by hand.)
    def encoded(k):
        return {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": base64.b64encode(k).decode(),
                "SSECustomerKeyMD5": base64.b64encode(hashlib.md5(k).digest()).decode()}
    attrs = dict(Bucket=b, Key="c", ObjectAttributes=["ObjectSize", "ETag"])
    assert s3.get_object_attributes(**attrs, **encoded(k1))["ObjectSize"] == len(body)
    assert refused(s3.get_object_attributes, **attrs) == (400, "InvalidRequest")
    assert refused(s3.get_object_attributes, **attrs, **encoded(k2)) == (403, "AccessDenied")
    # A key for an object that is not SSE-C.
    s3.put_object(Bucket=b, Key="plain", Body=b"p")
    assert refused(s3.get_object, Bucket=b, Key="plain", **ssec(k1)) == (400, "InvalidRequest")
    # Copy: SSE-C to SSE-C under another key, and out to SSE-S3.
    s3.copy_object(Bucket=b, Key="c2", CopySource={"Bucket": b, "Key": "c"}, **ssec(k2),
                   CopySourceSSECustomerAlgorithm="AES256", CopySourceSSECustomerKey=k1)
    assert s3.get_object(Bucket=b, Key="c2", **ssec(k2))["Body"].read() == body
    assert refused(s3.copy_object, Bucket=b, Key="c3", CopySource={"Bucket": b, "Key": "c"})[0] == 400
    s3.copy_object(Bucket=b, Key="c3", CopySource={"Bucket": b, "Key": "c"},
                   CopySourceSSECustomerAlgorithm="AES256", CopySourceSSECustomerKey=k1)
    h = s3.head_object(Bucket=b, Key="c3")
    assert h["ServerSideEncryption"] == "AES256"
    assert s3.get_object(Bucket=b, Key="c3")["Body"].read() == body
    # Multipart under SSE-C: every part with the key; a part with another key is refused.
    up = s3.create_multipart_upload(Bucket=b, Key="m", **ssec(k1))
    p1 = s3.upload_part(Bucket=b, Key="m", UploadId=up["UploadId"], PartNumber=1, Body=body[:5 << 20], **ssec(k1))
    assert refused(s3.upload_part, Bucket=b, Key="m", UploadId=up["UploadId"], PartNumber=2,
                   Body=body[5 << 20:], **ssec(k2)) == (403, "AccessDenied")
    p2 = s3.upload_part(Bucket=b, Key="m", UploadId=up["UploadId"], PartNumber=2, Body=body[5 << 20:], **ssec(k1))
    s3.complete_multipart_upload(Bucket=b, Key="m", UploadId=up["UploadId"], MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": p1["ETag"]}, {"PartNumber": 2, "ETag": p2["ETag"]}]})
    assert s3.get_object(Bucket=b, Key="m", **ssec(k1))["Body"].read() == body
    # Bad headers: a key of the wrong length or a wrong MD5.
    import botocore.handlers  # noqa: F401 (boto3 computes the MD5 itself; send a raw bad one)
    assert refused(s3.get_object, Bucket=b, Key="c", SSECustomerAlgorithm="AES256",
                   SSECustomerKey=os.urandom(16))[0] == 400
    # A browser form upload (POST) carries the same fields; the key is checked as on a PUT.
    import requests
    form = {"x-amz-server-side-encryption-customer-algorithm": "AES256",
            "x-amz-server-side-encryption-customer-key": base64.b64encode(k1).decode(),
            "x-amz-server-side-encryption-customer-key-MD5": base64.b64encode(hashlib.md5(k1).digest()).decode()}
    post = s3.generate_presigned_post(b, "form", Fields=form, Conditions=[{k: v} for k, v in form.items()],
                                      ExpiresIn=600)
    r = requests.post(post["url"], data=post["fields"], files={"file": ("f", b"posted")}, verify=str(pki / "ca.pem"))
    assert r.status_code == 204, r.text
    assert s3.get_object(Bucket=b, Key="form", **ssec(k1))["Body"].read() == b"posted"
    assert refused(s3.get_object, Bucket=b, Key="form") == (400, "InvalidRequest")
    bad = dict(post["fields"], **{"x-amz-server-side-encryption-customer-key-MD5": base64.b64encode(b"0" * 16).decode()})
    r = requests.post(post["url"], data=bad, files={"file": ("f", b"posted")}, verify=str(pki / "ca.pem"))
    assert r.status_code in (400, 403), r.text
    # The key never shows in the server's log.
    log = open(srv.log_path, "rb").read()
    for k in (k1, k2):
        assert base64.b64encode(k) not in log and k.hex().encode() not in log


def test_aws_cli_sse_flags(aws, tmp_path, lode_servers):
    b = "cli-sse-" + uuid.uuid4().hex[:8]
    aws("s3", "mb", f"s3://{b}")
    f = tmp_path / "f.bin"
    f.write_bytes(body_of(9 << 20, b"cli"))
    aws("s3", "cp", str(f), f"s3://{b}/a", "--sse", "AES256")
    h = json.loads(aws("s3api", "head-object", "--bucket", b, "--key", "a").stdout)
    assert h["ServerSideEncryption"] == "AES256"
    key = new_key(lode_servers[0], "cli")
    aws("s3", "cp", str(f), f"s3://{b}/k", "--sse", "aws:kms", "--sse-kms-key-id", key)
    h = json.loads(aws("s3api", "head-object", "--bucket", b, "--key", "k").stdout)
    assert h["ServerSideEncryption"] == "aws:kms" and h["SSEKMSKeyId"].endswith(key)
    out = tmp_path / "back.bin"
    aws("s3", "cp", f"s3://{b}/k", str(out))
    assert out.read_bytes() == f.read_bytes()


def scan_for(paths, needles):
    """Which of `needles` occur in the files under `paths`."""
    found = set()
    for root in paths:
        for dirpath, _, files in os.walk(root):
            for name in files:
                p = os.path.join(dirpath, name)
                try:
                    with open(p, "rb") as fh:
                        while True:
                            block = fh.read(64 << 20)
                            if not block:
                                break
                            for n in needles:
                                if n in block:
                                    found.add(n)
                except OSError:
                    continue
    return found


@local_only
def test_raw_bytes_on_one_node_are_not_the_plaintext(tmp_path):
    srv = Lode(str(tmp_path / "data"), device_size="128MiB", extra_toml="[encryption]\ndefault = false\n")
    srv.start()
    try:
        s3 = boto3.client("s3", endpoint_url=srv.endpoint, aws_access_key_id=ACCESS_KEY,
                          aws_secret_access_key=SECRET_KEY, region_name=REGION)
        s3.create_bucket(Bucket="clear")
        s3.create_bucket(Bucket="sealed")
        s3.put_bucket_encryption(Bucket="sealed", ServerSideEncryptionConfiguration={"Rules": [{
            "ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]})
        big_clear, big_sealed = body_of(3 << 20, b"clear-big"), body_of(3 << 20, b"sealed-big")
        small_clear, small_sealed = body_of(3000, b"clear-small"), body_of(3000, b"sealed-small")
        assert "ServerSideEncryption" not in s3.put_object(Bucket="clear", Key="big", Body=big_clear)
        s3.put_object(Bucket="clear", Key="small", Body=small_clear)
        assert s3.put_object(Bucket="sealed", Key="big", Body=big_sealed)["ServerSideEncryption"] == "AES256"
        s3.put_object(Bucket="sealed", Key="small", Body=small_sealed)
        needles = {n: n[1000:1064] for n in (big_clear, big_sealed, small_clear, small_sealed)}
        found = scan_for([srv.data_dir], set(needles.values()))
        assert needles[big_clear] in found and needles[small_clear] in found, "the scan finds plaintext"
        assert needles[big_sealed] not in found and needles[small_sealed] not in found
        assert s3.get_object(Bucket="sealed", Key="big")["Body"].read() == big_sealed
    finally:
        srv.remove()


@pytest.mark.skipif(not CLUSTER_MODE, reason="the RADOS objects of a cluster")
def test_raw_rados_objects_are_not_the_plaintext(tmp_path_factory):
    gws = cluster_gateways(tmp_path_factory, n=1, extra_toml="[encryption]\ndefault = false\n")
    try:
        g = gws[0]
        s3 = boto3.client("s3", endpoint_url=g.endpoint, aws_access_key_id=ACCESS_KEY,
                          aws_secret_access_key=SECRET_KEY, region_name=REGION)
        s3.create_bucket(Bucket="clear")
        s3.put_object(Bucket="clear", Key="big", Body=body_of(3 << 20, b"rados-clear"))
        s3.create_bucket(Bucket="sealed")
        s3.put_object(Bucket="sealed", Key="big", Body=body_of(3 << 20, b"rados-sealed"),
                      ServerSideEncryption="AES256")
        conf = os.environ["LODE_CEPH_CONF"]
        ns = g.extra_args[g.extra_args.index("--namespace") + 1]
        out = tmp_path_factory.mktemp("rados")
        names = subprocess.run(["rados", "-c", conf, "-p", "lode-compat-data", "-N", ns, "ls"],
                               check=True, capture_output=True, text=True).stdout.split()
        assert names
        for i, n in enumerate(names):
            subprocess.run(["rados", "-c", conf, "-p", "lode-compat-data", "-N", ns, "get", n, str(out / f"o{i}")],
                           check=True, capture_output=True)
        clear, sealed = body_of(3 << 20, b"rados-clear")[5000:5064], body_of(3 << 20, b"rados-sealed")[5000:5064]
        found = scan_for([str(out)], {clear, sealed})
        assert clear in found, "the scan finds plaintext"
        assert sealed not in found
    finally:
        for g in gws:
            g.remove()


@local_only
def test_a_wrong_master_key_stops_the_start_and_no_key_is_logged(tmp_path):
    """Lode never serves bytes it cannot decrypt: a master key that does not open the stored
    master key versions is refused at start, with a clear error that names no key. A rotation
    adds a version that the next start opens, and older objects still read."""
    srv = Lode(str(tmp_path / "data"), device_size="64MiB")
    srv.start()
    try:
        s3 = boto3.client("s3", endpoint_url=srv.endpoint, aws_access_key_id=ACCESS_KEY,
                          aws_secret_access_key=SECRET_KEY, region_name=REGION)
        s3.create_bucket(Bucket="mkey")
        s3.put_object(Bucket="mkey", Key="old", Body=b"before rotation")
        shown = json.loads(admin(srv, "master-key", "show").stdout)
        assert shown == {"versions": [1], "current": 1, "retired": []}
        assert json.loads(admin(srv, "master-key", "rotate").stdout) == {"current": 2}
        s3.put_object(Bucket="mkey", Key="new", Body=b"after rotation")
        srv.stop()
        master = open(os.path.join(srv.data_dir, "master.key"), "rb").read()
        srv.start()
        assert s3.get_object(Bucket="mkey", Key="old")["Body"].read() == b"before rotation"
        assert s3.get_object(Bucket="mkey", Key="new")["Body"].read() == b"after rotation"
        srv.stop()
        with open(os.path.join(srv.data_dir, "master.key"), "wb") as f:
            f.write(os.urandom(32))
        with pytest.raises(RuntimeError) as e:
            srv.start()
        assert "does not open" in str(e.value) and "master" in str(e.value)
        log = open(srv.log_path, "rb").read()
        for form in (master.hex().encode(), base64.b64encode(master)):
            assert form not in log
    finally:
        srv.remove()


def test_rotation_reseals_every_key_then_the_old_version_retires(tmp_path_factory):
    """`lode admin master-key reseal` moves every SSE-S3 data key (current and noncurrent
    versions, multipart objects) and every key ring key to the newest master key version, in
    metadata only; an upload in progress keeps its old seal until it completes (and completes
    under the newest). Retiring a version is refused while anything is still sealed by it; once
    retired, it opens nothing, and every object still reads, through every gateway."""
    if CLUSTER_MODE:
        gws = cluster_gateways(tmp_path_factory)
    else:
        gws = [Lode(str(tmp_path_factory.mktemp("reseal") / "data"), device_size="256MiB")]
        gws[0].start()
    try:
        srv = gws[0]
        clients = [boto3.client("s3", endpoint_url=g.endpoint, aws_access_key_id=ACCESS_KEY,
                                aws_secret_access_key=SECRET_KEY, region_name=REGION,
                                config=Config(retries={"max_attempts": 1})) for g in gws]
        s3 = clients[0]
        s3.create_bucket(Bucket="rsl")
        s3.put_bucket_versioning(Bucket="rsl", VersioningConfiguration={"Status": "Enabled"})
        want = {}  # (key, version id) -> body
        for k, n in (("small", 100), ("mid", 70_000), ("big", 4 * 1024 * 1024 + 7)):
            body = body_of(n, k.encode())
            v = s3.put_object(Bucket="rsl", Key=k, Body=body)["VersionId"]
            want[(k, v)] = body
        v = s3.put_object(Bucket="rsl", Key="small", Body=b"second")["VersionId"]
        want[("small", v)] = b"second"
        part = body_of(5 * 1024 * 1024, b"part")
        up = s3.create_multipart_upload(Bucket="rsl", Key="mp")["UploadId"]
        e1 = s3.upload_part(Bucket="rsl", Key="mp", UploadId=up, PartNumber=1, Body=part)["ETag"]
        kms = new_key(srv, "reseal")
        v = s3.put_object(Bucket="rsl", Key="kms", Body=b"under a ring key", ServerSideEncryption="aws:kms",
                          SSEKMSKeyId=kms)["VersionId"]
        want[("kms", v)] = b"under a ring key"
        sse_s3 = 4  # object versions sealed by the master key (the KMS one is not)

        assert json.loads(admin(srv, "master-key", "rotate").stdout) == {"current": 2}
        p = admin(srv, "master-key", "retire", "1", check=False)
        assert p.returncode != 0 and b"still sealed by master key version 1" in p.stderr
        p = admin(srv, "master-key", "retire", "2", check=False)
        assert p.returncode != 0 and b"current" in p.stderr

        rep = json.loads(admin(srv, "master-key", "reseal").stdout)
        assert (rep["current"], rep["resealed"], rep["kms_keys"]) == (2, sse_s3, 1), rep
        assert rep["objects"] == len(want), rep
        assert rep["remaining"] == {"1": 1}, rep  # the upload in progress
        p = admin(srv, "master-key", "retire", "1", check=False)
        assert p.returncode != 0 and b"1 records" in p.stderr
        # The second part goes through the other gateway; the upload completes under version 2.
        e2 = clients[-1].upload_part(Bucket="rsl", Key="mp", UploadId=up, PartNumber=2, Body=b"tail")["ETag"]
        v = s3.complete_multipart_upload(Bucket="rsl", Key="mp", UploadId=up, MultipartUpload={
            "Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})["VersionId"]
        want[("mp", v)] = part + b"tail"
        rep = json.loads(admin(srv, "master-key", "reseal").stdout)
        assert (rep["resealed"], rep["kms_keys"], rep["remaining"]) == (0, 0, {}), rep

        assert json.loads(admin(srv, "master-key", "retire", "1").stdout) == {"version": 1, "retired": True}
        assert json.loads(admin(srv, "master-key", "show").stdout) == {
            "versions": [1, 2], "current": 2, "retired": [1]}

        def all_read():
            for c in clients:
                for (k, vid), body in want.items():
                    got = c.get_object(Bucket="rsl", Key=k, VersionId=vid)
                    assert got["Body"].read() == body, (k, vid)
                    assert got["ServerSideEncryption"] == ("aws:kms" if k == "kms" else "AES256")
            return True
        # The retiring gateway has it retired at once; the others within their 10 s reload,
        # and nothing they read needs it.
        assert all_read()
        s3.put_object(Bucket="rsl", Key="after", Body=b"new")
        assert s3.get_object(Bucket="rsl", Key="after")["Body"].read() == b"new"
        assert json.loads(admin(srv, "master-key", "unretire", "1").stdout) == {"version": 1, "retired": False}
        assert json.loads(admin(srv, "master-key", "show").stdout)["retired"] == []
    finally:
        for g in gws:
            g.remove()
