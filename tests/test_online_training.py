"""``circuitop train --generate``: training on samples a generator makes as it goes (operators/training/online.py)."""

import datetime
import json

import numpy as np
import pytest
import torch

from cli_run import run_cli, torchrun_beside_one_process
from operators.cli import main
from operators.training import load_checkpoint, load_run, stored_spec
from operators.training.distributed import DistInfo
from operators.training.online import Stream, completed, epoch_set, rank_samples
from operators.training.spec import RunSpec
from pde_data.generate.registry import GENERATORS, GenerationSpec, make_samples

NS = ["--generate", "ns", "--gen", "n_sim=32", "n_out=16", "t_final=1", "n_records=4", "batch_size=4",
      "--samples-per-epoch", "8"]
MODEL = ["--model", "fno", "--config", "n_modes=4", "width=8", "n_layers=2", "--batch-size", "4", "--threads", "1",
         "--no-progress"]


def _ns_run(out, *extra):
    return ["train", *NS, "--window", "1", *MODEL, "--out", str(out), *extra]


def test_cli_trains_on_generated_ns_and_evaluates_on_its_fixed_set(tmp_path):
    done = run_cli(*_ns_run(tmp_path / "run", "--epochs", "2"))
    assert done.returncode == 0, done.stderr
    spec = stored_spec(tmp_path / "run")
    assert spec.data.path is None and spec.data.generator["visc"] == 1e-3  # the completed generator parameters
    assert spec.data.split == (0, 2, 2) and spec.data.splits.train == ()
    evaluated = run_cli("evaluate", "--run", tmp_path / "run", "--json")
    assert evaluated.returncode == 0, evaluated.stderr
    result = json.loads(evaluated.stdout)
    assert result["data"] == "generated" and result["n_samples"] == 2 and 0 < result["metrics"]["rel_l2"] < 2


def test_resume_equals_an_uninterrupted_run_bit_for_bit(tmp_path):
    """4 epochs in one go (next epoch made in the background) = 2, then --resume to 4 (made in turn); on the CPU,
    where bit-identical resume holds (GPU kernels may use atomics)."""
    assert main(_ns_run(tmp_path / "full", "--epochs", "4", "--device", "cpu")) == 0
    assert main(_ns_run(tmp_path / "cut", "--epochs", "2", "--workers", "0", "--device", "cpu")) == 0
    assert main(["train", "--out", str(tmp_path / "cut"), "--resume", "--epochs", "4", "--no-progress",
                 "--device", "cpu"]) == 0
    a, b = (load_checkpoint(tmp_path / d / "last.pt") for d in ("full", "cut"))
    assert a["epoch"] == b["epoch"] == 4
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert [r["train_loss"] for r in a["history"]] == [r["train_loss"] for r in b["history"]]


def test_every_epoch_trains_on_new_samples_and_the_normalizer_on_epoch_0(tmp_path):
    spec = completed(RunSpec().override({"data.generate": "ns", "data.samples_per_epoch": 4, "data.generator": {
        "n_sim": 32, "n_out": 16, "t_final": 1.0, "n_records": 3, "batch_size": 4}}))
    stream = Stream(spec, "cpu", background=True)
    first, second = stream.samples(0, ahead=True), stream.samples(1)
    whole = make_samples(GenerationSpec("ns", 8, 0, spec.data.generator), range(8))
    assert epoch_set(spec, 1)[1] == range(4, 8)
    np.testing.assert_array_equal(second.vorticity.values, whole.vorticity.values[4:])
    assert not np.array_equal(first.vorticity.values, second.vorticity.values)

    assert main(_ns_run(tmp_path / "run", "--epochs", "1", "--samples-per-epoch", "4")) == 0
    shift = load_run(tmp_path / "run").task.normalizers.input.shift
    epoch0 = make_samples(GenerationSpec("ns", 4, 0, {**spec.data.generator, "n_records": 4}), range(4))
    torch.testing.assert_close(shift.flatten(), torch.tensor([epoch0.vorticity.values.astype(np.float64).mean()],
                                                             dtype=shift.dtype))


def test_the_fixed_set_may_be_a_file(tmp_path):
    params = {"n_sim": 32, "n_out": 16, "t_final": 1.0, "n_records": 4, "batch_size": 4}
    make_samples(GenerationSpec("ns", 4, 7, params), range(4)).to_netcdf(tmp_path / "val.nc")
    assert main(_ns_run(tmp_path / "run", "--epochs", "1", "--data", str(tmp_path / "val.nc"))) == 0
    spec = stored_spec(tmp_path / "run")
    assert spec.data.split == (0, 2, 2) and spec.data.fingerprint.format == "netcdf"
    evaluated = run_cli("evaluate", "--run", tmp_path / "run", "--json", "--samples", "val")
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads(evaluated.stdout)["data"] == str(tmp_path / "val.nc")


@pytest.mark.parametrize("args", [
    ["--generate", "darcy", "--gen", "n_grid=16", "--samples-per-epoch", "4"],
    ["--generate", "swe", "--gen", "n_grid=16", "t_final=0.1", "n_frames=3", "batch_size=2", "--samples-per-epoch", "2",
     "--window", "1"],
])
def test_darcy_and_swe_train_too(tmp_path, args):
    assert main(["train", *args, *MODEL, "--epochs", "2", "--out", str(tmp_path / "run")]) == 0
    history = json.loads((tmp_path / "run" / "history.json").read_text())
    assert len(history) == 2 and all(np.isfinite(r["val_rel_l2"]) for r in history)


