#!/usr/bin/env bash
# Before/after: Lode's own figures of run-all.sh (every workload of `lode bench` with run-all's
# parameters, the list sized down to 10^5 keys) and posix_vs_local.py, for two lode binaries on
# the same machine in one run. Each workload runs against A, then B, each on a fresh data dir;
# the same client (B's `lode bench`) measures both. B's result is printed with its ratios to A
# (`--compare`). Results land in $OUT (default /var/tmp/lode-ab).
#   bench/ab.sh OLD_LODE NEW_LODE             e.g. bench/ab.sh /tmp/lode-before ~/.cache/lode-target/release/lode
# About 25 minutes. Run it alone on the machine: the numbers are ratios within this one run.
set -euo pipefail
A="$1"; B="$2"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-/var/tmp/lode-ab}"
POSIX_FILES="${POSIX_FILES:-50000}"; POSIX_BIG_MIB="${POSIX_BIG_MIB:-512}"
mkdir -p "$OUT"
export AWS_ACCESS_KEY_ID=benchaccesskey AWS_SECRET_ACCESS_KEY=benchsecretkey123
WORK=""; PID=""
stop() { [ -n "$PID" ] && { kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null || true; }; PID=""; [ -n "$WORK" ] && rm -rf "$WORK"; WORK=""; }
trap stop EXIT
start() { # start BIN: a fresh server on a 16 GiB device file
    stop
    WORK="$(mktemp -d /var/tmp/lode-ab.XXXXXX)"
    printf '[[datapath.devices]]\npath = "dev0.img"\nsize = "16GiB"\n' > "$WORK/lode.toml"
    LODE_ACCESS_KEY=$AWS_ACCESS_KEY_ID LODE_SECRET_KEY=$AWS_SECRET_ACCESS_KEY "$1" serve --config "$WORK/lode.toml" \
        --listen 127.0.0.1:19601 --admin-listen "" --data-dir "$WORK/data" >"$WORK/lode.log" 2>&1 & PID=$!
    for _ in $(seq 200); do (echo > /dev/tcp/127.0.0.1/19601) 2>/dev/null && return; sleep 0.1; done
    echo "lode did not start: $(tail -5 "$WORK/lode.log")" >&2; exit 1
}
bench() { # bench NAME WORKLOAD ARGS...: A then B, B compared with A
    local name="$1"; shift
    for side in A B; do
        local bin="$A"; [ $side = B ] && bin="$B"
        start "$bin"
        local cmp=(); [ $side = B ] && cmp=(--compare "$OUT/$name-A.json")
        echo "######## $name on $side ($bin)"
        "$B" bench "$@" --endpoint http://127.0.0.1:19601 --json "$OUT/$name-$side.json" "${cmp[@]}" 2>&1 \
            | tee "$OUT/$name-$side.txt"
    done
    stop
}
bench losf-ingest losf-ingest --objects 20000 --concurrency 16
bench train-read train-read --objects 4000 --concurrency 16
bench checkpoint checkpoint --size 2GiB --part-size 64MiB --concurrency 8
bench stat-storm stat-storm --objects 10000 --ops 100000 --concurrency 16
bench stream-read stream-read --size 2GiB --range-size 16MiB --concurrency 4
bench list list --objects 100000 --ops 200 --concurrency 16
bench blender blender --objects 2000 --duration 10
for side in A B; do
    bin="$A"; [ $side = B ] && bin="$B"
    echo "######## posix_vs_local on $side ($bin)"
    python3 "$ROOT/bench/posix_vs_local.py" --lode "$bin" --files "$POSIX_FILES" --big-mib "$POSIX_BIG_MIB" \
        --json "$OUT/posix-$side.json" 2>&1 | tee "$OUT/posix-$side.txt"
done
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
print("\n==== before (A) and after (B): ops/s and p99 per class, B/A")
print(f"{'workload':<12} {'class':<10} {'A ops/s':>10} {'B ops/s':>10} {'B/A':>6} {'A p99':>9} {'B p99':>9} {'B/A':>6}")
for name in ["losf-ingest", "train-read", "checkpoint", "stat-storm", "stream-read", "list", "blender"]:
    try:
        a, b = (json.load(open(os.path.join(out, f"{name}-{s}.json"))) for s in "AB")
    except OSError:
        continue
    for cls, x in a["classes"].items():
        y = b["classes"].get(cls)
        if not y:
            continue
        r = lambda p, q: p / q if q else float("nan")
        print(f"{name:<12} {cls:<10} {x['ops_per_sec']:>10.0f} {y['ops_per_sec']:>10.0f} {r(y['ops_per_sec'], x['ops_per_sec']):>6.2f} "
              f"{x['p99_ms']:>9.2f} {y['p99_ms']:>9.2f} {r(y['p99_ms'], x['p99_ms']):>6.2f}")
try:
    a, b = (json.load(open(os.path.join(out, f"posix-{s}.json"))) for s in "AB")
    print("\n==== posix_vs_local: the mount of A and of B, each as a share of the local disk in its own run")
    print(f"{'metric':<24} {'A local':>10} {'A lode':>10} {'A ratio':>8} {'B local':>10} {'B lode':>10} {'B ratio':>8} {'B/A':>6}")
    for k in a["lode"]:
        ra = a["lode"][k] / a["local"][k] if a["local"][k] else float("nan")
        rb = b["lode"][k] / b["local"][k] if b["local"][k] else float("nan")
        print(f"{k:<24} {a['local'][k]:>10.0f} {a['lode'][k]:>10.0f} {ra:>8.2f} {b['local'][k]:>10.0f} {b['lode'][k]:>10.0f} {rb:>8.2f} {rb / ra if ra else float('nan'):>6.2f}")
except OSError:
    pass
PY
