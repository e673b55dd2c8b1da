import sys

from hgraph.cli import main

sys.exit(main())