@pytest.mark.parametrize("change, expected", [
    (["--gen", "n_grid=8"], "--gen n_grid: expected a field of NSParams among ['batch_size', 'dt', 'dtype', 'n_out', "
                            "'n_records', 'n_sim', 'record_initial', 't_final', 'visc'], found 'n_grid'"),
    (["--gen", "n_sim=big"], "--gen n_sim: expected int, found 'big'"),
    (["--gen", "dtype=float16"], "--gen dtype: expected one of ['float32', 'float64'], found 'float16'"),
    (["--samples-per-epoch", "6"], "--samples-per-epoch: expected a multiple of --gen batch_size=4 (each epoch"),
    (["--generate", "heat"], f"--generate: expected one of {sorted(GENERATORS)}, found 'heat'"),
    (["--generate-seeds", "3,3"], "--generate-seeds: expected two different seeds >= 0"),
    (["--split", "4,2,2"], "--split: expected 0 training samples in a generated run"),
])
def test_bad_generator_options_give_one_line(tmp_path, capsys, change, expected):
    assert main(_ns_run(tmp_path / "run", *change)) == 1
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "run").exists()


def test_generator_options_without_generate_give_one_line(tmp_path, capsys):
    assert main(["train", "--data", "x.nc", "--gen", "n_sim=32", *MODEL, "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err.strip()
    assert "--gen: expected only with --generate" in err and len(err.splitlines()) == 1, err


def test_each_process_makes_whole_blocks_of_its_part_in_rank_order():
    def parts(n, block, world):
        return [rank_samples(range(8, 8 + n), block, DistInfo(rank=r, world_size=world)) for r in range(world)]

    assert parts(12, 4, 2) == [range(8, 12), range(12, 20)]  # 3 blocks over 2 processes
    assert parts(12, 1, 3) == [range(8, 12), range(12, 16), range(16, 20)]
    assert parts(4, 4, 2) == [range(8, 12)] * 2  # fewer blocks than processes: each makes the whole epoch
    assert parts(12, 4, 1) == [range(8, 20)]


def _blown_up(*args, **kwargs):
    raise FloatingPointError("solver blew up")


def _stream_in_process(rank: int, store: str, spec: RunSpec, out: str, fail: bool) -> None:
    """One of two gloo processes: epochs 0 and 1 of ``spec``'s stream (``fail``: rank 1's generation raises)."""
    import torch.distributed as dist

    from operators.training import online

    # a gather that waits for a failed process raises after a minute, instead of the expected error
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    made = []
    if fail and rank == 1:
        online.make_samples = _blown_up
    else:
        made_by = online.make_samples
        online.make_samples = lambda stream, samples, **k: made.append(samples) or made_by(stream, samples, **k)
    stream = Stream(spec, "cpu", background=True, dist=DistInfo(rank=rank, world_size=2))
    try:
        epochs = [stream.samples(e, ahead=e == 0).vorticity.values for e in (0, 1)]
        torch.save({"epochs": [torch.from_numpy(v) for v in epochs], "made": [(s.start, s.stop) for s in made]},
                   f"{out}.{rank}")
    except Exception as exc:  # noqa: BLE001 - the test reads what each process raised
        torch.save({"error": f"{type(exc).__name__}: {exc}"}, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("fail, per_epoch", [(False, 8), (True, 8), (True, 2)])
def test_under_ddp_each_process_makes_its_part_and_holds_the_whole_epoch(tmp_path, fail, per_epoch):
    """Two gloo processes: each simulates half of every epoch (whole blocks) and ends up with the very samples
    one process makes; a failing process makes the other raise rather than wait for it forever (also where
    an epoch of one block is made whole by each)."""
    params = {"n_sim": 16, "n_out": 8, "t_final": 0.5, "n_records": 2, "batch_size": 2}
    spec = completed(RunSpec().override({"data.generate": "ns", "data.samples_per_epoch": per_epoch,
                                         "data.generator": params}))
    out = tmp_path / "made"
    torch.multiprocessing.start_processes(_stream_in_process, args=(str(tmp_path / "store"), spec, str(out), fail),
                                          nprocs=2, start_method="spawn")
    results = [torch.load(f"{out}.{r}", weights_only=True) for r in range(2)]
    if fail:
        assert results[1]["error"] == "FloatingPointError: solver blew up"
        assert results[0]["error"] == ("RuntimeError: data.generate: another process failed to make its samples of "
                                       "epoch 1")
        return
    assert [r["made"] for r in results] == [[(0, 4), (8, 12)], [(4, 8), (12, 16)]]
    for epoch in (0, 1):
        one = make_samples(*epoch_set(spec, epoch)).vorticity.values
        for r in results:
            np.testing.assert_array_equal(r["epochs"][epoch].numpy(), one)


def test_torchrun_trains_on_generated_samples_like_one_process(tmp_path):
    torchrun_beside_one_process(lambda out, *extra: _ns_run(out, "--epochs", "2", *extra), tmp_path, atol=1e-6)


def test_a_file_run_never_imports_the_online_module(tmp_path):
    """A run on a file goes from its spec to its data without ``operators.training.online`` (a real ``circuitop
    train`` in a fresh process); a generated run does import it."""
    import subprocess
    import sys

    from cli_run import ENV, ROOT
    from test_trainer import write_poisson

    data = write_poisson(tmp_path / "p.nc", n_samples=8)
    script = ("import sys; from operators.cli import main; code = main(sys.argv[1:]); "
              "print('operators.training.online' in sys.modules); sys.exit(code)")
    train = ["train", "--data", str(data), "--input", "f", "--target", "u", "--split", "6,2,0", "--epochs", "1",
             "--out", str(tmp_path / "run"), *MODEL]
    for args, imported in ((train, "False"), (_ns_run(tmp_path / "gen", "--epochs", "1"), "True")):
        done = subprocess.run([sys.executable, "-c", script, *args], cwd=ROOT, env=ENV, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip().splitlines()[-1] == imported, done.stdout
