#!/usr/bin/env bash
# Install haqueue on one host of a cluster: a queue node, an LVS real server or an LVS director.
#
# usage: install.sh --config FILE --id ID [--role node|realserver|director]
#                   [--rendered DIR] [--source SPEC] [--destdir DIR] [--python PY] [--dry-run]
#
#   --config FILE   the cluster file; installed at its [deploy] config_path
#   --id ID         this host's id in the cluster file ([[nodes]] or [[directors]])
#   --role ROLE     node (collocated VRRP), realserver (behind LVS directors) or
#                   director; default: director for a [[directors]] id, realserver
#                   when the cluster file has directors, else node
#   --rendered DIR  configs rendered by `haqueue ops gen-keepalived`, `gen-lvs`
#                   and `gen-systemd` (e.g. the repository's keepalived/), found
#                   by file name. Default: render them here from the cluster file.
#   --source SPEC   what pip installs into /opt/haqueue: a checkout or a
#                   requirement (default: the checkout this script is in)
#   --destdir DIR   place files under DIR instead of /, and skip packages,
#                   users, the venv, sysctl and services (image builds, tests;
#                   needs --python with haqueue importable)
#   --python PY     a Python that can import haqueue (default: the venv's)
#   --dry-run       print what would be done, change nothing
#
# Every generated file carries `# install as: PATH` in its header; this script
# puts it there, so destinations are written once, by the generator.
# Steps: packages -> venv -> users -> cluster file -> sysctl.d -> keepalived,
# LVS and systemd files -> services. Re-running it is safe.
set -euo pipefail

prog=${0##*/}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")

die() { echo "$prog: $*" >&2; exit 1; }
say() { echo "$prog: $*"; }

config='' id='' role='' rendered='' source=$repo destdir='' python='' dry_run=0
while [ "$#" -gt 0 ]; do
  case $1 in
    --config) config=${2:?}; shift 2 ;;
    --id) id=${2:?}; shift 2 ;;
    --role) role=${2:?}; shift 2 ;;
    --rendered) rendered=${2:?}; shift 2 ;;
    --source) source=${2:?}; shift 2 ;;
    --destdir) destdir=${2:?}; shift 2 ;;
    --python) python=${2:?}; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[ -n "$config" ] || die "--config FILE is required"
[ -n "$id" ] || die "--id ID is required"
[ -f "$config" ] || die "--config $config: no such file"
case $role in ""|node|realserver|director) ;; *) die "--role '$role': choose node, realserver or director" ;; esac
[ -z "$rendered" ] || [ -d "$rendered" ] || die "--rendered $rendered: not a directory"
if [ -n "$destdir" ] && [ -z "$python" ]; then die "--destdir needs --python (no venv is built)"; fi
if [ -z "$destdir" ] && [ "$dry_run" -eq 0 ] && [ "$(id -u)" -ne 0 ]; then die "run as root"; fi

venv=/opt/haqueue
python=${python:-$venv/bin/python}

# run CMD...: do it, or only print it with --dry-run.
run() {
  if [ "$dry_run" -eq 1 ]; then echo "+ $*"; else "$@"; fi
}

