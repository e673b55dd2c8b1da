"""``python -m jobs ARGS`` == ``hgraph ARGS`` (the console script's entry point is :func:`jobs.cli.main`)."""

import sys

from jobs.cli import main

sys.exit(main())
