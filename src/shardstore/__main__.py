"""``python -m shardstore ...`` runs the ``shardstore`` command."""

import sys

from .cli import main

sys.exit(main())
