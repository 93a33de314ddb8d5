"""The POSIX door: a real FUSE mount served by a real `lode serve --mount`, used with plain file
calls and POSIX tools, and checked against boto3 / aws-cli on the same namespace.

With LODE_COMPAT_MODE=cluster (./test.sh's second pass) the mount and the S3 client are on a
cluster-mode gateway: the same checks, on the RADOS backends. These tests look at the mount
right after each S3 change, which holds on the mount's own gateway; another gateway's changes
reach it by a notify after their reply (milliseconds, SEMANTICS.md rule 18), which
test_cluster.py's mount tests check and measure."""

import base64
import errno
import hashlib
import os
import random
import shutil
import subprocess
import time
import uuid

import awscrt.checksums
import pytest
from botocore.exceptions import ClientError

from conftest import CLUSTER_MODE, Lode, cluster_gateways, local_only, make_client

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
    reason="FUSE mounts need root and /dev/fuse here",
)


def is_mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split(" ")[4] == path for line in f)


def force_unmount(path):
    """Leaves no mount behind a failed test (a killed server's mount stays until detached)."""
    if is_mounted(path):
        subprocess.run(["umount", "-l", path], check=False)


@pytest.fixture(scope="module")
def mounted(tmp_path_factory):
    d = tmp_path_factory.mktemp("posix")
    mnt = str(d / "mnt")
    # SSE-C over plain HTTP, for the test of SSE-C objects on the mount.
    plain_ssec = "[encryption]\nallow_sse_c_over_http = true\n"
    if CLUSTER_MODE:
        gws = cluster_gateways(tmp_path_factory, n=1, first_args=["--mount", mnt], extra_toml=plain_ssec)
    else:
        gws = [Lode(str(d / "data"), extra_args=["--mount", mnt], device_size="1GiB", extra_toml=plain_ssec)]
        gws[0].start()
    srv = gws[0]
    assert is_mounted(mnt)
    srv.mnt = mnt
    srv.gateways = gws
    yield srv
    for g in gws:
        g.remove()
    still = is_mounted(mnt)
    force_unmount(mnt)
    assert not still, "SIGTERM must unmount"


@pytest.fixture(scope="module")
def ps3(mounted):
    return make_client(mounted.endpoint)


@pytest.fixture
def pb(mounted, ps3):
    """A fresh bucket on the mounted server: (name, its directory on the mount)."""
    name = "p-" + uuid.uuid4().hex[:12]
    ps3.create_bucket(Bucket=name)
    yield name, os.path.join(mounted.mnt, name)
    for page in ps3.get_paginator("list_objects_v2").paginate(Bucket=name):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            ps3.delete_objects(Bucket=name, Delete={"Objects": keys, "Quiet": True})
    ps3.delete_bucket(Bucket=name)


def s3_keys(s3, bucket):
    out = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        out += [o["Key"] for o in page.get("Contents", [])]
    return out


def get(s3, bucket, key):
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def expect_errno(code, fn, *args):
    with pytest.raises(OSError) as e:
        fn(*args)
    assert e.value.errno == code, f"{fn.__name__}{args}: {e.value!r}, wanted {errno.errorcode[code]}"


# ---------------------------------------------------------------- sequences on the mount


def test_a_whole_file_read_is_one_fuse_request(mounted, pb, ps3):
    """The mount's readahead is raised to the 1 MiB that `init` negotiates (the kernel keeps
    the 128 KiB bdi default otherwise): reading a 900 KB file whole costs one READ."""
    import requests

    st = os.stat(mounted.mnt)
    knob = f"/sys/class/bdi/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/read_ahead_kb"
    assert open(knob).read().strip() == "1024"
    b, d = pb
    data = {f"r{i}": os.urandom(900_000 + i) for i in range(5)}
    for k, v in data.items():
        ps3.put_object(Bucket=b, Key=k, Body=v)
    os.listdir(d)  # names and attributes come with readdirplus
    reads = lambda: requests.get(mounted.admin + "/api/profile").json()["doors"]["posix"]["read"]["ops"]  # noqa: E731
    before = reads()
    for k, v in data.items():
        with open(os.path.join(d, k), "rb") as f:
            assert f.read() == v
    assert reads() - before == len(data)


def test_a_directory_of_several_listing_pages_lists_whole_with_attributes(pb, ps3):
    """A directory of 2,300 entries takes three catalog pages per readdir: every name comes
    once, each with its size and its POSIX mode (decoded from the listing's record summaries),
    and a file that shares its name with a directory whose keys start pages later shows only
    as that directory (keys `k` and `k/inner` with 1,200 `k-NNNN` between them)."""
    from concurrent.futures import ThreadPoolExecutor

    b, d = pb
    names = [f"k-{i:04d}" for i in range(1200)] + [f"z{i:04d}" for i in range(1100)]

    def put(n):
        ps3.put_object(Bucket=b, Key=n, Body=b"x" * (len(n) + int(n[-4:]) % 7))

    with ThreadPoolExecutor(8) as ex:
        list(ex.map(put, names))
    ps3.put_object(Bucket=b, Key="k", Body=b"file")
    ps3.put_object(Bucket=b, Key="k/inner", Body=b"in")
    with open(os.path.join(d, "made-here"), "wb") as f:
        f.write(b"abc")
    os.chmod(os.path.join(d, "made-here"), 0o640)
    listed = os.listdir(d)
    assert len(listed) == len(set(listed)), "a name came twice"
    assert sorted(listed) == sorted(names + ["k", "made-here"])
    assert os.path.isdir(os.path.join(d, "k"))
    assert os.listdir(os.path.join(d, "k")) == ["inner"]
    with os.scandir(d) as it:
        seen = {e.name: e.stat() for e in it if e.name != "k"}
    for n in names:
        assert seen[n].st_size == len(n) + int(n[-4:]) % 7, n
    assert seen["made-here"].st_size == 3
    assert seen["made-here"].st_mode & 0o7777 == 0o640


def test_names_that_become_directories_after_a_listing_resolve_as_directories(pb, ps3):
    """A lookup after a whole listing skips the `name/` range scan for the names the listing
    showed as files; every change that can make a name a directory must void that: S3 keys
    under a listed file's name or under a new name, and a mkdir or rename through the mount.
    The kernel's own name cache is dropped before each check, so the lookup reaches Lode."""

    def forget():
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("2")

    b, d = pb
    for n in ["f1", "f2"]:
        ps3.put_object(Bucket=b, Key=n, Body=b"x")
    assert sorted(os.listdir(d)) == ["f1", "f2"]
    forget()
    assert os.path.isfile(os.path.join(d, "f2"))
    ps3.put_object(Bucket=b, Key="f1/inner", Body=b"y")
    forget()
    assert os.path.isdir(os.path.join(d, "f1"))
    assert sorted(os.listdir(d)) == ["f1", "f2"]
    ps3.put_object(Bucket=b, Key="n3/x", Body=b"z")
    forget()
    assert os.listdir(os.path.join(d, "n3")) == ["x"]
    assert sorted(os.listdir(d)) == ["f1", "f2", "n3"]
    os.mkdir(os.path.join(d, "m1"))
    forget()
    assert os.path.isdir(os.path.join(d, "m1"))
    assert sorted(os.listdir(d)) == ["f1", "f2", "m1", "n3"]
    os.rename(os.path.join(d, "n3"), os.path.join(d, "m2"))
    forget()
    assert os.listdir(os.path.join(d, "m2")) == ["x"]
    assert not os.path.exists(os.path.join(d, "n3"))


