"""``circuitop generate ns``: filled in by issue 5."""

from operators.cli._pending import register_pending


def register(problems):
    register_pending(problems, "ns", "generate the ns data set", "issue 5")
