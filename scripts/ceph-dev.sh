#!/usr/bin/env bash
# A throwaway single-host Ceph (Pacific) cluster on loopback, for tests of Lode's cluster mode.
#
#   scripts/ceph-dev.sh start DIR [--auth none]
#                                          1 mon + 1 mgr + 3 BlueStore OSDs (files under DIR), waits
#                                          for I/O;
#                                          cephx on unless --auth none
#   scripts/ceph-dev.sh stop DIR [--purge] stop the daemons whose pid files are under DIR
#                                          (--purge also removes DIR)
#   scripts/ceph-dev.sh purge DIR          same as stop DIR --purge
#   scripts/ceph-dev.sh status DIR         which daemons of DIR are alive, and `ceph -s`
#   scripts/ceph-dev.sh kill-osd DIR N     SIGKILL osd.N (fault tests)
#   scripts/ceph-dev.sh start-osd DIR N    restart osd.N on its existing data, wait until it is up
#   scripts/ceph-dev.sh user DIR NAME POOL...
#                                          client.NAME with the smallest caps Lode needs on the
#                                          POOLs (made if missing): mon 'allow r', osd 'allow rw
#                                          pool=P' each; its keyring DIR/ceph.client.NAME.keyring
#
# Clients use DIR/ceph.conf (`ceph -c DIR/ceph.conf -s`, `rados -c DIR/ceph.conf lspools`,
# rados_conf_read_file). cephx is on (auth_*_required = cephx), as real clusters run: every
# entity's keyring is DIR/ceph.<entity>.keyring (`keyring = DIR/$cluster.$name.keyring` in the
# conf), so a client that reads DIR/ceph.conf under its name finds its key. `client.admin` may
# do anything; `client.lode` (Lode's default user) may read the maps, create and tag pools and
# read and write every pool: the tests make pools of many names (a production cluster gives it
# only its two pools: README "Deploying against your Ceph cluster"). msgr2 only, 127.0.0.1
# only (or each daemon's namespace address: CEPH_DEV_NETNS).
# Pools default to size 3 / min_size 2 and 8 PGs; pool delete is allowed. `start` leaves no pool
# behind (its smoke-test pool is deleted). Pid files: DIR/run/{mon.a,mgr.x,osd.N}.pid; logs:
# DIR/log. The mgr (mgr.x, only its always-on modules and iostat) gathers the usage figures:
# `ceph df`, pool capacity (Lode's /healthz and statfs in cluster mode).
# `start` on a DIR whose cluster runs prints so and exits 0 (restarting any OSD that is down); on
# a DIR whose mon is not running (stopped, crashed) it wipes the old cluster and makes a new one.
#
# Disk: a BlueStore block file never gives space back; it grows with the bytes written, up to
# CEPH_DEV_BLOCK_SIZE per OSD (default 4G, sparse). Callers must `stop DIR --purge` (or stop and
# rm -rf DIR) when done. DIR may be on tmpfs (/dev/shm) to spare the disk.
#
# Environment:
#   CEPH_DEV_MON_PORT   mon msgr2 port (default: first free port from 13300)
#   CEPH_DEV_BLOCK_SIZE size of each OSD block file (default 4G; bytes or K/M/G/T suffix)
#   CEPH_DEV_OSDS       number of OSDs (default 3)
#   CEPH_DEV_PORT_MIN / CEPH_DEV_PORT_MAX  OSD bind port range (default 6800-7300)
#   CEPH_DEV_NETNS      a topology file (written by scripts/ceph-netns.sh): the mon and each OSD
#                       run in their own network namespace at their own address, each OSD under
#                       its CRUSH host (failure domain host); kept as DIR/netns for later commands.
#                       Lines: `mon a NETNS IP` and `osd ID NETNS IP HOST`.
# Memory: osd_memory_target is at its floor (896 MiB); idle OSDs sit far below it.
set -euo pipefail

