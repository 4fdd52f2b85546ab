"""Shared by the PDEBench reader tests: count what h5py reads, to check that files are read lazily."""

import h5py
import numpy as np


def counting_reads(monkeypatch) -> list[int]:
    """From now on, append the element count of every h5py dataset read to the returned list."""
    counts = []
    original = h5py.Dataset.__getitem__

    def counted(self, key):
        out = original(self, key)
        counts.append(np.size(out))
        return out

    monkeypatch.setattr(h5py.Dataset, "__getitem__", counted)
    return counts
