"""kill -9 at random moments under concurrent PUT / overwrite / delete / multipart / append load
(appends: PutObject with x-amz-write-offset-bytes, each key's one writer reading it first). After
each restart: every acknowledged write reads back bit-exact, no write shows up in part, listings
agree with GETs, and (offline fsck) used extents equal referenced extents.

LODE_CRASH_ITERATIONS (default 4) sets how many crashes one run does."""

import hashlib
import json
import os
import random
import subprocess
import threading
import time

import pytest
from botocore.exceptions import ClientError

from conftest import Lode, lode_bin, make_client

MiB = 1024 * 1024
THREADS = 6
KEYS_PER_THREAD = 8
SIZES = [0, 100, 20_000, 300_000, 5 * MiB + 123]
_BLOCK = os.urandom(6 * MiB)


def body(rng):
    n = rng.choice(SIZES)
    off = rng.randrange(0, len(_BLOCK) - n + 1)
    return _BLOCK[off : off + n]


def worker(endpoint, t, stop, state, lock, counters):
    rng = random.Random(t * 7919 + int(time.time()))
    s3 = make_client(endpoint)
    while not stop.is_set():
        k = f"k{t}-{rng.randrange(KEYS_PER_THREAD)}"
        op = rng.choices(["put", "delete", "multipart", "append"], weights=[6, 2, 1, 2])[0]
        if op == "append":
            # This thread is the key's only writer: what it reads is what the append extends.
            try:
                cur = s3.get_object(Bucket="crash", Key=k)["Body"].read()
            except ClientError as e:
                if e.response["Error"]["Code"] != "NoSuchKey":
                    return
                cur = b""
            except Exception:
                return  # the server died under us
            n = rng.choice([1, 100, 20_000])
            off = rng.randrange(0, len(_BLOCK) - n + 1)
            piece = _BLOCK[off : off + n]
            new = hashlib.md5(cur + piece).hexdigest()
        elif op == "put":
            data = body(rng)
            new = hashlib.md5(data).hexdigest()
        elif op == "multipart":
            parts = [_BLOCK[: 5 * MiB], body(rng)]
            new = hashlib.md5(b"".join(parts)).hexdigest()
        else:
            new = None
        with lock:
            state[k]["inflight"] = new if op != "delete" else "DELETED"
        try:
            if op == "put":
                s3.put_object(Bucket="crash", Key=k, Body=data)
            elif op == "append":
                s3.put_object(Bucket="crash", Key=k, Body=piece, WriteOffsetBytes=len(cur))
            elif op == "delete":
                s3.delete_object(Bucket="crash", Key=k)
            else:
                uid = s3.create_multipart_upload(Bucket="crash", Key=k)["UploadId"]
                done = []
                for i, p in enumerate(parts, 1):
                    e = s3.upload_part(Bucket="crash", Key=k, UploadId=uid, PartNumber=i, Body=p)["ETag"]
                    done.append({"PartNumber": i, "ETag": e})
                s3.complete_multipart_upload(Bucket="crash", Key=k, UploadId=uid, MultipartUpload={"Parts": done})
        except Exception:
            return  # the server died under us; the op stays "in flight"
        with lock:
            state[k]["acked"] = new
            state[k]["inflight"] = None
            counters["acked"] += 1
            if op == "append":
                counters["appends"] = counters.get("appends", 0) + 1


def posix_worker(mnt, t, stop, state, lock, counters):
    """Writes (and sometimes unlinks) files through the mount; a write is acknowledged when
    close() returns, as a POSIX program sees it."""
    rng = random.Random(t * 104729 + int(time.time()))
    d = os.path.join(mnt, "crash")
    while not stop.is_set():
        k = f"p{t}-{rng.randrange(KEYS_PER_THREAD)}"
        delete = rng.random() < 0.2
        data = None if delete else body(rng)
        new = "DELETED" if delete else hashlib.md5(data).hexdigest()
        with lock:
            state[k]["inflight"] = new
        try:
            if delete:
                try:
                    os.unlink(os.path.join(d, k))
                except FileNotFoundError:
                    pass
            else:
                with open(os.path.join(d, k), "wb") as f:
                    f.write(data)
        except OSError:
            return  # the server died under us
        with lock:
            state[k]["acked"] = None if delete else new
            state[k]["inflight"] = None
            counters["acked"] += 1


