"""``--storage-option KEY=VALUE`` of every command that reads data (``info``, ``train``, ``evaluate``,
``predict``): fsspec's storage options of the URLs the command opens (:mod:`pde_data.core.remote`). A dotted key
makes a nested option (``client_kwargs.region_name=eu-west-1``). The secret ones (keys, tokens, passwords)
live in this process only; ``train`` stores the others in the run's spec, so ``--resume`` and ``evaluate``
reopen its data with them (and with the secrets given again, or the environment's)."""

from __future__ import annotations

import argparse

from pde_data.core import remote

__all__ = ["add_storage_option", "use_storage_options"]


def add_storage_option(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    p.add_argument("--storage-option", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                   help="a storage option of a URL's protocol (fsspec's storage_options; repeatable), e.g. "
                        "endpoint_url=http://host:9000 for s3://; credentials may come from the environment "
                        "instead, and are never written to the run's files")


def use_storage_options(args: argparse.Namespace) -> dict:
    """Make ``--storage-option`` the options of every URL this command opens; returns them without the secret
    ones (what a run may store).

    Raises:
        ValueError: an option that is not KEY=VALUE (one line naming it).
    """
    pairs = {}
    for text in getattr(args, "storage_option", None) or []:
        try:
            key, value = remote.parse_option(text)
        except ValueError as exc:
            raise ValueError(f"--storage-option: {exc}") from None
        pairs[key] = value
    options = remote.nested(pairs)
    remote.set_default(options)
    return remote.public(options)
