"""The console's outcomes a script can tell apart, each with its exit status.

0 done / found (no exception)
1 NotFound        the job, the tube or a job to peek is not there
2                 bad usage or cluster file (click's usage errors, HaqueueError)
3 Refused         the server answered with an error (DRAINING, BAD_FORMAT, ...)
4 Unreachable     no node of the cluster serves clients within the timeout
5 OutcomeUnknown  the connection broke after a change was sent: it may or may
                  not have been applied (never retried blindly: a put would be
                  made twice)

Plain exceptions: the console does not import click; haqueue/cli/console_options.py
turns them into one line on stderr and the exit status here.
"""

from __future__ import annotations


class ConsoleError(Exception):
    exit_code = 3


class NotFound(ConsoleError):
    exit_code = 1


class Refused(ConsoleError):
    exit_code = 3


class Unreachable(ConsoleError):
    exit_code = 4


class OutcomeUnknown(ConsoleError):
    exit_code = 5


EXIT_CODES = {"done": 0, "not found": NotFound.exit_code, "usage": 2, "refused": Refused.exit_code,
              "unreachable": Unreachable.exit_code, "outcome unknown": OutcomeUnknown.exit_code}
