"""`python -m conveyor.shell.cli ...`: the `conveyor` command, run by this interpreter."""

import sys

from .command import main

sys.exit(main())