def test_a_lookup_after_a_listing_sees_every_change_made_since(pb, ps3):
    """A lookup right after a whole listing answers from the listing's attributes; every
    change through the mount (write, truncate, chmod, utime, unlink, rename) and through S3
    must void them. Each step lists the directory again (so a valid listing is remembered),
    makes one change, drops the kernel's own caches and looks the name up."""

    def forget():
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("2")

    b, d = pb
    for n, size in [("a", 10), ("b", 20), ("c", 30), ("e", 40)]:
        ps3.put_object(Bucket=b, Key=n, Body=b"x" * size)
    path = lambda n: os.path.join(d, n)  # noqa: E731

    def relisted():
        with os.scandir(d) as it:
            seen = {e.name: e.stat() for e in it}
        forget()
        return seen

    seen = relisted()
    assert os.stat(path("a")).st_size == 10 == seen["a"].st_size
    assert os.stat(path("b")).st_mtime == seen["b"].st_mtime

    relisted()
    with open(path("a"), "wb") as f:
        f.write(b"y" * 11)
    forget()
    assert os.stat(path("a")).st_size == 11

    relisted()
    with open(path("a"), "ab") as f:
        f.write(b"z" * 5)
    forget()
    assert os.stat(path("a")).st_size == 16

    relisted()
    os.truncate(path("b"), 3)
    forget()
    assert os.stat(path("b")).st_size == 3

    relisted()
    os.chmod(path("b"), 0o600)
    forget()
    assert os.stat(path("b")).st_mode & 0o7777 == 0o600

    relisted()
    os.utime(path("c"), (1_000_000_000, 1_000_000_000))
    forget()
    assert os.stat(path("c")).st_mtime == 1_000_000_000

    relisted()
    os.unlink(path("c"))
    forget()
    assert not os.path.exists(path("c"))

    relisted()
    os.rename(path("b"), path("b2"))
    forget()
    assert not os.path.exists(path("b")) and os.stat(path("b2")).st_size == 3

    relisted()
    ps3.put_object(Bucket=b, Key="e", Body=b"w" * 41)
    forget()
    assert os.stat(path("e")).st_size == 41

    relisted()
    ps3.delete_object(Bucket=b, Key="e")
    forget()
    assert not os.path.exists(path("e"))


def test_file_lifecycle_create_write_read_truncate_unlink(pb, ps3):
    b, d = pb
    p = os.path.join(d, "f.bin")
    data = os.urandom(300_000)
    with open(p, "wb") as f:
        f.write(data)
    assert os.stat(p).st_size == len(data)
    with open(p, "rb") as f:
        assert f.read() == data
    # Random writes into an existing object (not only sequential new files).
    with open(p, "r+b") as f:
        f.seek(1000)
        f.write(b"X" * 10)
        f.seek(299_990)
        f.write(b"tail-grows-the-file")
    model = bytearray(data)
    model[1000:1010] = b"X" * 10
    model[299_990:] = b"tail-grows-the-file"
    assert open(p, "rb").read() == bytes(model)
    assert get(ps3, b, "f.bin") == bytes(model)
    os.truncate(p, 5000)
    assert os.stat(p).st_size == 5000
    assert get(ps3, b, "f.bin") == bytes(model[:5000])
    os.truncate(p, 8000)  # grows with zeros
    assert get(ps3, b, "f.bin") == bytes(model[:5000]) + b"\0" * 3000
    os.unlink(p)
    assert not os.path.exists(p)
    with pytest.raises(ClientError):
        ps3.head_object(Bucket=b, Key="f.bin")


def test_directories_mkdir_readdir_rmdir(pb, ps3):
    b, d = pb
    os.makedirs(os.path.join(d, "x/y/z"))
    assert sorted(s3_keys(ps3, b)) == ["x/", "x/y/", "x/y/z/"]
    for i in range(5):
        with open(os.path.join(d, "x", f"f{i}"), "w") as f:
            f.write(str(i))
    assert sorted(os.listdir(os.path.join(d, "x"))) == ["f0", "f1", "f2", "f3", "f4", "y"]
    expect_errno(errno.ENOTEMPTY, os.rmdir, os.path.join(d, "x"))
    expect_errno(errno.EEXIST, os.mkdir, os.path.join(d, "x"))
    os.rmdir(os.path.join(d, "x/y/z"))
    assert "x/y/z/" not in s3_keys(ps3, b)
    shutil.rmtree(os.path.join(d, "x"))
    assert s3_keys(ps3, b) == []
    assert os.listdir(d) == []


def test_rename_file_and_directory_atomically(pb, ps3):
    b, d = pb
    os.makedirs(os.path.join(d, "src/sub"))
    for k in ["src/a", "src/sub/b", "src/sub/c"]:
        ps3.put_object(Bucket=b, Key=k, Body=k.encode())
    os.rename(os.path.join(d, "src/a"), os.path.join(d, "src/a2"))
    assert get(ps3, b, "src/a2") == b"src/a"
    os.rename(os.path.join(d, "src"), os.path.join(d, "dst"))
    assert sorted(s3_keys(ps3, b)) == ["dst/", "dst/a2", "dst/sub/", "dst/sub/b", "dst/sub/c"]
    assert open(os.path.join(d, "dst/sub/c")).read() == "src/sub/c"
    assert not os.path.exists(os.path.join(d, "src"))
    # Over an existing file: replaced. Onto a non-empty directory: refused.
    ps3.put_object(Bucket=b, Key="dst/other", Body=b"old")
    os.rename(os.path.join(d, "dst/a2"), os.path.join(d, "dst/other"))
    assert get(ps3, b, "dst/other") == b"src/a"
    os.makedirs(os.path.join(d, "full/x"))
    expect_errno(errno.ENOTEMPTY, os.rename, os.path.join(d, "dst"), os.path.join(d, "full"))


