#!/usr/bin/env python3
"""train-epoch benchmark: samples/s of one shuffled epoch through torch's DataLoader, three ways,
in one run on one machine:

  s3     s3torchconnector S3MapDataset.from_prefix against lode (path-style, CRT client)
  mount  torchvision ImageFolder over the lode FUSE mount (/<mount>/<bucket>/train)
  local  the same ImageFolder over a plain local directory copy on the same file system

With --ceilings, two more paths give each door's ceiling on this machine, with no storage work
at all: `s3-ceiling` is s3torchconnector against `lode bench-ceiling` (a bare in-memory HTTP
handler holding the same samples, read by key list), and `mount-ceiling` is ImageFolder over
`lode bench-ceiling --fuse-source` (a bare FUSE mount of an in-memory copy of the local dir).
Lode's share of a ceiling is what its own work (auth, metadata, device reads, checksums) costs.

Each loader reads every sample whole (no decode: decoding would hide the IO path). Kernel caches
are dropped before every epoch (needs root; otherwise the run says so), paths are interleaved
round by round, and the median of `--rounds` epochs is reported with the ratios to local.

    ~/.cache/lode-venv/bin/python compat-tests/train_epoch.py --samples 20000 --workers 4
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import trainset  # noqa: E402
from conftest import ACCESS_KEY, SECRET_KEY, Lode, lode_bin  # noqa: E402


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default="/var/tmp", help="where lode's data dir and the local copy go")
    ap.add_argument("--json", help="write the result here")
    ap.add_argument("--ceilings", action="store_true", help="also measure both doors' ceilings (see above)")
    a = ap.parse_args()

    work = tempfile.mkdtemp(prefix="lode-train-epoch-", dir=a.dir)
    ceilings = []
    mnt, local = os.path.join(work, "mnt"), os.path.join(work, "local")
    dev_gib = max(2, (a.samples * 300_000 * 5 // 4) >> 30) + 1
    srv = Lode(os.path.join(work, "data"), extra_args=["--mount", mnt], device_size=f"{dev_gib}GiB")
    srv.start()
    os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = ACCESS_KEY, SECRET_KEY
    try:
        bucket = "epoch-" + uuid.uuid4().hex[:6]
        s3 = trainset.s3_client(srv.endpoint, ACCESS_KEY, SECRET_KEY)
        s3.create_bucket(Bucket=bucket)
        t = time.time()
        trainset.generate(s3, bucket, a.samples, local_dir=local, shards=False)
        gen = time.time() - t
        total_bytes = sum(trainset.sample_size(i) for i in range(a.samples))
        print(f"generated {a.samples} samples ({total_bytes / 2**30:.2f} GiB) in {gen:.0f} s; "
              f"{a.workers} workers, batch {a.batch}, {a.rounds} rounds", flush=True)

        sets = {
            "s3": lambda: trainset.s3_map(bucket, srv.endpoint, transform=trainset.s3_sample_size),
            "mount": lambda: trainset.image_folder(os.path.join(mnt, bucket, "train"), bench=True),
            "local": lambda: trainset.image_folder(local, bench=True),
        }
        if a.ceilings:
            sets.update(start_ceilings(a.samples, local, os.path.join(work, "ceiling-mnt"), ceilings))
        results = {k: [] for k in sets}
        cold = True
        for r in range(a.rounds):
            for name, make in sets.items():
                cold = drop_caches() and cold
                t = time.perf_counter()
                ds = make()  # listing / directory walk is part of the epoch
                items = trainset.epoch(ds, workers=a.workers, batch=a.batch, shuffle=True, seed=r)
                dt = time.perf_counter() - t
                got = sum(x if isinstance(x, int) else x[0] for x in items)
                assert len(items) == a.samples and got == total_bytes, (name, len(items), got, total_bytes)
                results[name].append(a.samples / dt)
                print(f"round {r + 1} {name:<6} {a.samples / dt:8.0f} samples/s "
                      f"{total_bytes / dt / 2**20:7.0f} MiB/s", flush=True)
        med = {k: statistics.median(v) for k, v in results.items()}
        print("\n== train-epoch (median of %d rounds%s)" % (a.rounds, ", caches dropped before each epoch" if cold
                                                           else "; NOT cold: could not drop caches (needs root)"))
        print(f"{'path':<14}{'samples/s':>11}{'MiB/s':>9}{'vs local':>10}   target")
        # Issue 16's targets: the mount at 0.9 of local; S3 at 0.85 of its ceiling (below).
        targets = {"mount": 0.90}
        for k in med:
            ratio = med[k] / med["local"]
            tgt = f">= {targets[k]:.2f}: {'met' if ratio >= targets[k] else 'MISSED'}" if k in targets else ""
            print(f"{k:<14}{med[k]:>11.0f}{med[k] * total_bytes / a.samples / 2**20:>9.0f}{ratio:>10.3f}   {tgt}")
        if a.ceilings:
            for k in ("s3", "mount"):
                share = med[k] / med[k + '-ceiling']
                tgt = f" (target >= 0.85: {'met' if share >= 0.85 else 'MISSED'})" if k == "s3" else ""
                print(f"{k} reaches {share:.2f} of its ceiling{tgt}; the ceiling is "
                      f"{med[k + '-ceiling'] / med['local']:.2f} of local")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"workload": "train-epoch", "params": vars(a) | {"cold": cold, "bytes": total_bytes},
                           "samples_per_sec": results, "median": med,
                           "ratio_vs_local": {k: med[k] / med["local"] for k in med}}, f, indent=1)
    finally:
        for c in ceilings:
            c.terminate()
            c.wait(timeout=60)
        srv.remove()
        import shutil
        shutil.rmtree(work, ignore_errors=True)


def start_ceilings(samples, local, fuse_mnt, procs):
    """Starts both ceilings holding the same samples; returns their dataset makers."""
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    http = subprocess.Popen([lode_bin(), "bench-ceiling", "--listen", f"127.0.0.1:{port}"], stdout=subprocess.PIPE)
    procs.append(http)
    http.stdout.readline()
    endpoint = f"http://127.0.0.1:{port}"
    s3 = trainset.s3_client(endpoint, ACCESS_KEY, SECRET_KEY)
    names = [trainset.sample_name(i) for i in range(samples)]

    def put(name):
        with open(os.path.join(local, name), "rb") as f:
            s3.put_object(Bucket="ceiling", Key="train/" + name, Body=f.read())

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, names))
    fuse = subprocess.Popen([lode_bin(), "bench-ceiling", "--fuse-source", local, "--fuse-mount", fuse_mnt],
                            stdout=subprocess.PIPE)
    procs.append(fuse)
    print(fuse.stdout.readline().decode().strip(), flush=True)
    uris = [f"s3://ceiling/train/{n}" for n in names]
    return {
        "s3-ceiling": lambda: trainset.S3MapDataset.from_objects(
            uris, region="us-east-1", endpoint=endpoint, transform=trainset.s3_sample_size,
            s3client_config=trainset.S3ClientConfig(force_path_style=True)),
        "mount-ceiling": lambda: trainset.image_folder(fuse_mnt, bench=True),
    }


if __name__ == "__main__":
    main()
