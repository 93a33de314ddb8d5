#!/usr/bin/env bash
# Builds and runs the fuzz targets with cargo-fuzz (libFuzzer + AddressSanitizer) on the
# machine's stable toolchain: RUSTC_BOOTSTRAP=1 unlocks the -Z flags cargo-fuzz needs (the ASan
# runtime ships with stable rustc). RocksDB is linked from the main build instead of being
# compiled again.
#   gateway/fuzz/run.sh [seconds per target] [target...]
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"; shift || true
targets=("${@:-keys records s3_request policy acl}")
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
main_target="${CARGO_TARGET_DIR:-$HOME/.cache/lode-target}"
lib=$(ls -d "$main_target"/release/build/librocksdb-sys-*/out 2>/dev/null | while read -r d; do [ -f "$d/librocksdb.a" ] && echo "$d"; done | head -1)
if [ -n "$lib" ]; then export ROCKSDB_LIB_DIR="$lib" ROCKSDB_STATIC=1; fi
export RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR="$HOME/.cache/lode-fuzz-target"
for t in ${targets[*]}; do
    mkdir -p "fuzz/corpus/$t"
    echo "==> $t for ${secs}s"
    cargo fuzz run "$t" "fuzz/corpus/$t" -- -max_total_time="$secs" -max_len=4096 -print_final_stats=1 2>&1 | tail -25
done
