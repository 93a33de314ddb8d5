#!/usr/bin/env bash
# Several hosts on one machine (issue 37 section 2): a Ceph cluster whose mon and each OSD host
# live in network namespaces of their own, gateways and a client in theirs, every namespace's
# packets delayed. Needs root (ip netns, nftables). The cluster is scripts/ceph-dev.sh's (cephx).
#
#   scripts/ceph-netns.sh up DIR [--rtt MS] [--hosts N] [--osds-per-host K] [--gateways G]
#                             [--network-only]
#        namespaces, bridges and links, then the cluster (DIR as ceph-dev.sh's); prints the conf
#   scripts/ceph-netns.sh down DIR      stop the cluster (purge DIR) and remove the network
#   scripts/ceph-netns.sh rtt DIR MS    set the round trip between any two namespaces
#   scripts/ceph-netns.sh run DIR NAME CMD...   CMD in NAME's network namespace (mon, h1.., gw1..,
#        client); only the network namespace: files and FUSE mounts are the machine's
#   scripts/ceph-netns.sh addr DIR NAME [front]  NAME's address on the cluster (or front) network
#   scripts/ceph-netns.sh cut DIR NAME  cut NAME's cluster link both ways (all packets dropped):
#        a host cut off, or a gateway cut off the cluster while its front link serves clients
#   scripts/ceph-netns.sh oneway DIR NAME  drop only what NAME sends on its cluster link (it still
#        hears the others): an asymmetric partition
#   scripts/ceph-netns.sh heal DIR NAME   restore NAME's link
#   scripts/ceph-netns.sh kill-host DIR hN   SIGKILL every OSD of host hN
#   scripts/ceph-netns.sh start-host DIR hN  restart them on their data, wait until they are up
#
# Two networks, each a bridge in the root namespace (which has an address on both, so the ceph
# CLI and tests run from here too):
#   cluster 10.77.1.0/24: root .1, mon .2, hosts h1.. .11.., gateways gw1.. .21..
#   front   10.77.2.0/24: root .1, gateways .21.., client .30
# Each namespace is linked by veth pairs. Delay: this machine's kernel has no sch_netem
# (CONFIG_NET_SCH_NETEM is not set), so each namespace queues what it receives (iptables
# NFQUEUE) to scripts/netdelay.py, which lets each packet in RTT/2 after it arrived: any two
# namespaces are RTT apart (RTT/2 from the root namespace, which delays nothing it receives).
# Faults are nftables drop rules in the namespace (chains faults_out, faults_in).
# Names start with LODE_NETNS_PREFIX (default "lnx").
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
P="${LODE_NETNS_PREFIX:-lnx}"
CNET=10.77.1 FNET=10.77.2

