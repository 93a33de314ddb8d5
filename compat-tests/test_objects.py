"""Object operations with boto3 in its default configuration (CRC checksums, aws-chunked
trailers on uploads, checksum validation on downloads)."""

import base64
import datetime
import hashlib
import os
import zlib
from urllib.parse import quote

import pytest
from botocore.exceptions import ClientError


def code(e):
    return e.value.response["Error"]["Code"]


def status(e):
    return e.value.response["ResponseMetadata"]["HTTPStatusCode"]


def md5(b):
    return hashlib.md5(b).hexdigest()


INLINE = 16 * 1024
CHUNK = 4 * 1024 * 1024


@pytest.mark.parametrize(
    "size", [0, 1, 99, INLINE, INLINE + 1, 300_000, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK + 12345]
)
def test_put_get_roundtrip_sizes(s3, bucket, size):
    body = os.urandom(size)
    r = s3.put_object(Bucket=bucket, Key=f"obj-{size}", Body=body)
    assert r["ETag"] == f'"{md5(body)}"'
    g = s3.get_object(Bucket=bucket, Key=f"obj-{size}")
    data = g["Body"].read()
    assert len(data) == size and data == body, "trailer or framing bytes must never end up in the object"
    assert g["ContentLength"] == size
    assert g["ETag"] == f'"{md5(body)}"'
    h = s3.head_object(Bucket=bucket, Key=f"obj-{size}")
    assert h["ContentLength"] == size and h["ETag"] == r["ETag"]


def test_overwrite_replaces_content(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"a" * 100_000)
    s3.put_object(Bucket=bucket, Key="k", Body=b"short")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"short"


def test_metadata_and_standard_headers(s3, bucket):
    exp = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    s3.put_object(
        Bucket=bucket,
        Key="meta",
        Body=b"hello",
        ContentType="text/x-lode",
        CacheControl="max-age=60",
        ContentDisposition='attachment; filename="h.txt"',
        ContentEncoding="identity",
        ContentLanguage="de-DE",
        Expires=exp,
        Metadata={"Owner": "Team-A", "purpose": "test"},
    )
    for r in (s3.head_object(Bucket=bucket, Key="meta"), s3.get_object(Bucket=bucket, Key="meta")):
        assert r["ContentType"] == "text/x-lode"
        assert r["CacheControl"] == "max-age=60"
        assert r["ContentDisposition"] == 'attachment; filename="h.txt"'
        assert r["ContentEncoding"] == "identity"
        assert r["ContentLanguage"] == "de-DE"
        assert r["Expires"] == exp
        assert r["Metadata"] == {"owner": "Team-A", "purpose": "test"}


def test_response_overrides(s3, bucket):
    s3.put_object(Bucket=bucket, Key="o", Body=b"x", ContentType="text/plain")
    r = s3.get_object(
        Bucket=bucket,
        Key="o",
        ResponseContentType="application/json",
        ResponseContentDisposition="inline",
        ResponseCacheControl="no-cache",
        ResponseContentLanguage="fr",
        ResponseContentEncoding="gzip",
    )
    assert r["ContentType"] == "application/json"
    assert r["ContentDisposition"] == "inline"
    assert r["CacheControl"] == "no-cache"
    assert r["ContentLanguage"] == "fr"
    assert r["ContentEncoding"] == "gzip"


def test_ranges(s3, bucket):
    body = os.urandom(CHUNK + 5000)  # spans two chunks
    s3.put_object(Bucket=bucket, Key="r", Body=body)
    cases = {
        "bytes=0-0": body[0:1],
        "bytes=10-19": body[10:20],
        f"bytes={CHUNK - 10}-{CHUNK + 10}": body[CHUNK - 10 : CHUNK + 11],
        "bytes=100-": body[100:],
        "bytes=-50": body[-50:],
        f"bytes=5-{len(body) + 100}": body[5:],
    }
    for rng, want in cases.items():
        r = s3.get_object(Bucket=bucket, Key="r", Range=rng)
        assert r["Body"].read() == want, rng
        assert r["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert r["ContentRange"].endswith(f"/{len(body)}")
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="r", Range=f"bytes={len(body)}-")
    assert code(e) == "InvalidRange" and status(e) == 416
    s3.put_object(Bucket=bucket, Key="inline", Body=b"0123456789")
    assert s3.get_object(Bucket=bucket, Key="inline", Range="bytes=3-5")["Body"].read() == b"345"