def test_attributes_chmod_chown_utime_are_kept(pb, ps3):
    b, d = pb
    p = os.path.join(d, "attrs")
    open(p, "w").write("x")
    os.chmod(p, 0o640)
    os.chown(p, 1234, 5678)
    os.utime(p, (1_600_000_000, 1_600_000_000.5))
    st = os.stat(p)
    assert (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (0o640, 1234, 5678)
    assert st.st_mtime == pytest.approx(1_600_000_000.5)
    meta = ps3.head_object(Bucket=b, Key="attrs")["Metadata"]
    assert meta["mode"] == str(0o100640) and meta["uid"] == "1234" and meta["gid"] == "5678"
    # Content unchanged by attribute changes; the ETag too.
    assert ps3.head_object(Bucket=b, Key="attrs")["ETag"] == '"%s"' % hashlib.md5(b"x").hexdigest()
    os.makedirs(os.path.join(d, "dir"))
    os.chmod(os.path.join(d, "dir"), 0o700)
    assert os.stat(os.path.join(d, "dir")).st_mode & 0o7777 == 0o700


def test_fsync_commits_and_readers_never_see_a_partial_file(pb, ps3):
    b, d = pb
    p = os.path.join(d, "growing")
    ps3.put_object(Bucket=b, Key="growing", Body=b"v1")
    f = open(p, "r+b")
    f.write(b"v2-partial-" * 1000)
    f.flush()
    # Written but neither closed nor fsynced: S3 still sees v1, whole.
    assert get(ps3, b, "growing") == b"v1"
    os.fsync(f.fileno())
    v2 = b"v2-partial-" * 1000
    assert get(ps3, b, "growing") == v2
    f.write(b"more")
    assert get(ps3, b, "growing") == v2
    f.close()
    obj = ps3.get_object(Bucket=b, Key="growing")
    body = obj["Body"].read()
    assert body == v2 + b"more"
    assert obj["ETag"] == '"%s"' % hashlib.md5(body).hexdigest()


def page_cache_kib():
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Cached:"))


def page_cache_growth_mib(path, flags, mib):
    """How much the kernel's page cache grew while `mib` MiB were written to `path` through a
    descriptor opened with `flags` (measured before the close)."""
    block = os.urandom(1 << 20)
    fd = os.open(path, flags | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        before = page_cache_kib()
        for _ in range(mib):
            assert os.write(fd, block) == len(block)
        return (page_cache_kib() - before) / 1024
    finally:
        os.close(fd)


def test_write_only_descriptors_bypass_the_page_cache_and_readers_stay_coherent(pb, ps3):
    """A file opened write-only is written past the kernel's page cache (FOPEN_DIRECT_IO: no
    copy into cache pages that nobody reads), and a reader that cached the old bytes, by read
    or by a map, sees the new ones once the writer closes; a read-write descriptor keeps the
    page cache."""
    b, d = pb
    old, new = os.urandom(256 << 10), os.urandom(8 << 10)
    ps3.put_object(Bucket=b, Key="k", Body=old)
    p = os.path.join(d, "k")
    import mmap
    with open(p, "rb") as r:
        assert r.read() == old
        m = mmap.mmap(r.fileno(), 0, prot=mmap.PROT_READ)
        assert m[:] == old
        w = os.open(p, os.O_WRONLY)
        assert os.pwrite(w, new, 64 << 10) == len(new)
        os.close(w)
        want = old[: 64 << 10] + new + old[(72 << 10):]
        assert os.pread(r.fileno(), len(old), 0) == want
        assert m[:] == want
        m.close()
    assert get(ps3, b, "k") == want
    # Any offset and size: a write past the end leaves a hole of zeros, as on a plain file.
    w = os.open(p, os.O_WRONLY)
    assert os.pwrite(w, b"tail", len(want) + 5001) == 4
    os.close(w)
    assert get(ps3, b, "k") == want + bytes(5001) + b"tail"
    with open(p, "rb") as r:
        assert r.read() == want + bytes(5001) + b"tail"
    # 64 MiB through a write-only descriptor: the page cache does not grow with it (from Linux
    # 6.6; before, the mount keeps it, P7b); through a read-write one it does (which also shows
    # the measure works on this machine).
    assert page_cache_growth_mib(os.path.join(d, "rw"), os.O_RDWR, 64) > 32
    wo = page_cache_growth_mib(os.path.join(d, "wo"), os.O_WRONLY, 64)
    kernel = tuple(int(x) for x in os.uname().release.split("-")[0].split(".")[:2])
    assert wo < 16 if kernel >= (6, 6) else wo > 32, (kernel, wo)
    assert ps3.head_object(Bucket=b, Key="wo")["ContentLength"] == 64 << 20


def staged_files(srv):
    """Local staging copies the server holds open (anonymous files under its staging dir)."""
    n = 0
    fds = f"/proc/{srv.proc.pid}/fd"
    for fd in os.listdir(fds):
        try:
            n += "/staging/" in os.readlink(os.path.join(fds, fd))
        except OSError:
            pass
    return n


def staged_files_after_release(srv, want):
    """`staged_files` once it is `want`, or as it is after 10 s: the kernel sends a file's
    RELEASE after `close` has returned, and the server drops the staging copy then."""
    deadline = time.monotonic() + 10
    while (n := staged_files(srv)) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    return n


def test_a_file_written_front_to_back_streams_into_chunks_and_other_writes_fall_back(mounted, pb, ps3):
    """A checkpoint written through the mount streams into chunks as it is written (no local
    staging copy, nothing visible on S3 until the close, MD5 ETag); a write anywhere but the
    end, a read, a truncate or an unlink of such a file keeps the semantics of a staged file."""
    b, d = pb
    blk = os.urandom(1 << 20)

    def free():
        s = os.statvfs(d)
        return s.f_bfree * s.f_frsize

    free0 = free()
    p = os.path.join(d, "ckpt.bin")
    f = open(p, "wb", buffering=0)
    for _ in range(24):
        f.write(blk)
    assert staged_files(mounted) == 0, "a file written front to back is not staged locally"
    assert os.stat(p).st_size == 24 << 20
    with pytest.raises(ClientError):
        ps3.head_object(Bucket=b, Key="ckpt.bin")
    f.close()
    obj = ps3.get_object(Bucket=b, Key="ckpt.bin")
    assert obj["Body"].read() == blk * 24
    assert obj["ETag"] == '"%s"' % hashlib.md5(blk * 24).hexdigest()

    # A write behind the end: the streamed bytes come back into a staged copy.
    p = os.path.join(d, "patched")
    with open(p, "wb", buffering=0) as f:
        for _ in range(6):
            f.write(blk)
        f.seek(5 << 20)
        f.write(b"X" * 100)
        assert staged_files(mounted) == 1
        f.seek(0, 2)
        f.write(blk)
    want = bytearray(blk * 7)
    want[5 << 20:(5 << 20) + 100] = b"X" * 100
    assert get(ps3, b, "patched") == bytes(want)
    # A read of what it wrote, then more at the end.
    p = os.path.join(d, "reread")
    with open(p, "w+b", buffering=0) as f:
        for _ in range(3):
            f.write(blk)
        f.seek(0)
        assert f.read(1 << 20) == blk
        f.seek(0, 2)
        f.write(blk)
    assert get(ps3, b, "reread") == blk * 4
    # Truncated to nothing, and to a middle size.
    for size in (0, 1000):
        p = os.path.join(d, f"cut{size}")
        with open(p, "wb", buffering=0) as f:
            for _ in range(3):
                f.write(blk)
            f.truncate(size)
            f.seek(size)
            f.write(b"tail")
        assert get(ps3, b, f"cut{size}") == blk[:size] + b"tail"
    # fsync commits what streamed; the file goes on growing and commits again at close.
    p = os.path.join(d, "synced")
    with open(p, "wb", buffering=0) as f:
        for _ in range(3):
            f.write(blk)
        os.fsync(f.fileno())
        assert get(ps3, b, "synced") == blk * 3
        f.write(blk)
        assert get(ps3, b, "synced") == blk * 3
    assert get(ps3, b, "synced") == blk * 4
    # Appended to: the stored object is copied in, then the appends stream.
    with open(p, "ab", buffering=0) as f:
        f.write(blk)
    assert get(ps3, b, "synced") == blk * 5
    # Unlinked while streaming: never committed, its chunks freed.
    p = os.path.join(d, "gone")
    f = open(p, "wb", buffering=0)
    for _ in range(5):
        f.write(blk)
    os.unlink(p)
    f.write(blk)
    f.close()
    assert "gone" not in s3_keys(ps3, b)
    assert staged_files_after_release(mounted, 0) == 0
    if not CLUSTER_MODE:
        for k in s3_keys(ps3, b):
            os.unlink(os.path.join(d, k))
        deadline = time.monotonic() + 10
        while free() != free0 and time.monotonic() < deadline:
            time.sleep(0.1)  # chunks are freed once the reads that might use them are done
        assert free() == free0, "every streamed chunk is freed or committed"


def test_files_past_the_streaming_limit_stage_locally_and_all_commit_whole(mounted, pb, ps3):
    """At most 16 files stream into chunks at once; the next ones written front to back stage
    locally (bounded memory), and every one commits whole."""
    b, d = pb
    blks = [os.urandom(1 << 20) for _ in range(18)]
    fs = [open(os.path.join(d, f"w{i:02d}"), "wb", buffering=0) for i in range(18)]
    for f, blk in zip(fs, blks):
        f.write(blk)
    assert staged_files(mounted) == 2, "the 17th and 18th file stage locally"
    for f, blk in zip(fs, blks):
        f.write(blk)
        f.close()
    assert staged_files_after_release(mounted, 0) == 0
    for i, blk in enumerate(blks):
        obj = ps3.get_object(Bucket=b, Key=f"w{i:02d}")
        assert obj["Body"].read() == blk * 2
        assert obj["ETag"] == '"%s"' % hashlib.md5(blk * 2).hexdigest()


@local_only
def test_statfs_reports_the_datapath(mounted):
    st = os.statvfs(mounted.mnt)
    assert st.f_blocks * st.f_frsize == 1 << 30
    assert 0 < st.f_bavail <= st.f_blocks
    assert st.f_namemax == 255


def test_top_level_mkdir_creates_a_bucket_and_rmdir_deletes_it(mounted, ps3):
    name = "mk-" + uuid.uuid4().hex[:10]
    os.mkdir(os.path.join(mounted.mnt, name))
    ps3.head_bucket(Bucket=name)
    os.rmdir(os.path.join(mounted.mnt, name))
    with pytest.raises(ClientError):
        ps3.head_bucket(Bucket=name)


# ---------------------------------------------------------------- cross-door


def test_cp_on_the_mount_then_boto3_reads_same_bytes_and_md5_etag(pb, ps3, tmp_path):
    b, d = pb
    src = tmp_path / "src.bin"
    data = os.urandom(9 << 20)  # several chunks
    src.write_bytes(data)
    subprocess.run(["cp", str(src), os.path.join(d, "copied.bin")], check=True)
    obj = ps3.get_object(Bucket=b, Key="copied.bin")
    assert obj["Body"].read() == data
    assert obj["ETag"] == '"%s"' % hashlib.md5(data).hexdigest()


def test_boto3_put_then_cat_and_ls(pb, ps3):
    b, d = pb
    ps3.put_object(Bucket=b, Key="dir/from-s3.txt", Body=b"hello from s3\n")
    out = subprocess.run(["cat", os.path.join(d, "dir/from-s3.txt")], capture_output=True, check=True)
    assert out.stdout == b"hello from s3\n"
    ls = subprocess.run(["ls", os.path.join(d, "dir")], capture_output=True, check=True)
    assert ls.stdout.split() == [b"from-s3.txt"]


def test_s3_changes_are_seen_by_the_very_next_stat_open_readdir(pb, ps3):
    b, d = pb
    p = os.path.join(d, "k")
    ps3.put_object(Bucket=b, Key="k", Body=b"1")
    # Warm every kernel cache: entry, attributes, pages.
    assert os.stat(p).st_size == 1 and open(p, "rb").read() == b"1"
    for i in range(2, 40):
        body = b"x" * i
        ps3.put_object(Bucket=b, Key="k", Body=body)
        assert os.stat(p).st_size == i
        assert open(p, "rb").read() == body
    ps3.delete_object(Bucket=b, Key="k")
    assert not os.path.exists(p)
    assert "k" not in os.listdir(d)
    ps3.put_object(Bucket=b, Key="k", Body=b"back")
    assert open(p, "rb").read() == b"back"
    # A file turning into a directory (key `k/x` appears): the directory wins at once.
    ps3.put_object(Bucket=b, Key="k/x", Body=b"")
    assert os.path.isdir(p)
    assert get(ps3, b, "k") == b"back"


def test_delete_on_one_side_gone_on_the_other(pb, ps3):
    b, d = pb
    ps3.put_object(Bucket=b, Key="a", Body=b"a")
    ps3.put_object(Bucket=b, Key="b", Body=b"b")
    assert sorted(os.listdir(d)) == ["a", "b"]
    os.unlink(os.path.join(d, "a"))
    with pytest.raises(ClientError):
        ps3.head_object(Bucket=b, Key="a")
    ps3.delete_object(Bucket=b, Key="b")
    expect_errno(errno.ENOENT, os.stat, os.path.join(d, "b"))


def test_rename_on_the_mount_is_a_new_key_on_s3(pb, ps3):
    b, d = pb
    ps3.put_object(Bucket=b, Key="old/name.txt", Body=b"payload", ContentType="text/plain")
    os.rename(os.path.join(d, "old/name.txt"), os.path.join(d, "old/new.txt"))
    obj = ps3.get_object(Bucket=b, Key="old/new.txt")
    assert obj["Body"].read() == b"payload" and obj["ContentType"] == "text/plain"
    with pytest.raises(ClientError):
        ps3.head_object(Bucket=b, Key="old/name.txt")


def test_s3_rename_object_is_a_rename_on_the_mount(pb, ps3):
    b, d = pb
    ps3.put_object(Bucket=b, Key="ck/step.tmp", Body=b"weights")
    assert os.listdir(os.path.join(d, "ck")) == ["step.tmp"]
    ps3.rename_object(Bucket=b, Key="ck/step.pt", RenameSource=f"{b}/ck/step.tmp")
    assert os.listdir(os.path.join(d, "ck")) == ["step.pt"]
    with open(os.path.join(d, "ck/step.pt"), "rb") as f:
        assert f.read() == b"weights"
    assert not os.path.exists(os.path.join(d, "ck/step.tmp"))
    # And back through the mount: S3 sees the one name.
    os.rename(os.path.join(d, "ck/step.pt"), os.path.join(d, "ck/final.pt"))
    assert s3_keys(ps3, b) == ["ck/final.pt"]


def test_s3_append_is_seen_on_the_mount(pb, ps3):
    b, d = pb
    f = os.path.join(d, "log.txt")
    ps3.put_object(Bucket=b, Key="log.txt", Body=b"one\n")
    with open(f, "rb") as h:
        assert h.read() == b"one\n"
    ps3.put_object(Bucket=b, Key="log.txt", Body=b"two\n", WriteOffsetBytes=4)
    assert os.stat(f).st_size == 8
    with open(f, "rb") as h:
        assert h.read() == b"one\ntwo\n"


def test_mount_writes_and_renames_keep_tags_a_replacement_drops_them(pb, ps3):
    """SEMANTICS.md P21: tags are not shown on the mount; they stay with the file as its mode
    does: through appends, a truncating rewrite and renames. A new file renamed over it (the
    write-temp-then-rename pattern) replaces it, tags and all."""
    b, d = pb
    tags = lambda k: ps3.get_object_tagging(Bucket=b, Key=k)["TagSet"]
    raw = [{"Key": "stage", "Value": "raw"}]
    ps3.put_object(Bucket=b, Key="t.txt", Body=b"one\n", Tagging="stage=raw")
    with open(os.path.join(d, "t.txt"), "ab") as h:
        h.write(b"two\n")
    assert get(ps3, b, "t.txt") == b"one\ntwo\n"
    assert tags("t.txt") == raw
    os.rename(os.path.join(d, "t.txt"), os.path.join(d, "u.txt"))
    assert tags("u.txt") == raw
    with open(os.path.join(d, "u.txt"), "wb") as h:
        h.write(b"new")
    assert get(ps3, b, "u.txt") == b"new"
    assert tags("u.txt") == raw
    with open(os.path.join(d, "u.tmp"), "wb") as h:
        h.write(b"newer")
    os.rename(os.path.join(d, "u.tmp"), os.path.join(d, "u.txt"))
    assert get(ps3, b, "u.txt") == b"newer"
    assert tags("u.txt") == []


def test_versioned_bucket_on_the_mount(pb, ps3):
    """SEMANTICS.md P22: the mount shows each key's current version; a write there makes a new
    version, an unlink a delete marker; a rename moves the current version (the old name keeps
    its history under a delete marker); a directory rename is EXDEV, so mv copies and deletes."""
    b, d = pb
    ps3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    try:
        f = os.path.join(d, "v.txt")
        with open(f, "wb") as h:
            h.write(b"one")
        with open(f, "wb") as h:
            h.write(b"two")
        r = ps3.list_object_versions(Bucket=b, Prefix="v.txt")
        assert [v["IsLatest"] for v in r["Versions"]] == [True, False]
        old = r["Versions"][1]["VersionId"]
        assert ps3.get_object(Bucket=b, Key="v.txt", VersionId=old)["Body"].read() == b"one"
        with open(f, "rb") as h:
            assert h.read() == b"two"
        os.rename(f, os.path.join(d, "w.txt"))
        assert get(ps3, b, "w.txt") == b"two"
        assert not os.path.exists(f)
        r = ps3.list_object_versions(Bucket=b, Prefix="v.txt")
        assert r["DeleteMarkers"][0]["IsLatest"] and [v["VersionId"] for v in r["Versions"]] == [old]
        w = ps3.list_object_versions(Bucket=b, Prefix="w.txt")["Versions"]
        assert len(w) == 1 and w[0]["IsLatest"]
        # A directory rename is EXDEV: mv copies and deletes.
        os.mkdir(os.path.join(d, "dir"))
        with open(os.path.join(d, "dir", "x"), "wb") as h:
            h.write(b"in dir")
        expect_errno(errno.EXDEV, os.rename, os.path.join(d, "dir"), os.path.join(d, "dir2"))
        subprocess.run(["mv", os.path.join(d, "dir"), os.path.join(d, "dir2")], check=True)
        assert get(ps3, b, "dir2/x") == b"in dir"
        assert not os.path.exists(os.path.join(d, "dir"))
        # The marker removed through S3: the old name is back on the mount, at its older version.
        ps3.delete_object(Bucket=b, Key="v.txt", VersionId=r["DeleteMarkers"][0]["VersionId"])
        with open(f, "rb") as h:
            assert h.read() == b"one"
    finally:
        for page in ps3.get_paginator("list_object_versions").paginate(Bucket=b):
            for v in page.get("Versions", []) + page.get("DeleteMarkers", []):
                ps3.delete_object(Bucket=b, Key=v["Key"], VersionId=v["VersionId"])


def test_object_lock_on_the_mount(mounted, ps3):
    """SEMANTICS.md P23: in a bucket with object lock, a write on the mount makes a new version
    (the bucket's default retention applies to it; the locked one stays), an unlink a delete
    marker, and a locked version's metadata is not rewritten in place nor renamed: chmod and
    rename are EPERM."""
    b = "pl-" + uuid.uuid4().hex[:10]
    ps3.create_bucket(Bucket=b, ObjectLockEnabledForBucket=True)
    d = os.path.join(mounted.mnt, b)
    try:
        held = ps3.put_object(Bucket=b, Key="f.txt", Body=b"one", ObjectLockLegalHoldStatus="ON")["VersionId"]
        f = os.path.join(d, "f.txt")
        expect_errno(errno.EPERM, os.chmod, f, 0o600)
        # A locked version does not leave its name.
        expect_errno(errno.EPERM, os.rename, f, os.path.join(d, "g.txt"))
        ps3.put_object_lock_configuration(Bucket=b, ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}})
        with open(f, "wb") as h:
            h.write(b"two")
        r = ps3.list_object_versions(Bucket=b, Prefix="f.txt")["Versions"]
        assert len(r) == 2 and r[1]["VersionId"] == held
        new = ps3.head_object(Bucket=b, Key="f.txt")
        assert new["ObjectLockMode"] == "GOVERNANCE" and "ObjectLockLegalHoldStatus" not in new
        os.unlink(f)
        assert ps3.list_object_versions(Bucket=b, Prefix="f.txt")["DeleteMarkers"][0]["IsLatest"]
        assert ps3.get_object(Bucket=b, Key="f.txt", VersionId=held)["Body"].read() == b"one"
    finally:
        for page in ps3.get_paginator("list_object_versions").paginate(Bucket=b):
            for v in page.get("Versions", []) + page.get("DeleteMarkers", []):
                if v["VersionId"] == held:
                    ps3.put_object_legal_hold(Bucket=b, Key=v["Key"], VersionId=held, LegalHold={"Status": "OFF"})
                ps3.delete_object(Bucket=b, Key=v["Key"], VersionId=v["VersionId"], BypassGovernanceRetention=True)
        ps3.delete_bucket(Bucket=b)