usage() { sed -n '6,23p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "ceph-netns: $*" >&2; exit 1; }
log() { echo "==> $*"; }

CMD="${1:-}"
[ -n "$CMD" ] && [ -n "${2:-}" ] || usage
DIR="$(realpath -m -- "$2")"
shift 2
STATE="$DIR/netns.env"  # RTT, HOSTS, OSDS_PER_HOST, GATEWAYS of the running topology

[ "$(id -u)" = 0 ] || die "needs root (ip netns, nftables)"
NET="$DIR/net"  # delayer pid files and logs

ns() { echo "$P-$1"; }
# The root-side end of NAME's link on network c (cluster) or f (front).
port() { echo "$P$1-$2"; }


ensure_packages() {
    command -v nft >/dev/null && command -v iptables >/dev/null && command -v nsenter >/dev/null &&
        command -v ip >/dev/null && return
    log "installing Debian packages: nftables iptables iproute2 util-linux"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nftables \
        iptables iproute2 util-linux >/dev/null
}

in_ns() { local n="$1"; shift; nsenter --net="/run/netns/$(ns "$n")" "$@"; }

# NAME's rules: what it receives (not on loopback) goes to the delay queue, bypassed while no
# delayer listens (iptables' NFQUEUE target: this kernel has no nft `queue`), then its nftables
# fault chains. Delaying on receipt, not on sending: a packet held on the sender's side still
# counts against its socket (TCP small queues, autocorking), which would throttle a stream and
# hold back a reply's second small write by the delay, as no real link does.
ns_rules() {
    in_ns "$1" iptables -t mangle -A PREROUTING ! -i lo -j NFQUEUE --queue-num 0 --queue-bypass
    in_ns "$1" nft -f - <<NFT
table inet lodenet {
    chain faults_out { }
    chain faults_in { }
    chain out {
        type filter hook output priority 0; policy accept;
        oif "lo" accept
        jump faults_out
    }
    chain in {
        type filter hook input priority 0; policy accept;
        iif "lo" accept
        jump faults_in
    }
}
NFT
}

stop_delayer() {
    local f="$NET/$1.pid" pid
    [ -f "$f" ] || return 0
    pid="$(cat "$f")"
    if { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -q netdelay.py; then
        kill "$pid" 2>/dev/null || true
        while kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
    fi
    rm -f "$f"
}

# (Re)starts NAME's delayer at RTT/2 (none at RTT 0).
start_delayer() {
    local name="$1" half
    stop_delayer "$name"
    half=$(awk -v r="$RTT" 'BEGIN { printf "%.4f", r / 2 }')
    awk -v r="$RTT" 'BEGIN { exit !(r > 0) }' || return 0
    mkdir -p "$NET"
    # nsenter execs the delayer: $! is its pid.
    nsenter --net="/run/netns/$(ns "$name")" /usr/bin/python3 "$ROOT/scripts/netdelay.py" 0 \
        "$half" >>"$NET/$name.log" 2>&1 </dev/null &
    echo $! >"$NET/$name.pid"
}

# A veth pair from NAME's namespace (as IFACE there) to the bridge of network NET.
link() {
    local name="$1" net="$2" iface="$3" addr="$4" bridge="$P-${2}br" rp
    rp="$(port "$net" "$name")"
    ip link add "$rp" type veth peer name "$iface" netns "$(ns "$name")"
    ip link set "$rp" master "$bridge" up
    ip netns exec "$(ns "$name")" ip addr add "$addr/24" dev "$iface"
    ip netns exec "$(ns "$name")" ip link set "$iface" up
}

names() {
    echo mon
    local i
    for ((i = 1; i <= HOSTS; i++)); do echo "h$i"; done
    for ((i = 1; i <= GATEWAYS; i++)); do echo "gw$i"; done
    echo client
}

cluster_addr() {
    case "$1" in
    mon) echo "$CNET.2" ;; h*) echo "$CNET.$((10 + ${1#h}))" ;; gw*) echo "$CNET.$((20 + ${1#gw}))" ;;
    root) echo "$CNET.1" ;; *) return 1 ;;
    esac
}
front_addr() {
    case "$1" in
    gw*) echo "$FNET.$((20 + ${1#gw}))" ;; client) echo "$FNET.30" ;; root) echo "$FNET.1" ;;
    *) return 1 ;;
    esac
}

load_state() { [ -f "$STATE" ] || die "no topology in $DIR (run: $0 up $DIR)"; . "$STATE"; }

