"""The next step's batch built in a background thread: right ids, same numbers, clean stops.

Run: ``.venv/bin/python -m pytest tests/training/test_prefetch.py -q``
No process group needed: the sampler is given its rank, and the trainer runs as world size 1
(the 2- and 3-rank exactness tests in test_trainer.py / test_parallel_trainer.py run with
prefetch on, its default). Tolerance: bitwise (prefetch must not change any number).
"""

import threading
import time

import pytest
import torch

import neural_arch.distributed as nd
from neural_arch.training import prefetch as prefetch_module
from neural_arch.training.config import load_config
from neural_arch.training.prefetch import Prefetcher, next_batch
from neural_arch.training.trainer import train
from tests.helpers.run_outputs import assert_params, final_params, metrics
from tests.helpers.trainer_runs import TWENTY_STEPS


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("neural_arch-prefetch")]


def test_next_batch_is_what_the_sampler_yields_next_across_epochs_and_resume():
    # 101 samples in batches of 12 on rank 1 of 3: every epoch ends with a 5-sample batch
    sampler = nd.DistributedSampler(dataset_size=101, batch_size=12, seed=3, rank=1, num_replicas=3)
    guesses, seen = [], []
    while len(seen) < 30:
        for batch in sampler:
            if seen:
                assert (list(batch), batch.global_size) == guesses[-1], len(seen)
            seen.append(batch)
            state = sampler.state_dict()
            guess = next_batch(sampler)
            assert sampler.state_dict() == state  # peeking moves nothing a checkpoint stores
            guesses.append((list(guess), guess.global_size))
            if len(seen) == 30:
                break
        else:
            sampler.set_epoch(sampler.epoch + 1)
    # a sampler restored mid-epoch and at an epoch's end peeks what its loop runs next
    for position in (48, 101):
        restored = nd.DistributedSampler(dataset_size=101, batch_size=12, seed=3, rank=1, num_replicas=3)
        restored.load_state_dict({**sampler.state_dict(), "epoch": 2, "position": position})
        guess = next_batch(restored)
        batches = list(restored)
        if not batches:  # the trainer's loop moves to the next epoch
            restored.set_epoch(3)
            batches = list(restored)
        assert (list(guess), guess.global_size) == (list(batches[0]), batches[0].global_size)


def test_prefetcher_hands_out_its_build_or_builds_now_and_stops_cleanly():
    where: list[str] = []

    def build(batch: nd.IndexBatch) -> list[int]:
        where.append(threading.current_thread().name)
        if 99 in batch:
            raise KeyError("sample 99 is damaged")
        return [2 * i for i in batch]

    with Prefetcher(build) as ahead:
        assert ahead.take(nd.IndexBatch([1, 2], 4)) == [2, 4] and where[-1] == "MainThread"  # nothing ahead yet
        ahead.start(nd.IndexBatch([3, 4], 4))
        assert ahead.take(nd.IndexBatch([3, 4], 4)) == [6, 8] and where[-1].startswith("neural_arch-prefetch")
        ahead.start(nd.IndexBatch([5], 4))  # a wrong guess is not handed out: built again here
        assert ahead.take(nd.IndexBatch([5], 2)) == [10] and where[-1] == "MainThread" and ahead.hits == 1
        ahead.start(nd.IndexBatch([99], 2))
        with pytest.raises(KeyError, match="damaged"):  # the background's error, raised by the take that asks
            ahead.take(nd.IndexBatch([99], 2))
        ahead.start(nd.IndexBatch([98], 2))  # a wrong guess's error is not the run's
        ahead.start(nd.IndexBatch([99], 2))
        assert ahead.take(nd.IndexBatch([7], 2)) == [14]
    assert not prefetch_threads()
    with Prefetcher(build, enabled=False) as off:
        off.start(nd.IndexBatch([1], 1))
        assert off.take(nd.IndexBatch([1], 1)) == [2] and where[-1] == "MainThread" and off.hits == 0


def test_an_error_in_the_loop_waits_for_the_build_in_progress_and_stops_the_thread():
    done = threading.Event()

    def slow(batch: nd.IndexBatch) -> int:
        time.sleep(0.3)
        done.set()
        return len(batch)

    with pytest.raises(RuntimeError, match="step failed"):
        with Prefetcher(slow) as ahead:
            ahead.start(nd.IndexBatch([1, 2], 2))
            raise RuntimeError("step failed")
    assert done.is_set() and not prefetch_threads()


def test_prefetch_changes_no_number(tmp_path, monkeypatch):
    hits: list[int] = []
    real_close = Prefetcher.close
    monkeypatch.setattr(prefetch_module.Prefetcher, "close", lambda self: (hits.append(self.hits), real_close(self))[1])
    runs = {}
    for prefetch in ("true", "false"):
        run = tmp_path / prefetch
        train(load_config(None, [*TWENTY_STEPS, f"run.dir={run}", f"training.prefetch={prefetch}"]))
        runs[prefetch] = run
    assert hits == [19, 0]  # every step after the first took the background build; none with prefetch off
    assert metrics(runs["true"]) == metrics(runs["false"])
    assert_params(final_params(runs["true"]), final_params(runs["false"]), atol=0)
    assert torch.get_num_threads() >= 1 and not prefetch_threads()
