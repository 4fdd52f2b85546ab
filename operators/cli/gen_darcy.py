"""``circuitop generate darcy``: filled in by issue 4."""

from operators.cli._pending import register_pending


def register(problems):
    register_pending(problems, "darcy", "generate the darcy data set", "issue 4")