net_down() {
    local n
    for n in "$NET"/*.pid; do [ -e "$n" ] && stop_delayer "$(basename "$n" .pid)"; done
    for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$P-" || true); do
        ip netns del "$n" 2>/dev/null || true
    done
    for n in "$P-cbr" "$P-fbr"; do ip link del "$n" 2>/dev/null || true; done
}

cmd_up() {
    RTT=0.5 HOSTS=3 OSDS_PER_HOST=1 GATEWAYS=2 NETONLY=0
    while [ $# -gt 0 ]; do
        case "$1" in
        --rtt) RTT="$2"; shift 2 ;; --hosts) HOSTS="$2"; shift 2 ;;
        --osds-per-host) OSDS_PER_HOST="$2"; shift 2 ;; --gateways) GATEWAYS="$2"; shift 2 ;;
        --network-only) NETONLY=1; shift ;;
        *) usage ;;
        esac
    done
    [[ "$RTT" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--rtt takes milliseconds"
    ((HOSTS >= 3)) || die "--hosts must be at least 3 (pools of size 3, failure domain host)"
    ensure_packages
    mkdir -p "$DIR"
    net_down
    local b name i k id=0
    for b in c f; do
        ip link add "$P-${b}br" type bridge
        ip link set "$P-${b}br" up
    done
    ip addr add "$CNET.1/24" dev "$P-cbr"
    ip addr add "$FNET.1/24" dev "$P-fbr"
    for name in $(names); do
        ip netns add "$(ns "$name")"
        ip netns exec "$(ns "$name")" ip link set lo up
        if [ "$name" != client ]; then link "$name" c eth0 "$(cluster_addr "$name")"; fi
        case "$name" in gw* | client) link "$name" f eth1 "$(front_addr "$name")" ;; esac
        ns_rules "$name"
        # GW_TCP_RTO_MAX_MS caps TCP's retransmission backoff in the gateway namespaces
        # (net.ipv4.tcp_rto_max_ms, Linux 6.15+; default 120000), as an operator can on
        # gateway hosts: a connection that lost packets during a cut retries sooner after it.
        case "$name" in gw*)
            [ -z "${GW_TCP_RTO_MAX_MS:-}" ] ||
                ip netns exec "$(ns "$name")" sysctl -qw net.ipv4.tcp_rto_max_ms="$GW_TCP_RTO_MAX_MS" ;;
        esac
        start_delayer "$name"
    done
    printf 'RTT=%s\nHOSTS=%s\nOSDS_PER_HOST=%s\nGATEWAYS=%s\n' "$RTT" "$HOSTS" "$OSDS_PER_HOST" \
        "$GATEWAYS" >"$STATE"
    {
        echo "mon a $(ns mon) $(cluster_addr mon)"
        for ((i = 1; i <= HOSTS; i++)); do
            for ((k = 0; k < OSDS_PER_HOST; k++)); do
                echo "osd $id $(ns "h$i") $(cluster_addr "h$i") h$i"; id=$((id + 1))
            done
        done
    } >"$DIR/topology"
    log "network up: $(names | tr '\n' ' '); RTT $RTT ms between namespaces"
    ((NETONLY)) && return 0
    # 8 GiB OSDs (sparse): three replicas of a benchmark's objects.
    CEPH_DEV_BLOCK_SIZE="${CEPH_DEV_BLOCK_SIZE:-8G}" CEPH_DEV_NETNS="$DIR/topology" \
        "$ROOT/scripts/ceph-dev.sh" start "$DIR"
}

cmd_down() {
    # The daemons first (while the network still carries their goodbyes), then the network.
    if [ -f "$DIR/ceph.conf" ]; then "$ROOT/scripts/ceph-dev.sh" stop "$DIR" || true; fi
    net_down
    rm -rf "$DIR"
    log "network of $P removed"
}

cmd_rtt() {
    load_state
    RTT="$1"
    [[ "$RTT" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "RTT in milliseconds"
    sed -i "s/^RTT=.*/RTT=$RTT/" "$STATE"
    local name
    for name in $(names); do start_delayer "$name"; done
    log "RTT $RTT ms"
}

# Drops what NAME sends on its cluster link (eth0), and with "both" what it receives there.
cut_link() {
    local name="$1" both="$2"
    cluster_addr "$name" >/dev/null && [ "$name" != root ] && [ -e "/run/netns/$(ns "$name")" ] ||
        die "$name has no cluster link"
    in_ns "$name" nft flush chain inet lodenet faults_out
    in_ns "$name" nft flush chain inet lodenet faults_in
    in_ns "$name" nft add rule inet lodenet faults_out oifname eth0 drop
    [ "$both" = 0 ] || in_ns "$name" nft add rule inet lodenet faults_in iifname eth0 drop
}

heal_link() {
    in_ns "$1" nft flush chain inet lodenet faults_out
    in_ns "$1" nft flush chain inet lodenet faults_in
}

osds_of() {
    awk -v h="$1" '$1 == "osd" && $5 == h { print $2 }' "$DIR/topology"
}

case "$CMD" in
up) cmd_up "$@" ;;
down) cmd_down ;;
rtt) [ -n "${1:-}" ] || usage; cmd_rtt "$1" ;;
run)
    [ -n "${1:-}" ] && [ -n "${2:-}" ] || usage
    load_state; name="$1"; shift
    [ -e "/run/netns/$(ns "$name")" ] || die "no namespace for $name"
    exec nsenter --net="/run/netns/$(ns "$name")" "$@"
    ;;
addr)
    [ -n "${1:-}" ] || usage
    if [ "${2:-}" = front ]; then front_addr "$1"; else cluster_addr "$1"; fi
    ;;
cut) load_state; cut_link "${1:?}" 1; log "$1 cut off the cluster network" ;;
oneway) load_state; cut_link "${1:?}" 0; log "what $1 sends on the cluster network is dropped" ;;
heal) load_state; heal_link "${1:?}"; log "$1 healed" ;;
kill-host)
    load_state
    ids="$(osds_of "${1:?}")"; [ -n "$ids" ] || die "no OSD on host $1"
    for id in $ids; do "$ROOT/scripts/ceph-dev.sh" kill-osd "$DIR" "$id"; done
    ;;
start-host)
    load_state
    ids="$(osds_of "${1:?}")"; [ -n "$ids" ] || die "no OSD on host $1"
    for id in $ids; do "$ROOT/scripts/ceph-dev.sh" start-osd "$DIR" "$id"; done
    ;;
*) usage ;;
esac
