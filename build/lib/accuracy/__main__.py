"""`python -m accuracy` is the same as the `opbench` console script."""

import sys

from accuracy.cli.main import main

sys.exit(main())
