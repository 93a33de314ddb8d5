"""Multipart uploads, as `aws s3 cp` and boto3's transfer manager use them."""

import base64
import hashlib
import os

import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

MiB = 1024 * 1024


def code(e):
    return e.value.response["Error"]["Code"]


def mp_etag(parts):
    return '"%s-%d"' % (hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest(), len(parts))


def test_full_lifecycle(s3, bucket):
    parts = [os.urandom(5 * MiB), os.urandom(5 * MiB + 7), os.urandom(1234)]
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp", ContentType="x/y", Metadata={"a": "b"})
    uid = up["UploadId"]
    ups = s3.list_multipart_uploads(Bucket=bucket)["Uploads"]
    assert [(u["Key"], u["UploadId"]) for u in ups] == [("mp", uid)]
    etags = []
    for i, p in enumerate(parts, 1):
        r = s3.upload_part(Bucket=bucket, Key="mp", UploadId=uid, PartNumber=i, Body=p)
        assert r["ETag"] == f'"{hashlib.md5(p).hexdigest()}"'
        etags.append(r["ETag"])
    lp = s3.list_parts(Bucket=bucket, Key="mp", UploadId=uid)
    assert [(p["PartNumber"], p["Size"], p["ETag"]) for p in lp["Parts"]] == [
        (i, len(p), e) for i, (p, e) in enumerate(zip(parts, etags), 1)
    ]
    lp1 = s3.list_parts(Bucket=bucket, Key="mp", UploadId=uid, MaxParts=1, PartNumberMarker=1)
    assert [p["PartNumber"] for p in lp1["Parts"]] == [2] and lp1["IsTruncated"]
    # Not visible before Complete.
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="mp")
    r = s3.complete_multipart_upload(
        Bucket=bucket,
        Key="mp",
        UploadId=uid,
        MultipartUpload={"Parts": [{"PartNumber": i, "ETag": e} for i, e in enumerate(etags, 1)]},
    )
    assert r["ETag"] == mp_etag(parts)
    g = s3.get_object(Bucket=bucket, Key="mp")
    assert g["Body"].read() == b"".join(parts)
    assert g["ContentType"] == "x/y" and g["Metadata"] == {"a": "b"} and g["ETag"] == mp_etag(parts)
    assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")
    # partNumber reads
    for i, p in enumerate(parts, 1):
        r = s3.get_object(Bucket=bucket, Key="mp", PartNumber=i)
        assert r["Body"].read() == p and r["PartsCount"] == 3
        assert s3.head_object(Bucket=bucket, Key="mp", PartNumber=i)["ContentLength"] == len(p)
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="mp", PartNumber=4)
    # AWS: a part the object does not have is 400 InvalidPart (not 416).
    assert (e.value.response["ResponseMetadata"]["HTTPStatusCode"], code(e)) == (400, "InvalidPart")
    with pytest.raises(ClientError) as e:
        s3.list_parts(Bucket=bucket, Key="mp", UploadId=uid)
    assert code(e) == "NoSuchUpload"


def test_complete_errors(s3, bucket):
    uid = s3.create_multipart_upload(Bucket=bucket, Key="e")["UploadId"]
    small = s3.upload_part(Bucket=bucket, Key="e", UploadId=uid, PartNumber=1, Body=b"x" * 100)["ETag"]
    last = s3.upload_part(Bucket=bucket, Key="e", UploadId=uid, PartNumber=2, Body=b"y" * 100)["ETag"]

    def complete(parts):
        with pytest.raises(ClientError) as e:
            s3.complete_multipart_upload(Bucket=bucket, Key="e", UploadId=uid, MultipartUpload={"Parts": parts})
        return code(e)

    assert complete([{"PartNumber": 1, "ETag": '"0123"'}]) == "InvalidPart"
    assert complete([{"PartNumber": 3, "ETag": small}]) == "InvalidPart"
    assert complete([{"PartNumber": 2, "ETag": last}, {"PartNumber": 1, "ETag": small}]) == "InvalidPartOrder"
    assert complete([{"PartNumber": 1, "ETag": small}, {"PartNumber": 2, "ETag": last}]) == "EntityTooSmall"
    with pytest.raises(ClientError) as e:
        s3.upload_part(Bucket=bucket, Key="e", UploadId=uid, PartNumber=10001, Body=b"x")
    assert code(e) == "InvalidArgument"
    # A single small part is a valid upload.
    r = s3.complete_multipart_upload(Bucket=bucket, Key="e", UploadId=uid, MultipartUpload={"Parts": [{"PartNumber": 2, "ETag": last}]})
    assert s3.get_object(Bucket=bucket, Key="e")["Body"].read() == b"y" * 100
    assert r["ETag"] == mp_etag([b"y" * 100])