def test_conditional_reads(s3, bucket):
    r = s3.put_object(Bucket=bucket, Key="c", Body=b"cond")
    et = r["ETag"]
    past = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
    future = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
    assert s3.get_object(Bucket=bucket, Key="c", IfMatch=et)["Body"].read() == b"cond"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfMatch='"0000"')
    assert status(e) == 412
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfNoneMatch=et)
    assert status(e) == 304
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfModifiedSince=future)
    assert status(e) == 304
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfUnmodifiedSince=past)
    assert status(e) == 412
    assert s3.get_object(Bucket=bucket, Key="c", IfModifiedSince=past)["Body"].read() == b"cond"
    # If-Match true wins over a failing If-Unmodified-Since (RFC 7232, as S3 does).
    assert s3.get_object(Bucket=bucket, Key="c", IfMatch=et, IfUnmodifiedSince=past)["Body"].read() == b"cond"
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="c", IfMatch='"0000"')
    assert status(e) == 412


def test_conditional_writes(s3, bucket):
    s3.put_object(Bucket=bucket, Key="w", Body=b"v1", IfNoneMatch="*")
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="w", Body=b"v2", IfNoneMatch="*")
    assert code(e) == "PreconditionFailed" and status(e) == 412
    et = s3.head_object(Bucket=bucket, Key="w")["ETag"]
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="w", Body=b"v2", IfMatch='"ffff"')
    assert status(e) == 412
    s3.put_object(Bucket=bucket, Key="w", Body=b"v3", IfMatch=et)
    assert s3.get_object(Bucket=bucket, Key="w")["Body"].read() == b"v3"
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="absent", Body=b"v", IfMatch=et)
    assert status(e) == 404


