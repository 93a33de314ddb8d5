#!/usr/bin/env bash
# Lode against s3s-fs (`cargo install s3s-fs --version 0.14.1 --features binary --locked`),
# same client (`lode bench`), same concurrency, same machine, one run. Prints each server's
# table and the Lode/s3s-fs ratio per op class. Usage:
#   bench/vs-s3s-fs.sh [workload] [extra lode-bench args...]     e.g.  bench/vs-s3s-fs.sh small --objects 20000
set -euo pipefail
WORKLOAD="${1:-small}"; shift || true
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/lode-target}"
LODE="$CARGO_TARGET_DIR/release/lode"
# LODE_SERVER: the binary that serves (default the same); the client is always $LODE, so two
# builds compare with one client (issue 34's before/after).
LODE_SERVER="${LODE_SERVER:-$LODE}"
S3SFS="${S3SFS:-$(command -v s3s-fs || echo "$HOME/.cargo/bin/s3s-fs")}"
[ -x "$LODE" ] || (cd "$ROOT" && cargo build --release --locked)
[ -x "$S3SFS" ] || { echo "s3s-fs not found: cargo install s3s-fs --version 0.14.1 --features binary --locked" >&2; exit 1; }
WORK="$(mktemp -d /var/tmp/lode-bench.XXXXXX)"
AK=benchaccesskey SK=benchsecretkey123
cleanup() { kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"; }
PIDS=(); trap cleanup EXIT
LODE_ACCESS_KEY=$AK LODE_SECRET_KEY=$SK "$LODE_SERVER" serve --listen 127.0.0.1:19301 --admin-listen "" --data-dir "$WORK/lode" >"$WORK/lode.log" 2>&1 & PIDS+=($!)
mkdir -p "$WORK/s3sfs"; "$S3SFS" --host 127.0.0.1 --port 19302 --access-key $AK --secret-key $SK "$WORK/s3sfs" >"$WORK/s3sfs.log" 2>&1 & PIDS+=($!)
for port in 19301 19302; do
    for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
done
echo "== lode ($WORKLOAD)"
"$LODE" bench "$WORKLOAD" --endpoint http://127.0.0.1:19301 --access-key $AK --secret-key $SK --json "$WORK/lode.json" "$@"
echo "== s3s-fs ($WORKLOAD)"
"$LODE" bench "$WORKLOAD" --endpoint http://127.0.0.1:19302 --access-key $AK --secret-key $SK --json "$WORK/s3sfs.json" "$@"
python3 - "$WORK/lode.json" "$WORK/s3sfs.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
print("== ratio lode / s3s-fs")
for cls, x in a["classes"].items():
    y = b["classes"].get(cls)
    if y:
        print(f"{cls:<6} ops/s {x['ops_per_sec']:.0f} vs {y['ops_per_sec']:.0f} = {x['ops_per_sec']/max(y['ops_per_sec'],1e-9):.2f}x   "
              f"p99 {x['p99_ms']:.2f} vs {y['p99_ms']:.2f} ms")
PY
