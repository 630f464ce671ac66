"""The queue state machine: pure, deterministic, standard library only.

Nothing in this package reads a clock, a random source, the network or the
disk: time arrives as the `now` argument of every transition (docs/design.md I2).
"""
