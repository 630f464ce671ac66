#!/usr/bin/env bash
# LVS real server in TUN mode: accept the director's IPIP packets and keep
# client segments small enough to survive the 20-byte IPIP header.
#
# usage: tunnel.sh up VIP DEV [BASE_MTU]    tunl0 up, rp_filter off on it, DEV's MTU = BASE_MTU - 20
#        tunnel.sh down VIP DEV [BASE_MTU]  DEV's MTU back to BASE_MTU, tunl0 down
#
# VIP: the cluster's virtual IP (also put on lo, ARP-quiet, by realserver-arp.sh)
# DEV: the interface this host sends its replies out of (e.g. eth1)
# BASE_MTU: DEV's MTU without the tunnel (default 1500)
#
# Why each step:
# - The director wraps every client packet in an outer IPv4 header (IPIP,
#   protocol 4) addressed to this host. The ipip module's fallback device
#   tunl0 unwraps them; the inner packet is addressed to the VIP, which is
#   local because realserver-arp.sh put it on lo.
# - The unwrapped packet arrives on tunl0 with the client's source address,
#   and the route back to the client is via DEV: strict reverse-path filtering
#   drops it. The kernel applies the larger of conf/all and conf/tunl0, so both
#   are set to 0; other interfaces keep their own rp_filter value.
# - A client sending full-size segments makes the director send packets 20
#   bytes over the path MTU. Lowering DEV's MTU by 20 (1500 -> 1480) lowers the
#   MSS this host advertises in its SYN-ACK (1440 instead of 1460), so clients
#   never send a segment that cannot be encapsulated.
# Idempotent: the MTU is computed from BASE_MTU, never from the current value.
set -euo pipefail

prog=${0##*/}
die() { echo "$prog: $*" >&2; exit 1; }
usage() { die "usage: $prog up|down VIP DEV [BASE_MTU]"; }

IPIP_OVERHEAD=20  # one outer IPv4 header without options

if [ "$#" -lt 3 ] || [ "$#" -gt 4 ]; then usage; fi
action=$1
vip=$2
dev=$3
base_mtu=${4:-1500}
[[ $vip =~ ^([0-9]{1,3}\.){3}[0-9]{1,3}$ ]] || die "VIP '$vip' is not an IPv4 address"
if ! [[ $base_mtu =~ ^[0-9]+$ ]] || [ "$base_mtu" -lt 596 ] || [ "$base_mtu" -gt 65535 ]; then
  die "BASE_MTU '$base_mtu' must be a number between 596 and 65535"
fi
ip link show dev "$dev" >/dev/null 2>&1 || die "no interface '$dev'"

tunnel_mtu=$((base_mtu - IPIP_OVERHEAD))

case $action in
  up)
    if ! ip link show dev tunl0 >/dev/null 2>&1; then
      modprobe ipip 2>/dev/null || true
      ip link show dev tunl0 >/dev/null 2>&1 \
        || die "no tunl0: this kernel has no ipip module (CONFIG_NET_IPIP)"
    fi
    sysctl -q -w net.ipv4.conf.tunl0.rp_filter=0 net.ipv4.conf.all.rp_filter=0 >/dev/null
    ip link set dev tunl0 up
    ip link set dev "$dev" mtu "$tunnel_mtu"
    if ! ip -4 -o addr show dev lo | grep -qF " inet $vip/32 "; then
      echo "$prog: warning: $vip/32 is not on lo yet; run realserver-arp.sh up $vip" >&2
    fi
    echo "$prog: tunl0 up (rp_filter 0), $dev mtu $tunnel_mtu (advertised MSS $((tunnel_mtu - 40)))"
    ;;
  down)
    ip link set dev "$dev" mtu "$base_mtu"
    if ip link show dev tunl0 >/dev/null 2>&1; then
      ip link set dev tunl0 down
    fi
    echo "$prog: tunl0 down, $dev mtu $base_mtu"
    ;;
  *)
    usage
    ;;
esac
