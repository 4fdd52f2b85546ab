"""``circuitop generate order``: filled in by issue 4."""

from operators.cli._pending import register_pending


def register(problems):
    register_pending(problems, "order", "generate the order data set", "issue 4")