def test_conditional_delete_object(s3, bucket):
    body = os.urandom(3000)
    et = s3.put_object(Bucket=bucket, Key="cd", Body=body)["ETag"]
    h = s3.head_object(Bucket=bucket, Key="cd")
    mtime = h["LastModified"]
    # Each failing condition: 412, and the object stays.
    for kw in (
        {"IfMatch": '"0123456789abcdef0123456789abcdef"'},
        {"IfMatchSize": 2999},
        {"IfMatchLastModifiedTime": mtime + datetime.timedelta(seconds=1)},
        {"IfMatch": et, "IfMatchSize": 3001},
    ):
        with pytest.raises(ClientError) as e:
            s3.delete_object(Bucket=bucket, Key="cd", **kw)
        assert code(e) == "PreconditionFailed" and status(e) == 412, kw
        assert s3.get_object(Bucket=bucket, Key="cd")["Body"].read() == body
    r = s3.delete_object(Bucket=bucket, Key="cd", IfMatch=et, IfMatchSize=3000, IfMatchLastModifiedTime=mtime)
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="cd")
    assert status(e) == 404
    # An absent key: If-Match (an ETag or *) is NoSuchKey; the size and time conditions hold.
    for m in (et, "*"):
        with pytest.raises(ClientError) as e:
            s3.delete_object(Bucket=bucket, Key="cd", IfMatch=m)
        assert code(e) == "NoSuchKey" and status(e) == 404
    assert s3.delete_object(Bucket=bucket, Key="cd", IfMatchSize=1)["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=bucket, Key="cd", IfMatchSize=-1)
    assert code(e) == "InvalidArgument" and status(e) == 400
    s3.put_object(Bucket=bucket, Key="cd", Body=b"again")
    assert s3.delete_object(Bucket=bucket, Key="cd", IfMatch="*")["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix="cd")


def test_conditional_delete_objects_per_object(s3, bucket):
    ets = {k: s3.put_object(Bucket=bucket, Key=k, Body=k.encode() * 10)["ETag"] for k in ("a", "b", "c", "d", "e")}
    mtime = s3.head_object(Bucket=bucket, Key="e")["LastModified"]
    r = s3.delete_objects(
        Bucket=bucket,
        Delete={
            "Objects": [
                {"Key": "a", "ETag": ets["a"]},
                {"Key": "b", "ETag": ets["a"]},
                {"Key": "c", "Size": 11},
                {"Key": "d", "ETag": "*", "Size": 10},
                {"Key": "e", "LastModifiedTime": mtime},
                {"Key": "gone", "ETag": "*"},
            ]
        },
    )
    assert sorted(d["Key"] for d in r["Deleted"]) == ["a", "d", "e"]
    errs = {e["Key"]: e["Code"] for e in r["Errors"]}
    assert errs == {"b": "PreconditionFailed", "c": "PreconditionFailed", "gone": "NoSuchKey"}
    left = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert left == ["b", "c"]


def test_rename_object_moves_bytes_and_metadata(s3, bucket):
    big = os.urandom(CHUNK + 12345)
    for key, body in (("small/a", b"tiny"), ("big/a", big)):
        put = s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="x/y", Metadata={"m": "1"})
        before = s3.head_object(Bucket=bucket, Key=key)
        s3.rename_object(Bucket=bucket, Key=key + ".moved", RenameSource=f"{bucket}/{key}")
        g = s3.get_object(Bucket=bucket, Key=key + ".moved")
        assert g["Body"].read() == body
        assert g["ETag"] == put["ETag"] and g["ContentType"] == "x/y" and g["Metadata"] == {"m": "1"}
        assert g["LastModified"] == before["LastModified"], "a rename keeps the last-modified date"
        with pytest.raises(ClientError) as e:
            s3.head_object(Bucket=bucket, Key=key)
        assert status(e) == 404
    # Onto an existing key: it is replaced; `/bucket/key` (with the leading slash) works too.
    s3.put_object(Bucket=bucket, Key="t", Body=b"old target")
    s3.rename_object(Bucket=bucket, Key="t", RenameSource=f"/{bucket}/small/a.moved")
    assert s3.get_object(Bucket=bucket, Key="t")["Body"].read() == b"tiny"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert keys == ["big/a.moved", "t"]


def test_rename_object_conditions_and_errors(s3, bucket):
    src_et = s3.put_object(Bucket=bucket, Key="s", Body=b"source")["ETag"]
    dst_et = s3.put_object(Bucket=bucket, Key="d", Body=b"target")["ETag"]
    mtime = s3.head_object(Bucket=bucket, Key="s")["LastModified"]
    later = mtime + datetime.timedelta(seconds=5)
    refused = (
        {"DestinationIfNoneMatch": "*"},
        {"DestinationIfMatch": src_et},
        {"DestinationIfModifiedSince": later},
        {"SourceIfMatch": dst_et},
        {"SourceIfNoneMatch": src_et},
        {"SourceIfNoneMatch": "*"},
        {"SourceIfModifiedSince": later},
        {"SourceIfUnmodifiedSince": mtime - datetime.timedelta(seconds=5)},
    )
    for kw in refused:
        with pytest.raises(ClientError) as e:
            s3.rename_object(Bucket=bucket, Key="d", RenameSource=f"{bucket}/s", **kw)
        assert code(e) == "PreconditionFailed" and status(e) == 412, kw
        assert s3.get_object(Bucket=bucket, Key="s")["Body"].read() == b"source"
        assert s3.get_object(Bucket=bucket, Key="d")["Body"].read() == b"target"
    s3.rename_object(
        Bucket=bucket,
        Key="d",
        RenameSource=f"{bucket}/s",
        DestinationIfMatch=dst_et,
        SourceIfMatch=src_et,
        SourceIfUnmodifiedSince=later,
        ClientToken="retry-token-1",
    )
    assert s3.get_object(Bucket=bucket, Key="d")["Body"].read() == b"source"
    with pytest.raises(ClientError) as e:
        s3.rename_object(Bucket=bucket, Key="d2", RenameSource=f"{bucket}/s")
    assert code(e) == "NoSuchKey" and status(e) == 404
    # If-None-Match: * onto an absent key renames.
    s3.rename_object(Bucket=bucket, Key="fresh", RenameSource=f"{bucket}/d", DestinationIfNoneMatch="*")
    assert s3.get_object(Bucket=bucket, Key="fresh")["Body"].read() == b"source"
    s3.put_object(Bucket=bucket, Key="dir/", Body=b"")
    with pytest.raises(ClientError) as e:
        s3.rename_object(Bucket=bucket, Key="dir2/", RenameSource=f"{bucket}/dir/")
    assert status(e) == 400
    nb = "no-such-bucket-" + bucket
    with pytest.raises(ClientError) as e:
        s3.rename_object(Bucket=nb, Key="x", RenameSource=f"{nb}/fresh")
    assert code(e) == "NoSuchBucket" and status(e) == 404
    # A source in another bucket, or no bucket at all: 400, nothing moves.
    for src in ("other-bucket/fresh", "fresh"):
        with pytest.raises(ClientError) as e:
            s3.rename_object(Bucket=bucket, Key="x", RenameSource=src)
        assert status(e) == 400, src
    # Keys that need percent-encoding, in the source and in the target.
    odd = "odd dir/100% ü+&?.bin"
    s3.put_object(Bucket=bucket, Key=odd, Body=b"odd")
    # The header must be URL-encoded (the API reference says so; boto3 sends it as given).
    s3.rename_object(Bucket=bucket, Key=odd + " moved", RenameSource=quote(f"{bucket}/{odd}"))
    assert s3.get_object(Bucket=bucket, Key=odd + " moved")["Body"].read() == b"odd"
    # A target modified after the given time: refused, nothing moves.
    s3.put_object(Bucket=bucket, Key="ut", Body=b"t")
    with pytest.raises(ClientError) as e:
        s3.rename_object(Bucket=bucket, Key="ut", RenameSource=f"{bucket}/{odd} moved",
                         DestinationIfUnmodifiedSince=mtime - datetime.timedelta(days=1))
    assert code(e) == "PreconditionFailed" and status(e) == 412
    assert s3.get_object(Bucket=bucket, Key="ut")["Body"].read() == b"t"
    assert s3.get_object(Bucket=bucket, Key="fresh")["Body"].read() == b"source"


def test_racing_renames_of_one_source_exactly_one_wins(s3, bucket):
    import concurrent.futures

    for rnd in range(5):
        s3.put_object(Bucket=bucket, Key=f"r{rnd}", Body=b"x" * 100)

        def go(i, rnd=rnd):
            try:
                s3.rename_object(Bucket=bucket, Key=f"r{rnd}-to{i}", RenameSource=f"{bucket}/r{rnd}")
                return "won"
            except ClientError as e:
                return code_of(e)

        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            outcomes = list(ex.map(go, range(8)))
        assert sorted(outcomes) == ["NoSuchKey"] * 7 + ["won"], outcomes
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=f"r{rnd}")["Contents"]]
        assert len(keys) == 1 and keys[0].startswith(f"r{rnd}-to")


