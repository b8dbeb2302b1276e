"""IceNet-style U-Net for sea-ice forecasting, its masked loss and ice probability.

Try it::

    >>> import torch
    >>> from neural_arch.apps.icenet.model import IceNetUNet
    >>> IceNetUNet(5)(torch.randn(2, 5, 15, 17)).shape
    torch.Size([2, 3, 3, 15, 17])

The model maps ``[n, in_channels, H, W]`` input fields to logits ``[n, leads, classes, H, W]``:
for each forecast lead, a distribution over sea-ice concentration (SIC) classes per grid
cell. With the default three classes (the IceNet convention) class 0 is open water
(SIC < 15 %), class 1 is marginal ice (15 % <= SIC < 80 %) and class 2 is full ice
(SIC >= 80 %); see :func:`sic_to_class`.

Plain PyTorch, no distributed imports (the trainer wraps it in DDP from outside), and
TorchScript-able (``torch.jit.script(model)``) so it can be exported for C++ inference.

Two choices matter for distributed exactness (N ranks must compute what one process does):

* **GroupNorm, not BatchNorm.** BatchNorm normalises with statistics of the *per-rank*
  batch, so the output for a sample would depend on which other samples happened to land
  on the same rank, i.e. on the world size. GroupNorm normalises each sample on its own,
  so ``model(batch)[i] == model(batch[i:i+1])`` and splitting a global batch over ranks
  changes nothing. It also makes an empty batch (a rank with no samples in an uneven last
  batch) just work.
* **Per-sample loss.** :func:`masked_weighted_cross_entropy` returns one loss per sample,
  normalised by that sample's own cell count (not by a batch-wide sum of weights), so the
  caller can weight samples exactly across ranks (``neural_arch.distributed.global_batch_loss``).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _norm(width: int) -> nn.GroupNorm:
    # Up to 8 groups, but always a divisor of width so GroupNorm accepts any width.
    groups = min(8, width)
    while width % groups:
        groups -= 1
    return nn.GroupNorm(groups, width)


class ConvBlock(nn.Module):
    """(3x3 conv -> GroupNorm -> ReLU) x 2, keeping the spatial size."""

    def __init__(self, in_channels: int, out_channels: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 3, padding=1),
            _norm(out_channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(out_channels, out_channels, 3, padding=1),
            _norm(out_channels),
            nn.ReLU(inplace=True),
            # Dropout2d drops whole feature maps, as IceNet does; Identity when p == 0.
            nn.Dropout2d(dropout) if dropout > 0 else nn.Identity(),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.body(x)


class UpBlock(nn.Module):
    """Upsample x2 (nearest) + 3x3 conv, concatenate the skip, then a :class:`ConvBlock`."""

    def __init__(self, in_channels: int, skip_channels: int, out_channels: int) -> None:
        super().__init__()
        # Nearest upsampling + conv (as in IceNet) avoids transposed-conv checkerboard artefacts.
        self.up = nn.Sequential(
            nn.Upsample(scale_factor=2.0, mode="nearest"),
            nn.Conv2d(in_channels, out_channels, 3, padding=1),
            nn.ReLU(inplace=True),
        )
        self.block = ConvBlock(out_channels + skip_channels, out_channels)

    def forward(self, x: Tensor, skip: Tensor) -> Tensor:
        return self.block(torch.cat([self.up(x), skip], dim=1))


class IceNetUNet(nn.Module):
    """U-Net: ``len(widths)`` levels, ``len(widths) - 1`` max-pools, logits ``[n, leads, classes, H, W]``.

    Any ``H, W`` is accepted: the input is zero-padded on the bottom and right up to a
    multiple of ``2 ** (len(widths) - 1)`` and the output is cropped back. Zero padding
    (rather than reflect) works for every size, even 1 x 1, and is what the convolutions'
    own ``padding=1`` already assumes beyond the border. Input fields should therefore be
    normalised (mean ~0), so that zero means "nothing unusual" there.
    """

    def __init__(
        self,
        in_channels: int,
        leads: int = 3,
        widths: Sequence[int] = (16, 32, 64),
        classes: int = 3,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        widths = [int(w) for w in widths]
        if in_channels < 1 or leads < 1 or classes < 2:
            raise ValueError(
                f"IceNetUNet needs in_channels >= 1, leads >= 1 and classes >= 2; got "
                f"in_channels={in_channels}, leads={leads}, classes={classes}."
            )
        if not widths or min(widths) < 1:
            raise ValueError(f"widths must be a non-empty list of positive channel counts, got {widths}.")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}.")
        self.leads = leads
        self.classes = classes
        self.multiple = 2 ** (len(widths) - 1)
        last = len(widths) - 1
        self.down = nn.ModuleList(
            # Dropout only in the bottleneck, where IceNet regularises.
            ConvBlock(c_in, c_out, dropout if i == last else 0.0)
            for i, (c_in, c_out) in enumerate(zip([in_channels] + widths[:-1], widths))
        )
        self.up = nn.ModuleList(UpBlock(widths[i + 1], widths[i], widths[i]) for i in reversed(range(last)))
        self.head = nn.Conv2d(widths[0], leads * classes, 1)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != 4:
            raise ValueError(f"IceNetUNet expects input [n, channels, H, W], got shape {list(x.shape)}.")
        n, h, w = x.shape[0], x.shape[2], x.shape[3]
        pad_h = (self.multiple - h % self.multiple) % self.multiple
        pad_w = (self.multiple - w % self.multiple) % self.multiple
        x = F.pad(x, [0, pad_w, 0, pad_h])
        skips: list[Tensor] = []
        for i, block in enumerate(self.down):
            if i > 0:
                x = F.max_pool2d(x, 2)
            x = block(x)
            skips.append(x)
        for i, block in enumerate(self.up):
            # skips[-1] is the bottleneck output (x itself); decoder level i joins skips[-2 - i].
            x = block(x, skips[len(skips) - 2 - i])
        x = self.head(x)[:, :, :h, :w]
        # Channel index = lead * classes + class.
        return x.reshape(n, self.leads, self.classes, h, w)


def masked_weighted_cross_entropy(
    logits: Tensor, target_class: Tensor, active_mask: Tensor, class_weights: Optional[Tensor] = None
) -> Tensor:
    """Per-sample class-weighted cross-entropy over active (ocean) cells: shape ``[n]``.

    ``logits`` ``[n, leads, C, H, W]``, ``target_class`` int64 ``[n, leads, H, W]``,
    ``active_mask`` bool ``[H, W]``, ``class_weights`` ``[C]`` or None (all ones).

    ``loss[i] = sum over active cells and leads of w[target] * CE / (#active cells * leads)``.
    The divisor is a count fixed by the grid, *not* the sum of weights in the batch, so a
    sample's loss never depends on the other samples: a global batch split across ranks
    gives exactly the per-sample losses one process would. Targets on inactive cells are
    ignored entirely (they may hold any value, e.g. -1 for land). ``n == 0`` gives an
    empty ``[0]`` tensor that is still connected to ``logits`` for backward.
    """
    if logits.dim() != 5:
        raise ValueError(f"logits must be [n, leads, classes, H, W], got shape {list(logits.shape)}.")
    n, leads, classes, h, w = logits.shape
    expect = [n, leads, h, w]
    if list(target_class.shape) != expect:
        raise ValueError(f"target_class must have shape {expect} to match logits, got {list(target_class.shape)}.")
    if list(active_mask.shape) != [h, w] or active_mask.dtype != torch.bool:
        raise ValueError(
            f"active_mask must be a bool [H, W] = {[h, w]} tensor, got {active_mask.dtype} {list(active_mask.shape)}."
        )
    if class_weights is not None and list(class_weights.shape) != [classes]:
        raise ValueError(f"class_weights must have shape [{classes}], got {list(class_weights.shape)}.")
    active = int(active_mask.sum())
    if active == 0:
        raise ValueError("active_mask has no active cells; the loss would be 0/0.")
    # Only active cells: land targets (any value) are never indexed, land logits never read.
    logp = torch.log_softmax(logits[:, :, :, active_mask], dim=2)  # [n, leads, C, A]
    target = target_class[:, :, active_mask].long()  # [n, leads, A]
    if target.numel() > 0 and (int(target.min()) < 0 or int(target.max()) >= classes):
        raise ValueError(
            f"target_class on active cells must be in [0, {classes}), got "
            f"values in [{int(target.min())}, {int(target.max())}]."
        )
    nll = -logp.gather(2, target.unsqueeze(2)).squeeze(2)  # [n, leads, A]
    if class_weights is not None:
        nll = nll * class_weights.to(nll.dtype)[target]
    # One contiguous row per sample, reduced on its own: the same arithmetic whatever n is.
    return nll.reshape(n, leads * active).sum(dim=1) / float(leads * active)


def ice_probability(logits: Tensor) -> Tensor:
    """Probability of ice (SIC >= 15 %) ``[n, leads, H, W]``: P(class 1) + P(class 2), i.e. all classes but 0."""
    if logits.dim() != 5:
        raise ValueError(f"logits must be [n, leads, classes, H, W], got shape {list(logits.shape)}.")
    return torch.softmax(logits, dim=2)[:, :, 1:].sum(dim=2)


def sic_to_class(sic: Tensor, thresholds: Sequence[float] = (0.15, 0.80)) -> Tensor:
    """SIC (fraction 0..1) to int64 class: 0 below 0.15, 1 in [0.15, 0.80), 2 from 0.80 (IceNet's classes)."""
    edges = torch.tensor(list(thresholds), dtype=sic.dtype, device=sic.device)
    # right=True puts a value equal to a threshold in the upper class, matching "SIC >= 15 %".
    return torch.bucketize(sic, edges, right=True)
