"""Tests of the generated operations files (haqueue/ops, ops/): golden renders, host checks, keepalived and LVS."""