def code_of(e):
    return e.response["Error"]["Code"]


def test_append_with_write_offset(s3, bucket):
    base = os.urandom(CHUNK + 100)
    s3.put_object(Bucket=bucket, Key="log", Body=base, ContentType="text/x-log")
    add = os.urandom(1000)
    r = s3.put_object(Bucket=bucket, Key="log", Body=add, WriteOffsetBytes=len(base))
    want = hashlib.md5(bytes.fromhex(md5(base)) + bytes.fromhex(md5(add))).hexdigest() + "-2"
    assert r["ETag"] == f'"{want}"'
    # ChecksumMode makes botocore check the combined full-object CRC against the bytes.
    g = s3.get_object(Bucket=bucket, Key="log", ChecksumMode="ENABLED")
    assert g["Body"].read() == base + add
    assert g["ETag"] == f'"{want}"' and g["ContentType"] == "text/x-log"
    assert g.get("ChecksumCRC32") and g.get("ChecksumType") == "FULL_OBJECT", "boto3 sends CRC32: combined"
    # A wrong offset: 400 InvalidWriteOffset, nothing changes.
    for off in (len(base), len(base) + 1001, 0):
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=bucket, Key="log", Body=b"zz", WriteOffsetBytes=off)
        assert code(e) == "InvalidWriteOffset" and status(e) == 400, off
    assert s3.head_object(Bucket=bucket, Key="log")["ContentLength"] == len(base) + 1000
    # Offset 0 and no object: the append makes it.
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="new", Body=b"x", WriteOffsetBytes=1)
    assert code(e) == "InvalidWriteOffset"
    r = s3.put_object(Bucket=bucket, Key="new", Body=b"x", WriteOffsetBytes=0)
    assert r["ETag"] == f'"{md5(b"x")}"'
    # Many small appends, across the inline threshold.
    body = b"x"
    for i in range(40):
        piece = os.urandom(997)
        s3.put_object(Bucket=bucket, Key="new", Body=piece, WriteOffsetBytes=len(body))
        body += piece
    g = s3.get_object(Bucket=bucket, Key="new", ChecksumMode="ENABLED")
    assert g["Body"].read() == body and g["ETag"].endswith('-41"')
    assert s3.get_object(Bucket=bucket, Key="new", Range="bytes=16000-17999")["Body"].read() == body[16000:18000]


