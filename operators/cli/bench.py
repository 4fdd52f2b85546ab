"""``circuitop bench``: filled in by the examples-and-bench issue."""

from operators.cli._pending import register_pending


def register(sub):
    register_pending(sub, "bench", "run the benchmark scripts", "issue 10")
