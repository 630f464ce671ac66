"""haqueue's test suite: a package, so test helpers are imported by module path (`tests.support…`)."""