def test_racing_appenders_at_one_offset_exactly_one_wins(s3, bucket):
    import concurrent.futures

    s3.put_object(Bucket=bucket, Key="a", Body=b"start|")

    def go(i):
        try:
            s3.put_object(Bucket=bucket, Key="a", Body=f"writer{i}|".encode() * 100, WriteOffsetBytes=6)
            return i
        except ClientError as e:
            return code_of(e)

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        out = list(ex.map(go, range(8)))
    winners = [o for o in out if isinstance(o, int)]
    assert len(winners) == 1 and out.count("InvalidWriteOffset") == 7, out
    assert s3.get_object(Bucket=bucket, Key="a")["Body"].read() == b"start|" + f"writer{winners[0]}|".encode() * 100


def test_delete_is_idempotent_and_missing_key_errors(s3, bucket):
    s3.put_object(Bucket=bucket, Key="d", Body=b"x")
    assert s3.delete_object(Bucket=bucket, Key="d")["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert s3.delete_object(Bucket=bucket, Key="d")["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="d")
    assert code(e) == "NoSuchKey" and status(e) == 404
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="d")
    assert status(e) == 404


def test_delete_objects_quiet_and_verbose(s3, bucket):
    for i in range(5):
        s3.put_object(Bucket=bucket, Key=f"m/{i}", Body=b"x")
    # Newer boto3 sends a CRC32 checksum and no Content-MD5 here.
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "m/0"}, {"Key": "m/1"}, {"Key": "nope"}]})
    assert sorted(d["Key"] for d in r["Deleted"]) == ["m/0", "m/1", "nope"]
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "m/2"}, {"Key": "m/3"}], "Quiet": True})
    assert not r.get("Deleted") and not r.get("Errors")
    left = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert left == ["m/4"]


def test_copy_object_copy_and_replace(s3, bucket):
    body = os.urandom(CHUNK + 10)
    src = s3.put_object(Bucket=bucket, Key="src", Body=body, ContentType="a/b", Metadata={"k": "v"})
    r = s3.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"})
    assert r["CopyObjectResult"]["ETag"] == src["ETag"]
    h = s3.head_object(Bucket=bucket, Key="dst")
    assert h["ContentType"] == "a/b" and h["Metadata"] == {"k": "v"}
    s3.copy_object(
        Bucket=bucket,
        Key="dst2",
        CopySource={"Bucket": bucket, "Key": "src"},
        MetadataDirective="REPLACE",
        ContentType="c/d",
        Metadata={"n": "m"},
    )
    h = s3.head_object(Bucket=bucket, Key="dst2")
    assert h["ContentType"] == "c/d" and h["Metadata"] == {"n": "m"}
    # Deleting the source leaves the shared bytes of the copies intact.
    s3.delete_object(Bucket=bucket, Key="src")
    assert s3.get_object(Bucket=bucket, Key="dst")["Body"].read() == body
    assert s3.get_object(Bucket=bucket, Key="dst2")["Body"].read() == body


