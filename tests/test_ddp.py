"""DDP: ``torchrun`` with 2 CPU processes (gloo), each streaming its slice of every global batch through a
loader worker, gives the same weights as 1 process reading from memory, same global batch."""

import pytest
import torch

from cli_run import torchrun_beside_one_process
from test_trainer import write_poisson

pytestmark = pytest.mark.slow  # end-to-end: real subprocesses (CI runs them)


def _args(data, out, *extra):
    return ["train", "--data", str(data), "--model", "unet", "--out", str(out),
            # no GroupNorm: at 4-channel widths it amplifies the summation-order round-off past this test's
            # tolerance within 2 epochs; what is under test is DDP's loss scaling and batch slicing
            "--config", "n_layers=2", "n_res=1", "n_res_neck=1", "channel_multiplier=4", "norm=False",
            "--input", "f", "--target", "u", "--split", "22,4,0", "--epochs", "2", "--batch-size", "8",
            "--grad-clip", "1.0", "--threads", "1", "--no-progress", *extra]


def test_two_process_torchrun_matches_one_process(tmp_path):
    data = write_poisson(tmp_path / "p.nc", n_samples=26)
    # 22 samples at batch 8: the last global batch (6) splits 3 + 3; the losses are scaled so that
    # DDP's gradient mean is the global-batch mean, so only float summation order differs.
    a, b = torchrun_beside_one_process(lambda out, *extra: _args(data, out, *extra), tmp_path, atol=1e-6)
    assert a["epoch"] == b["epoch"] == 2
    initial = torch.load(tmp_path / "one" / "last.pt", weights_only=True)["history"][0]["train_loss"]
    assert initial > 0


def test_a_classification_run_under_torchrun_matches_one_process(tmp_path):
    """The same for images → labels: cross-entropy scaled like the field losses (no drop-path or shifts,
    whose random draws differ between one process and two)."""
    from test_classification import bright_quadrant_images

    import pde_data

    data = pde_data.save(bright_quadrant_images(26), tmp_path / "img.nc")

    def args(out, *extra):
        return ["train", "--data", str(data), "--model", "conv_vision", "--out", str(out), "--config", "size=cpu",
                "drop_path=0.0", "--target", "label", "--split", "22,4,0", "--epochs", "2", "--batch-size", "8",
                "--label-smoothing", "0.1", "--threads", "1", "--no-progress", *extra]

    _, b = torchrun_beside_one_process(args, tmp_path, atol=1e-5)
    assert "val_top1" in b["history"][-1]


def test_cuda_without_an_index_is_the_gpu_of_each_process(monkeypatch):
    """``--device cuda`` (or none, with CUDA) is ``cuda:LOCAL_RANK``; a rank past the node's GPUs is one line
    (torch's set_device refuses a CUDA device without an index: found on the first GPU machine)."""
    from operators.training.distributed import device_of
    from operators.training.spec_values import SpecError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert device_of("cuda", local_rank=1) == device_of(None, local_rank=1) == torch.device("cuda", 1)
    assert device_of("cuda:0", local_rank=1) == torch.device("cuda", 0) and device_of("cpu") == torch.device("cpu")
    with pytest.raises(SpecError, match="local rank 2 of 2 CUDA device"):
        device_of("cuda", local_rank=2)
    with pytest.raises(SpecError, match="expected one of the 2 CUDA devices, found 'cuda:3'"):
        device_of("cuda:3")
