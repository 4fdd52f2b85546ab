"""``circuitop generate poisson``: filled in by issue 4."""

from operators.cli._pending import register_pending


def register(problems):
    register_pending(problems, "poisson", "generate the poisson data set", "issue 4")
