"""``python -m kfs_core.cli``: the `kfs` command (tests and `kfs run` start daemons this way)."""

import sys

from kfs_core.cli import main

sys.exit(main())
