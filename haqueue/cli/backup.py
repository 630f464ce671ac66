"""`haqueue backup` and `haqueue restore`: a copy of the committed state, and a new cluster from it.

backup:  find the serving leader (the cluster file's nodes, or --address for a
         lone node's admin port), GET /backup (server/backup.py), write the file
         next to -o as FILE.partial while checking its length and checksum,
         then rename it into place: -o never names a partial file.
restore: read and check a backup (backup/fileformat.py), turn it into the
         state of a new cluster on this host's clock (backup/records.py), and
         write it into each empty data directory given (backup/restore.py).
docs/operations.md, "Backup and restore", is the runbook; docs/backup.md the format.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import time
from urllib.parse import urlsplit

import click

from haqueue.cli.user_errors import HaqueueError, load_cluster_file

READ_TIMEOUT = 600.0  # seconds one read of the answer may wait (a big state's fork and pickling)


@click.command("backup")
@click.option("--config", "config_path", metavar="FILE", default=None,
              help="The cluster file: its leader is asked.")
@click.option("--address", metavar="HOST:PORT", default=None,
              help="A node's admin address instead of a cluster file (a lone node).")
@click.option("--token", default=None, help="The admin token (default: the cluster file's admin_token).")
@click.option("-o", "--output", "output", metavar="FILE", required=True, type=click.Path(dir_okay=False),
              help="Where to write the backup.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=READ_TIMEOUT, show_default=True,
              help="Seconds to wait for the leader's answer.")
def backup(config_path, address, token, output, timeout) -> None:
    """Write a consistent copy of the cluster's committed state to -o FILE, taken from the serving leader."""
    if (config_path is None) == (address is None):
        raise HaqueueError("backup: give --config FILE or --address HOST:PORT (one of them)")
    if config_path is not None:
        cluster = load_cluster_file(config_path)
        token = token if token is not None else cluster.admin_token
        where = _leader_admin(cluster)
    else:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise HaqueueError(f"backup: --address {address!r} is not HOST:PORT")
        where = (host.strip("[]"), int(port))
    fields, size = _download(where, token, output, timeout)
    taken = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(fields.get("taken_at_ms", 0) / 1000))
    click.echo(f"backup of entry {fields.get('index')} (term {fields.get('term')}) taken on "
               f"{fields.get('node') or where[0]} at {taken}: {output}, {size} bytes")


def _leader_admin(cluster) -> tuple[str, int]:
    from haqueue import admin_client

    for node in cluster.nodes:
        if admin_client.is_leader(node.address, node.admin_port, timeout=1.0):
            return node.address, node.admin_port
    raise HaqueueError("backup: no node of the cluster answers /leader: is a leader serving?")


def _download(where: tuple[str, int], token: str | None, output: str, timeout: float,
              redirects: int = 1) -> tuple[dict, int]:
    """GET /backup into OUTPUT.partial, checked, renamed to OUTPUT: (header fields, bytes)."""
    from haqueue.backup import fileformat

    host, port = where
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    partial = output + ".partial"
    try:
        try:
            conn.request("GET", "/backup", headers={"Authorization": f"Bearer {token}"} if token else {})
            response = conn.getresponse()
            if response.status == 503 and redirects and response.getheader("Location"):
                moved = urlsplit(response.getheader("Location"))
                if moved.hostname and moved.port:
                    return _download((moved.hostname, moved.port), token, output, timeout, redirects - 1)
            if response.status != 200:
                reason = response.read(300).decode(errors="replace").strip()
                raise HaqueueError(f"backup: {host}:{port} answered {response.status}: {reason}")
            first = response.readline(fileformat.HEADER_MAX)
            try:
                fields, _ = fileformat.read_header(first)
            except fileformat.BackupFileError as exc:
                raise HaqueueError(f"backup: {host}:{port} sent no backup: {exc}") from None
            digest, got = hashlib.sha256(), 0
            with open(partial, "wb") as out:
                out.write(first)
                while chunk := response.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
                    got += len(chunk)
                out.flush()
                os.fsync(out.fileno())
        except OSError as exc:  # socket errors, timeouts, and the file's own
            raise HaqueueError(f"backup: {exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")
                               ) from None
        except http.client.HTTPException as exc:
            raise HaqueueError(f"backup: {host}:{port}: bad HTTP answer ({type(exc).__name__})") from None
        if got != fields["length"] or digest.hexdigest() != fields["sha256"]:
            raise HaqueueError(f"backup: the answer was cut off or damaged ({got} of {fields['length']} bytes, "
                               f"checksum {'matches' if digest.hexdigest() == fields['sha256'] else 'differs'})")
        os.replace(partial, output)
        return fields, len(first) + got
    finally:
        conn.close()
        if os.path.exists(partial):
            os.unlink(partial)


@click.command("restore")
@click.argument("backup_file", metavar="FILE", type=click.Path(dir_okay=False))
@click.option("-b", "--data-dir", "data_dirs", multiple=True, required=True, type=click.Path(file_okay=False),
              help="An empty data directory to prepare (repeat for several).")
@click.option("--skip-ids", default="auto", show_default=True, metavar="auto|N",
              help="Ids to leave out above the backup's: auto counts those an old cluster still serving "
                   "could have handed out since the backup; 0 when it took no writes after it.")
def restore(backup_file, data_dirs, skip_ids) -> None:
    """Prepare data directories from which a new cluster's nodes start with FILE's state."""
    from haqueue.backup import fileformat, records, restore as restoring
    from haqueue.server.batcher import wall_ms

    if skip_ids != "auto" and not (skip_ids.isdigit() and int(skip_ids) < 2**62):
        raise HaqueueError(f"restore: --skip-ids {skip_ids!r} is not auto or a count")
    try:
        with open(backup_file, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise HaqueueError(f"restore: {backup_file}: {exc.strerror or exc}") from None
    try:
        state_records, fields = fileformat.decode(data)
    except fileformat.BackupFileError as exc:
        raise HaqueueError(f"restore: {backup_file}: {exc}") from None
    now = wall_ms()
    taken_at = fields.get("taken_at_ms") if type(fields.get("taken_at_ms")) is int else 0
    skip = records.auto_skip(taken_at, now) if skip_ids == "auto" else int(skip_ids)
    try:
        for directory in data_dirs:
            restoring.check_empty(directory)
        state = restoring.restored_state(state_records, now, skip)
        index = fields.get("index") if type(fields.get("index")) is int else 0
        data = restoring.snapshot_bytes(state, index)
        for directory in data_dirs:
            restoring.write(directory, data)
    except restoring.RestoreError as exc:
        raise HaqueueError(f"restore: {exc}") from None
    except OSError as exc:
        raise HaqueueError(f"restore: {exc.filename or ''}: {exc.strerror or exc}") from None
    counts = records.summary(state_records)
    click.echo(f"restored {counts['jobs']} jobs (ready {counts['ready']}, delayed {counts['delayed']}, "
               f"reserved {counts['reserved']}, buried {counts['buried']}) in {counts['tubes']} tubes "
               f"({counts['paused_tubes']} paused), {counts['id_counters']} id counters, "
               f"{counts['gearman_jobs']} Gearman jobs")
    click.echo(f"ids skip {skip}: next job id {state.next_id}; state digest {state.digest()[:16]}")
    for directory in data_dirs:
        click.echo(f"ready: {directory}")
