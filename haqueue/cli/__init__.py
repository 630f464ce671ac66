"""The `haqueue` command line: one module per command group."""
