#!/usr/bin/env python3
"""The POSIX door against the machine's own disk, in one run, with the same operations.

Starts `lode serve --mount` on a fresh data dir (a 2 GiB device), then runs on the mount and on a
plain directory of the file system that holds the data dir:

  creates    N small files (4 KiB) in one directory, from T threads; each is closed (on Lode
             that is a durable commit, on the local disk only a page-cache write)
  creates+fsync  the same into another directory, each file fsynced before its close: what the
             local disk does when every close is durable, as every close on Lode is
  readdir    os.listdir of that N-entry directory
  stat       os.stat of every file in random order, cold (kernel caches dropped) and warm
  ls -l      `ls -l` of that directory, kernel caches dropped first (a listing, a stat of every
             entry, and the ACL and SELinux xattr checks `ls` makes of each)
  write      one file of B MiB in 1 MiB writes, then fsync + close
  read       the same file in 1 MiB reads, page cache dropped first
  torch.save a state dict of --ckpt-mib MiB (16 float32 tensors) to a file, then fsync + close

and, against the same server, the same bytes through S3: one --big-mib MiB PUT from one stream
(`lode bench small --concurrency 1`, the median of 3), and the checkpoint through
s3torchconnector's S3Checkpoint writer (the CRT's multipart upload), so the mount's writes stand
against Lode's own S3 door (`--ckpt-mib 0` skips the torch rows).

and the read side (readdir, stat, read) and the creates once more on the bare FUSE ceiling:
`lode bench-ceiling --fuse-source` serving an in-memory copy of the local directory over the
same FUSE setup as Lode's mount (creates kept in memory), so what is FUSE's and what is Lode's
stays visible.

`--write-rounds R` measures only the sequential write, as R rounds on one fresh server, each
round the mount's write of --big-mib MiB (a new file, the previous one removed) and then one
PUT of the same size through the S3 door: the two sides alternate in one run, so the ratio's
noise is each round's own (the PUT alone varies by a third from run to run here). Prints each
round and the medians.

Usage (as root, needs /dev/fuse):  bench/posix_vs_local.py [--files 100000] [--big-mib 1024]
Prints a table and writes --json (default posix-vs-local.json).
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from lodeproc import exports


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def names_of(files):
    return [f"f{i:07d}" for i in range(files)]


def creates(d, files, threads, fsync):
    """Files per second: `files` 4 KiB files made in `d` from `threads` threads."""
    os.makedirs(d, exist_ok=True)
    payload = os.urandom(4096)

    def create(chunk):
        for n in chunk:
            with open(os.path.join(d, n), "wb") as f:
                f.write(payload)
                if fsync:
                    f.flush()
                    os.fsync(f.fileno())

    names = names_of(files)
    chunks = [names[i::threads] for i in range(threads)]
    with ThreadPoolExecutor(threads) as ex:
        t = timed(lambda: list(ex.map(create, chunks)))
    return files / t


def state_dict(mib):
    """A checkpoint's worth of float32 tensors: 16 of mib/16 MiB each."""
    import torch
    g = torch.Generator().manual_seed(7)
    n = (mib << 20) // 16 // 4
    return {f"layer{i}.weight": torch.rand(n, generator=g) for i in range(16)}


def torch_save(path, sd):
    """MiB/s of one torch.save of `sd` to `path`, fsynced and closed."""
    import torch
    mib = sum(t.numel() * t.element_size() for t in sd.values()) / (1 << 20)

    def save():
        with open(path, "wb") as f:
            torch.save(sd, f)
            f.flush()
            os.fsync(f.fileno())

    return mib / timed(save)


