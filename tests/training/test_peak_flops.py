"""The MFU peak: measured once per machine and cached, never varying with load; MFU <= 1.

Run: ``.venv/bin/python -m pytest tests/training/test_peak_flops.py``
Load is simulated, never timed: the "measurement" is a function returning a peak far below
what the machine does (as a matmul timed on a busy machine would be). Then a run's MFU still
never exceeds 1: the first row that beats the peak raises it, in the run and in the cache,
and the log says so.
"""

import json

import pytest
import torch

from neural_arch.training import peak_flops as peak_module
from neural_arch.training.config import load_config
from neural_arch.training.interval_metrics import FIRST, PER_RANK, IntervalMeter
from neural_arch.training.peak_flops import machine_key, rank_peak
from neural_arch.training.trainer import train
from tests.helpers.run_outputs import metrics

CPU = torch.device("cpu")


def _never(device: torch.device) -> float:
    raise AssertionError("measured again: the cached peak was not used")


def test_measured_once_then_read_from_the_cache(tmp_path):
    cache = tmp_path / "peak_flops.json"
    first = rank_peak(CPU, None, cache=cache, measure=lambda device: 5e8)
    again = rank_peak(CPU, None, cache=cache, measure=_never)
    assert first.value == again.value == 5e8
    assert str(cache) in again.describe() and machine_key(CPU) in again.describe()
    assert json.loads(cache.read_text())[machine_key(CPU)]["flops"] == 5e8


def test_a_configured_peak_is_used_as_given_and_never_cached(tmp_path):
    cache = tmp_path / "peak_flops.json"
    peak = rank_peak(CPU, 2e12, cache=cache, measure=_never)
    assert (peak.value, peak.source) == (2e12, "logging.peak_flops")
    assert not cache.exists()


def test_a_damaged_cache_is_measured_again(tmp_path):
    cache = tmp_path / "peak_flops.json"
    cache.write_text("{not json")
    assert rank_peak(CPU, None, cache=cache, measure=lambda device: 7e8).value == 7e8


def _row(meter: IntervalMeter, step_flops_sum: float, step_seconds: float) -> dict[str, float]:
    """A metrics row from a summed vector built by hand: every rank ``step_seconds`` of compute."""
    total = torch.zeros(FIRST + PER_RANK * meter.world_size + 1, dtype=torch.float64)
    for rank in range(meter.world_size):
        total[FIRST + PER_RANK * rank + 1] = step_seconds
    total[-1] = step_flops_sum
    meter.count_step(8, 0.0, step_seconds, step_seconds)
    return meter.row(total, None)


def test_a_row_above_the_peak_has_mfu_1_and_raises_the_peak(tmp_path, caplog):
    cache = tmp_path / "peak_flops.json"
    peak = rank_peak(CPU, None, write=True, cache=cache, measure=lambda device: 1e3)  # "measured under load"
    meter = IntervalMeter(2, 0, CPU, peak.value, on_peak_raised=peak.raise_to)
    row = _row(meter, 4e6, 0.5)  # 8e6 FLOP/s over 2 ranks: 4e6 per rank
    assert row["perf/mfu"] == 1.0 and meter.peak_flops == peak.value == 4e6
    assert "the peak was too low" in caplog.text
    assert rank_peak(CPU, None, cache=cache, measure=_never).value == 4e6
    assert _row(meter, 2e6, 0.5)["perf/mfu"] == pytest.approx(0.5)  # later rows: against the raised peak


@pytest.mark.timeout(180)
def test_every_row_of_a_run_with_a_peak_measured_under_load_has_mfu_at_most_1(tmp_path, monkeypatch):
    cache = tmp_path / "cache" / "peak_flops.json"
    monkeypatch.setattr(peak_module, "CACHE", cache)
    monkeypatch.setattr(peak_module, "measured_peak_flops", lambda device: 1e3)  # a machine busy at start-up
    run = tmp_path / "run"
    train(load_config("configs/tiny.yaml", ["training.steps=10", "logging.every_steps=2", f"run.dir={run}"]))
    rows = [row for row in metrics(run, perf=True) if "perf/mfu" in row]
    assert len(rows) >= 5
    assert all(0 < row["perf/mfu"] <= 1 for row in rows), [row["perf/mfu"] for row in rows]
    log = (run / "logs" / "rank_0.log").read_text()
    assert "peak FLOP/s per rank: 1000" in log and "the peak was too low" in log
    assert json.loads(cache.read_text())[machine_key(CPU)]["flops"] > 1e3
