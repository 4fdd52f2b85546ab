"""Open PDEBench HDF5 files lazily as Datasets of the data model (``docs/specs/data.md``).

=============  =============================================  ====================================
layout         file keys                                      Dataset
=============  =============================================  ====================================
``darcy``      ``nu`` (N,X,Y), ``tensor`` (N,1,X,Y)           ``a``, ``u`` (sample, x, y)
``group``      groups ``0000``... with ``data`` (T,X,Y,C),    one variable per channel
               ``grid/x``, ``grid/y``, ``grid/t``, ``config``  (sample, time, x, y); config numbers
                                                              as (sample,) coordinates
``diff-react`` as ``group``, file axes (T, y, x, C)           ``u``, ``v`` (sample, time, x, y)
``1d``         ``tensor`` (N,T,X), ``t-coordinate`` (T+1,)    ``u`` (sample, time, x)
``cfd``        ``density``, ``pressure``, ``Vx``[, Vy, Vz]     same names (sample, time, x[, y, z])
``ns_incom``   ``velocity`` (N,T,X,Y,2), ``particles``         ``vx``, ``vy``, ``particles``
               (N,T,X,Y,1), ``force`` (N,X,Y,2), ``t`` (N,T)   (sample, time, x, y); ``force_x``,
                                                              ``force_y`` (sample, x, y)
``cno_poisson`` groups ``Sample_0``... with ``input``,        ``f``, ``u`` (sample, x, y);
               ``output`` (X,Y); scalars ``min_inp``,          the four scalars in attrs
               ``max_inp``, ``min_out``, ``max_out``
=============  =============================================  ====================================

Each layout's keys are read by :mod:`pde_data.formats.pdebench_layouts`. Nothing is read at open time except
coordinates and attributes: every variable is an ``xarray`` lazily indexed array over the h5py file, so ``ds.isel(sample=i).values`` reads sample
``i`` only (one h5py read per sample), and each slice is checked for NaN when it is read. The
``t-coordinate`` of the single-file layouts has one entry more than there are frames: ``time`` is
its first T entries and the last is kept in ``attrs["t_final"]``.

``ns_incom`` (PDEBench 2D incompressible Navier-Stokes, ``ns_incom_inhom_2d_512-*.h5``) stores no grid:
``x``, ``y`` are *assumed* cell centres ``(i + 0.5) / n`` on [0, 1) (their ``grid`` attribute says so).
``t`` is per sample: when all samples share it, ``time`` is that (time,) vector; when they differ,
``time`` is the data model's irregular-sampling coordinate of dims (sample, time) holding every
sample's times, and ``attrs["time_note"]`` says so (nothing is dropped). The velocity channels and
the force channels are lazy views of one channel each of the file's ``velocity`` / ``force``.

``cno_poisson`` (CNO's ``PoissonData_64x64_IN.h5`` / ``_OUT.h5``) keeps samples in the order of
``i`` in ``Sample_{i}`` (numerically: ``Sample_10`` after ``Sample_9``); if the ``i`` are not
``0..N-1`` they are kept as a (sample,) coordinate ``sample_id``. The file stores no grid: ``x``,
``y`` are *assumed* points ``p / (n - 1)`` on [0, 1], boundaries included, as in
:func:`pde_data.generate.poisson.generate_poisson`.
"""

from __future__ import annotations

import h5py

from pde_data.formats.pdebench_layouts import LAYOUTS, Lazy, detect_layout, read_layout

__all__ = ["read_pdebench", "LAYOUTS"]


def read_pdebench(f: h5py.File, path: str, stamp: tuple, *, layout: str | None = None,
                  variables: tuple[str, ...] | None = None) -> Lazy:
    """The PDEBench file open as ``f`` (:func:`pde_data.formats.h5lazy.opening`) as a lazy Dataset with
    ``attrs["pdebench_layout"]``, and the HDF5 source of each variable (``layout`` and ``variables`` as
    :class:`pde_data.formats.opener.ReadOptions`)."""
    layout = layout or detect_layout(f, path)
    ds, sources = read_layout(f, path, stamp, layout, variables)
    ds.attrs["pdebench_layout"] = layout
    return ds, sources
