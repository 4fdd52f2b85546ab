"""Training-time augmentation of image batches (classification runs).

:func:`random_shift` translates each image by its own random offset of up to ``shift`` pixels per axis,
repeating the border pixels (the pad-and-crop augmentation of image classifiers). Offsets come from
torch's global generator, whose state every checkpoint stores, so a resumed run draws the same ones.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

__all__ = ["random_shift"]


def random_shift(x: torch.Tensor, shift: int) -> torch.Tensor:
    """``x (batch, channels, h, w)`` with each image moved by offsets in ``[-shift, shift]`` (same shape)."""
    if shift == 0:
        return x
    batch, _, h, w = x.shape
    padded = F.pad(x, (shift, shift, shift, shift), mode="replicate")
    start = torch.randint(0, 2 * shift + 1, (2, batch)).to(x.device)
    rows = (start[0][:, None] + torch.arange(h, device=x.device))[:, :, None]  # (batch, h, 1)
    cols = (start[1][:, None] + torch.arange(w, device=x.device))[:, None, :]  # (batch, 1, w)
    picked = padded[torch.arange(batch, device=x.device)[:, None, None], :, rows, cols]  # (batch, h, w, channels)
    return picked.permute(0, 3, 1, 2)
