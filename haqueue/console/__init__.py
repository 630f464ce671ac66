"""The operator's console: tubes and jobs of a running cluster, from a terminal.

`Console` (console.py) finds the leader and runs one operation on it, over
the beanstalkd protocol like any client, so every change goes through the
Raft log and is answered only once committed (docs/design.md I1).
`haqueue tube ...` and `haqueue job ...` (haqueue/cli/tube.py, job.py) are
thin commands over it; errors.py names the outcomes a script can tell apart
by the exit status.
"""
