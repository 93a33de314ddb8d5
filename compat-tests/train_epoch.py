#!/usr/bin/env python3
"""train-epoch benchmark: samples/s of one shuffled epoch through torch's DataLoader, three ways,
in one run on one machine:

  s3     s3torchconnector S3MapDataset.from_prefix against lode (path-style, CRT client)
  mount  torchvision ImageFolder over the lode FUSE mount (/<mount>/<bucket>/train)
  local  the same ImageFolder over a plain local directory copy on the same file system

Each loader reads every sample whole (no decode: decoding would hide the IO path). Kernel caches
are dropped before every epoch (needs root; otherwise the run says so), paths are interleaved
round by round, and the median of `--rounds` epochs is reported with the ratios to local.

    ~/.cache/lode-venv/bin/python compat-tests/train_epoch.py --samples 20000 --workers 4
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import trainset  # noqa: E402
from conftest import ACCESS_KEY, SECRET_KEY, Lode  # noqa: E402


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
    a = ap.parse_args()

    work = tempfile.mkdtemp(prefix="lode-train-epoch-", dir=a.dir)
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
        print(f"{'path':<7}{'samples/s':>11}{'MiB/s':>9}{'vs local':>10}   target")
        targets = {"s3": 0.70, "mount": 0.85}
        for k in ("s3", "mount", "local"):
            ratio = med[k] / med["local"]
            tgt = f">= {targets[k]:.2f}: {'met' if ratio >= targets[k] else 'MISSED'}" if k in targets else ""
            print(f"{k:<7}{med[k]:>11.0f}{med[k] * total_bytes / a.samples / 2**20:>9.0f}{ratio:>10.2f}   {tgt}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"workload": "train-epoch", "params": vars(a) | {"cold": cold, "bytes": total_bytes},
                           "samples_per_sec": results, "median": med,
                           "ratio_vs_local": {k: med[k] / med["local"] for k in med}}, f, indent=1)
    finally:
        srv.remove()
        import shutil
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
