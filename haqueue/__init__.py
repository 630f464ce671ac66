"""haqueue: a highly available, beanstalkd-compatible job queue replicated with Raft."""

__version__ = "0.1.0"
