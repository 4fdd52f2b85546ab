"""Training on samples generated as it goes, with no files: the data of a run whose ``data.generate`` names a
generator (:data:`pde_data.generate.registry.GENERATORS`; the torch solvers run on the training device).

==================  ==========================================================================================
set                 samples
==================  ==========================================================================================
training, epoch e   ``[e·N, (e+1)·N)`` of the stream of seed ``data.generate_seeds[0]`` (``N``: samples per epoch)
validation, test    the ``data.split`` sizes of a fixed set: ``data.path`` if given, else ``split[1] + split[2]``
                    samples of seed ``data.generate_seeds[1]``, made once when the run starts
==================  ==========================================================================================

Sample ``i`` of a stream is a function of the seed, ``i`` and the generator's parameters alone
(:func:`pde_data.generate.registry.make_samples`), so every epoch sees new samples, a resumed run sees the very samples
an uninterrupted one does, and ``evaluate`` makes the fixed set again bit for bit (its fingerprint is stored).
The normalizers are fitted on epoch 0's samples (the training data, as a file run's are on its training split).
An epoch's samples are read like a cached file's (:meth:`~operators.training.tasks.Task.dataset` over an
in-memory Dataset); with ``loading.workers`` > 0 (the default) a background thread makes epoch ``e + 1``'s samples
while epoch ``e`` trains. Under ``torchrun`` the processes share the making: each simulates its part of every
epoch, and the parts are gathered, so ``P`` processes make an epoch about ``P`` times as fast.

Example:
    >>> spec = RunSpec(data=DataSpec(generate="ns", generator={"n_sim": 64, "t_final": 5.0},
    ...                              samples_per_epoch=64), task=TaskSpec(window=1), model=ModelSpec("fno"))
    >>> train_run(spec, "runs/ns-online")
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from concurrent.futures import Future
from typing import Iterator

import numpy as np
import torch
import xarray as xr

import pde_data
from operators.training.distributed import DistInfo, all_gather_rows, all_reduce_sum
from operators.training.loader import Loader, global_batches
from operators.training.spec import RunSpec, SpecError, Splits
from operators.training.tasks import Normalizers, Task, make_task, resolve
from pde_data.datasets.batch import Batch
from pde_data.generate.registry import GENERATORS, GenerationSpec, block_size, make_samples
from pde_data.core.model import SAMPLE

__all__ = ["completed", "fixed_set", "epoch_set", "rank_samples", "open_fixed", "resolve_run", "Stream", "StreamLoader",
           "fit_stream_normalizers"]


def _check_stream(data) -> None:
    """One line for a generated run's fields out of place or range."""
    n, seeds = data.samples_per_epoch, data.generate_seeds
    if n is None or n < 1:
        raise SpecError("data.samples_per_epoch", "a positive number of samples per epoch with {data.generate}",
                        str(n), ["data.generate"])
    if len(seeds) != 2 or min(seeds) < 0 or seeds[0] == seeds[1]:
        raise SpecError("data.generate_seeds", "two different seeds >= 0 (the training stream's, the fixed "
                        "validation and test set's)", str(list(seeds)))
    if data.split is not None and data.split[0] != 0:
        raise SpecError("data.split", "0 training samples in a generated run (each epoch makes its own, "
                        "{data.samples_per_epoch})", str(list(data.split)), ["data.samples_per_epoch"])


