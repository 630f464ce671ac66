#!/usr/bin/env bash
# LVS real server (DR and TUN modes): hold the VIP on lo without answering ARP for it.
#
# usage: realserver-arp.sh up VIP      arp_ignore=1/arp_announce=2, then VIP/32 on lo
#        realserver-arp.sh down VIP    remove the VIP from lo (the sysctls stay: harmless)
#        realserver-arp.sh status VIP  exit 0 when the VIP is on lo and ARP is quiet
#
# In DR and TUN modes the director forwards packets addressed to the VIP
# unchanged, so every real server must treat the VIP as a local address; it
# goes on lo as a /32 (a wider prefix on lo would make the whole subnet local).
# Only the director may answer ARP for the VIP, hence, before the address appears:
#   arp_ignore=1   answer ARP only for addresses configured on the interface
#                  the request came in on (the VIP is on lo, requests come in on ethX)
#   arp_announce=2 never use the VIP as the sender address of our own ARP requests
# The kernel applies the larger of conf/all and conf/IFACE, so 'all' covers
# every interface; 'lo' is set too, as the LVS recipe does. The same values are
# made persistent by `haqueue ops gen-sysctl --role realserver`.
# Idempotent: running `up` twice changes nothing.
set -euo pipefail

prog=${0##*/}
die() { echo "$prog: $*" >&2; exit 1; }
usage() { die "usage: $prog up|down|status VIP (an IPv4 address, e.g. 192.168.56.100)"; }

[ "$#" -eq 2 ] || usage
action=$1
vip=$2
[[ $vip =~ ^([0-9]{1,3}\.){3}[0-9]{1,3}$ ]] || die "VIP '$vip' is not an IPv4 address (no prefix: it is always /32 on lo)"

sysctl_set() {
  local key=$1 value=$2
  sysctl -q -w "$key=$value" >/dev/null || die "cannot set $key=$value"
}

sysctl_is() {
  local key=$1 value=$2
  [ "$(sysctl -n "$key")" = "$value" ]
}

vip_on_lo() {
  ip -4 -o addr show dev lo | grep -qF " inet $vip/32 "
}

case $action in
  up)
    # ARP first: the moment the VIP is on lo without these, this host would
    # answer ARP for it and pull the VIP's traffic away from the director.
    for scope in all lo; do
      sysctl_set "net.ipv4.conf.$scope.arp_ignore" 1
      sysctl_set "net.ipv4.conf.$scope.arp_announce" 2
    done
    ip addr replace "$vip/32" dev lo label lo:haqueue
    echo "$prog: $vip/32 on lo; arp_ignore=1 arp_announce=2 on all and lo"
    ;;
  down)
    if vip_on_lo; then
      ip addr del "$vip/32" dev lo
    fi
    echo "$prog: $vip removed from lo"
    ;;
  status)
    ok=0
    vip_on_lo || { echo "$prog: $vip/32 is not on lo"; ok=1; }
    for scope in all lo; do
      sysctl_is "net.ipv4.conf.$scope.arp_ignore" 1 || { echo "$prog: net.ipv4.conf.$scope.arp_ignore is not 1"; ok=1; }
      sysctl_is "net.ipv4.conf.$scope.arp_announce" 2 || { echo "$prog: net.ipv4.conf.$scope.arp_announce is not 2"; ok=1; }
    done
    [ "$ok" -eq 0 ] && echo "$prog: $vip/32 on lo, ARP quiet"
    exit "$ok"
    ;;
  *)
    usage
    ;;
esac
