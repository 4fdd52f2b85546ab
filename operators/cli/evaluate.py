"""``circuitop evaluate``: filled in by the evaluation issue."""

from operators.cli._pending import register_pending


def register(sub):
    register_pending(sub, "evaluate", "evaluate predictions or a trained run", "issue 3")
