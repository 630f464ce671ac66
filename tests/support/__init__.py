"""Test helpers shared across test packages (real servers, raw clients)."""
