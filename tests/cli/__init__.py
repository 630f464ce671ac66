"""Tests of the command line (haqueue/cli): start-up, progress, cluster-file commands, renders."""