def s3_writes(a, endpoint, ak, sk, sd, work):
    """The same bytes through Lode's S3 door: the single-stream PUT and the S3Checkpoint save."""
    res = {"s3_put_mib_s": s3_put(a, endpoint, ak, sk, work, 3)}
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ak, AWS_SECRET_ACCESS_KEY=sk)
    if sd is not None:
        import torch
        from s3torchconnector import S3Checkpoint, S3ClientConfig
        os.environ.update(AWS_ACCESS_KEY_ID=ak, AWS_SECRET_ACCESS_KEY=sk)
        subprocess.run([a.lode, "bench", "small", "--endpoint", endpoint, "--bucket", "bench-ckpt",
                        "--objects", "1", "--concurrency", "1"], env=env, check=True,
                       stdout=subprocess.DEVNULL)  # creates the bucket
        ckpt = S3Checkpoint(region="us-east-1", endpoint=endpoint,
                            s3client_config=S3ClientConfig(force_path_style=True))
        mib = sum(t.numel() * t.element_size() for t in sd.values()) / (1 << 20)

        def save():
            with ckpt.writer("s3://bench-ckpt/ckpt.pt") as w:
                torch.save(sd, w)

        res["torch_save_mib_s"] = mib / timed(save)
    return res


def seq_write(path, big_mib):
    """MiB/s of one file of `big_mib` MiB written in 1 MiB writes to `path`, fsynced and closed."""
    block = os.urandom(1 << 20)

    def write_big():
        with open(path, "wb") as f:
            for _ in range(big_mib):
                f.write(block)
            f.flush()
            os.fsync(f.fileno())

    return big_mib / timed(write_big)


