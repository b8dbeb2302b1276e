"""Which batch-coupled layers the trainer makes exact, and the one line it refuses the others with.

Run: ``.venv/bin/python -m pytest tests/training/test_batch_coupling.py -q`` (one process, no
process group: the placement-time check only; the exactness itself is tested in
tests/distributed/data_parallel/test_batch_norm.py and tests/training/test_batch_norm_task.py).
"""

import pytest
import torch
from torch import nn

from neural_arch.distributed.data_parallel.batch_norm import EXACT_CLASSES
from neural_arch.distributed.parallel.layout import ParallelLayout
from neural_arch.training.batch_coupling import exact_batch_coupling
from neural_arch.training.config import load_config
from neural_arch.training.typed_config import ConfigError


class Net(nn.Module):
    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv1d(2, 4, 1), norm)
        self.extra = nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.extra(self.body(x))


class Renamed(nn.BatchNorm1d):
    """A user's subclass: its behaviour is its own, so the trainer cannot know it is safe to sync."""


def config(*overrides: str):
    return load_config(None, ["run.task=regression", *overrides])


def test_every_batch_norm_becomes_exact_with_its_names_kept():
    model = Net(nn.SyncBatchNorm(4))
    names = list(model.state_dict())
    assert exact_batch_coupling(model, config()) == 2
    assert list(model.state_dict()) == names
    assert all(type(m) in EXACT_CLASSES.values() for m in (model.body[1], model.extra))
    assert exact_batch_coupling(model, config()) == 2  # idempotent
    assert exact_batch_coupling(nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2)), config()) == 0
    model(torch.randn(3, 2, 5))  # trains on one process without a process group


@pytest.mark.parametrize(
    ("norm", "overrides", "layout", "expected"),
    [
        (nn.BatchNorm1d(4), ["training.grad_accum_steps=2"], None, "set training.grad_accum_steps=1"),
        (nn.BatchNorm1d(4), [], ParallelLayout(pp=2), "parallel.pp=2 runs the step as pipeline micro-batches"),
        (nn.BatchNorm1d(4), [], ParallelLayout(tp=2), "parallel.tp=2: batch statistics are not synchronised"),
        (Renamed(4), [], None, "(Renamed) (and 1 more such layer(s)) normalises"),
        (nn.BatchNorm1d(4, track_running_stats=False), [], None, "set track_running_stats=True"),
    ],
)
def test_what_cannot_be_exact_is_refused_in_one_line_naming_the_layer(norm, overrides, layout, expected):
    model = Net(norm)
    with pytest.raises(ConfigError) as refused:
        exact_batch_coupling(model, config(*overrides), layout)
    message = str(refused.value)
    assert message.startswith("model.body.1 (") and expected in message and "\n" not in message
    assert "nn.GroupNorm / nn.LayerNorm" in message
    assert type(model.extra) is nn.BatchNorm1d  # nothing changed before the refusal
