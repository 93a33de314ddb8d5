#!/usr/bin/env bash
# 10^7 keys (issue 37 section 5): `lode bench keys` ingests N small objects into one bucket of a
# fresh server (256 B each, every 20th 20 KiB so the store holds extents too) and reports each
# tenth's PUT rate, first-page latency and RSS, then one full listing; then the server is
# stopped (SIGTERM) and started again on the same data, and the time until it accepts
# connections (it opens its stores first: RocksDB, the allocator rebuilt from every extent) and
# its RSS are measured, with the first listing page after the restart. Usage:
#   bench/keys.sh local|cluster [N (10000000 local, 1000000 cluster)] [CONCURRENCY (64)]
# cluster mode: one gateway on a fresh scripts/ceph-dev.sh cluster; the index partitions of the
# bucket are counted at the end (`rados ls`), and the gateway's index ops per PUT are reported
# per tenth (its /metrics sampled every 5 s into $WORK/ops.txt: group commit thins out as the
# partitions multiply, and a split shows as reads). DEVICE sets the local device size
# (default: enough for the extents). GATEWAYS=2 (cluster mode) starts a second gateway on the
# same cluster and spreads the connections over both (index ops summed over both; the restart
# is the first's). The JSON goes to $WORK/keys.json (printed at the end).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/lode-target}"
LODE="$CARGO_TARGET_DIR/release/lode"
# LODE_SERVER: the binary that serves (default the same); the client is always $LODE, so two
# builds compare with one client.
LODE_SERVER="${LODE_SERVER:-$LODE}"
[ -x "$LODE" ] || (cd "$ROOT" && cargo build --release --locked)
MODE="${1:-}"
case "$MODE" in local) N="${2:-10000000}" ;; cluster) N="${2:-1000000}" ;; *) sed -n '8p' "$0" >&2; exit 2 ;; esac
C="${3:-64}"; PORT="${PORT:-19711}"; GATEWAYS="${GATEWAYS:-1}"
[ "$GATEWAYS" = 1 ] || [ "$MODE" = cluster ] || { echo "GATEWAYS needs cluster mode" >&2; exit 2; }
WORK="$(mktemp -d /var/tmp/lode-keys.XXXXXX)"
export LODE_ACCESS_KEY=keysaccesskey001 LODE_SECRET_KEY=keyssecretkey0123456789abcdef
PID=""; PID2=""
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
    [ -n "$PID2" ] && kill "$PID2" 2>/dev/null && wait "$PID2" 2>/dev/null || true
    [ "$MODE" = cluster ] && "$ROOT/scripts/ceph-dev.sh" stop "$WORK/ceph" --purge >/dev/null 2>&1 || true
    rm -rf "$WORK/data" "$WORK/data2" "$WORK/dev0.img"
}
trap cleanup EXIT
ARGS=(--listen "127.0.0.1:$PORT" --data-dir "$WORK/data")
ADMIN_PORT=$((PORT + 1))
if [ "$MODE" = cluster ]; then
    "$ROOT/scripts/ceph-dev.sh" start "$WORK/ceph" >/dev/null
    printf '[cluster]\nrelease_grace_secs = 60\n' >"$WORK/lode.toml"
    ARGS+=(--cluster ceph --ceph-conf "$WORK/ceph/ceph.conf" --admin-listen "127.0.0.1:$ADMIN_PORT")
    export LODE_MASTER_KEY=$(openssl rand -hex 32)
else
    ARGS+=(--admin-listen "")
    # Every 20th object takes 20 KiB of the device: N/20 x 20 KiB, and a quarter more.
    dev="${DEVICE:-$(( N / 20 * 20 * 1024 * 5 / 4 / 1048576 + 1024 ))MiB}"
    printf '[[datapath.devices]]\npath = "%s/dev0.img"\nsize = "%s"\n' "$WORK" "$dev" >"$WORK/lode.toml"