usage() {
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

die() { echo "ceph-dev: $*" >&2; exit 1; }
log() { echo "==> $*"; }

CMD="${1:-}"
[ -n "$CMD" ] && [ -n "${2:-}" ] || usage
DIR="$(realpath -m -- "$2")"
shift 2
CONF="$DIR/ceph.conf"
RUN="$DIR/run"
PY=/usr/bin/python3  # ceph-common depends on it; not a pyenv/venv python
# Several simulated hosts (scripts/ceph-netns.sh): the topology is kept in DIR/netns.
TOPO="$DIR/netns"
TOPO_NEW=""
[ -n "${CEPH_DEV_NETNS:-}" ] && [ "$CMD" = start ] && TOPO_NEW="$(realpath -- "$CEPH_DEV_NETNS")"

# Field $2 of daemon $1's line in the topology (3: netns, 4: address, 5: CRUSH host).
topo_field() {
    local f="${TOPO_NEW:-$TOPO}" kind="${1%%.*}" id="${1#*.}"
    [ -f "$f" ] || return 0
    awk -v k="$kind" -v i="$id" -v n="$2" '$1 == k && $2 == i { print $n }' "$f"
}

# Runs "$@" in daemon $1's network namespace (only the network one: a FUSE mount or a file
# made there is the root namespace's as usual), or here without a topology.
in_ns() {
    local name="$1" ns
    shift
    ns="$(topo_field "$name" 3)"
    if [ -n "$ns" ]; then nsenter --net="/run/netns/$ns" "$@"; else "$@"; fi
}

ensure_packages() {
    local need=() pkg
    for pkg in ceph-mon ceph-mgr ceph-osd ceph-common librados-dev; do
        dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
    done
    if ((${#need[@]})); then
        log "installing Debian packages: ${need[*]}"
        local sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "${need[@]}" >/dev/null
    fi
}

# ceph CLI against DIR's cluster, never hanging for long.
cephc() { timeout 30 ceph -c "$CONF" --connect-timeout 10 "$@"; }
radosc() { timeout 30 rados -c "$CONF" "$@"; }

# Prints the pid of daemon $1 (mon.a, osd.0, ...) if its pid file is under DIR and the process
# is alive and is a ceph daemon of this DIR (guards against pid reuse); else fails.
live_pid() {
    local f="$RUN/$1.pid" pid
    [ -f "$f" ] || return 1
    pid="$(cat "$f" 2>/dev/null)" || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [ -r "/proc/$pid/cmdline" ] || return 1
    # Our daemons run as `ceph-{mon,mgr,osd} -c DIR/ceph.conf -i ID`.
    local cmd
    cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
    case "$cmd" in
    "ceph-mon -c $CONF "* | "ceph-mgr -c $CONF "* | "ceph-osd -c $CONF "*) ;;
    *) return 1 ;;
    esac
    echo "$pid"
}

# Names of the daemons that have a pid file under DIR.
daemons() {
    local f
    for f in "$RUN"/*.pid; do
        [ -e "$f" ] || continue
        f="${f##*/}"; echo "${f%.pid}"
    done
}

osd_ids() {
    local d
    for d in "$DIR"/osd.*; do
        [ -d "$d" ] && echo "${d##*/osd.}"
    done | sort -n
}

# SIGTERM to the given daemons of DIR, SIGKILL after 10 s; removes their pid files and sockets.
term_daemons() {
    local name pid pids=() i alive
    for name in "$@"; do
        if pid="$(live_pid "$name")"; then
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
            STOPPED+=("$name")
        fi
    done
    for ((i = 0; i < 100; i++)); do
        alive=0
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        ((alive)) || break
        sleep 0.1
    done
    for pid in "${pids[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then
            echo "ceph-dev: pid $pid did not exit on SIGTERM, sending SIGKILL" >&2
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    for pid in "${pids[@]}"; do
        while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    done
    for name in "$@"; do rm -f "$RUN/$name.pid" "$RUN/$name.asok"; done
}

# OSDs first (they tell the mon they are going down), then the mon.
stop_daemons() {
    STOPPED=()
    # shellcheck disable=SC2046
    term_daemons $(daemons | grep -v '^mon\.' || true)
    # shellcheck disable=SC2046
    term_daemons $(daemons)
    if ((${#STOPPED[@]})); then log "stopped ${STOPPED[*]}"; else log "no daemon of $DIR was running"; fi
}

# Starts osd.$1 and waits until the monitors mark it up (a new instance, if one was up before).
start_osd() {
    local id="$1" epoch deadline
    epoch="$(cephc osd dump -f json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["epoch"])')"
    in_ns "osd.$id" ceph-osd -c "$CONF" -i "$id" 2>>"$DIR/log/osd.$id.stderr"
    deadline=$((SECONDS + 60))
    until cephc osd dump -f json | "$PY" -c '
import json, sys
m = json.load(sys.stdin)
o = [o for o in m["osds"] if o["osd"] == int(sys.argv[1])][0]
sys.exit(0 if o["up"] and o["in"] and o["up_from"] > int(sys.argv[2]) else 1)' "$id" "$epoch"; do
        ((SECONDS < deadline)) || die "osd.$id did not come up in 60 s (see $DIR/log/osd.$id.log)"
        live_pid "osd.$id" >/dev/null || sleep 0.5
        sleep 0.3
    done
}

wait_all_up() {
    local n="$1" deadline=$((SECONDS + 90)) stat
    until stat="$(cephc osd stat -f json 2>/dev/null)" && "$PY" -c '
import json, sys
s = json.loads(sys.argv[1]); n = int(sys.argv[2])
sys.exit(0 if s["num_osds"] == n and s["num_up_osds"] == n and s["num_in_osds"] == n else 1)' "$stat" "$n"
    do
        ((SECONDS < deadline)) || die "OSDs not all up and in after 90 s: $stat"
        sleep 0.5
    done
}

# mgr.x beside the mon: it gathers the usage figures (`ceph df`, pool capacity) that Lode reports.
start_mgr() {
    mkdir -p "$DIR/mgr.x"
    if [ "$AUTH" != none ]; then
        cephc auth get-or-create mgr.x mon 'allow profile mgr' osd 'allow *' mds 'allow *' \
            -o "$DIR/mgr.x/keyring" >/dev/null
    fi
    in_ns mon.a ceph-mgr -c "$CONF" -i x 2>>"$DIR/log/mgr.x.stderr" ||
        die "ceph-mgr failed to start (see $DIR/log/mgr.x.log)"
}

# Creates a pool, writes and reads back an object, deletes the pool.
smoke_test() {
    local pool="ceph-dev-smoke" tmp deadline
    tmp="$(mktemp -d)"
    cephc osd pool create "$pool" 8 8 >/dev/null 2>&1
    echo "hello from ceph-dev $$" >"$tmp/in"
    deadline=$((SECONDS + 60))
    until radosc -p "$pool" put smoke "$tmp/in" 2>/dev/null; do
        ((SECONDS < deadline)) || die "smoke test: rados put failed for 60 s"
        sleep 0.5
    done
    radosc -p "$pool" get smoke "$tmp/out"
    cmp -s "$tmp/in" "$tmp/out" || die "smoke test: object read back differs"
    rm -rf "$tmp"
    cephc osd pool delete "$pool" "$pool" --yes-i-really-really-mean-it >/dev/null 2>&1
}

free_port() {
    local p
    for ((p = 13300; p < 13400; p++)); do
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
    done
    die "no free port in 13300-13399 (set CEPH_DEV_MON_PORT)"
}

# The conf's auth settings: cephx (the default), or none (`start DIR --auth none`).
auth_conf() {
    if [ "$AUTH" = none ]; then
        printf '%s\n' "auth cluster required = none" "auth service required = none" \
            "auth client required = none" "auth supported = none"
    else
        printf '%s\n' "auth cluster required = cephx" "auth service required = cephx" \
            "auth client required = cephx" "keyring = $DIR/\$cluster.\$name.keyring"
    fi
}

# Lode's mon caps in the dev cluster: read the maps, make and tag its pools.
LODE_MON_CAPS='allow r, allow command "osd pool create", allow command "osd pool application enable", allow command "osd pool set", allow command "osd erasure-code-profile set"'

# The conf's addresses: 127.0.0.1 for all, or each daemon's own in a topology (`[osd.N]`
# sections with its address and CRUSH host; failure domain host).
addr_conf() {
    local mon="$1" port="$2"
    if [ -z "$TOPO_NEW" ]; then
        printf '%s\n' "mon host = [v2:127.0.0.1:$port]" "public addr = 127.0.0.1" \
            "cluster addr = 127.0.0.1" "osd crush chooseleaf type = 0" \
            "mon osd reporter subtree level = osd"
    else
        printf '%s\n' "mon host = [v2:$mon:$port]" "public network = ${mon%.*}.0/24" \
            "osd crush chooseleaf type = 1" "mon osd reporter subtree level = host"
    fi
}

topo_sections() {
    [ -n "$TOPO_NEW" ] || return 0
    awk '$1 == "mon" { printf "[mon.%s]\npublic addr = %s\n", $2, $4 }
         $1 == "osd" { printf "[osd.%s]\npublic addr = %s\ncluster addr = %s\ncrush location = root=default host=%s\n", $2, $4, $4, $5 }' "$TOPO_NEW"
}

write_conf() {
    local fsid="$1" port="$2" block="$3" mon="$4"
    cat >"$CONF" <<EOF
# Written by scripts/ceph-dev.sh: a throwaway test cluster.
[global]
fsid = $fsid
$(addr_conf "$mon" "$port")
ms bind msgr1 = false
ms bind msgr2 = true
ms bind port min = ${CEPH_DEV_PORT_MIN:-6800}
ms bind port max = ${CEPH_DEV_PORT_MAX:-7300}
$(auth_conf)
osd pool default size = 3
osd pool default min size = 2
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool delete = true
mon warn on pool no redundancy = false
mon warn on insecure global id reclaim = false
mon warn on insecure global id reclaim allowed = false
mon data avail warn = 2
mon data avail crit = 1

[mon]
mon data = $DIR/mon.\$id
keyring = $DIR/mon.\$id/keyring
mon cluster log file = $DIR/log/cluster.log
log file = $DIR/log/\$name.log
pid file = $RUN/\$name.pid
admin socket = $RUN/\$name.asok
run dir = $RUN
crash dir = $DIR/crash

[mgr]
mgr data = $DIR/mgr.\$id
keyring = $DIR/mgr.\$id/keyring
log file = $DIR/log/\$name.log
pid file = $RUN/\$name.pid
admin socket = $RUN/\$name.asok
run dir = $RUN
crash dir = $DIR/crash
mgr initial modules = iostat

[osd]
osd data = $DIR/osd.\$id
keyring = $DIR/osd.\$id/keyring
osd objectstore = bluestore
bluestore block create = true
bluestore block size = $block
log file = $DIR/log/\$name.log
pid file = $RUN/\$name.pid
admin socket = $RUN/\$name.asok
run dir = $RUN
crash dir = $DIR/crash
osd memory target = 939524096
bluestore cache autotune = false
bluestore cache size = 67108864
bluestore rocksdb options = compression=kNoCompression,max_write_buffer_number=2,min_write_buffer_number_to_merge=1,recycle_log_file_num=2,write_buffer_size=33554432,writable_file_max_buffer_size=0,compaction_readahead_size=2097152,max_background_compactions=1,max_total_wal_size=134217728
osd op num shards = 2
osd op num threads per shard = 1
osd scrub min interval = 31536000
osd scrub max interval = 31536000
osd deep scrub interval = 31536000
$(topo_sections)
EOF
}

cmd_start() {
    AUTH=cephx
    case "${1:-}" in
    --auth) [ "${2:-}" = none ] || [ "${2:-}" = cephx ] || usage; AUTH="$2" ;;
    "") ;;
    *) usage ;;
    esac
    ensure_packages
    local nosd="${CEPH_DEV_OSDS:-3}" id name dead=()
    if [ -n "$TOPO_NEW" ]; then
        [ -f "$TOPO_NEW" ] || die "no topology file $TOPO_NEW"
        nosd="$(awk '$1 == "osd"' "$TOPO_NEW" | wc -l)"
    fi
    if [ -f "$DIR/ready" ] && live_pid mon.a >/dev/null; then
        for id in $(osd_ids); do live_pid "osd.$id" >/dev/null || dead+=("$id"); done
        if ((${#dead[@]} == 0)); then
            log "a cluster of $DIR is already running"
            echo "$CONF"
            return 0
        fi
        log "a cluster of $DIR is running; restarting osd.${dead[*]}"
        for id in "${dead[@]}"; do rm -f "$RUN/osd.$id.pid"; start_osd "$id"; done
        wait_all_up "$(osd_ids | wc -l)"
        echo "$CONF"
        return 0
    fi
    if [ -e "$CONF" ] || [ -d "$RUN" ] || compgen -G "$DIR/mon.*" >/dev/null ||
        compgen -G "$DIR/osd.*" >/dev/null; then
        log "stale cluster in $DIR: cleaning"
        stop_daemons
        rm -rf "$DIR"/mon.* "$DIR"/mgr.* "$DIR"/osd.* "$RUN" "$DIR/log" "$DIR/crash" "$DIR/monmap" "$CONF" \
            "$DIR/ready" "$DIR"/*.keyring "$TOPO"
    fi
    # A failed start leaves no daemon running (its logs stay in DIR/log).
    trap '[ -f "$DIR/ready" ] || { echo "ceph-dev: start failed; stopping its daemons" >&2; stop_daemons >&2; }' EXIT
    local t0=$SECONDS fsid port block mon=127.0.0.1
    fsid="$(cat /proc/sys/kernel/random/uuid)"
    if [ -n "$TOPO_NEW" ]; then
        # The mon has a namespace (and its ports) of its own.
        mon="$(topo_field mon.a 4)"; port="${CEPH_DEV_MON_PORT:-3300}"
        [ -n "$mon" ] || die "the topology $TOPO_NEW has no mon"
    else
        port="${CEPH_DEV_MON_PORT:-$(free_port)}"
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            die "port $port is in use (CEPH_DEV_MON_PORT)"
        fi
    fi
    block="$(numfmt --from=iec "${CEPH_DEV_BLOCK_SIZE:-4G}")"
    mkdir -p "$DIR" "$RUN" "$DIR/log" "$DIR/crash"
    [ -z "$TOPO_NEW" ] || [ "$TOPO_NEW" = "$TOPO" ] || cp "$TOPO_NEW" "$TOPO"
    write_conf "$fsid" "$port" "$block" "$mon"

    log "mon.a on $mon:$port"
    monmaptool --create --fsid "$fsid" --addv a "[v2:$mon:$port]" "$DIR/monmap" >/dev/null
    mkdir -p "$DIR/mon.a"
    local mkfs_keyring=()
    if [ "$AUTH" != none ]; then
        ceph-authtool --create-keyring "$DIR/mon.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
        ceph-authtool --create-keyring "$DIR/ceph.client.admin.keyring" --gen-key -n client.admin \
            --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' --cap mds 'allow *' >/dev/null
        ceph-authtool "$DIR/mon.keyring" --import-keyring "$DIR/ceph.client.admin.keyring" >/dev/null
        chmod 600 "$DIR/mon.keyring" "$DIR/ceph.client.admin.keyring"
        mkfs_keyring=(--keyring "$DIR/mon.keyring")
    fi
    ceph-mon -c "$CONF" -i a --mkfs --monmap "$DIR/monmap" "${mkfs_keyring[@]}" \
        >>"$DIR/log/mkfs.mon.a.log" 2>&1 || die "ceph-mon --mkfs failed (see $DIR/log/mkfs.mon.a.log)"
    in_ns mon.a ceph-mon -c "$CONF" -i a 2>>"$DIR/log/mon.a.stderr" ||
        die "ceph-mon failed to start (see $DIR/log/mon.a.log)"
    local deadline=$((SECONDS + 30))
    until cephc mon stat >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "mon.a did not answer in 30 s (see $DIR/log/mon.a.log)"
        sleep 0.3
    done

    # mkfs and start the OSDs in parallel (about 5 s each when run one after the other).
    local ids=() pids=() uuid secret
    for ((i = 0; i < nosd; i++)); do
        uuid="$(cat /proc/sys/kernel/random/uuid)"
        if [ "$AUTH" != none ]; then
            secret="$(ceph-authtool --gen-print-key)"
            id="$(echo "{\"cephx_secret\": \"$secret\"}" | cephc osd new "$uuid" -i -)"
            mkdir -p "$DIR/osd.$id"
            ceph-authtool --create-keyring "$DIR/osd.$id/keyring" --name "osd.$id" \
                --add-key "$secret" >/dev/null
        else
            id="$(cephc osd new "$uuid")"
            mkdir -p "$DIR/osd.$id"
        fi
        (ceph-osd -c "$CONF" -i "$id" --mkfs --osd-uuid "$uuid" >>"$DIR/log/mkfs.osd.$id.log" 2>&1 &&
            in_ns "osd.$id" ceph-osd -c "$CONF" -i "$id" 2>>"$DIR/log/osd.$id.stderr") &
        ids+=("$id"); pids+=($!)
    done
    for ((i = 0; i < nosd; i++)); do
        wait "${pids[i]}" || die "osd.${ids[i]} failed to start (see $DIR/log/*osd.${ids[i]}*)"
    done
    log "osd.${ids[*]} started"
    wait_all_up "$nosd"
    start_mgr
    smoke_test
    if [ "$AUTH" != none ]; then
        cephc auth get-or-create client.lode mon "$LODE_MON_CAPS" osd 'allow rw' \
            -o "$DIR/ceph.client.lode.keyring" >/dev/null
        chmod 600 "$DIR/ceph.client.lode.keyring"
    fi
    touch "$DIR/ready"
    log "cluster up in $((SECONDS - t0)) s (auth: ${AUTH}); smoke test passed (its pool was deleted)"
    echo "$CONF"
}

cmd_stop() {
    local purge=0
    case "${1:-}" in --purge) purge=1 ;; "") ;; *) usage ;; esac
    stop_daemons
    if ((purge)); then
        # Guard against `purge ~`: remove only a DIR this script set up (or an empty one).
        if [ -d "$DIR" ] && ! grep -qs '^# Written by scripts/ceph-dev.sh' "$CONF" &&
            [ -n "$(ls -A "$DIR")" ]; then
            die "$DIR has no ceph.conf written by this script: not removing it"
        fi
        rm -rf "$DIR"
        log "removed $DIR"
    fi
}

cmd_status() {
    local name pid any=0
    for name in $(daemons); do
        if pid="$(live_pid "$name")"; then
            echo "$name: running (pid $pid)"; any=1
        else
            echo "$name: dead (stale pid file)"
        fi
    done
    ((any)) || { echo "no daemon of $DIR is running"; return 1; }
    if live_pid mon.a >/dev/null; then cephc -s; fi
}

osd_arg() {
    [[ "${1:-}" =~ ^[0-9]+$ ]] || usage
    [ -d "$DIR/osd.$1" ] || die "no osd.$1 in $DIR"
}

# client.NAME with mon 'allow r' and osd 'allow rw pool=P' on each POOL (made if missing).
cmd_user() {
    local name="${1:-}" pool caps=""
    [[ "$name" =~ ^[A-Za-z0-9_.-]+$ ]] && [ -n "${2:-}" ] || usage
    shift
    for pool in "$@"; do
        cephc osd pool create "$pool" 8 8 >/dev/null 2>&1 || true
        cephc osd pool application enable "$pool" lode >/dev/null 2>&1 || true
        caps="${caps:+$caps, }allow rw pool=$pool"
    done
    cephc auth get-or-create "client.$name" mon 'allow r' osd "$caps" \
        -o "$DIR/ceph.client.$name.keyring" >/dev/null
    chmod 600 "$DIR/ceph.client.$name.keyring"
    echo "$DIR/ceph.client.$name.keyring"
}

case "$CMD" in
start) cmd_start "$@" ;;
user) cmd_user "$@" ;;
stop) cmd_stop "$@" ;;
purge) cmd_stop --purge ;;
status) cmd_status ;;
kill-osd)
    osd_arg "${1:-}"
    pid="$(live_pid "osd.$1")" || die "osd.$1 is not running"
    kill -KILL "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    rm -f "$RUN/osd.$1.pid" "$RUN/osd.$1.asok"
    log "killed osd.$1 (pid $pid)"
    ;;
start-osd)
    osd_arg "${1:-}"
    if live_pid "osd.$1" >/dev/null; then
        log "osd.$1 is already running"
    else
        rm -f "$RUN/osd.$1.pid"
        start_osd "$1"
        log "osd.$1 is up"
    fi
    ;;
*) usage ;;
esac
