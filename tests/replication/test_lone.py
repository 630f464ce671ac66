"""A cluster of one (haqueue/replication/lone.py): log, sync, apply, in the loop's thread.

Real files in tmp_path, a real event loop; the crash-and-fault side is covered by
tests/replication/test_storage_faults.py, which runs `haqueue serve` (a lone node).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from haqueue.core import commands as C
from haqueue.config.fsync_policy import DURABLE, NEVER, FsyncPolicy
from haqueue.replication.journal import DurableJournal
from haqueue.replication.lone import LoneReplica
from haqueue.replication.replay import replay_with_tail
from haqueue.config.replication import ReplicationSettings
from haqueue.replication.replica import open_replica

STAMP = 1_700_000_000_000


def put(tube: str = "default", body: bytes = b"x", delay: int = 0) -> tuple:
    return (C.PUT, tube, 0, delay, 60_000, body)


async def snapshot_written(replica: LoneReplica, timeout: float = 10.0) -> None:
    """Until a running snapshot writer's exit has reached the loop (its pidfd is a reader
    there, so the loop must turn): polled, with a deadline."""
    deadline = asyncio.get_running_loop().time() + timeout
    while replica.snapshot_writer.pid:
        assert asyncio.get_running_loop().time() < deadline, "the snapshot writer never finished"
        await asyncio.sleep(0.005)


def run_lone(config: ReplicationSettings, batches: list[list[tuple]]) -> tuple[list, list, LoneReplica]:
    """Open, lead, submit each batch as one entry, stop; what came back."""
    roles: list = []
    outcomes: list = []

    async def main() -> LoneReplica:
        replica = open_replica(config, on_role_change=lambda role, term: roles.append((role, term)),
                               on_fatal=lambda message: roles.append(("fatal", message)))
        replica.start()
        for n, batch in enumerate(batches):
            replica.submit(C.encode_batch(STAMP + n, batch), outcomes.append)
        await asyncio.sleep(0)
        replica.stop()
        return replica

    return roles, outcomes, asyncio.run(main())


def test_a_lone_node_leads_at_once_and_answers_each_entry_as_it_is_submitted():
    roles, outcomes, replica = run_lone(ReplicationSettings("127.0.0.1:0", []),
                                        [[put("a"), put("b", delay=1000)], [(C.TICK,)]])
    assert isinstance(replica, LoneReplica)
    assert roles == [("leader", 1)]
    assert [o.results for o in outcomes] == [[("INSERTED", 1), ("INSERTED", 2)], [("OK",)]]
    assert outcomes[0].effects.woken == {"a"} and outcomes[0].effects.next_deadline == STAMP + 1000
    assert replica.status()["commit_index"] == 2 and replica.is_followed() and replica.read_lease_valid()


def test_what_a_lone_node_logged_is_there_after_a_restart_and_each_start_is_a_new_term(tmp_path):
    config = ReplicationSettings("127.0.0.1:0", [], data_dir=str(tmp_path), policy=DURABLE)
    _, _, first = run_lone(config, [[put(body=b"one")], [put(body=b"two"), put(body=b"three")]])
    roles, outcomes, second = run_lone(config, [[put(body=b"four")]])
    assert roles == [("leader", 2)]
    assert outcomes[0].results == [("INSERTED", 4)]  # ids go on where they were
    assert [job.body for _, job in sorted(second.state.jobs.items())] == [b"one", b"two", b"three", b"four"]
    # The files read as a Raft node's: the offline replay sees every entry committed.
    state, applied, tail = replay_with_tail(str(tmp_path))
    assert (applied, tail) == (3, 0) and state.digest() == second.state.digest()


@pytest.mark.parametrize("policy", [DURABLE, FsyncPolicy(50)], ids=["f0", "f50"])
def test_snapshots_fold_the_journal_and_a_restart_reads_them_back(tmp_path, policy):
    config = ReplicationSettings("127.0.0.1:0", [], data_dir=str(tmp_path), policy=policy, journal_limit=4096)
    body = b"b" * 700

    async def main() -> tuple[str, list[int], int]:
        replica = open_replica(config, on_role_change=lambda *a: None, on_fatal=pytest.fail)
        replica.start()
        written = []  # the size of each snapshot, as it was written
        for n in range(40):
            replica.submit(C.encode_batch(STAMP + n, [put(body=body)]), lambda applied: None)
            await snapshot_written(replica)
            if replica.observations.snapshots > len(written):
                written.append(replica.observations.last_snapshot_bytes)
        digest = replica.state.digest()
        replica.stop()
        return digest, written, replica.observations.last_snapshot_bytes

    digest, written, last_snapshot = asyncio.run(main())
    assert len(written) >= 3
    # Each logged byte paid for at most one snapshot byte (snapshot.journal_due): with
    # -s alone, a snapshot of the whole state for every 4 KiB logged made 3.5 times
    # the 28 KB logged.
    assert sum(written) <= 2 * 40 * 800
    records = DurableJournal(str(tmp_path / "raft.journal"), NEVER)
    assert records.end < max(4096, last_snapshot) + 2 * 800  # folded, not grown
    records._destroy()
    _, _, again = run_lone(config, [])
    assert again.state.digest() == digest and len(again.state.jobs) == 40
    assert replay_with_tail(str(tmp_path))[0].digest() == digest


def test_a_lone_node_whose_snapshot_fails_says_why_and_waits_before_it_tries_again(tmp_path):
    # The same SnapshotWriter as a Raft node's (snapshot_writer.py): a writer that
    # cannot write is not forked again after every entry.
    from haqueue import events

    events.clear()
    os.mkdir(tmp_path / "raft.snapshot.writing")  # where the writer writes first: open() fails, EISDIR
    config = ReplicationSettings("127.0.0.1:0", [], data_dir=str(tmp_path), policy=NEVER, journal_limit=4096)

    async def main() -> LoneReplica:
        replica = open_replica(config, on_role_change=lambda *a: None, on_fatal=pytest.fail)
        replica.start()
        replica.snapshot_writer.clock = lambda: 0.0  # time stands still: the backoff never ends
        for n in range(40):
            replica.submit(C.encode_batch(STAMP + n, [put(body=b"b" * 700)]), lambda applied: None)
            await snapshot_written(replica)
        replica.stop()
        return replica

    replica = asyncio.run(main())
    assert (replica.observations.snapshot_failures, replica.observations.snapshots) == (1, 0)
    (failed,) = [e for e in events.recent() if e["event"] == "snapshot_failed"]
    assert failed["reason"] == f"cannot write the snapshot ({tmp_path}/raft.snapshot.writing): Is a directory"
    assert failed["retry_in"] == 1.0


def test_a_data_dir_written_by_a_raft_lone_node_is_read_by_a_lone_replica(tmp_path):
    """Upgrading: a lone node's files from before lone.py (pysyncobj's) carry on.
    tests/testdata/raft-lone-node/ is what a ReplicatedQueue without partners wrote
    (commit 1572b59, the last that could build one) for three puts of b"old"."""
    shutil.copytree(Path(__file__).resolve().parent.parent / "testdata" / "raft-lone-node", tmp_path,
                    dirs_exist_ok=True)
    _, outcomes, lone = run_lone(ReplicationSettings("127.0.0.1:0", [], data_dir=str(tmp_path), policy=DURABLE),
                                 [[put(body=b"new")]])
    assert outcomes[0].results == [("INSERTED", 4)]
    assert [job.body for _, job in sorted(lone.state.jobs.items())] == [b"old"] * 3 + [b"new"]


def test_a_lone_node_never_loads_pysyncobj_or_cryptography(tmp_path):
    code = f"""
