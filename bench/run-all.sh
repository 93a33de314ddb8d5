#!/usr/bin/env bash
# Reproduces every number of the issue-6 closing note in one run on one machine: each workload
# against lode and s3s-fs with the same client and concurrency, stream-read and checkpoint
# against fio on the same disk (O_DIRECT, same block size and queue depth), listing at 10^3 vs
# 10^6 keys, HEAD p99 at 16 clients, the blender, and the ceiling of the HTTP stack (a bare
# in-memory handler, `lode bench-ceiling`). Results land in $OUT (default
# /var/tmp/lode-bench-results). Needs: s3s-fs (`cargo install s3s-fs --version 0.14.1
# --features binary --locked`), fio (`apt install fio`). About 15 minutes.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/lode-target}"
LODE="$CARGO_TARGET_DIR/release/lode"
# LODE_SERVER: the binary that serves (default the same); the client is always $LODE, so two
# builds compare with one client (issue 34's before/after).
LODE_SERVER="${LODE_SERVER:-$LODE}"
OUT="${OUT:-/var/tmp/lode-bench-results}"
mkdir -p "$OUT"
[ -x "$LODE" ] || (cd "$ROOT" && cargo build --release --locked)
run() { echo; echo "######## $*"; "$@"; }
# Small objects and checkpoints: lode vs s3s-fs, same client, same concurrency (16).
run "$ROOT/bench/vs-s3s-fs.sh" losf-ingest --objects 20000 --concurrency 16 2>&1 | tee "$OUT/losf-ingest.txt"
run "$ROOT/bench/vs-s3s-fs.sh" train-read --objects 4000 --concurrency 16 2>&1 | tee "$OUT/train-read.txt"
run "$ROOT/bench/vs-s3s-fs.sh" checkpoint --size 2GiB --part-size 64MiB --concurrency 8 2>&1 | tee "$OUT/checkpoint.txt"
run "$ROOT/bench/vs-s3s-fs.sh" stat-storm --objects 10000 --ops 100000 --concurrency 16 2>&1 | tee "$OUT/stat-storm.txt"
# The ceiling of the HTTP stack: the same client against a bare in-memory handler.
"$LODE" bench-ceiling --listen 127.0.0.1:19501 >/dev/null 2>&1 & CEIL=$!
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/19501) 2>/dev/null && break; sleep 0.1; done
# losf-ingest runs twice and the second run is the figure: the ceiling keeps every body in
# memory, so a fresh ceiling's first pass spends its time faulting in ~3 GiB of new pages
# (measured: 3,397 then 6,378 and 7,716 PUT/s on one ceiling; 5,955 on the first pass with
# MALLOC_MMAP_THRESHOLD_=32MiB). The second pass overwrites the same keys (same seed), so its
# memory is reused, as Lode's buffers are.
"$LODE" bench losf-ingest --endpoint http://127.0.0.1:19501 --access-key x --secret-key y --objects 20000 \
    --concurrency 16 >/dev/null
for w in losf-ingest train-read; do
    n=20000; [ $w = train-read ] && n=4000
    run "$LODE" bench $w --endpoint http://127.0.0.1:19501 --access-key x --secret-key y --objects $n \
        --concurrency 16 --json "$OUT/ceiling-$w.json" 2>&1 | tee "$OUT/ceiling-$w.txt"
done
kill $CEIL; wait $CEIL 2>/dev/null || true
# Lode alone: streaming vs fio, listing, blender.
WORK="$(mktemp -d /var/tmp/lode-bench-all.XXXXXX)"
trap 'kill $PID 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"' EXIT
printf '[[datapath.devices]]\npath = "dev0.img"\nsize = "16GiB"\n' > "$WORK/lode.toml"
export AWS_ACCESS_KEY_ID=benchaccesskey AWS_SECRET_ACCESS_KEY=benchsecretkey123
LODE_ACCESS_KEY=$AWS_ACCESS_KEY_ID LODE_SECRET_KEY=$AWS_SECRET_ACCESS_KEY "$LODE_SERVER" serve --config "$WORK/lode.toml" \
    --listen 127.0.0.1:19401 --admin-listen 127.0.0.1:19409 --data-dir "$WORK/data" >"$WORK/lode.log" 2>&1 & PID=$!
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/19401) 2>/dev/null && break; sleep 0.1; done
E=http://127.0.0.1:19401
run "$LODE" bench stream-read --endpoint $E --size 2GiB --range-size 16MiB --concurrency 4 --json "$OUT/stream-read.json" 2>&1 | tee "$OUT/stream-read.txt"
# fio on the same file system, O_DIRECT, 16 MiB blocks at QD 4 (the bench's range size and concurrency).
run fio --name=seqread --filename="$WORK/fio.dat" --size=2G --direct=1 --rw=read --bs=16M --iodepth=4 \
    --ioengine=io_uring --numjobs=1 --group_reporting 2>&1 | tee "$OUT/fio-read.txt" | grep -E "READ:|bw="
run fio --name=seqwrite --filename="$WORK/fio.dat" --size=2G --direct=1 --rw=write --bs=64M --iodepth=8 \
    --ioengine=io_uring --numjobs=1 --end_fsync=1 --group_reporting 2>&1 | tee "$OUT/fio-write.txt" | grep -E "WRITE:|bw="
rm -f "$WORK/fio.dat"
run "$LODE" bench list --endpoint $E --objects 1000000 --ops 200 --concurrency 16 --json "$OUT/list.json" 2>&1 | tee "$OUT/list.txt"
run "$LODE" bench stat-storm --endpoint $E --objects 10000 --ops 100000 --concurrency 16 --json "$OUT/head.json" 2>&1 | tee "$OUT/head.txt"
run "$LODE" bench blender --endpoint $E --objects 2000 --duration 10 --json "$OUT/blender.json" --chart "$OUT/blender.svg" 2>&1 | tee "$OUT/blender.txt"
echo "results in $OUT"
