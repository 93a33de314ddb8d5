#!/usr/bin/env bash
# Several hosts, simulated (issue 37 section 2): for each round-trip profile, a fresh cluster from
# scripts/ceph-netns.sh (mon, three OSD hosts, two gateway namespaces and a client namespace,
# every packet delayed so any two namespaces are RTT apart; failure domain host; cephx), then
#   1. Lode (gw1) against radosgw (gw1 too: the same links), the same `lode bench` client in the
#      client namespace: small PUT/GET, stat-storm (HEAD), list, losf-ingest, train-read,
#      checkpoint; ratios per class;
#   2. the cross-gateway mount visibility lag (PUT through gw2's S3, stat on gw1's mount);
#   3. faults under PUT load through both gateways (compat-tests/netns.py): a host killed, a
#      host cut off, an asymmetric partition (what a host sends is dropped), a gateway cut off
#      the cluster; time to recovery and the acknowledged PUTs checked through both gateways.
# Usage: bench/netns.sh [RTT_MS ...]   (default: 0.5 5). Needs root. WORKLOADS and FAULTS narrow
# it (e.g. WORKLOADS="small list", FAULTS="kill-host"; =none skips them); GW_TCP_RTO_MAX_MS caps
# TCP's retransmission backoff in the gateway namespaces (scripts/ceph-netns.sh); BENCH_ARGS,
# when set, replaces each workload's own size arguments (e.g. BENCH_ARGS="--objects 200").
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/lode-target}"
LODE="$CARGO_TARGET_DIR/release/lode"
[ -x "$LODE" ] || (cd "$ROOT" && cargo build --release --locked)
command -v radosgw >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq radosgw >/dev/null; }
PY="${LODE_VENV:-$HOME/.cache/lode-venv}/bin/python"
RTTS=("$@"); [ ${#RTTS[@]} -gt 0 ] || RTTS=(0.5 5)
read -r -a WORKLOADS <<<"${WORKLOADS:-small stat-storm list losf-ingest train-read checkpoint}"
read -r -a FAULT_LIST <<<"${FAULTS:-kill-host cut-host oneway-host cut-gateway}"
WORK="$(mktemp -d /tmp/lode-nxb.XXXXXX)"
CEPH="$WORK/c"
NX="$ROOT/scripts/ceph-netns.sh"
AK=benchaccesskey01 SK=benchsecretkey0123456789abcdefghijkl
PIDS=()
stop_servers() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
    if [ -f "$WORK/rgw.pid" ]; then
        rgw=$(cat "$WORK/rgw.pid")
        kill "$rgw" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$rgw" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$rgw" 2>/dev/null || true
        rm -f "$WORK/rgw.pid"
    fi
    for m in "$WORK/m1" "$WORK/m2"; do fusermount3 -u -z "$m" 2>/dev/null || true; done
}
cleanup() { stop_servers; "$NX" down "$CEPH" >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT

wait_port() {
    for _ in $(seq 900); do (echo >"/dev/tcp/$1/$2") 2>/dev/null && return 0; sleep 0.1; done
    echo "nothing listens on $1:$2 after 90 s" >&2; tail -20 "$WORK"/*.log >&2 || true; exit 1
}

echo "== bench/netns.sh: $(uptime)"
for rtt in "${RTTS[@]}"; do
    echo "=================== profile: RTT $rtt ms between namespaces"
    "$NX" up "$CEPH" --rtt "$rtt" >"$WORK/up.log" 2>&1 || { cat "$WORK/up.log"; exit 1; }
    CONF="$CEPH/ceph.conf"
    GW1=$("$NX" addr "$CEPH" gw1 front) GW2=$("$NX" addr "$CEPH" gw2 front)
    probe='import socket,time,statistics as st
r=[]
for _ in range(50):
    s=socket.socket();t=time.monotonic();s.connect_ex(("10.77.1.12",9));r.append((time.monotonic()-t)*1000);s.close()
print(f"{st.median(r):.2f} ms median, {min(r):.2f} min")'
    echo "measured round trip (TCP connect h1 -> h2): $("$NX" run "$CEPH" h1 python3 -c "$probe")"
    cat >>"$CONF" <<CONF
[client.rgw.bench]
ms_mon_client_mode = crc
rgw_frontends = beast endpoint=$GW1:19402 tcp_nodelay=1
rgw_data = $WORK/rgw
log_file = $WORK/rgw.log
pid_file = $WORK/rgw.pid
rgw_thread_pool_size = 64
CONF
    mkdir -p "$WORK/rgw" "$WORK/m1" "$WORK/m2"
    ceph -c "$CONF" auth get-or-create client.rgw.bench mon 'allow rw' osd 'allow rwx' \
        -o "$CEPH/ceph.client.rgw.bench.keyring" >/dev/null
    "$NX" run "$CEPH" gw1 radosgw -c "$CONF" -n client.rgw.bench --no-mon-config >"$WORK/rgw.out" 2>&1 || true
    radosgw-admin -c "$CONF" -n client.admin user create --uid=bench --display-name=bench \
        --access-key=$AK --secret=$SK >/dev/null
    for i in 1 2; do
        addr=$([ $i = 1 ] && echo "$GW1" || echo "$GW2")
        LODE_ACCESS_KEY=$AK LODE_SECRET_KEY=$SK LODE_MASTER_KEY=7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b \
            "$NX" run "$CEPH" "gw$i" "$LODE" serve --cluster ceph --ceph-conf "$CONF" \
            --listen "$addr:19401" --admin-listen "" --data-dir "$WORK/d$i" --mount "$WORK/m$i" \
            >"$WORK/lode$i.log" 2>&1 &
        PIDS+=($!)
    done
    wait_port "$GW1" 19401; wait_port "$GW2" 19401; wait_port "$GW1" 19402
    for w in "${WORKLOADS[@]}"; do
        [ "$w" != none ] || continue
        case "$w" in
        small) args=(--objects 2000) ;;
        stat-storm) args=(--objects 2000 --ops 10000) ;;
        list) args=(--objects 5000 --ops 200) ;;
        losf-ingest) args=(--objects 1000) ;;
        train-read) args=(--objects 500) ;;
        checkpoint) args=(--size 512MiB --part-size 16MiB --saves 20) ;;
        *) args=() ;;
        esac
        # shellcheck disable=SC2206
        [ -z "${BENCH_ARGS:-}" ] || args=($BENCH_ARGS)
        for s in "lode 19401" "rgw 19402"; do
            set -- $s
            # shellcheck disable=SC2086
            "$NX" run "$CEPH" client "$LODE" bench "$w" --endpoint "http://$GW1:$2" --access-key $AK \
                --secret-key $SK --bucket "$1-$w" --json "$WORK/$1-$w.json" "${args[@]}" \
                >"$WORK/$1-$w.out" 2>&1 || { echo "$1 $w failed:"; tail -5 "$WORK/$1-$w.out"; }
        done
        python3 "$ROOT/bench/ratio.py" "$WORK/lode-$w.json" "$WORK/rgw-$w.json" "RTT $rtt ms $w"
    done
    # Cross-gateway mount visibility: PUT through gw2, stat on gw1's mount until it is there.
    AWS_ACCESS_KEY_ID=$AK AWS_SECRET_ACCESS_KEY=$SK "$PY" - "http://$GW2:19401" "$WORK/m1" "$rtt" <<'PY'
import os, statistics, sys, time, boto3
s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1")
s3.create_bucket(Bucket="lag")
d = os.path.join(sys.argv[2], "lag")
deadline = time.monotonic() + 30
while not os.path.isdir(d):
    assert time.monotonic() < deadline, "bucket never showed on the mount"
    time.sleep(0.05)
lags = []
for i in range(40):
    p = os.path.join(d, f"k{i}")
    os.path.exists(p)  # the kernel has looked the name up (a negative entry to invalidate)
    s3.put_object(Bucket="lag", Key=f"k{i}", Body=b"x")
    t = time.monotonic()
    while not os.path.exists(p):
        assert time.monotonic() - t < 30, f"k{i} never showed"
        time.sleep(0.001)
    lags.append((time.monotonic() - t) * 1000)
lags.sort()
print(f"RTT {sys.argv[3]} ms mount visibility lag (stat on gw1 after a PUT through gw2): "
      f"p50 {statistics.median(lags):.1f} ms, p99 {lags[int(len(lags)*0.99)-1]:.1f} ms, max {lags[-1]:.1f} ms")
PY
    stop_servers
    if [ "${FAULT_LIST[*]}" != none ]; then
        (cd "$ROOT/compat-tests" && "$PY" netns.py faults "$CEPH" "${FAULT_LIST[@]}") | python3 -c "$(cat <<'PY'
import json, sys
rtt = sys.argv[1]
for line in sys.stdin:
    r = json.loads(line)
    lost = {k: v["lost_count"] for k, v in r["verified"].items()}
    acked = {k: v["acked"] for k, v in r["verified"].items()}
    print(f"RTT {rtt} ms fault {r['fault']:<12} on {r['target']}, healed after {r['held_s']} s: "
          f"PUTs {r['puts']} acked {r['acked']} failed {r['failed']} {r['errors']} slow>2s {r['slow_over_2s']} "
          f"longest {r['longest_put_s']} s, outage {r['outage_s']} s, recovered {r['recovered_after_fault_s']} s "
          f"after the fault ({r['recovered_after_heal_s']} s after the heal); acked PUTs checked {acked}, lost {lost}")
    if "cut_gateway" in r:
        print(f"    cut gateway: {r['cut_gateway']}")
        print(f"    other gateway: {r['other_gateways']}")
PY
)" "$rtt"
    fi
    "$NX" down "$CEPH" >/dev/null 2>&1
done
