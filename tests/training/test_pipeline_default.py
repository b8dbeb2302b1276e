"""``neural-arch train --set parallel.pp=2`` alone (no ``parallel.microbatches``) trains, and
equals one process.

Run: ``.venv/bin/python -m pytest tests/training/test_pipeline_default.py -q``
The same tiny float64 GPT, 10 steps and comparison as tests/training/test_parallel_trainer.py
(parameters within 1e-10, every logged loss and the validation bits per byte within 1e-12
relative, the same sample ids at every step): left out, ``microbatches`` is ``pp`` (2), so
each global batch of 6 runs as 2 micro-batches of 3 through the default 1F1B schedule.
"""

from pathlib import Path

import pytest

from tests.helpers.gpt_corpus import make_corpus
from tests.helpers.layout_runs import assert_same_run, same_samples, train

pytestmark = pytest.mark.multiprocess  # launches ranks


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return make_corpus(tmp_path_factory.mktemp("gpt"))


@pytest.mark.timeout(600)
def test_pipeline_without_microbatches_equals_one_process(corpus, tmp_path):
    train(tmp_path / "reference", corpus, 10)
    train(tmp_path / "run", corpus, 10, "--set", "parallel.pp=2", procs=2)
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert "microbatches: 2" in saved  # the default, resolved and recorded with the run
    assert_same_run(tmp_path / "run", tmp_path / "reference")
    assert same_samples(tmp_path / "run", tmp_path / "reference")
