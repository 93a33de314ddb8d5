#!/usr/bin/env bash
# Hours of load (issue 37 section 4): `lode bench soak` against a fresh server, sampling its RSS,
# open files and each class's ops/s and p99 every SAMPLE seconds. Usage:
#   bench/soak.sh local|cluster [SECONDS (3600)] [SAMPLE (60)]
# The blend without the 16 MiB checkpoint bursts, at half the blender's rates (a rate both modes
# sustain on a 2-core machine with a 3-replica cluster on one disk), its PUTs overwriting 500
# keys so space stays bounded; cluster mode: one gateway on a fresh scripts/ceph-dev.sh cluster,
# released chunks collected after 60 s. Extra `lode bench` arguments go in BENCH_ARGS, the port in
# PORT (19701). The
# table goes to stdout, the JSON (every sample) to $WORK/soak.json (printed at the end).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/lode-target}"
LODE="$CARGO_TARGET_DIR/release/lode"
[ -x "$LODE" ] || (cd "$ROOT" && cargo build --release --locked)
MODE="${1:-}"; SECS="${2:-3600}"; EVERY="${3:-60}"; PORT="${PORT:-19701}"
case "$MODE" in local | cluster) ;; *) sed -n '2,4p' "$0" >&2; exit 2 ;; esac
WORK="$(mktemp -d /var/tmp/lode-soak.XXXXXX)"
export LODE_ACCESS_KEY=soakaccesskey01 LODE_SECRET_KEY=soaksecretkey0123456789abcdef
PID=""
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
    [ "$MODE" = cluster ] && "$ROOT/scripts/ceph-dev.sh" stop "$WORK/ceph" --purge >/dev/null 2>&1 || true
    rm -rf "$WORK/data"
}
trap cleanup EXIT
ARGS=(--listen 127.0.0.1:$PORT --admin-listen "" --data-dir "$WORK/data")
if [ "$MODE" = cluster ]; then
    "$ROOT/scripts/ceph-dev.sh" start "$WORK/ceph" >/dev/null
    printf '[cluster]\nrelease_grace_secs = 60\n' >"$WORK/lode.toml"
    ARGS+=(--cluster ceph --ceph-conf "$WORK/ceph/ceph.conf" --config "$WORK/lode.toml")
    export LODE_MASTER_KEY=$(openssl rand -hex 32)
fi
"$LODE" serve "${ARGS[@]}" >"$WORK/lode.log" 2>&1 & PID=$!
for _ in $(seq 600); do (echo > /dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
echo "== $MODE, $SECS s, a sample every $EVERY s; uptime: $(uptime)"
# shellcheck disable=SC2086
"$LODE" bench soak --endpoint http://127.0.0.1:$PORT --access-key "$LODE_ACCESS_KEY" \
    --secret-key "$LODE_SECRET_KEY" --bucket soak --objects 500 \
    --classes get,head,list,put,stream --rate-scale 0.5 --duration "$SECS" --sample-secs "$EVERY" \
    --server-pid "$PID" --json "$WORK/soak.json" ${BENCH_ARGS:-}
echo "JSON: $WORK/soak.json"