def completed(spec: RunSpec) -> RunSpec:
    """``spec`` with a generated run's generator parameters completed and checked, and the sizes of its fixed set
    (default: a quarter of an epoch's samples each, at least 1); a run on a file as it is."""
    data = spec.data
    if data.generate is None:
        return spec
    if data.generate not in GENERATORS:
        raise SpecError("data.generate", f"one of {sorted(GENERATORS)}", repr(data.generate))
    _check_stream(data)
    params = {**GENERATORS[data.generate].defaults, **data.generator}
    block = block_size(GenerationSpec(data.generate, 1, 0, params))
    if data.samples_per_epoch % block:
        raise SpecError("data.samples_per_epoch", f"a multiple of {{data.generator.batch_size={block}}} (each "
                        "epoch simulates whole blocks)", str(data.samples_per_epoch), ["data.generator.batch_size"])
    n_fixed = max(1, data.samples_per_epoch // 4)
    split = data.split or (None if data.path else (0, n_fixed, n_fixed))
    return spec.override({"data.generator": params, "data.split": split})


def epoch_set(spec: RunSpec, epoch: int) -> tuple[GenerationSpec, range]:
    """The generated set and the sample range epoch ``epoch`` of a completed generated run trains on."""
    n = spec.data.samples_per_epoch
    stream = GenerationSpec(spec.data.generate, (epoch + 1) * n, spec.data.generate_seeds[0], spec.data.generator)
    return stream, range(epoch * n, (epoch + 1) * n)


def rank_samples(samples: range, block: int, dist: DistInfo) -> range:
    """This process's part of an epoch's ``samples`` (a multiple of ``block`` long): a contiguous run of whole
    generator blocks, the parts of ranks 0, 1, ... making up ``samples`` in order; all of ``samples`` when not
    distributed or when there are fewer blocks than processes."""
    blocks = len(samples) // block
    if not dist.distributed or blocks < dist.world_size:
        return samples
    first, last = (blocks * r // dist.world_size for r in (dist.rank, dist.rank + 1))
    return range(samples.start + first * block, samples.start + last * block)


def _gathered(part: xr.Dataset, counts: list[int], dist: DistInfo) -> xr.Dataset:
    """The samples of every process, ``counts[r]`` made by process ``r`` (this one's: ``part``), concatenated in
    rank order along the sample dim; the variables without it are every process's alike."""
    def gathered(var: xr.Variable) -> xr.Variable:
        if SAMPLE not in var.dims:
            return var
        rows = var.transpose(SAMPLE, ...)
        values = np.require(rows.values, requirements=("C", "W"))  # a copy only where read-only (an index)
        values = all_gather_rows(torch.from_numpy(values), counts, dist).numpy()
        return xr.Variable(rows.dims, values, var.attrs).transpose(*var.dims)

    return xr.Dataset({name: gathered(part[name].variable) for name in part.data_vars},
                      coords={name: gathered(part[name].variable) for name in part.coords}, attrs=part.attrs)


def fixed_set(spec: RunSpec) -> GenerationSpec:
    """The generated validation and test set of a completed generated run without ``data.path``."""
    _, n_val, n_test = spec.data.split
    return GenerationSpec(spec.data.generate, max(1, n_val + n_test), spec.data.generate_seeds[1], spec.data.generator)


def open_fixed(spec: RunSpec, device: torch.device | str | None = None) -> pde_data.Source:
    """The source a completed run resolves, validates and tests on: its file, else its generated fixed set,
    made on ``device``."""
    if spec.data.path is not None:
        return pde_data.open_source(spec.data.path)
    fixed = fixed_set(spec)
    return pde_data.open_source(make_samples(fixed, range(fixed.n), device=device))


def resolve_run(spec: RunSpec, source: pde_data.Source) -> RunSpec:
    """:func:`~operators.training.tasks.resolve` against ``source``; a generated run's file is split into
    validation and test halves unless ``data.split`` says otherwise."""
    if spec.data.generate is not None and spec.data.split is None:
        n = source.sizes[SAMPLE]
        spec = spec.override({"data.split": (0, n // 2, n - n // 2)})
    return resolve(spec, source)


class Stream:
    """The training samples of a completed generated run, an epoch at a time, made on ``device``; with
    ``background``, the next epoch's are made by a daemon thread while this one trains.

    Under ``torchrun`` (``dist``) each process makes its part of every epoch (:func:`rank_samples`) and the
    parts are gathered where :meth:`samples` is asked for, in the main thread (collectives must come in the
    same order on every process): every process then holds the epoch a single process makes, bit for bit.
    """

    def __init__(self, spec: RunSpec, device: torch.device | str | None, *, background: bool,
                 dist: DistInfo | None = None):
        self.spec, self.device, self.background = spec, device, background
        self.dist = dist or DistInfo()
        self._made: dict[int, Future] = {}
        self._whole: dict[int, xr.Dataset] = {}  # epochs gathered from every process's part
        self.seconds: dict[int, float] = {}  # the wall time each epoch's samples took to make (this process's part)

    def _parts(self, epoch: int) -> tuple[GenerationSpec, list[range]]:
        """The set of ``epoch`` and the sample range each process makes of it."""
        stream, samples = epoch_set(self.spec, epoch)
        block = block_size(stream)
        ranks = range(self.dist.world_size)
        return stream, [rank_samples(samples, block, dataclasses.replace(self.dist, rank=r)) for r in ranks]

    def _start(self, epoch: int) -> None:
        if epoch in self._made or epoch in self._whole:
            return
        future: Future = Future()
        self._made[epoch] = future
        stream, parts = self._parts(epoch)

        def make() -> None:
            start = time.perf_counter()
            try:
                future.set_result(make_samples(stream, parts[self.dist.rank], device=self.device))
            except BaseException as exc:  # noqa: BLE001 - raised again where the epoch's samples are asked for
                future.set_exception(exc)
            self.seconds[epoch] = time.perf_counter() - start

        if self.background:
            threading.Thread(target=make, name=f"generate epoch {epoch + 1}", daemon=True).start()
        else:
            make()

    def _whole_epoch(self, epoch: int) -> xr.Dataset:
        """All of ``epoch``'s samples: this process's part, with every other's gathered when they differ."""
        if epoch in self._whole:
            return self._whole[epoch]
        _, parts = self._parts(epoch)
        future = self._made.pop(epoch)
        error = future.exception()
        # every process learns of a failure here, instead of waiting for the failed one at the next collective
        failed = all_reduce_sum(torch.tensor(0 if error is None else 1), self.dist)
        if error is not None:
            raise error
        if int(failed):
            raise RuntimeError(f"data.generate: another process failed to make its samples of epoch {epoch + 1}")
        if len(set(parts)) == 1:  # every process made the whole epoch
            return future.result()
        return _gathered(future.result(), [len(p) for p in parts], self.dist)

    def samples(self, epoch: int, *, ahead: bool = False) -> xr.Dataset:
        """Epoch ``epoch``'s samples (sample dim ``N``), once made; ``ahead``: then start making the next epoch's
        (one epoch ahead at most: one thread making samples, two epochs' samples held)."""
        for held in (self._whole, self._made):  # earlier epochs go before this one is gathered
            for done in [e for e in held if e < epoch]:
                del held[done]
        self._start(epoch)
        made = self._whole[epoch] = self._whole_epoch(epoch)
        if ahead and self.background:
            self._start(epoch + 1)
        return made


def fit_stream_normalizers(task: Task, stream: Stream) -> Normalizers:
    """The task's normalizers fitted on epoch 0's samples (all of them: the epoch is the training split); what
    making them cost is said in one line (every later epoch costs as much, made while the one before trains)."""
    first = stream.samples(0)
    n = first.sizes[SAMPLE]
    if stream.dist.is_main:
        seconds = stream.seconds.get(0, 0.0)
        print(f"generated: epoch 1's {n} samples took {seconds:.1f} s ({seconds / max(n, 1):.2g} s each); each "
              "later epoch is made as the one before trains", file=sys.stderr, flush=True)
    spec = task.spec.override({"data.splits": Splits(tuple(range(n)), (), ())})
    return make_task(spec).processor(pde_data.open_source(first))


#: seconds an epoch may wait for its generated samples before the run says so
WAIT_SAID = 1.0


class StreamLoader:
    """The training batches of a generated run, with :class:`~operators.training.loader.Loader`'s interface:
    epoch ``e`` reads :meth:`Stream.samples` ``(e)`` through the task's batches (in memory), in the seeded
    order of ``(seed, e)``; under ``torchrun`` every process holds the whole epoch (each makes its part:
    :class:`Stream`) and reads its slice of each global batch."""

    def __init__(self, task: Task, stream: Stream, fixed: pde_data.Source, *, batch_size: int, seed: int,
                 dist: DistInfo | None = None):
        self.task, self.stream, self.batch_size, self.seed = task, stream, batch_size, seed
        self.dist = dist or DistInfo()
        self.per_sample = len(task.dataset(fixed, [0], cache=False))  # items (windows) of one sample
        self.epochs = task.spec.optim.epochs

    def __len__(self) -> int:
        """Items (windows or pairs) of one epoch."""
        return self.per_sample * self.task.spec.data.samples_per_epoch

    def global_sizes(self, epoch: int) -> list[int]:
        """The size of each global batch of ``epoch`` (this process reads its slice of each)."""
        return [len(b) for b in global_batches(len(self), self.batch_size, seed=self.seed, epoch=epoch, shuffle=True,
                                               min_size=self.dist.world_size)]

    def epoch(self, epoch: int) -> Iterator[Batch]:
        """This process's batches of ``epoch`` (its samples made first, unless made in the background already)."""
        start = time.perf_counter()
        made = self.stream.samples(epoch, ahead=epoch + 1 < self.epochs)
        waited = time.perf_counter() - start
        if epoch > 0 and waited > WAIT_SAID and self.dist.is_main:  # the generation did not keep up with training
            print(f"epoch {epoch + 1} waited {waited:.1f} s for its generated samples: making an epoch "
                  f"({self.stream.seconds.get(epoch, float('nan')):.1f} s) takes longer than training one (fewer "
                  "samples per epoch or a cheaper generator would keep up)", file=sys.stderr, flush=True)
        data = self.task.batches(pde_data.open_source(made), range(made.sizes[SAMPLE]), cache=True)
        if len(data) != len(self):
            raise ValueError(f"data.generate: expected {len(self)} items of {len(self) // self.per_sample} generated "
                             f"samples like the fixed set's, found {len(data)}")
        loader = Loader(data, batch_size=self.batch_size, seed=self.seed, dist=self.dist)
        yield from loader.epoch(epoch)
