"""`python -m haqueue` runs the CLI."""

import sys

from haqueue.cli import main

sys.exit(main())