def test_abort_and_unknown_upload(s3, bucket):
    uid = s3.create_multipart_upload(Bucket=bucket, Key="a")["UploadId"]
    s3.upload_part(Bucket=bucket, Key="a", UploadId=uid, PartNumber=1, Body=os.urandom(MiB))
    s3.abort_multipart_upload(Bucket=bucket, Key="a", UploadId=uid)
    with pytest.raises(ClientError) as e:
        s3.upload_part(Bucket=bucket, Key="a", UploadId=uid, PartNumber=2, Body=b"x")
    assert code(e) == "NoSuchUpload"
    # A retried abort succeeds again (test_aws_parity.py has the rules).
    assert s3.abort_multipart_upload(Bucket=bucket, Key="a", UploadId=uid)["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="a")


def test_reupload_part_replaces_it(s3, bucket):
    uid = s3.create_multipart_upload(Bucket=bucket, Key="r")["UploadId"]
    s3.upload_part(Bucket=bucket, Key="r", UploadId=uid, PartNumber=1, Body=b"old" * 1000)
    e2 = s3.upload_part(Bucket=bucket, Key="r", UploadId=uid, PartNumber=1, Body=b"new")["ETag"]
    s3.complete_multipart_upload(Bucket=bucket, Key="r", UploadId=uid, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e2}]})
    assert s3.get_object(Bucket=bucket, Key="r")["Body"].read() == b"new"


def test_upload_part_copy(s3, bucket):
    src = os.urandom(6 * MiB)
    s3.put_object(Bucket=bucket, Key="src", Body=src)
    uid = s3.create_multipart_upload(Bucket=bucket, Key="pc")["UploadId"]
    p1 = s3.upload_part_copy(Bucket=bucket, Key="pc", UploadId=uid, PartNumber=1, CopySource={"Bucket": bucket, "Key": "src"}, CopySourceRange=f"bytes=0-{5 * MiB - 1}")
    p2 = s3.upload_part_copy(Bucket=bucket, Key="pc", UploadId=uid, PartNumber=2, CopySource={"Bucket": bucket, "Key": "src"}, CopySourceRange=f"bytes={5 * MiB}-{6 * MiB - 1}")
    s3.complete_multipart_upload(
        Bucket=bucket,
        Key="pc",
        UploadId=uid,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": p1["CopyPartResult"]["ETag"]}, {"PartNumber": 2, "ETag": p2["CopyPartResult"]["ETag"]}]},
    )
    assert s3.get_object(Bucket=bucket, Key="pc")["Body"].read() == src
    with pytest.raises(ClientError) as e:
        s3.upload_part_copy(Bucket=bucket, Key="pc2", UploadId=uid, PartNumber=1, CopySource={"Bucket": bucket, "Key": "src"})
    assert code(e) == "NoSuchUpload"