def check_keys(s3, state, label=""):
    """Every acknowledged write reads back bit-exact (or the one in flight at the crash), no
    partial object, and the listing agrees with GETs. Then each key's state is what it reads."""
    listed = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="crash"):
        listed |= {o["Key"] for o in page.get("Contents", [])}
    for k, st in state.items():
        try:
            got = hashlib.md5(s3.get_object(Bucket="crash", Key=k)["Body"].read()).hexdigest()
        except ClientError as e:
            assert e.response["Error"]["Code"] == "NoSuchKey"
            got = None
        allowed = {st["acked"]}
        if st["inflight"] is not None:
            allowed.add(None if st["inflight"] == "DELETED" else st["inflight"])
        assert got in allowed, f"{label}{k} reads {got}, allowed {allowed}"
        assert (k in listed) == (got is not None), f"listing disagrees with GET for {k}"
        st["acked"], st["inflight"] = got, None


def fsck_clean(srv, label):
    """Runs fsck on the stopped server's data dir: no leaked, unrecorded or miscounted chunk."""
    p = subprocess.run([lode_bin(), "fsck", "--data-dir", srv.data_dir], capture_output=True, timeout=300)
    assert p.returncode == 0, f"{label}fsck: " + p.stdout.decode() + p.stderr.decode()
    rep = json.loads(p.stdout)
    assert not rep["leaked"] and not rep["unrecorded"] and not rep["wrong_refs"], rep


def crash_loop(srv, iterations, workers, keys):
    """Runs `workers` (each: (fn, arg)), kills the server with SIGKILL at a random moment, restarts
    it and checks every key in `keys`; then stops it and runs fsck. Returns the counters (and
    the keys' state, what each reads, under "state")."""
    s3 = make_client(srv.endpoint)
    state = {k: {"acked": None, "inflight": None} for k in keys}
    counters = {"acked": 0, "checked": 0, "state": state}
    lock = threading.Lock()
    rng = random.Random(1)
    for it in range(iterations):
        stop = threading.Event()
        threads = [threading.Thread(target=fn, args=(arg, t, stop, state, lock, counters)) for t, (fn, arg) in enumerate(workers)]
        for th in threads:
            th.start()
        time.sleep(rng.uniform(0.5, 2.0))
        srv.proc.kill()  # SIGKILL mid-load
        srv.proc.wait()
        stop.set()
        for th in threads:
            th.join(timeout=60)
        srv.restart()
        s3 = make_client(srv.endpoint)
        check_keys(s3, state, f"iteration {it}: ")
        counters["checked"] += len(state)
        # Interrupted multipart uploads stay listed; abort them so space accounting is exact.
        for u in s3.list_multipart_uploads(Bucket="crash").get("Uploads", []):
            s3.abort_multipart_upload(Bucket="crash", Key=u["Key"], UploadId=u["UploadId"])
        srv.stop()
        fsck_clean(srv, f"iteration {it}: ")
        srv.start()
    return counters


def test_kill_9_under_load_loses_no_acknowledged_write(tmp_path):
    iterations = int(os.environ.get("LODE_CRASH_ITERATIONS", "4"))
    srv = Lode(str(tmp_path / "data"))
    srv.start()
    make_client(srv.endpoint).create_bucket(Bucket="crash")
    keys = [f"k{t}-{i}" for t in range(THREADS) for i in range(KEYS_PER_THREAD)]
    try:
        counters = crash_loop(srv, iterations, [(worker, srv.endpoint)] * THREADS, keys)
        print(f"crash iterations={iterations} acked={counters['acked']} appends={counters.get('appends', 0)} "
              f"checked={counters['checked']}")
        assert counters["acked"] > 0 and counters.get("appends", 0) > 0
    finally:
        srv.remove()