def test_copy_object_conditions_and_errors(s3, bucket):
    r = s3.put_object(Bucket=bucket, Key="s", Body=b"abc")
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="t", CopySource={"Bucket": bucket, "Key": "s"}, CopySourceIfMatch='"00"')
    assert status(e) == 412
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="t", CopySource={"Bucket": bucket, "Key": "s"}, CopySourceIfNoneMatch=r["ETag"])
    assert status(e) == 412
    s3.copy_object(Bucket=bucket, Key="t", CopySource={"Bucket": bucket, "Key": "s"}, CopySourceIfMatch=r["ETag"])
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="t", CopySource={"Bucket": bucket, "Key": "missing"})
    assert code(e) == "NoSuchKey"
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="s", CopySource={"Bucket": bucket, "Key": "s"})
    assert code(e) == "InvalidRequest"
    # Copy onto itself with REPLACE is how metadata is changed in place.
    s3.copy_object(Bucket=bucket, Key="s", CopySource={"Bucket": bucket, "Key": "s"}, MetadataDirective="REPLACE", Metadata={"x": "y"})
    assert s3.head_object(Bucket=bucket, Key="s")["Metadata"] == {"x": "y"}
    assert s3.get_object(Bucket=bucket, Key="s")["Body"].read() == b"abc"


@pytest.mark.parametrize("algo", ["CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"])
@pytest.mark.parametrize("size", [10, 6 * 1024 * 1024])
def test_flexible_checksums_stored_and_returned(s3, bucket, algo, size):
    body = os.urandom(size)
    r = s3.put_object(Bucket=bucket, Key=f"ck-{algo}", Body=body, ChecksumAlgorithm=algo)
    sent = r[f"Checksum{algo}"]
    g = s3.get_object(Bucket=bucket, Key=f"ck-{algo}", ChecksumMode="ENABLED")
    assert g["Body"].read() == body
    assert g[f"Checksum{algo}"] == sent
    h = s3.head_object(Bucket=bucket, Key=f"ck-{algo}", ChecksumMode="ENABLED")
    assert h[f"Checksum{algo}"] == sent
    if algo == "CRC32":
        assert base64.b64decode(sent) == (zlib.crc32(body) & 0xFFFFFFFF).to_bytes(4, "big")
    if algo == "SHA256":
        assert base64.b64decode(sent) == hashlib.sha256(body).digest()


def test_wrong_checksum_is_bad_digest_and_leaves_nothing(s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="bad", Body=b"hello", ChecksumCRC32="AAAAAA==")
    assert code(e) == "BadDigest" and status(e) == 400
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="bad", Body=b"hello", ChecksumSHA256=base64.b64encode(b"x" * 32).decode())
    assert code(e) == "BadDigest"
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="bad")
    assert status(e) == 404


def test_content_md5_verified(s3, bucket):
    body = b"payload"
    good = base64.b64encode(hashlib.md5(body).digest()).decode()
    s3.put_object(Bucket=bucket, Key="md5", Body=body, ContentMD5=good)
    bad = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="md5", Body=body, ContentMD5=bad)
    assert code(e) == "BadDigest"
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="md5", Body=body, ContentMD5="notbase64!!")
    assert code(e) == "InvalidDigest"


def test_key_limits(s3, bucket):
    k = "k" * 1024
    s3.put_object(Bucket=bucket, Key=k, Body=b"max")
    assert s3.get_object(Bucket=bucket, Key=k)["Body"].read() == b"max"
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="k" * 1025, Body=b"x")
    assert code(e) == "KeyTooLongError" and status(e) == 400
    for odd in ["../../etc/passwd", "a/./b", "a//b", "sp ace/ü/日本", "%2F%00", "trailing/"]:
        s3.put_object(Bucket=bucket, Key=odd, Body=odd.encode())
        assert s3.get_object(Bucket=bucket, Key=odd)["Body"].read() == odd.encode()


def test_unimplemented_operation_says_so(s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.get_bucket_logging(Bucket=bucket)
    assert code(e) == "NotImplemented" and status(e) == 501
    with pytest.raises(ClientError) as e:
        s3.get_bucket_website(Bucket=bucket)
    assert code(e) == "NotImplemented" and status(e) == 501
    s3.put_object(Bucket=bucket, Key="v", Body=b"x")
    # A version id of a form Lode never makes: S3's answer.
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="w", CopySource={"Bucket": bucket, "Key": "v", "VersionId": "abc"})
    assert code(e) == "InvalidArgument" and status(e) == 400
    # The "null" version of an unversioned bucket is the object itself.
    s3.copy_object(Bucket=bucket, Key="w", CopySource={"Bucket": bucket, "Key": "v", "VersionId": "null"})
    assert s3.get_object(Bucket=bucket, Key="w")["Body"].read() == b"x"