# ---------------------------------------------------------------- name rules (SEMANTICS.md)


def test_key_and_prefix_collision_directory_wins(pb, ps3):
    b, d = pb
    ps3.put_object(Bucket=b, Key="a", Body=b"object a")
    ps3.put_object(Bucket=b, Key="a/b", Body=b"object a/b")
    assert os.listdir(d) == ["a"]
    assert os.path.isdir(os.path.join(d, "a"))
    assert open(os.path.join(d, "a/b"), "rb").read() == b"object a/b"
    assert get(ps3, b, "a") == b"object a"


def test_collision_across_a_listing_page_boundary(pb, ps3):
    """readdir lists in pages of 1000; `f0999` the object ends page one, `f0999/` the directory
    starts page two. It must show once, as a directory."""
    b, d = pb
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda i: ps3.put_object(Bucket=b, Key=f"f{i:04d}", Body=b""), range(1200)))
    ps3.put_object(Bucket=b, Key="f0999/inner", Body=b"")
    names = os.listdir(d)
    assert len(names) == 1200 and len(set(names)) == 1200
    assert os.path.isdir(os.path.join(d, "f0999"))


def test_a_directory_of_many_pages_is_listed_ahead_and_whole(pb, ps3):
    """A directory of more than a page is listed ahead of the kernel's reads, at most 16 pages
    (of 1000) ahead. Every name comes once, in a listing read straight through and in one whose
    reader stops for longer than the lister waits for it (5 s: it stops, so a handle left
    open unread holds no thread, and the reader lists on from where it stopped). Cluster mode
    lists the same way over the RADOS catalog; there the directory has 2,500 names (its
    creates are slower), so the lister never fills its window."""
    from concurrent.futures import ThreadPoolExecutor

    b, d = pb
    n = 2_500 if CLUSTER_MODE else 17_500
    names = [f"n{i:05d}" for i in range(n)]

    def make(name):
        with open(os.path.join(d, name), "wb"):
            pass

    with ThreadPoolExecutor(8) as ex:
        list(ex.map(make, names))
    os.mkdir(os.path.join(d, "n01000.d"))
    want = sorted(names + ["n01000.d"])
    listed = os.listdir(d)
    assert len(listed) == len(set(listed)) and sorted(listed) == want
    with os.scandir(d) as it:
        first = [next(it).name for _ in range(10)]
        time.sleep(6)
        rest = [e.name for e in it]
    got = first + rest
    assert len(got) == len(set(got)), "a name came twice"
    assert sorted(got) == want
    assert [e for e in got if os.path.isdir(os.path.join(d, e))] == ["n01000.d"]


