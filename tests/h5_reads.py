"""Shared by the PDEBench reader tests: count what h5py reads, to check that files are read lazily."""

import h5py
import numpy as np


def counting_reads(monkeypatch) -> list[int]:
    """From now on, append the element count of every h5py dataset read (``dset[key]`` or
    ``dset.read_direct``) to the returned list."""
    counts = []
    original, original_direct = h5py.Dataset.__getitem__, h5py.Dataset.read_direct

    def counted(self, key):
        out = original(self, key)
        counts.append(np.size(out))
        return out

    def counted_direct(self, dest, source_sel=None, dest_sel=None):
        original_direct(self, dest, source_sel, dest_sel)
        counts.append(np.size(dest if dest_sel is None else dest[dest_sel]))

    monkeypatch.setattr(h5py.Dataset, "__getitem__", counted)
    monkeypatch.setattr(h5py.Dataset, "read_direct", counted_direct)
    return counts
