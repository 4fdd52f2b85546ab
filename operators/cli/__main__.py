"""``python -m operators.cli``: the ``circuitop`` command (guarded: Dask's spawned workers import this module)."""

import sys

from operators.cli import main

if __name__ == "__main__":
    sys.exit(main())
