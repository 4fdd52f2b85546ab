"""``circuitop generate swe``: filled in by issue 5."""

from operators.cli._pending import register_pending


def register(problems):
    register_pending(problems, "swe", "generate the swe data set", "issue 5")
