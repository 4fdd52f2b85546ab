"""Torch datasets over a :class:`pde_data.Source`: windows, pairs, samples, labels, sequences, the
normalizers and the loader's shared batch buffers; each reads the one :class:`~pde_data.datasets.batch.Batch`.
Imports ``pde_data.core`` and ``pde_data.formats``."""