def write_rounds(a, bucket, exported, work):
    """--write-rounds: the mount's sequential write and one S3 PUT of the same bytes, alternating."""
    rounds = []
    for i in range(a.write_rounds):
        path = os.path.join(bucket, f"big{i}.bin")
        mount = seq_write(path, a.big_mib)
        os.unlink(path)
        put = s3_put(a, exported["AWS_ENDPOINT_URL"], exported["AWS_ACCESS_KEY_ID"],
                     exported["AWS_SECRET_ACCESS_KEY"], work, 1)
        rounds.append({"mount_mib_s": mount, "s3_put_mib_s": put, "ratio": mount / put})
        print(f"round {i + 1}: mount {mount:6.0f} MiB/s, S3 PUT {put:6.0f} MiB/s, mount/S3 {mount / put:5.2f}",
              flush=True)
    med = {k: sorted(r[k] for r in rounds)[len(rounds) // 2] for k in rounds[0]}
    print(f"median of {len(rounds)} rounds: mount {med['mount_mib_s']:.0f} MiB/s, S3 PUT "
          f"{med['s3_put_mib_s']:.0f} MiB/s, mount/S3 {med['ratio']:.2f} (the median of the rounds' ratios)")
    with open(a.json, "w") as f:
        json.dump({"params": vars(a), "rounds": rounds, "median": med}, f, indent=2)
    return 0


def s3_put(a, endpoint, ak, sk, work, n):
    """MiB/s of one --big-mib MiB PUT from one stream (`lode bench small`): the median of `n`."""
    out = os.path.join(work, "put.json")
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ak, AWS_SECRET_ACCESS_KEY=sk)
    subprocess.run([a.lode, "bench", "small", "--endpoint", endpoint, "--bucket", "bench-put",
                    "--size", f"{a.big_mib}MiB", "--objects", str(n), "--concurrency", "1",
                    "--json", out], env=env, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        put = json.load(f)["classes"]["put"]
    assert put["errors"] == 0, put
    return a.big_mib / (put["p50_ms"] / 1000)


def run_suite(root, files, threads, big_mib, ttl_wait):
    res = {}
    res["creates_per_s"] = creates(os.path.join(root, "many"), files, threads, False)
    res["creates_fsync_per_s"] = creates(os.path.join(root, "synced"), files, threads, True)
    res["seq_write_mib_s"] = seq_write(os.path.join(root, "big.bin"), big_mib)
    res.update(read_suite(root, files, big_mib, ttl_wait))
    return res


def read_suite(root, files, big_mib, ttl_wait):
    """readdir, cold and warm stat, and the cold read of big.bin, on what run_suite made."""
    res = {}
    d = os.path.join(root, "many")
    names = names_of(files)
    time.sleep(ttl_wait)
    drop_caches()
    listed = []
    t = timed(lambda: listed.extend(os.listdir(d)))
    assert len(listed) == files, (len(listed), files)
    res["readdir_entries_per_s"] = files / t
    res["readdir_s"] = t

    order = names[:]
    random.Random(7).shuffle(order)
    time.sleep(ttl_wait)
    drop_caches()

    def stat_all():
        for n in order:
            os.stat(os.path.join(d, n))

    res["stat_cold_per_s"] = files / timed(stat_all)
    res["stat_warm_per_s"] = files / timed(stat_all)

    time.sleep(ttl_wait)
    drop_caches()
    res["ls_l_entries_per_s"] = files / timed(
        lambda: subprocess.run(["ls", "-l", d], stdout=subprocess.DEVNULL, check=True))

    big = os.path.join(root, "big.bin")
    drop_caches()

    def read_big():
        n = 0
        with open(big, "rb", buffering=0) as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                n += len(b)
        assert n == big_mib << 20, n

    res["seq_read_mib_s"] = big_mib / timed(read_big)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--big-mib", type=int, default=1024)
    ap.add_argument("--ckpt-mib", type=int, default=1024, help="torch.save state dict size (0: no torch rows)")
    ap.add_argument("--lode", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/lode-target")), "release", "lode"))
    ap.add_argument("--workdir", default=None, help="where the data dir and the local dir go (default: a temp dir)")
    ap.add_argument("--json", default="posix-vs-local.json")
    ap.add_argument("--write-rounds", type=int, default=0,
                    help="only the sequential write: this many rounds of mount write, then one S3 PUT")
    a = ap.parse_args()
    if a.write_rounds:
        a.ckpt_mib = 0

    work = a.workdir or tempfile.mkdtemp(prefix="lode-posix-bench-")
    data, mnt, local = (os.path.join(work, x) for x in ("data", "mnt", "local"))
    os.makedirs(local, exist_ok=True)
    cfg = os.path.join(work, "lode.toml")
    with open(cfg, "w") as f:
        # Each write round keeps its PUT, and the removed file's chunks may wait out a grace.
        f.write('[[datapath.devices]]\npath = "dev0.img"\nsize = "%dMiB"\n' % (5 * a.big_mib + 3 * a.ckpt_mib + 1024 + 2 * a.write_rounds * a.big_mib))
    env = dict(os.environ, LODE_LOG="warn", RUST_LIB_BACKTRACE="0")
    proc = subprocess.Popen(
        [a.lode, "serve", "--config", cfg, "--data-dir", data, "--listen", "127.0.0.1:0", "--admin-listen", "", "--mount", mnt],
        stdout=subprocess.PIPE, env=env,
    )
    sd = state_dict(a.ckpt_mib) if a.ckpt_mib else None
    try:
        exported = exports(proc.stdout)
        bucket = os.path.join(mnt, "bench-" + str(os.getpid()))
        os.mkdir(bucket)
        if a.write_rounds:
            return write_rounds(a, bucket, exported, work)
        ttl = 0.0  # cold passes: drop_caches drops the kernel's FUSE dentries and attributes too
        print(f"==> local disk ({local})", flush=True)
        loc = run_suite(local, a.files, a.threads, a.big_mib, ttl)
        print(f"==> Lode mount ({bucket})", flush=True)
        lod = run_suite(bucket, a.files, a.threads, a.big_mib, ttl)
        if sd is not None:
            loc["torch_save_mib_s"] = torch_save(os.path.join(local, "ckpt.pt"), sd)
            lod["torch_save_mib_s"] = torch_save(os.path.join(bucket, "ckpt.pt"), sd)
        print("==> the same writes through Lode's S3 door", flush=True)
        s3 = s3_writes(a, exported["AWS_ENDPOINT_URL"], exported["AWS_ACCESS_KEY_ID"],
                       exported["AWS_SECRET_ACCESS_KEY"], sd, work)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        print("==> bare FUSE ceiling (an in-memory copy of the local dir)", flush=True)
        ceil = ceiling_suite(a, local, os.path.join(work, "ceiling"), ttl)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)

    rows = [
        ("creates/s (%d threads, 4 KiB files)" % a.threads, "creates_per_s"),
        ("creates/s, each fsynced at close", "creates_fsync_per_s"),
        ("readdir entries/s (%d entries)" % a.files, "readdir_entries_per_s"),
        ("stat/s cold", "stat_cold_per_s"),
        ("stat/s warm", "stat_warm_per_s"),
        ("ls -l entries/s (cold)", "ls_l_entries_per_s"),
        ("seq write MiB/s (%d MiB, fsync)" % a.big_mib, "seq_write_mib_s"),
        ("seq read MiB/s (cold)", "seq_read_mib_s"),
    ]
    # ratio: Lode over the local disk; Lode/ceil: Lode over the bare FUSE ceiling.
    print(f"\n{'operation':42} {'local disk':>12} {'Lode mount':>12} {'ratio':>7} {'FUSE ceiling':>13} {'Lode/ceil':>9}")
    for label, k in rows:
        c = f"{ceil[k]:13.0f} {lod[k] / ceil[k]:9.2f}" if k in ceil else f"{'-':>13} {'-':>9}"
        print(f"{label:42} {loc[k]:12.0f} {lod[k]:12.0f} {lod[k] / loc[k]:7.2f} {c}")
    # Every close on Lode is durable: its plain creates against the local disk's fsynced ones.
    print(f"{'creates: Lode vs local fsynced at close':42} {'':12} {'':12} "
          f"{lod['creates_per_s'] / loc['creates_fsync_per_s']:7.2f}")
    # The mount's writes against the same bytes through Lode's S3 door.
    print(f"\n{'write':42} {'local disk':>12} {'Lode mount':>12} {'Lode S3':>12} {'mount/S3':>9}")
    writes = [("seq write MiB/s (%d MiB) vs one S3 PUT" % a.big_mib, "seq_write_mib_s", "s3_put_mib_s")]
    if sd is not None:
        writes.append(("torch.save %d MiB vs S3Checkpoint" % a.ckpt_mib, "torch_save_mib_s", "torch_save_mib_s"))
    for label, k, sk in writes:
        print(f"{label:42} {loc[k]:12.0f} {lod[k]:12.0f} {s3[sk]:12.0f} {lod[k] / s3[sk]:9.2f}")
    with open(a.json, "w") as f:
        json.dump({"params": vars(a), "local": loc, "lode": lod, "lode_s3": s3, "fuse_ceiling": ceil}, f, indent=2)


def ceiling_suite(a, local, mnt, ttl):
    """The read side of the suite on `lode bench-ceiling --fuse-source local`."""
    env = dict(os.environ, LODE_LOG="warn", RUST_LIB_BACKTRACE="0")
    ceil = subprocess.Popen([a.lode, "bench-ceiling", "--fuse-source", local, "--fuse-mount", mnt],
                            stdout=subprocess.PIPE, env=env)
    try:
        line = ceil.stdout.readline()
        if b"bench-ceiling:" not in line:
            raise RuntimeError(f"bench-ceiling did not start: {line!r}")
        res = read_suite(mnt, a.files, a.big_mib, ttl)
        # Its creates go to the top directory (kept in memory beside the tree, unlisted).
        res["creates_per_s"] = creates(mnt, a.files, a.threads, False)
        return res
    finally:
        ceil.send_signal(signal.SIGTERM)
        ceil.wait(timeout=60)


if __name__ == "__main__":
    sys.exit(main())
