"""Every YAML recipe in configs/ loads and validates, with the sizes its comments claim.

Run: ``.venv/bin/python -m pytest tests/training/test_shipped_configs.py -q``
GPU recipes cannot run here; this at least keeps them valid as the schema changes.
"""

import pytest

from neural_arch.apps.gpt.model import GPT, count_parameters
from neural_arch.training.config import load_config
from tests.helpers.paths import REPO

CONFIGS = sorted((REPO / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_recipe_loads_and_validates(path):
    cfg = load_config(path)  # validates ranges and cross-field rules at its own process count
    assert cfg.run.task


def test_gpu_gpt_recipe_is_about_100m_parameters_on_8_nccl_ranks_in_bf16():
    cfg = load_config(REPO / "configs" / "gpt_gpu.yaml")
    m = cfg.model
    params = count_parameters(
        GPT(d_model=m.d_model, n_layers=m.n_layers, n_heads=m.n_heads, mlp_ratio=m.mlp_ratio, context=m.context)
    )
    assert 90e6 <= params <= 110e6, params
    assert (cfg.training.nproc_per_node, cfg.training.backend, cfg.training.precision) == (8, "nccl", "bf16")
    assert cfg.training.global_batch_size % 8 == 0
