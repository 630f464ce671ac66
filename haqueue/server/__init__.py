"""One node's asyncio side: leader-only serving, group commit, listeners, timers, the admin port.

One subfolder per front end (beanstalk/, gearman/, ids/); what they share sits here
(docs/architecture.md names every module).
"""
