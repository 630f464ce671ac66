"""`python -m haqueue` runs the CLI."""

import sys

from haqueue.cli.main import main

sys.exit(main())