# -- 1. packages and the venv (the venv provides the Python the later steps use)
if [ -z "$destdir" ]; then
  apt_install() { run env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"; }
  # The leader check uses curl; keepalived runs on nodes and directors alike.
  apt_install keepalived curl iproute2 procps python3-venv
  # The package starts keepalived with its sample config: stop it until ours is in place.
  run systemctl stop keepalived
  if [ ! -x "$venv/bin/python" ]; then
    run python3 -m venv "$venv"
  fi
  run "$venv/bin/python" -m pip install -q --upgrade "$source"
fi

if [ "$dry_run" -eq 1 ] && [ ! -x "$python" ]; then
  python=python3  # the venv does not exist yet; read the cluster file with what there is
fi

# -- 2. what the cluster file says about this host (validated by haqueue itself)
facts=$("$python" - "$config" "$id" "$role" <<'PY'
import sys
from haqueue.config.cluster import ClusterFileError, load_cluster
from haqueue.ops.check import default_role
path, member_id, role = sys.argv[1:]
try:
    c = load_cluster(path)
except ClusterFileError as exc:
    sys.exit(f"install.sh: {exc}")
members = {m.id: m for m in c.nodes + c.directors}
if member_id not in members:
    sys.exit(f"install.sh: --id {member_id}: not in {path} (ids: {', '.join(members)})")
m = members[member_id]
is_director = any(d.id == member_id for d in c.directors)
role = role or default_role(c, m)  # as `haqueue ops check` decides it
if (role == "director") != is_director:
    sys.exit(f"install.sh: --role {role} does not fit {member_id}, a member of "
             f"{'[[directors]]' if is_director else '[[nodes]]'}")
if role == "realserver" and not c.directors:
    sys.exit("install.sh: --role realserver needs [[directors]] in the cluster file")
# One value per line, in the order the shell reads them below (the loader
# has validated them: no spaces or newlines in any of them).
print(role, m.interface, c.vip_address, c.lvs.mode, c.deploy.config_path, c.deploy.haqueue_bin,
      c.deploy.user, c.keepalived.script_user, "-" if is_director else c.data_dir_of(m), sep="\n")
PY
) || exit 1
{
  read -r role; read -r interface; read -r vip; read -r lvs_mode; read -r config_path
  read -r haqueue_bin; read -r user; read -r script_user; read -r data_dir
} <<<"$facts"
say "$id: role $role, interface $interface, VIP $vip${destdir:+, under $destdir}"

# -- 3. users (and the directors' ipvsadm, to inspect ip_vs)
if [ -z "$destdir" ]; then
  if [ "$role" = director ]; then apt_install ipvsadm; fi
  # TUN real servers clamp the MSS of their SYN-ACKs with an iptables rule.
  if [ "$role" = realserver ] && [ "$lvs_mode" = tun ]; then apt_install iptables; fi
  getent passwd "$user" >/dev/null \
    || run useradd --system --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin "$user"
  if [ "$role" != realserver ]; then
    # keepalived runs its check and notify scripts as this user (enable_script_security).
    getent passwd "$script_user" >/dev/null \
      || run useradd --system --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin "$script_user"
  fi
  run ln -sfn "$venv/bin/haqueue" "$haqueue_bin"
fi

# place SRC DEST MODE [OWNER]: install one file under destdir.
place() {
  local src=$1 dest=$destdir$2 mode=$3 owner=${4:-}
  run install -D -m "$mode" "$src" "$dest"
  if [ -n "$owner" ] && [ -z "$destdir" ]; then run chown "$owner" "$dest"; fi
  say "installed $2"
}

# install_as FILE: the destination its generator wrote in the header.
install_as() {
  local dest
  dest=$(head -n 5 "$1" | sed -n 's/^# install as: \(\/[^ ]*\).*/\1/p')
  [ -n "$dest" ] || die "$1: no '# install as: /PATH' line in its header"
  echo "$dest"
}

# place_rendered FILE: to its header's destination, executable if it is a script.
place_rendered() {
  local mode=0644
  if [ "$(head -c 2 "$1")" = "#!" ]; then mode=0755; fi
  place "$1" "$(install_as "$1")" "$mode"
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# -- 4. the cluster file (it holds the Raft secret: readable by haqueue only)
place "$config" "$config_path" 0640 "root:$user"
if [ "$role" != director ] && [ -z "$destdir" ]; then
  run install -d -m 0750 -o "$user" -g "$user" "$data_dir"
fi

# -- 5. sysctl.d for this role (applied in step 8)
if [ "$role" = director ]; then
  # systemd-modules-load runs before systemd-sysctl at boot: with ip_vs loaded
  # by then, the net.ipv4.vs.* keys of the sysctl.d file apply at boot too.
  printf '# written by ops/install.sh: load ip_vs before sysctl.d is applied\nip_vs\n' >"$work/ip_vs.conf"
  place "$work/ip_vs.conf" /etc/modules-load.d/haqueue-ip_vs.conf 0644
fi
"$python" -m haqueue ops gen-sysctl --config "$config" --role "$role" -o "$work/sysctl" >/dev/null 2>&1 \
  || die "haqueue ops gen-sysctl failed: run it by hand to see why"
sysctl_file=$(install_as "$work/sysctl/60-haqueue-$role.conf")
place_rendered "$work/sysctl/60-haqueue-$role.conf"

# -- 6. keepalived, LVS and systemd files: from --rendered, or rendered here
# find_rendered NAME GENERATOR: the file from --rendered, or render it now.
find_rendered() {
  local name=$1 generator=$2 found
  if [ -n "$rendered" ]; then
    found=$(find "$rendered" -type f -name "$name" | sort)
    [ -n "$found" ] || die "--rendered $rendered: no $name (render it with haqueue ops $generator)"
    [ "$(echo "$found" | wc -l)" -eq 1 ] || die "--rendered $rendered: several $name; pass the subdirectory"
    echo "$found"
    return
  fi
  if [ ! -d "$work/$generator" ]; then
    "$python" -m haqueue ops "$generator" --config "$config" -o "$work/$generator" >/dev/null 2>&1 \
      || die "haqueue ops $generator failed: run it by hand to see why"
  fi
  [ -f "$work/$generator/$name" ] || die "haqueue ops $generator did not render $name"
  echo "$work/$generator/$name"
}

# NAME:GENERATOR for every rendered file this role needs.
case $role in
  node)
    needed=("keepalived-$id.conf:gen-keepalived" haqueue-leader-check.sh:gen-keepalived
            "haqueue-$id.service:gen-systemd" "keepalived-haqueue-$id.conf:gen-systemd") ;;
  realserver)
    # No keepalived here: the directors hold the VIP. The real-server unit first,
    # so the VIP's real-server side is in place before haqueue serves it.
    needed=("lvs-realserver-$id.sh:gen-lvs" "haqueue-lvs-realserver-$id.service:gen-systemd"
            "haqueue-$id.service:gen-systemd") ;;
  director)
    needed=("keepalived-$id.conf:gen-lvs" lvs-director.sh:gen-lvs modprobe-ip_vs.conf:gen-lvs
            "keepalived-haqueue-director-$id.conf:gen-systemd") ;;
esac
units=()
for item in "${needed[@]}"; do
  f=$(find_rendered "${item%%:*}" "${item##*:}")
  place_rendered "$f"
  dest=$(install_as "$f")
  case $dest in
    /etc/systemd/system/*.service) units+=("${dest##*/}") ;;
  esac
done

# -- 7. apply and start everything
if [ -z "$destdir" ]; then
  if [ "$role" = director ]; then
    # After modprobe.d is in place (conn_tab_bits is read at load) and before
    # sysctl (the net.ipv4.vs.* keys appear with the module).
    run /usr/local/sbin/lvs-director.sh start
  fi
  run sysctl -q -e -p "$sysctl_file"
  run systemctl daemon-reload
  for unit in "${units[@]}"; do
    run systemctl enable --now "$unit"
  done
  if [ "$role" != realserver ]; then
    # restart, not start: the package's keepalived may be running an old config.
    run systemctl enable keepalived.service
    run systemctl restart keepalived.service
  fi
fi
say "done: check this host with: haqueue ops check --config $config_path --node $id"
