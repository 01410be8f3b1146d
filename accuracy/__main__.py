"""`python -m accuracy` is the same as the `opbench` console script."""

import sys

from accuracy.cli import main

sys.exit(main())
