#!/usr/bin/env bash
# Lode's cluster-mode gateway against radosgw (Debian's) on the same single-host Ceph cluster
# (scripts/ceph-dev.sh, pools of size 3), the same `lode bench` client and concurrency, one run.
# Prints each server's table and the Lode/RGW ratio per op class. Usage:
#   bench/vs-rgw.sh [workload ...]      default: losf-ingest train-read stat-storm list
# Extra `lode bench` arguments go in BENCH_ARGS (e.g. BENCH_ARGS="--objects 2000").
# The pseudo-workload `rados-ops` counts the RADOS client ops per S3 operation of each server
# at the OSDs (bench/rados_ops.py --osd-asok-dir), one server at a time.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/lode-target}"
LODE="$CARGO_TARGET_DIR/release/lode"
# LODE_SERVER: the binary that serves (default the same); the client is always $LODE, so two
# builds compare with one client (issue 34's before/after).
LODE_SERVER="${LODE_SERVER:-$LODE}"
[ -x "$LODE" ] || (cd "$ROOT" && cargo build --release --locked)
command -v radosgw >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq radosgw >/dev/null; }
WORKLOADS=("$@"); [ ${#WORKLOADS[@]} -gt 0 ] || WORKLOADS=(losf-ingest train-read stat-storm list)
WORK="$(mktemp -d /var/tmp/lode-vs-rgw.XXXXXX)"
CEPH="$WORK/ceph"
AK=benchaccesskey01 SK=benchsecretkey0123456789abcdefghijkl
PIDS=()
cleanup() {
    kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true
    # radosgw's graceful stop can wait on the cluster forever: stop it before the cluster,
    # and for good after 10 s.
    if [ -f "$WORK/rgw.pid" ]; then
        rgw=$(cat "$WORK/rgw.pid")
        kill "$rgw" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$rgw" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$rgw" 2>/dev/null || true
    fi
    "$ROOT/scripts/ceph-dev.sh" stop "$CEPH" --purge >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
# 12 GiB per OSD (sparse): the blender's data set, bursts and both servers' copies fill the
# default 4 GiB ones.
CEPH_DEV_BLOCK_SIZE="${CEPH_DEV_BLOCK_SIZE:-12G}" "$ROOT/scripts/ceph-dev.sh" start "$CEPH" >/dev/null
CONF="$CEPH/ceph.conf"
# radosgw: beast with tcp_nodelay (its default waits 40 ms for delayed ACKs on small replies).
# It forces a secure-only connection to the monitors (rgw_main.cc's defaults), which an
# auth-none cluster (`ceph-dev.sh start --auth none`) cannot offer (only crc): without crc it
# never connects (-13, EACCES). Lode's gateway uses crc too (`[cluster] ms_mode`).
cat >> "$CONF" <<CONF
[client.rgw.bench]
ms_mon_client_mode = crc
rgw_frontends = beast endpoint=127.0.0.1:19402 tcp_nodelay=1
rgw_data = $WORK/rgw
log_file = $WORK/rgw.log
pid_file = $WORK/rgw.pid
rgw_thread_pool_size = 64
CONF
mkdir -p "$WORK/rgw"
# cephx (the dev cluster's default): radosgw's own key, RGW's usual caps.
ceph -c "$CONF" auth get-or-create client.rgw.bench mon 'allow rw' osd 'allow rwx' \
    -o "$CEPH/ceph.client.rgw.bench.keyring" >/dev/null
radosgw -c "$CONF" -n client.rgw.bench --no-mon-config >"$WORK/rgw.out" 2>&1 || true
radosgw-admin -c "$CONF" -n client.admin user create --uid=bench --display-name=bench \
    --access-key=$AK --secret=$SK >/dev/null
LODE_ACCESS_KEY=$AK LODE_SECRET_KEY=$SK LODE_MASTER_KEY=$(openssl rand -hex 32) "$LODE_SERVER" serve --cluster ceph --ceph-conf "$CONF" \
    --listen 127.0.0.1:19401 --admin-listen "" >"$WORK/lode.log" 2>&1 & PIDS+=($!)
for port in 19401 19402; do
    up=0
    for _ in $(seq 600); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && { up=1; break; }; sleep 0.1; done
    if [ $up = 0 ]; then
        echo "nothing listens on port $port after 60 s" >&2
        tail -20 "$WORK/rgw.log" "$WORK/lode.log" >&2 2>/dev/null || true
        exit 1
    fi
done
PY="${LODE_VENV:-$HOME/.cache/lode-venv}/bin/python"
for w in "${WORKLOADS[@]}"; do
    if [ "$w" = rados-ops ]; then
        for s in "lode 19401" "radosgw 19402"; do
            set -- $s
            echo "== RADOS client ops per S3 operation, counted at the OSDs: $1"
            AWS_ACCESS_KEY_ID=$AK AWS_SECRET_ACCESS_KEY=$SK "$PY" "$ROOT/bench/rados_ops.py" \
                "http://127.0.0.1:$2" --osd-asok-dir "$CEPH/run"
        done
        continue
    fi
    echo "== lode cluster mode ($w)"
    "$LODE" bench "$w" --endpoint http://127.0.0.1:19401 --access-key $AK --secret-key $SK \
        --bucket "lode-$w" --json "$WORK/lode-$w.json" ${BENCH_ARGS:-}
    echo "== radosgw ($w)"
    "$LODE" bench "$w" --endpoint http://127.0.0.1:19402 --access-key $AK --secret-key $SK \
        --bucket "rgw-$w" --json "$WORK/rgw-$w.json" ${BENCH_ARGS:-}
    echo "== ratio lode / radosgw ($w)"
    python3 "$ROOT/bench/ratio.py" "$WORK/lode-$w.json" "$WORK/rgw-$w.json" "$w"
done
