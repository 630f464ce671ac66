"""Tests of the queue core (haqueue/core): pure, no network."""