fi
ARGS+=(--config "$WORK/lode.toml")
now_ms() { date +%s%3N; }
# Waits until server PID (logging to LOG) accepts connections on PORT; exits if it dies first.
listening() {
    until (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null; do
        kill -0 "$2" 2>/dev/null || { tail -20 "$3"; exit 1; }
        sleep 0.02
    done
}
# Starts the server; START_MS: how long until it accepted a connection.
start() {
    local t0; t0=$(now_ms)
    "$LODE_SERVER" serve "${ARGS[@]}" >>"$WORK/lode.log" 2>&1 & PID=$!
    listening "$PORT" "$PID" "$WORK/lode.log"
    START_MS=$(( $(now_ms) - t0 ))
}
rss() { awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$PID/status"; }
# Cluster mode, every 5 s while the server runs: time, S3 writes, index-pool RADOS reads, writes
# (summed over the gateways).
sample_ops() {
    while kill -0 "$PID" 2>/dev/null; do
        for a in "${ADMINS[@]}"; do curl -s "http://127.0.0.1:$a/metrics" || true; done | awk -v t="$(date +%s.%N)" '
            /^lode_ops_total\{door="s3",class="write"\}/ { p += $2; seen = 1 }
            /^lode_rados_ops_total\{pool="lode-index",kind="read"\}/ { r += $2 }
            /^lode_rados_ops_total\{pool="lode-index",kind="write"\}/ { w += $2 }
            END { if (seen) print t, p, r + 0, w + 0 }' || true
        sleep 5
    done
}
start
ENDPOINTS="http://127.0.0.1:$PORT"; PIDS=(--server-pid "$PID"); ADMINS=("$ADMIN_PORT")
if [ "$GATEWAYS" = 2 ]; then
    # The second gateway: its own ports and (unused in cluster mode) data dir.
    ARGS2=("${ARGS[@]}")
    for i in "${!ARGS2[@]}"; do
        case "${ARGS2[$i]}" in
            "127.0.0.1:$PORT") ARGS2[$i]="127.0.0.1:$((PORT + 2))" ;;
            "127.0.0.1:$ADMIN_PORT") ARGS2[$i]="127.0.0.1:$((PORT + 3))" ;;
            "$WORK/data") ARGS2[$i]="$WORK/data2" ;;
        esac
    done
    "$LODE_SERVER" serve "${ARGS2[@]}" >>"$WORK/lode2.log" 2>&1 & PID2=$!
    listening "$((PORT + 2))" "$PID2" "$WORK/lode2.log"
    ENDPOINTS="$ENDPOINTS,http://127.0.0.1:$((PORT + 2))"; PIDS+=(--server-pid "$PID2"); ADMINS+=("$((PORT + 3))")
fi
[ "$MODE" = cluster ] && { sample_ops >"$WORK/ops.txt" 2>/dev/null & }
echo "== $MODE, $N objects, $C connections, $GATEWAYS gateway(s); uptime: $(uptime)"
"$LODE" bench keys --endpoint "$ENDPOINTS" --access-key "$LODE_ACCESS_KEY" \
    --secret-key "$LODE_SECRET_KEY" --bucket keys --objects "$N" --concurrency "$C" \
    "${PIDS[@]}" --json "$WORK/keys.json" ${BENCH_ARGS:-}
before="$(rss)"
if [ "$MODE" = cluster ]; then
    parts="$(rados -c "$WORK/ceph/ceph.conf" -p lode-index ls | grep -c '^lode\.part\.keys\.' || true)"
    echo "index partitions of the bucket: $(( parts + 1 ))"
    # How long each split kept the writers of its moved range waiting (its gateway's log line).
    { grep -ho 'sealed_ms=[0-9]*' "$WORK"/lode*.log || true; } | cut -d= -f2 | sort -n | awk '{ a[NR] = $1 }
        END { if (NR) printf "splits: %d; sealed (writers of the moved range waiting) %d-%d ms, median %d\n", NR, a[1], a[NR], a[int((NR + 1) / 2)] }'
    # Per tenth, from the samples nearest its end (the last one also holds the listing's reads).
    awk -v n="$N" '
        { p[NR] = $2; r[NR] = $3; w[NR] = $4 }
        END {
            k = 1; last = 1
            for (i = 2; i <= NR && k <= 10; i++) if (p[i] >= n * k / 10) {
                k0 = k
                while (k <= 10 && p[i] >= n * k / 10) k++
                what = k - 1 > k0 ? sprintf("tenths %d-%d", k0, k - 1) : sprintf("tenth %d", k0)
                d = p[i] - p[last]
                if (d > 0) printf "%s (to %d PUTs): %.2f index writes and %.2f index reads per PUT\n", what, p[i], (w[i] - w[last]) / d, (r[i] - r[last]) / d
                last = i
            }
        }' "$WORK/ops.txt"
fi
kill "$PID"; wait "$PID" || true; PID=""
start
echo "restart: accepting after $START_MS ms; RSS $(rss) MiB (before the restart: $before MiB)"
# The first page after the restart (cold caches), signed by curl.
curl -sS -o /dev/null -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -w 'first page after the restart: HTTP %{http_code} in %{time_total} s\n' \
    --aws-sigv4 aws:amz:us-east-1:s3 --user "$LODE_ACCESS_KEY:$LODE_SECRET_KEY" \
    "http://127.0.0.1:$PORT/keys?list-type=2&max-keys=1000"
grep -h "datapath space rebuilt" "$WORK/lode.log" | tail -1 || true
echo "after the restart and one listing: RSS $(rss) MiB"
echo "JSON: $WORK/keys.json"
