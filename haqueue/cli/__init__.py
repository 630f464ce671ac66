"""The `haqueue` command line: one module per command group.

`main` is the console script's entry point. It imports nothing heavy itself, so that
`haqueue serve` can listen before click and the server are loaded (haqueue/cli/early.py);
a plain `serve` command line, read there, then starts its node without loading click at
all (haqueue/cli/node_start.py).
`beanstalkd_main` is `haqueue-beanstalkd`: `haqueue serve` under beanstalkd's command
line, for anything that starts beanstalkd by path with its flags (a client library's
test harness with $BEANSTALKD_PATH, a systemd unit).
"""

from __future__ import annotations

import gc
import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["serve"]:
        # No collector passes while the server is imported: the node's collector
        # policy freezes what start-up made and turns it back on as the server starts
        # running (haqueue/server/gc_policy.py, CollectorPolicy.start).
        gc.disable()
        from haqueue.cli.early import listen_early

        plain = listen_early(args[1:])
        if plain is not None:
            from haqueue.cli.node_start import serve_plain

            return serve_plain(plain)
    from haqueue.cli.main import main as run

    return run(args)


def beanstalkd_main() -> int:
    return main(["serve", *sys.argv[1:]])
