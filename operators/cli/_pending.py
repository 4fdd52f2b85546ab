"""Placeholder subcommands for issues that have not landed yet: they say so and exit non-zero."""

from __future__ import annotations

import argparse

__all__ = ["register_pending"]


def register_pending(sub: argparse._SubParsersAction, name: str, help_text: str, issue: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=f"{help_text} [not implemented yet: {issue}]")

    def run(args: argparse.Namespace) -> int:
        raise NotImplementedError(f"'{name}' is not implemented yet ({issue})")

    p.set_defaults(func=run)
    return p
