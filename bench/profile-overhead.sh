#!/usr/bin/env bash
# Cost of recording the IO profile: small-object GET throughput with `[server] profile` on and
# off, same data dir, alternating runs; prints each run and the median ratio.
#   bench/profile-overhead.sh [runs] [lode-bench small args...]
set -euo pipefail
RUNS="${1:-3}"; shift || true
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/lode-target}"
LODE="$CARGO_TARGET_DIR/release/lode"
WORK="$(mktemp -d /var/tmp/lode-prof.XXXXXX)"
AK=benchaccesskey SK=benchsecretkey123
PID=""
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
printf '[[datapath.devices]]\npath = "dev0.img"\nsize = "1GiB"\n' > "$WORK/on.toml"
printf '[server]\nprofile = false\n[[datapath.devices]]\npath = "dev0.img"\nsize = "1GiB"\n' > "$WORK/off.toml"
run() { # mode run# [bench args]
    local mode="$1" n="$2"; shift 2
    LODE_ACCESS_KEY=$AK LODE_SECRET_KEY=$SK "$LODE" serve --config "$WORK/$mode.toml" --listen 127.0.0.1:19311 --admin-listen "" --data-dir "$WORK/data" >"$WORK/$mode.log" 2>&1 & PID=$!
    for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/19311) 2>/dev/null && break; sleep 0.1; done
    "$LODE" bench small --endpoint http://127.0.0.1:19311 --access-key $AK --secret-key $SK --json "$WORK/$mode-$n.json" "$@" >/dev/null
    kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
}
for i in $(seq "$RUNS"); do run on "$i" "$@"; run off "$i" "$@"; done
python3 - "$WORK" "$RUNS" <<'PY'
import json, statistics, sys
w, n = sys.argv[1], int(sys.argv[2])
get = lambda m, i: json.load(open(f"{w}/{m}-{i}.json"))["classes"]["get"]["ops_per_sec"]
on = [get("on", i) for i in range(1, n + 1)]
off = [get("off", i) for i in range(1, n + 1)]
print("GET ops/s with profile:   ", " ".join(f"{x:.0f}" for x in on))
print("GET ops/s without profile:", " ".join(f"{x:.0f}" for x in off))
print(f"median on/off = {statistics.median(on):.0f}/{statistics.median(off):.0f} = {statistics.median(on)/statistics.median(off):.3f}")
PY
