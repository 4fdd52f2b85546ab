"""``circuitop train``: filled in by the operators issue."""

from operators.cli._pending import register_pending


def register(sub):
    register_pending(sub, "train", "train a neural operator", "issue 9")