def test_keys_that_cannot_be_names_are_hidden(pb, ps3):
    b, d = pb
    hidden = ["x//y", "x/./dot", "x/../up", "x/" + "L" * 256, "./top", "../top2"]
    for k in hidden:
        ps3.put_object(Bucket=b, Key=k, Body=b"h")
    ps3.put_object(Bucket=b, Key="x/ok", Body=b"ok")
    assert sorted(os.listdir(d)) == ["x"]
    assert os.listdir(os.path.join(d, "x")) == ["ok"]
    for k in hidden:  # still objects
        assert get(ps3, b, k) == b"h"


def test_dir_markers_are_directories(pb, ps3):
    b, d = pb
    ps3.put_object(Bucket=b, Key="empty/", Body=b"")
    assert os.path.isdir(os.path.join(d, "empty")) and os.listdir(os.path.join(d, "empty")) == []
    os.mkdir(os.path.join(d, "made"))
    head = ps3.head_object(Bucket=b, Key="made/")
    assert head["ContentLength"] == 0 and head["ContentType"] == "application/x-directory"


def test_posix_writes_keep_content_type_and_user_metadata(pb, ps3):
    b, d = pb
    ps3.put_object(Bucket=b, Key="doc.json", Body=b"{}", ContentType="application/json",
                   Metadata={"owner-team": "vision"})
    with open(os.path.join(d, "doc.json"), "ab") as f:
        f.write(b"\n")
    head = ps3.head_object(Bucket=b, Key="doc.json")
    assert head["ContentType"] == "application/json"
    assert head["Metadata"]["owner-team"] == "vision"
    # The write records its mtime; mode/uid/gid appear only when created on the mount or set.
    assert "mtime" in head["Metadata"] and "mode" not in head["Metadata"]
    # The old checksums go with the old content; the new content has a CRC64NVME of its own,
    # as any upload sent without a checksum, and listings name it.
    head = ps3.head_object(Bucket=b, Key="doc.json", ChecksumMode="ENABLED")
    crc = base64.b64encode(awscrt.checksums.crc64nvme(b"{}\n").to_bytes(8, "big")).decode()
    assert {k: v for k, v in head.items() if k.startswith("Checksum")} == {
        "ChecksumCRC64NVME": crc, "ChecksumType": "FULL_OBJECT"}
    listed = ps3.list_objects_v2(Bucket=b, Prefix="doc.json")["Contents"][0]
    assert (listed["ChecksumAlgorithm"], listed["ChecksumType"]) == (["CRC64NVME"], "FULL_OBJECT")
    # A new file gets no content type of its own (S3's default) and POSIX attributes.
    open(os.path.join(d, "new.bin"), "wb").write(b"1")
    head = ps3.head_object(Bucket=b, Key="new.bin")
    assert head["ContentType"] == "binary/octet-stream"
    assert int(head["Metadata"]["mode"]) & 0o170000 == 0o100000


