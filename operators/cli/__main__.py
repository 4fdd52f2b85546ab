"""``python -m operators.cli``: the ``circuitop`` command (guarded: Dask's spawned workers import this module)."""

from operators.cli import run

if __name__ == "__main__":
    run()
