"""The versions of Python and of the packages that decide a result's numerics (recorded in manifests)."""

from __future__ import annotations

import platform
from importlib import metadata

import torch

__all__ = ["PACKAGES", "package_versions"]

#: the packages whose versions a manifest records
PACKAGES = ("circuitop", "torch", "numpy", "scipy", "xarray", "netCDF4", "h5py", "dask", "distributed")


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """The versions of Python and of the packages ``names`` (default :data:`PACKAGES`; None where one is not
    installed). torch's is ``torch.__version__``, build tag included (``+cpu``, ``+cu130``: the build decides
    the numerics; some wheels' metadata leave the tag out)."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = torch.__version__ if name == "torch" else metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out