def test_refused_cases_and_their_errno(mounted, pb, ps3):
    b, d = pb
    other = "q-" + uuid.uuid4().hex[:10]
    ps3.create_bucket(Bucket=other)
    try:
        open(os.path.join(d, "f"), "w").write("f")
        expect_errno(errno.EXDEV, os.rename, os.path.join(d, "f"), os.path.join(mounted.mnt, other, "f"))
    finally:
        ps3.delete_bucket(Bucket=other)
    expect_errno(errno.EINVAL, os.mkdir, os.path.join(mounted.mnt, "Not_A_Bucket"))
    expect_errno(errno.EPERM, open, os.path.join(mounted.mnt, "top-level-file"), "w")
    deep = os.path.join(d, *(["d" * 200] * 5))
    os.makedirs(deep)  # key of 1005 bytes + '/'
    expect_errno(errno.ENAMETOOLONG, open, os.path.join(deep, "n" * 30), "w")
    expect_errno(errno.ENOENT, os.stat, os.path.join(d, "missing"))
    expect_errno(errno.EISDIR, os.unlink, os.path.join(d, "d" * 200))
    expect_errno(errno.ENOTDIR, os.listdir, os.path.join(d, "f"))
    expect_errno(errno.ENOTEMPTY, os.rmdir, os.path.join(d, "d" * 200))
    shutil.rmtree(os.path.join(d, "d" * 200))


def test_extended_attributes_are_not_supported_and_copies_still_work(pb, tmp_path):
    # EOPNOTSUPP for every xattr call (SEMANTICS P15): the mount answers the first getxattr and
    # listxattr with ENOSYS, and the kernel answers every later one itself, so a write() no
    # longer costs a round trip asking for `security.capability`.
    b, d = pb
    f = os.path.join(d, "xa")
    open(f, "w").write("x")
    for _ in range(2):  # the first answer comes from the mount, the second from the kernel
        expect_errno(errno.EOPNOTSUPP, os.getxattr, f, "user.k")
        expect_errno(errno.EOPNOTSUPP, os.getxattr, f, "security.capability")
        expect_errno(errno.EOPNOTSUPP, os.listxattr, f)
    expect_errno(errno.EOPNOTSUPP, os.setxattr, f, "user.k", b"v")
    # Copying tools take "not supported" as "none": cp -a and shutil.copy2 out of the mount.
    subprocess.run(["cp", "-a", f, str(tmp_path / "a")], check=True)
    shutil.copy2(f, tmp_path / "b")
    assert (tmp_path / "a").read_text() == (tmp_path / "b").read_text() == "x"