@pytest.mark.parametrize("algo", ["CRC32", "CRC32C", "SHA256", "CRC64NVME"])
def test_checksummed_multipart(s3, bucket, algo):
    parts = [os.urandom(5 * MiB), os.urandom(3 * MiB)]
    uid = s3.create_multipart_upload(Bucket=bucket, Key="ck", ChecksumAlgorithm=algo)["UploadId"]
    done = []
    for i, p in enumerate(parts, 1):
        r = s3.upload_part(Bucket=bucket, Key="ck", UploadId=uid, PartNumber=i, Body=p, ChecksumAlgorithm=algo)
        done.append({"PartNumber": i, "ETag": r["ETag"], f"Checksum{algo}": r[f"Checksum{algo}"]})
    r = s3.complete_multipart_upload(Bucket=bucket, Key="ck", UploadId=uid, MultipartUpload={"Parts": done})
    h = s3.head_object(Bucket=bucket, Key="ck", ChecksumMode="ENABLED")
    if algo == "CRC64NVME":
        assert h["ChecksumType"] == "FULL_OBJECT"
        assert not h[f"Checksum{algo}"].endswith("-2")
    else:
        assert h["ChecksumType"] == "COMPOSITE"
        raw = b"".join(base64.b64decode(d[f"Checksum{algo}"]) for d in done)
        if algo == "SHA256":
            assert h["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(raw).digest()).decode() + "-2"
        assert h[f"Checksum{algo}"].endswith("-2")
    assert r[f"Checksum{algo}"] == h[f"Checksum{algo}"]
    g = s3.get_object(Bucket=bucket, Key="ck", ChecksumMode="ENABLED")
    assert g["Body"].read() == b"".join(parts)
    # A part listed with a wrong checksum is refused.
    uid = s3.create_multipart_upload(Bucket=bucket, Key="ck2", ChecksumAlgorithm=algo)["UploadId"]
    r = s3.upload_part(Bucket=bucket, Key="ck2", UploadId=uid, PartNumber=1, Body=b"z", ChecksumAlgorithm=algo)
    wrong = base64.b64encode(b"\0" * len(base64.b64decode(r[f"Checksum{algo}"]))).decode()
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="ck2", UploadId=uid, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": r["ETag"], f"Checksum{algo}": wrong}]})
    assert code(e) in ("InvalidPart", "BadDigest")


def test_full_object_crc32_multipart(s3, bucket):
    import zlib

    parts = [os.urandom(5 * MiB), os.urandom(MiB)]
    uid = s3.create_multipart_upload(Bucket=bucket, Key="fo", ChecksumAlgorithm="CRC32", ChecksumType="FULL_OBJECT")["UploadId"]
    done = []
    for i, p in enumerate(parts, 1):
        r = s3.upload_part(Bucket=bucket, Key="fo", UploadId=uid, PartNumber=i, Body=p, ChecksumAlgorithm="CRC32")
        done.append({"PartNumber": i, "ETag": r["ETag"], "ChecksumCRC32": r["ChecksumCRC32"]})
    whole = base64.b64encode((zlib.crc32(b"".join(parts)) & 0xFFFFFFFF).to_bytes(4, "big")).decode()
    r = s3.complete_multipart_upload(Bucket=bucket, Key="fo", UploadId=uid, MultipartUpload={"Parts": done}, ChecksumCRC32=whole, ChecksumType="FULL_OBJECT")
    assert r["ChecksumCRC32"] == whole and r["ChecksumType"] == "FULL_OBJECT"


def test_transfer_manager_upload_download(s3, bucket, tmp_path):
    body = os.urandom(40 * MiB + 3)
    src = tmp_path / "in.bin"
    src.write_bytes(body)
    cfg = TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB, max_concurrency=8)
    s3.upload_file(str(src), bucket, "big.bin", Config=cfg)
    out = tmp_path / "out.bin"
    s3.download_file(bucket, "big.bin", str(out), Config=cfg)
    assert out.read_bytes() == body
    h = s3.head_object(Bucket=bucket, Key="big.bin")
    assert h["ETag"].endswith('-6"') and h["ContentLength"] == len(body)


def test_list_uploads_prefix_delimiter_and_paging(s3, bucket):
    keys = ["a/1", "a/2", "b/x/1", "c", "c", "d/1"]
    ids = [(k, s3.create_multipart_upload(Bucket=bucket, Key=k)["UploadId"]) for k in keys]
    r = s3.list_multipart_uploads(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["a/", "b/", "d/"]
    assert sorted(u["UploadId"] for u in r["Uploads"]) == sorted(i for k, i in ids if k == "c")
    r = s3.list_multipart_uploads(Bucket=bucket, Prefix="b/", Delimiter="/")
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["b/x/"] and not r.get("Uploads")
    # Paging one entry at a time visits every upload and prefix exactly once.
    seen, km, um = [], None, None
    while True:
        kw = {"Bucket": bucket, "MaxUploads": 1, "Delimiter": "/"}
        if km:
            kw["KeyMarker"] = km
        if um:
            kw["UploadIdMarker"] = um
        r = s3.list_multipart_uploads(**kw)
        seen += [p["Prefix"] for p in r.get("CommonPrefixes", [])] + [u["Key"] for u in r.get("Uploads", [])]
        if not r["IsTruncated"]:
            break
        km, um = r.get("NextKeyMarker"), r.get("NextUploadIdMarker")
    assert sorted(seen) == ["a/", "b/", "c", "c", "d/"]
    for k, i in ids:
        s3.abort_multipart_upload(Bucket=bucket, Key=k, UploadId=i)