def test_kill_9_under_load_in_a_versioned_bucket(tmp_path):
    """The same in a versioned bucket: overwrites and deletes keep what they replace (noncurrent
    versions, delete markers), and fsck counts the versions' chunks as held."""
    iterations = int(os.environ.get("LODE_CRASH_ITERATIONS", "4"))
    srv = Lode(str(tmp_path / "data"))
    srv.start()
    s3 = make_client(srv.endpoint)
    s3.create_bucket(Bucket="crash")
    s3.put_bucket_versioning(Bucket="crash", VersioningConfiguration={"Status": "Enabled"})
    keys = [f"k{t}-{i}" for t in range(THREADS) for i in range(KEYS_PER_THREAD)]
    try:
        counters = crash_loop(srv, iterations, [(worker, srv.endpoint)] * THREADS, keys)
        s3 = make_client(srv.endpoint)
        n = sum(len(p.get("Versions", [])) + len(p.get("DeleteMarkers", []))
                for p in s3.get_paginator("list_object_versions").paginate(Bucket="crash"))
        print(f"versioned crash iterations={iterations} acked={counters['acked']} versions={n} "
              f"appends={counters.get('appends', 0)}")
        assert counters["acked"] > 0 and n > len(keys), "overwrites kept their versions"
        assert counters.get("appends", 0) > 0
        # Removing every noncurrent version leaves each current one whole (an appended version
        # shares its older versions' bytes), and fsck finds every reference count right.
        for page in s3.get_paginator("list_object_versions").paginate(Bucket="crash"):
            old = [{"Key": v["Key"], "VersionId": v["VersionId"]} for v in page.get("Versions", []) if not v["IsLatest"]]
            if old:
                r = s3.delete_objects(Bucket="crash", Delete={"Objects": old})
                assert not r.get("Errors"), r["Errors"]
        check_keys(s3, counters["state"], "after removing the noncurrent versions: ")
        srv.stop()
        fsck_clean(srv, "after removing the noncurrent versions: ")
    finally:
        srv.remove()


def test_kill_9_under_posix_and_s3_load(tmp_path):
    """The same, with writers on the FUSE mount beside S3 writers (the mount is replaced at each
    restart)."""
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        pytest.skip("FUSE mounts need root and /dev/fuse here")
    iterations = int(os.environ.get("LODE_CRASH_ITERATIONS", "4"))
    mnt = str(tmp_path / "mnt")
    srv = Lode(str(tmp_path / "data"), extra_args=["--mount", mnt])
    srv.start()
    make_client(srv.endpoint).create_bucket(Bucket="crash")
    workers = [(worker, srv.endpoint)] * 3 + [(posix_worker, mnt)] * 3
    keys = [f"k{t}-{i}" for t in range(3) for i in range(KEYS_PER_THREAD)]
    keys += [f"p{t}-{i}" for t in range(3, 6) for i in range(KEYS_PER_THREAD)]
    try:
        counters = crash_loop(srv, iterations, workers, keys)
        print(f"posix crash iterations={iterations} acked={counters['acked']} checked={counters['checked']}")
        assert counters["acked"] > 0
    finally:
        srv.remove()
        subprocess.run(["umount", "-l", mnt], capture_output=True)


def test_client_vanishing_mid_upload_leaves_nothing(tmp_path):
    """Clients that disconnect mid-body (small and chunked objects, and mid-part) leave no object,
    no part and, per fsck, no leaked extent."""
    import socket

    srv = Lode(str(tmp_path / "data"))
    srv.start()
    try:
        s3 = make_client(srv.endpoint)
        s3.create_bucket(Bucket="gone")
        uid = s3.create_multipart_upload(Bucket="gone", Key="mp")["UploadId"]
        targets = [
            ("PUT", "gone", "small", {}, 1_000, 10_000),
            ("PUT", "gone", "big", {}, 9 * MiB, 20 * MiB),
            ("PUT", "gone", "mp", {"PartNumber": 1, "UploadId": uid}, 6 * MiB, 10 * MiB),
        ]
        for method, b, k, params, send, declared in targets:
            op = "upload_part" if params else "put_object"
            url = s3.generate_presigned_url(op, Params={"Bucket": b, "Key": k, **params}, ExpiresIn=60)
            path = url.split(str(srv.port), 1)[1]
            sock = socket.create_connection(("127.0.0.1", srv.port))
            head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\nContent-Length: {declared}\r\n\r\n"
            sock.sendall(head.encode())
            sent = 0
            while sent < send:
                n = min(1 << 20, send - sent)
                sock.sendall(_BLOCK[:n])
                sent += n
            sock.close()  # vanish
        time.sleep(0.5)
        for k in ("small", "big"):
            try:
                s3.head_object(Bucket="gone", Key=k)
                raise AssertionError(f"{k} became visible")
            except ClientError as e:
                assert e.response["Error"]["Code"] in ("404", "NoSuchKey")
        assert s3.list_parts(Bucket="gone", Key="mp", UploadId=uid).get("Parts", []) == []
        s3.abort_multipart_upload(Bucket="gone", Key="mp", UploadId=uid)
        srv.stop()
        p = subprocess.run([lode_bin(), "fsck", "--data-dir", srv.data_dir], capture_output=True, timeout=300)
        assert p.returncode == 0, p.stdout.decode() + p.stderr.decode()
        rep = json.loads(p.stdout)
        assert rep["extents_recorded"] == 0 and not rep["leaked"]
    finally:
        srv.remove()


