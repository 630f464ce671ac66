"""Tests of the server edge (haqueue/server): sessions, batching, limits, metrics, over real sockets where it matters."""
