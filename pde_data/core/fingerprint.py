"""A fingerprint of a data source that does not depend on its path: layout, sizes, dtypes and a digest.

The digest is a sha256 over a few sample slices (samples ``0``, ``n // 2`` and ``n - 1``; of every data
variable in sorted order, the first frame, or the whole sample when there is no ``time`` dim) and over
the coordinates that do not involve ``sample``. Only those slices are read, never the whole file, so
a moved or copied file has the same fingerprint while a changed one (another sample count, dtype, or a
value in a fingerprinted slice) does not. A fingerprint is stored as plain str/int/list values
(:meth:`Fingerprint.to_state`), so it fits in JSON and in ``weights_only`` torch checkpoints.

Example:
    >>> saved = Fingerprint.from_state(ckpt["spec"]["data"]["fingerprint"])
    >>> for line in saved.differences(pde_data.open_source("darcy.nc").fingerprint()):
    ...     print(line)                     # e.g. "sizes: sample 64 vs 32"
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import xarray as xr

from pde_data.core.model import SAMPLE, TIME

__all__ = ["Fingerprint", "fingerprint"]

_STATE_KEYS = ("format", "sizes", "dtypes", "digest")


@dataclass(frozen=True)
class Fingerprint:
    """What identifies a data source independent of its path.

    Args:
        format: the format of the file (:attr:`pde_data.Source.format`); for a Dataset alone its
            ``attrs["source_format"]``, else ``"pdebench:<attrs["pdebench_layout"]>"`` (as the Source of that
            file says), else ``"netcdf"``.
        sizes: ``((dim, length), ...)`` sorted by dim name.
        dtypes: ``((variable, dtype), ...)`` of the data variables, sorted by name (e.g. ``("u", "float32")``).
        digest: sha256 hex digest of the sample slices and the non-sample coordinates.
    """

    format: str
    sizes: tuple[tuple[str, int], ...]
    dtypes: tuple[tuple[str, str], ...]
    digest: str

    def differences(self, other: "Fingerprint") -> list[str]:
        """Human-readable differences from ``self`` to ``other``; empty when the two are equal.

        Items read ``"sizes: sample 64 vs 32"``, ``"dtypes: u float32 vs float64"``, ``"format: netcdf vs
        pdebench:darcy"``; ``"content of sample slices differs"`` is named only when sizes and dtypes
        agree (with other sizes the digests cover other slices and say nothing more).
        """
        items = [f"format: {self.format} vs {other.format}"] if self.format != other.format else []
        items += _mapping_differences("sizes", dict(self.sizes), dict(other.sizes))
        items += _mapping_differences("dtypes", dict(self.dtypes), dict(other.dtypes))
        if self.digest != other.digest and (self.sizes, self.dtypes) == (other.sizes, other.dtypes):
            items.append("content of sample slices differs")
        return items

    def to_state(self) -> dict[str, object]:
        """``{"format": str, "sizes": [[dim, n], ...], "dtypes": [[name, dtype], ...], "digest": str}``."""
        return {"format": self.format, "sizes": [[d, n] for d, n in self.sizes],
                "dtypes": [[v, t] for v, t in self.dtypes], "digest": self.digest}

    @classmethod
    def from_state(cls, state: dict[str, object]) -> "Fingerprint":
        """Inverse of :meth:`to_state` (from JSON or a checkpoint).

        Raises:
            ValueError: a key is missing or a value does not have the form :meth:`to_state` writes.
        """
        missing = [k for k in _STATE_KEYS if k not in state]
        if missing:
            raise ValueError(f"fingerprint state: expected keys {list(_STATE_KEYS)}; missing {missing}")
        try:
            sizes = tuple((str(d), int(n)) for d, n in state["sizes"])
            dtypes = tuple((str(v), str(t)) for v, t in state["dtypes"])
        except (TypeError, ValueError):
            raise ValueError("fingerprint state: expected 'sizes' and 'dtypes' as lists of [name, value] pairs, "
                             f"found {state['sizes']!r} and {state['dtypes']!r}") from None
        return cls(str(state["format"]), sizes, dtypes, str(state["digest"]))


def _mapping_differences(label: str, mine: dict, theirs: dict) -> list[str]:
    """``"label: key a vs b"`` for each key whose values differ (``absent`` where a key is missing)."""
    return [f"{label}: {key} {mine.get(key, 'absent')} vs {theirs.get(key, 'absent')}"
            for key in sorted(set(mine) | set(theirs)) if mine.get(key) != theirs.get(key)]


def _source_format(ds: xr.Dataset) -> str:
    layout = ds.attrs.get("pdebench_layout")
    return str(ds.attrs.get("source_format") or (f"pdebench:{layout}" if layout else "netcdf"))


def _as_bytes(values: np.ndarray) -> bytes:
    """Values as bytes independent of the machine: little-endian numbers, text for strings and objects."""
    values = np.asarray(values)
    if values.dtype.kind in "OSUV":
        return repr(values.tolist()).encode()
    return np.ascontiguousarray(values.astype(values.dtype.newbyteorder("<"), copy=False)).tobytes()


def _update(digest: "hashlib._Hash", label: str, values: np.ndarray) -> None:
    """Feed a labelled array (its name, shape and dtype kind too) into ``digest``."""
    values = np.asarray(values)
    digest.update(f"{label}|{values.shape}|{values.dtype.kind}{values.dtype.itemsize}|".encode())
    digest.update(_as_bytes(values))


def _slice(da: xr.DataArray, sample: int) -> np.ndarray:
    """The first frame (or the whole of it without ``time``) of sample ``sample`` of ``da``, read alone."""
    where = {SAMPLE: sample} if SAMPLE in da.dims else {}
    if TIME in da.dims and da.sizes[TIME] > 0:
        where[TIME] = 0
    return da.isel(where).values


def _fingerprint_samples(n: int) -> list[int]:
    """Samples ``0``, ``n // 2`` and ``n - 1``, deduplicated and sorted (none when ``n == 0``)."""
    return sorted({0, n // 2, n - 1}) if n > 0 else []


def _digest(ds: xr.Dataset) -> str:
    """sha256 over the sample slices of every data variable and over the non-sample coordinates."""
    digest = hashlib.sha256()
    names = sorted(str(v) for v in ds.data_vars)
    for i in _fingerprint_samples(ds.sizes.get(SAMPLE, 0)):
        for name in (v for v in names if SAMPLE in ds[v].dims):
            _update(digest, f"{name}[{i}]", _slice(ds[name], i))
    for name in (v for v in names if SAMPLE not in ds[v].dims):  # no sample dim: one slice of its own
        _update(digest, name, _slice(ds[name], 0))
    for name in sorted(str(c) for c in ds.coords if SAMPLE not in ds.coords[c].dims):
        _update(digest, f"coord {name}", ds.coords[name].values)
    return digest.hexdigest()


def fingerprint(ds: xr.Dataset, *, format: str | None = None) -> Fingerprint:  # noqa: A002
    """The :class:`Fingerprint` of a (lazy) Dataset; reads only the slices the digest covers.

    Args:
        ds: a Dataset of the data model (an opened file's: :meth:`pde_data.Source.fingerprint`).
        format: the file's format (default: from ``ds.attrs``, see :class:`Fingerprint`).

    Example:
        >>> fingerprint(pde_data.open_source("a.nc").dataset) == fingerprint(pde_data.open_source("copy-of-a.nc").dataset)
        True
    """
    if not isinstance(ds, xr.Dataset):
        raise TypeError(f"fingerprint: expected an xarray.Dataset, found {type(ds).__name__}")
    sizes = tuple(sorted((str(d), int(n)) for d, n in ds.sizes.items()))
    dtypes = tuple(sorted((str(v), str(ds[v].dtype)) for v in ds.data_vars))
    return Fingerprint(format or _source_format(ds), sizes, dtypes, _digest(ds))