def test_a_directory_remembered_through_creates_vanishes_with_its_last_key(pb, ps3):
    # The mount remembers that a directory exists for the getattr the kernel sends after each
    # create in it. An unlink through the mount, or a delete through S3, of its last key must
    # still make it vanish at once.
    b, d = pb
    for side in ("mount", "s3"):
        dn = "implied-" + side
        ps3.put_object(Bucket=b, Key=dn + "/x", Body=b"x")  # no marker: the keys make it
        for i in range(5):
            open(os.path.join(d, dn, f"f{i}"), "w").write("f")
            assert os.path.isdir(os.path.join(d, dn))
        names = ["x"] + [f"f{i}" for i in range(5)]
        for n in names:
            if side == "mount":
                os.unlink(os.path.join(d, dn, n))
            else:
                ps3.delete_object(Bucket=b, Key=f"{dn}/{n}")
        expect_errno(errno.ENOENT, os.stat, os.path.join(d, dn))
        assert dn not in os.listdir(d)


def test_dot_dot_path_games_stay_inside(pb, mounted):
    b, d = pb
    # `..` is resolved by the kernel; it can never name a key outside the mount's tree.
    p = os.path.join(d, "..", "..", os.path.basename(mounted.mnt), b, "x")
    open(p, "w").write("inside")
    assert open(os.path.join(d, "x")).read() == "inside"
    assert os.path.realpath(os.path.join(d, "..", "..")) == os.path.dirname(mounted.mnt)


# ---------------------------------------------------------------- property tests


def test_reference_model_random_ops_through_both_doors(pb, ps3):
    b, d = pb
    rng = random.Random(1234)
    model = {}  # key -> bytes (files only; directories are implied)
    names = ["a", "b", "c", "d/e", "d/f", "g/h/i"]

    def check_all():
        assert {k: get(ps3, b, k) for k in s3_keys(ps3, b) if not k.endswith("/")} == model
        seen = {}
        for root, _, files in os.walk(d):
            for fn in files:
                full = os.path.join(root, fn)
                seen[os.path.relpath(full, d)] = open(full, "rb").read()
        assert seen == model

    for step in range(300):
        k = rng.choice(names)
        op = rng.random()
        path = os.path.join(d, k)
        if op < 0.25:
            body = os.urandom(rng.choice([0, 10, 5000, 70_000]))
            ps3.put_object(Bucket=b, Key=k, Body=body)
            model[k] = body
        elif op < 0.5:
            body = os.urandom(rng.choice([1, 100, 20_000]))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(body)
            model[k] = body
        elif op < 0.6 and k in model:
            # Patch in place through the mount.
            off = rng.randrange(len(model[k]) + 1)
            with open(path, "r+b") as f:
                f.seek(off)
                f.write(b"PATCH")
            m = bytearray(model[k])
            m[off:off + 5] = b"PATCH"
            model[k] = bytes(m)
        elif op < 0.7:
            ps3.delete_object(Bucket=b, Key=k)
            model.pop(k, None)
        elif op < 0.8 and k in model:
            os.unlink(path)
            del model[k]
        elif op < 0.9 and k in model:
            dst = rng.choice(names)
            if dst != k and not any(n.startswith(dst + "/") for n in model) and not any(
                dst.startswith(n + "/") for n in model
            ):
                os.makedirs(os.path.dirname(os.path.join(d, dst)), exist_ok=True)
                os.rename(path, os.path.join(d, dst))
                model[dst] = model.pop(k)
        # Check one name through both doors every step.
        probe = rng.choice(names)
        if probe in model:
            assert get(ps3, b, probe) == model[probe], (step, probe)
            assert open(os.path.join(d, probe), "rb").read() == model[probe], (step, probe)
        else:
            assert not os.path.isfile(os.path.join(d, probe)), (step, probe)
        if step % 50 == 49:
            # Directories left empty by deletes keep their markers (mkdir made them); drop
            # them from the comparison by listing files only.
            check_all()
    check_all()


def test_fsx_style_random_read_write_truncate(pb, ps3):
    """fsx's loop: random writes, reads, truncates (grow and shrink) and reopen/fsync, each read
    compared with an in-memory model, and the object compared at every close."""
    b, d = pb
    p = os.path.join(d, "fsx.dat")
    rng = random.Random(42)
    model = bytearray()
    f = open(p, "w+b")
    ops = {"write": 0, "read": 0, "truncate": 0, "close": 0, "fsync": 0}
    max_len = 1 << 20
    for step in range(3000):
        r = rng.random()
        if r < 0.4:
            off = rng.randrange(max_len)
            n = rng.randrange(1, 65536)
            buf = bytes([rng.randrange(256)]) * n
            f.seek(off)
            f.write(buf)
            if off > len(model):
                model.extend(b"\0" * (off - len(model)))
            model[off:off + n] = buf
            ops["write"] += 1
        elif r < 0.75:
            if not model:
                continue
            off = rng.randrange(len(model))
            n = rng.randrange(1, 65536)
            f.seek(off)
            got = f.read(n)
            assert got == bytes(model[off:off + n]), f"step {step}: read {off}+{n} differs"
            ops["read"] += 1
        elif r < 0.87:
            size = rng.randrange(max_len)
            f.truncate(size)
            if size < len(model):
                del model[size:]
            else:
                model.extend(b"\0" * (size - len(model)))
            ops["truncate"] += 1
        elif r < 0.95:
            f.flush()
            os.fsync(f.fileno())
            ops["fsync"] += 1
        else:
            f.close()
            assert get(ps3, b, "fsx.dat") == bytes(model), f"step {step}: object differs"
            assert os.stat(p).st_size == len(model)
            f = open(p, "r+b")
            ops["close"] += 1
    f.close()
    obj = ps3.get_object(Bucket=b, Key="fsx.dat")
    assert obj["Body"].read() == bytes(model)
    assert obj["ETag"] == '"%s"' % hashlib.md5(bytes(model)).hexdigest()
    assert min(ops.values()) > 20, ops


# ---------------------------------------------------------------- lifecycle


@local_only
def test_kill_9_leaves_a_stale_mount_that_the_next_start_replaces(tmp_path):
    mnt = str(tmp_path / "mnt")
    srv = Lode(str(tmp_path / "data"), extra_args=["--mount", mnt], device_size="64MiB")
    srv.start()
    try:
        name = "k-" + uuid.uuid4().hex[:10]
        os.mkdir(os.path.join(mnt, name))
        open(os.path.join(mnt, name, "kept"), "w").write("durable")
        srv.stop(hard=True)
        expect_errno(errno.ENOTCONN, os.listdir, mnt)
        srv.start()
        assert open(os.path.join(mnt, name, "kept")).read() == "durable"
        assert "stale FUSE mount" in open(srv.log_path).read()
        # A second server on the same mount point is refused while the first one lives.
        other = Lode(str(tmp_path / "data2"), extra_args=["--mount", mnt], device_size="64MiB")
        with pytest.raises(RuntimeError, match="already mounted"):
            other.start()
        other.remove()
    finally:
        srv.remove()
        still = is_mounted(mnt)
        force_unmount(mnt)
    assert not still


