"""The reference side of :mod:`bench.bench_trainer`: neuraloperator 2.0's own ``Trainer`` on a neuraloperator
``.pt`` file, as its Darcy example sets it up, run as a whole process (it imports neuraloperator and torch only).

Data: ``x`` (bool coefficients) and ``y`` of the file, as float32 ``(sample, 1, x, y)``; the training and
validation samples are the indices given (the same split ``circuitop train`` drew). Channel-wise
``UnitGaussianNormalizer`` of inputs and outputs fitted on the training samples, in a ``DefaultDataProcessor``
(training loss on normalised outputs, validation in physical units, as neuraloperator does); its
``TensorDataset`` in a shuffled ``DataLoader`` without workers (in-memory data: a worker only adds start-up);
``LpLoss(d=2)`` (relative L2, summed over the batch) for training and validation; ``torch.optim.Adam``.

Prints one JSON line: ``{"epoch_s": [...], "val_rel_l2": float}``.

Run: ``python -m bench._neuralop_trainer --data F.pt --splits splits.json --epochs 10 --batch-size 32 --lr 3e-3
--width 32 --n-modes 16 14``.
"""

from __future__ import annotations

import argparse
import json

import torch
from neuralop import LpLoss, Trainer
from neuralop.data.datasets.tensor_dataset import TensorDataset
from neuralop.data.transforms.data_processors import DefaultDataProcessor
from neuralop.data.transforms.normalizers import UnitGaussianNormalizer
from neuralop.models import FNO
from torch.utils.data import DataLoader


class _TimedTrainer(Trainer):
    """neuraloperator's Trainer, keeping the training time of every epoch it reports."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.epoch_s: list[float] = []

    def train_one_epoch(self, epoch, train_loader, training_loss):
        result = super().train_one_epoch(epoch, train_loader, training_loss)
        self.epoch_s.append(result[-1])
        return result


def _loaders(path: str, splits: dict, batch_size: int) -> tuple[DataLoader, DataLoader, DefaultDataProcessor]:
    data = torch.load(path, weights_only=True)
    x, y = (data[k].to(torch.float32).unsqueeze(1) for k in ("x", "y"))
    train, val = (torch.as_tensor(splits[k]) for k in ("train", "val"))
    normalizers = []
    for t in (x, y):
        normalizer = UnitGaussianNormalizer(dim=[0, 2, 3])  # one mean and std per channel
        normalizer.fit(t[train])
        normalizers.append(normalizer)
    processor = DefaultDataProcessor(in_normalizer=normalizers[0], out_normalizer=normalizers[1])
    train_loader = DataLoader(TensorDataset(x[train], y[train]), batch_size=batch_size, shuffle=True)
    val_loader = DataLoader(TensorDataset(x[val], y[val]), batch_size=batch_size, shuffle=False)
    return train_loader, val_loader, processor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--splits", required=True, help="JSON file with 'train' and 'val' sample indices")
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--width", type=int, required=True)
    parser.add_argument("--n-modes", type=int, nargs=2, required=True, help="neuraloperator's n_modes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    with open(args.splits) as f:
        splits = json.load(f)
    torch.manual_seed(args.seed)
    train_loader, val_loader, processor = _loaders(args.data, splits, args.batch_size)
    model = FNO(n_modes=tuple(args.n_modes), in_channels=1, out_channels=1, hidden_channels=args.width)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=100, gamma=0.5)
    trainer = _TimedTrainer(model=model, n_epochs=args.epochs, data_processor=processor, device=args.device)
    loss = LpLoss(d=2, p=2)
    metrics = trainer.train(train_loader, {"val": val_loader}, optimizer, scheduler, training_loss=loss,
                            eval_losses={"rel_l2": loss})
    print(json.dumps({"epoch_s": trainer.epoch_s, "val_rel_l2": float(metrics["val_rel_l2"])}))


if __name__ == "__main__":
    main()
