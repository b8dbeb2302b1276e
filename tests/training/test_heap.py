"""The training loop runs with set-up's objects frozen out of the collector, and gives them back.

Run: ``.venv/bin/python -m pytest tests/training/test_heap.py -q``
World size 1, in this process (the default config's tiny regression task). What must hold:
inside the loop the objects from before it are frozen (a full GC pass does not walk them);
after ``train()`` returns or raises, nothing stays frozen, so the earlier objects of a
process that trains twice (tests, notebooks) can be collected again.
"""

import gc

import pytest

from neural_arch.training.config import load_config
from neural_arch.training.heap import frozen_heap
from neural_arch.training.trainer import train
from tests.helpers.trainer_runs import QUIET_SMALL

BASE = ["training.steps=6", *QUIET_SMALL]


def test_frozen_heap_freezes_what_exists_and_unfreezes_on_error():
    assert gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError, match="boom"):
        with frozen_heap():
            frozen = gc.get_freeze_count()
            assert frozen > 1000  # at least the interpreter's and pytest's own objects
            made = [[i] for i in range(100)]  # new objects are not frozen
            # At most as many: a frozen object is still freed when its last reference goes,
            # and another thread (pytest-xdist's I/O thread) may drop some meanwhile.
            assert gc.get_freeze_count() <= frozen and made
            raise RuntimeError("boom")
    assert gc.get_freeze_count() == 0


def test_a_callers_own_freeze_is_left_frozen():
    gc.freeze()  # e.g. a host application that froze its objects before forking workers
    try:
        before = gc.get_freeze_count()
        with frozen_heap():
            made = [[i] for i in range(100)]
        assert made and gc.get_freeze_count() >= before > 0
    finally:
        gc.unfreeze()


def test_train_freezes_set_up_during_the_loop_only(tmp_path):
    counts: list[int] = []
    train(
        load_config(None, [*BASE, f"run.dir={tmp_path / 'ok'}"]),
        on_step=lambda step: counts.append(gc.get_freeze_count()),
    )
    assert len(counts) == 6 and min(counts) > 1000 and gc.get_freeze_count() == 0

    def fail(step: int) -> None:
        if step == 3:
            raise RuntimeError("injected at step 3")

    with pytest.raises(RuntimeError, match="injected at step 3"):
        train(load_config(None, [*BASE, f"run.dir={tmp_path / 'failed'}"]), on_step=fail)
    assert gc.get_freeze_count() == 0