import asyncio, sys
from haqueue.config.replication import ReplicationSettings
from haqueue.replication.replica import open_replica
import haqueue.server.app, haqueue.cli.serve
async def main():
    replica = open_replica(ReplicationSettings("127.0.0.1:0", [], data_dir={str(tmp_path)!r}),
                           on_role_change=lambda *a: None, on_fatal=print)
    replica.start()
    replica.stop()
asyncio.run(main())
print(sorted(m for m in sys.modules if m.split(".")[0] in ("pysyncobj", "cryptography")))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_compacted_journal_without_its_snapshot_refuses_to_start(tmp_path):
    config = ReplicationSettings("127.0.0.1:0", [], data_dir=str(tmp_path), policy=DURABLE, journal_limit=4096)

    async def fill() -> None:
        replica = open_replica(config, on_role_change=lambda *a: None, on_fatal=pytest.fail)
        replica.start()
        for n in range(40):
            replica.submit(C.encode_batch(STAMP + n, [put(body=b"b" * 700)]), lambda applied: None)
            await snapshot_written(replica)
        replica.stop()

    asyncio.run(fill())
    os.unlink(tmp_path / "raft.snapshot")
    from haqueue.replication.snapshot import SnapshotError

    with pytest.raises(SnapshotError, match="starts at entry .* but there is no snapshot"):
        LoneReplica(config, on_role_change=print, on_fatal=print)
