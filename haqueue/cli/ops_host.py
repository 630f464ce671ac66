"""`haqueue ops gen-sysctl | gen-bonding | check`: the host side of the ops toolkit.

Thin commands over haqueue.ops.sysctl, .bonding and .check; the `ops` group
(cli/ops.py) adds `COMMANDS` beside its renderers, and both halves share the
options in cli/options.py. Every command loads and validates the cluster file
and its own options before writing anything; every problem ends as one line
(HaqueueError), never a traceback.
"""

from __future__ import annotations

import json

import click

from haqueue.cli.options import config_option, emit, load, made_by, node_option, one_line_errors, output_option
from haqueue.ops import bonding, check, sysctl


@click.command("gen-sysctl")
@config_option
@click.option("--role", type=click.Choice(sysctl.ROLES + ("all",)), default="all", show_default=True,
              help="The host role to render for (queue node, LVS director, LVS real server).")
@output_option
@click.pass_context
def gen_sysctl(ctx: click.Context, config_path: str, role: str, output: str) -> None:
    """Render sysctl.d files per host role."""
    cluster = load(config_path)
    roles = sysctl.ROLES if role == "all" else (role,)
    emit(sysctl.render_all(cluster, roles, made_by(ctx)), output)


@click.command("gen-bonding")
@config_option
@node_option
@click.option("--slaves", required=True, metavar="IF,IF",
              help="The physical interfaces to bond, e.g. eth1,eth2 (the first is the primary).")
@click.option("--mode", type=click.Choice(bonding.MODES), default="active-backup", show_default=True,
              help="active-backup works with any switch; 802.3ad needs a LACP LAG on the switch.")
@click.option("--miimon", type=int, default=bonding.DEFAULT_MIIMON_MS, show_default=True,
              help="Link monitoring interval in milliseconds.")
@click.option("--format", "fmt", type=click.Choice(bonding.FORMATS + ("all",)), default="all",
              show_default=True, help="ifupdown, systemd-networkd or RHEL ifcfg files.")
@output_option
@click.pass_context
@one_line_errors(bonding.BondingError, check.CheckError)
def gen_bonding(ctx: click.Context, config_path: str, node_id: str | None, slaves: str, mode: str,
                miimon: int, fmt: str, output: str) -> None:
    """Render NIC bonding: ifupdown, networkd, ifcfg.

    The bond is each member's `interface` in the cluster file (e.g. bond0):
    its address and the VIP live there.
    """
    cluster = load(config_path)
    targets = [check.find_member(cluster, node_id)] if node_id else list(check.members(cluster))
    names = [s.strip() for s in slaves.split(",")]
    specs = [bonding.bond_spec(cluster, m, names, mode, miimon) for m in targets]
    formats = bonding.FORMATS if fmt == "all" else (fmt,)
    command = made_by(ctx)
    emit([f for spec in specs for f in bonding.render_files(spec, formats, command)], output)


@click.command("check")
@config_option
@click.option("--node", "node_id", metavar="ID",
              help="Which member this host is (default: the one whose address is configured here).")
@click.option("--role", type=click.Choice(sysctl.ROLES),
              help="Override the role (default: director for [[directors]], realserver when the "
                   "cluster has directors, else node).")
@click.option("--timeout", type=click.FloatRange(0.05, 30), default=check.DEFAULT_LEADER_TIMEOUT,
              show_default=True, help="Seconds to wait for the node's /leader endpoint.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
@one_line_errors(check.CheckError)
def check_host(ctx: click.Context, config_path: str, node_id: str | None, role: str | None,
               timeout: float, as_json: bool) -> None:
    """Check this host against the cluster file.

    Interface, addresses, the VIP against the node's Raft role, the role's
    sysctls, keepalived, ip_vs and bonds. Prints a table (or --json) and exits
    1 when any row FAILs.
    """
    cluster = load(config_path)
    links = check.read_links()
    member = (check.find_member(cluster, node_id) if node_id
              else check.detect_member(cluster, check.local_addresses(links)))
    role = role or check.default_role(cluster, member)
    facts = check.gather(cluster, member, role, timeout=timeout, links=links)
    rows = check.evaluate(cluster, member, role, facts)
    if as_json:
        click.echo(json.dumps({
            "member": member.id,
            "role": role,
            "ok": not check.failed(rows),
            "rows": [{"check": r.check, "status": r.status, "detail": r.detail} for r in rows],
        }, indent=2))
    else:
        click.echo(check.format_table(rows), nl=False)
    if check.failed(rows):
        ctx.exit(1)


COMMANDS = (gen_sysctl, gen_bonding, check_host)