@pytest.mark.parametrize(
    "point,visible",
    [("put.after_data_write", False), ("put.after_data_sync", False), ("put.after_commit", True)],
)
def test_failpoints_at_each_commit_step(tmp_path, point, visible):
    """The process dies (abort, like kill -9) at one step of the commit protocol on the third
    PUT. After a restart: the two acknowledged PUTs are intact, the third is visible whole only if
    its metadata committed, and fsck finds every extent accounted for."""
    srv = Lode(str(tmp_path / "data"), extra_env={"LODE_FAILPOINTS": f"{point}=abort@3"})
    srv.start()
    try:
        s3 = make_client(srv.endpoint)
        s3.create_bucket(Bucket="fpb")
        acked = {}
        for i in range(2):
            data = _BLOCK[i : i + 5 * MiB]
            s3.put_object(Bucket="fpb", Key=f"ok{i}", Body=data)
            acked[f"ok{i}"] = hashlib.md5(data).hexdigest()
        third = _BLOCK[7 : 7 + 5 * MiB]
        with pytest.raises(Exception):
            s3.put_object(Bucket="fpb", Key="third", Body=third)
        srv.proc.wait(timeout=30)
        assert srv.proc.returncode != 0, "the failpoint did not fire"
        srv.extra_env = {}
        srv.restart()
        s3 = make_client(srv.endpoint)
        for k, want in acked.items():
            assert hashlib.md5(s3.get_object(Bucket="fpb", Key=k)["Body"].read()).hexdigest() == want
        try:
            got = s3.get_object(Bucket="fpb", Key="third")["Body"].read()
            assert visible and got == third
        except ClientError as e:
            assert not visible and e.response["Error"]["Code"] == "NoSuchKey"
        srv.stop()
        p = subprocess.run([lode_bin(), "fsck", "--data-dir", srv.data_dir, "--verify-data"], capture_output=True, timeout=300)
        assert p.returncode == 0, p.stdout.decode() + p.stderr.decode()
    finally:
        srv.remove()


def test_a_lode_whose_data_dir_is_deleted_stops_before_it_can_harm_the_next_one(tmp_path):
    """`rm -rf` of a running lode's data dir and a new lode on the same path: the old process
    must not flush its RocksDB by path into the new directory (that once deleted every SST of
    the new store). It aborts as soon as the directory is gone, and the new one keeps its data."""
    import shutil
    data = str(tmp_path / "data")
    old = Lode(data).start()
    s3 = make_client(old.endpoint)
    s3.create_bucket(Bucket="old")
    for i in range(20):
        s3.put_object(Bucket="old", Key=f"k{i}", Body=b"o" * 1000)
    shutil.rmtree(data)
    deadline = time.time() + 10
    while old.proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert old.proc.poll() is not None, "a lode whose data dir was deleted kept running"
    assert b"was removed or replaced" in open(old.log_path, "rb").read()
    old.stop()
    new = Lode(data).start()
    try:
        s3 = make_client(new.endpoint)
        s3.create_bucket(Bucket="new")
        for i in range(50):
            s3.put_object(Bucket="new", Key=f"k{i}", Body=b"n" * 5000)
        new.restart()
        s3 = make_client(new.endpoint)
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket="new")["Contents"]]
        assert len(keys) == 50
        assert s3.get_object(Bucket="new", Key="k7")["Body"].read() == b"n" * 5000
    finally:
        new.remove()
