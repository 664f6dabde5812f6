"""``python -m dagster_lance_partitioned.cli``: the ``lance-partitioned`` command."""

import sys

from . import main

sys.exit(main())
