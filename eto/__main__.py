"""``python -m eto``: the command line."""

import sys

from eto.cli import main

sys.exit(main())
