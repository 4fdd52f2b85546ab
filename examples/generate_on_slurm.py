"""Generate a large Navier–Stokes set on a SLURM (or PBS) cluster: one Dask worker per batch job, one task per shard.

The same call as ``circuitop generate ns --shards S --out DIR`` on a laptop, with the workers started by
``dask-jobqueue`` (``pip install dask-jobqueue``; not a circuitop dependency). The set is the same bit for bit
as one made on a laptop with the same parameters (one torch thread per worker on CPUs). Re-running the script
after a crash or a time limit completes the set: finished shards are checked by sha256 and kept. Adjust the
``SLURMCluster`` arguments to your site (partition, account, walltime; ``PBSCluster`` for PBS).

Not run by the test suite (there is no cluster there); the Dask path it uses is, against a real
``dask scheduler`` with two ``dask worker`` processes (tests/test_sharded_generation.py).

    python examples/generate_on_slurm.py --out /scratch/ns_10k --n 10000 --shards 500 --jobs 50
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the set's folder (shards and manifest.json)")
    p.add_argument("--n", type=int, default=10_000, help="samples (default 10000)")
    p.add_argument("--shards", type=int, default=500, help="shard files, one Dask task each (default 500)")
    p.add_argument("--jobs", type=int, default=50, help="SLURM jobs, one worker each (default 50)")
    p.add_argument("--partition", default=None, help="SLURM partition (queue)")
    p.add_argument("--account", default=None, help="SLURM account")
    p.add_argument("--walltime", default="04:00:00", help="per job (default 04:00:00)")
    p.add_argument("--gpu", action="store_true", help="one GPU per job (adds --gres=gpu:1; solvers on cuda)")
    args = p.parse_args(argv)

    from dask_jobqueue import SLURMCluster  # pip install dask-jobqueue

    import pde_data

    spec = pde_data.GenerationSpec("ns", args.n, 0, {"n_sim": 256, "n_out": 64, "t_final": 50.0, "dt": 1e-4,
                                                     "batch_size": 8})  # the FNO benchmark's settings
    extra = ["--gres=gpu:1"] if args.gpu else []
    cluster = SLURMCluster(cores=1, processes=1, memory="8GB", walltime=args.walltime, queue=args.partition,
                           account=args.account, job_extra_directives=extra)
    cluster.scale(jobs=args.jobs)
    try:
        manifest = pde_data.generate_sharded(spec, args.out, shards=args.shards, scheduler=cluster.scheduler_address,
                                             device="cuda" if args.gpu else "cpu",
                                             progress=lambda info: print(
                                                 f"\r{info['done']:.0f}/{info['total']} samples, "
                                                 f"{info['workers']} workers, {info['retries']} retries",
                                                 end="", file=sys.stderr))
    finally:
        cluster.close()
    print(f"\nwrote {args.out}: {spec.n} samples in {len(manifest.shards)} shards, {manifest.bytes / 1e9:.3g} GB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
