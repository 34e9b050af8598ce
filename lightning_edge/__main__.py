import sys

from lightning_edge.cli import main

sys.exit(main())
