"""The ``Placement`` interface: a new layout is one subclass, and each layout answers the loop's questions itself.

Run: ``.venv/bin/python -m pytest tests/distributed/parallel/test_placement.py -q`` (one process,
no process group). The layouts themselves train, save and resume through the trainer in
``tests/training/test_parallel_trainer.py``.
"""

import contextlib

import pytest
import torch
from torch import nn

from neural_arch.distributed import parallel as par


class Minimal(par.Placement):
    """Only the abstract methods: everything else is the interface's default."""

    def no_sync(self):
        return contextlib.nullcontext()

    def model_state(self):
        return self.plain.state_dict()

    def optimizer_state(self, optimizer):
        return optimizer.state_dict()

    def load(self, optimizer, model_state, optim_state):
        self.plain.load_state_dict(model_state)

    def load_weights(self, step_dir, state):
        self.plain.load_state_dict(state["model"])

    def whole_model(self, build):
        return self.plain


def test_a_new_layout_is_one_subclass_with_the_defaults_of_a_plain_one():
    model = nn.Linear(3, 2)
    placement = Minimal(model, model, dp_rank=0, dp_size=1, leader=True)
    assert placement.own_step is None  # the loop runs the micro-batches itself
    assert placement.min_rows == 0 and placement.counts_flops
    assert not placement.sharded_by_default and not placement.report_on_every_rank
    assert placement.compression_state() is None and placement.load_compression_state(None) is None
    assert placement.norm_parameters() == list(model.parameters())
    norm = torch.tensor(2.5)
    assert placement.reduce_norm(norm) is norm


def test_a_layout_missing_a_method_cannot_be_built():
    class Incomplete(par.Placement):
        def no_sync(self):
            return contextlib.nullcontext()

    with pytest.raises(TypeError, match="abstract"):
        Incomplete(nn.Linear(1, 1), nn.Linear(1, 1), 0, 1, True)


@pytest.mark.parametrize(
    ("cls", "sharded_by_default", "report_on_every_rank", "counts_flops"),
    [
        ("ReplicatedPlacement", False, False, True),
        ("ShardedPlacement", True, True, True),
        ("PipelinePlacement", True, False, False),
    ],
)
def test_each_layout_answers_what_the_loop_once_asked_about_the_layout(
    cls, sharded_by_default, report_on_every_rank, counts_flops
):
    placement = getattr(par, cls)
    assert issubclass(placement, par.Placement)
    assert placement.sharded_by_default is sharded_by_default  # checkpoint.format: auto
    assert placement.report_on_every_rank is report_on_every_rank  # Task.REPORT_ON_EVERY_RANK applies
    assert placement.counts_flops is counts_flops  # the first step's FLOP count