def test_open_handle_sees_replacement_and_estale_after_delete(pb, ps3):
    b, d = pb
    ps3.put_object(Bucket=b, Key="h", Body=b"first version")
    f = open(os.path.join(d, "h"), "rb", buffering=0)
    assert f.read(5) == b"first"
    ps3.put_object(Bucket=b, Key="h", Body=b"SECOND VERSION")
    f.seek(0)
    assert f.read() == b"SECOND VERSION"
    ps3.delete_object(Bucket=b, Key="h")
    f.seek(0)
    with pytest.raises(OSError) as e:
        f.read()
    assert e.value.errno == errno.ESTALE
    f.close()


@local_only
def test_full_datapath_is_enospc_at_close_and_nothing_is_harmed(tmp_path):
    mnt = str(tmp_path / "mnt")
    srv = Lode(str(tmp_path / "data"), extra_args=["--mount", mnt], device_size="32MiB")
    srv.start()
    try:
        name = "full-" + uuid.uuid4().hex[:8]
        os.mkdir(os.path.join(mnt, name))
        keep = os.urandom(8 << 20)
        open(os.path.join(mnt, name, "keep"), "wb").write(keep)
        # Written front to back, the file streams into chunks: the device fills during the
        # writes, which answer ENOSPC, and so does the close.
        f = open(os.path.join(mnt, name, "huge"), "wb", buffering=0)
        errs = []
        for _ in range(40):
            try:
                f.write(os.urandom(1 << 20))
            except OSError as e:
                errs.append(e.errno)
                break
        with pytest.raises(OSError) as e:
            f.close()
        errs.append(e.value.errno)
        assert errs == [errno.ENOSPC, errno.ENOSPC], errs
        # A file staged locally (written out of order) meets the full device at its close.
        f = open(os.path.join(mnt, name, "scattered"), "wb", buffering=0)
        for i in reversed(range(40)):
            f.seek(i << 20)
            f.write(os.urandom(1 << 20))
        with pytest.raises(OSError) as e:
            f.close()
        assert e.value.errno == errno.ENOSPC
        assert open(os.path.join(mnt, name, "keep"), "rb").read() == keep
        s3 = make_client(srv.endpoint)
        for k in ("huge", "scattered"):
            with pytest.raises(ClientError):
                s3.head_object(Bucket=name, Key=k)
        # Space comes back after a delete.
        os.unlink(os.path.join(mnt, name, "keep"))
        open(os.path.join(mnt, name, "after"), "wb").write(os.urandom(16 << 20))
        assert s3.head_object(Bucket=name, Key="after")["ContentLength"] == 16 << 20
    finally:
        srv.remove()
        force_unmount(mnt)


def as_nobody(*cmd):
    return subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd],
        capture_output=True,
        timeout=30,
    )


def test_other_users_are_kept_out_unless_allow_other(pb, mounted):
    """allow_other is off by default: only the user running lode may use the mount."""
    b, d = pb
    open(os.path.join(d, "open-to-all"), "w").write("x")
    os.chmod(os.path.join(d, "open-to-all"), 0o644)
    p = as_nobody("cat", os.path.join(d, "open-to-all"))
    assert p.returncode != 0 and b"Permission denied" in p.stderr, p


@local_only
def test_allow_other_enforces_permission_bits(tmp_path):
    # Outside pytest's 0700 temp tree, so that another user can reach it at all.
    mnt = f"/tmp/lode-allow-other-{uuid.uuid4().hex[:8]}"
    cfg = tmp_path / "allow-other.toml"
    cfg.write_text('[[datapath.devices]]\npath = "dev0.img"\nsize = "64MiB"\n[posix]\nallow_other = true\n')
    srv = Lode(str(tmp_path / "data"), extra_args=["--config", str(cfg), "--mount", mnt])
    srv.start()
    try:
        os.chmod(mnt, 0o755)
        name = "perm-" + uuid.uuid4().hex[:8]
        os.mkdir(os.path.join(mnt, name))
        pub, priv = os.path.join(mnt, name, "public"), os.path.join(mnt, name, "private")
        open(pub, "w").write("everyone")
        open(priv, "w").write("root only")
        os.chmod(pub, 0o644)
        os.chmod(priv, 0o600)
        assert as_nobody("cat", pub).stdout == b"everyone"
        p = as_nobody("cat", priv)
        assert p.returncode != 0 and b"Permission denied" in p.stderr, p
        # Writing into a directory owned by root with mode 0755 is refused too.
        p = as_nobody("sh", "-c", f"echo x > {os.path.join(mnt, name, 'new')}")
        assert p.returncode != 0 and b"Permission denied" in p.stderr, p
        s3 = make_client(srv.endpoint)
        assert [o["Key"] for o in s3.list_objects_v2(Bucket=name)["Contents"]] == ["private", "public"]
    finally:
        srv.remove()
        force_unmount(mnt)
        os.rmdir(mnt)


def test_encrypted_objects_on_the_mount(mounted, ps3, pb):
    """SSE-S3 and SSE-KMS objects read and write through the mount as any other (random reads
    open only the segments they touch); a file made on the mount takes the bucket's default
    encryption; an SSE-C object cannot be opened (EACCES, SEMANTICS.md P24)."""
    import json

    from test_sse import raw_ssec_put
    from test_users import admin
    name, d = pb
    key = json.loads(admin(mounted, "kms", "create-key", "--description", "mount").stdout)["id"]
    ps3.put_bucket_encryption(Bucket=name, ServerSideEncryptionConfiguration={"Rules": [{
        "ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": key},
        "BlockedEncryptionTypes": {"EncryptionType": ["NONE"]}}]})
    body = os.urandom(5 * 1024 * 1024 + 999)
    ps3.put_object(Bucket=name, Key="s3obj", Body=body, ServerSideEncryption="AES256")
    with open(os.path.join(d, "s3obj"), "rb") as f:
        assert f.read() == body
        for at in (0, 65_530, 4_128_760, len(body) - 10):
            f.seek(at)
            assert f.read(100) == body[at:at + 100], at
    with open(os.path.join(d, "made"), "wb") as f:
        f.write(body)
    h = ps3.head_object(Bucket=name, Key="made")
    assert h["ServerSideEncryption"] == "aws:kms" and h["SSEKMSKeyId"].endswith(key)
    assert ps3.get_object(Bucket=name, Key="made")["Body"].read() == body
    r = raw_ssec_put(ps3.meta.endpoint_url, name, "ssec", b"customer secret", os.urandom(32))
    assert r.status_code == 200, r.content
    assert os.stat(os.path.join(d, "ssec")).st_size == len(b"customer secret")
    with pytest.raises(PermissionError):
        open(os.path.join(d, "ssec"), "rb")
