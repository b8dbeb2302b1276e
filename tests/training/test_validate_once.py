"""A layout is checked once per process: the rules live in one function and every other caller uses its result.

Run: ``.venv/bin/python -m pytest tests/training/test_validate_once.py -q`` (about 20 s: one spawned 1-step rank)
``validate`` (distributed/parallel/layout.py) holds the layout's rules, ``check_layout``
(training/layout_check.py) every rule of the ``parallel:`` section; ``validate_config`` calls
the latter. ``neural-arch train`` checks in the launching process (before any worker starts), a
worker checks for the world it joined, the trainer again (for a world started by torchrun), and
``build_mesh`` too: counted here, the rules run once per process all the same. A layout built
in Python and given to ``build_mesh`` directly is still checked there.
"""

from __future__ import annotations

from collections import Counter

import pytest

import neural_arch.distributed.parallel.layout as layout_module
import neural_arch.distributed.parallel.mesh as mesh_module
import neural_arch.training.config as config_module
from neural_arch.cli import train as train_cli
from neural_arch.distributed.parallel import ParallelLayout
from tests.helpers.multiproc import run_ranks

RUN = [
    "training.steps=1",
    "training.precision=fp64",
    "training.global_batch_size=4",
    "training.report=false",
    "data.num_samples=16",
    "data.val_samples=8",
    "logging.progress=false",
    "logging.tensorboard=false",
    "parallel.gather_for_eval=false",  # a parallel: layout (FSDP's code path) that runs on one process
]
"""One step of the regression MLP, with a ``parallel:`` section, so the layout is checked and a mesh built."""


def count_checks(patch: pytest.MonkeyPatch | None = None) -> Counter[str]:
    """Count, from now on in this process, the layout's rule runs, the config's checks of the
    ``parallel:`` section, and the calls to ``validate`` that ``build_mesh`` makes; the
    process's memory of checked pairs starts empty."""
    counts: Counter[str] = Counter()
    rules, section, mesh_validate = layout_module._check_rules, config_module.check_layout, mesh_module.validate

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    setattr_ = patch.setattr if patch is not None else setattr
    setattr_(layout_module, "_CHECKED", set())
    setattr_(config_module, "_VALIDATED", set())
    setattr_(layout_module, "_check_rules", counted("layout rules", rules))
    setattr_(config_module, "check_layout", counted("parallel section", section))
    setattr_(mesh_module, "validate", counted("build_mesh asks", mesh_validate))
    return counts


def train_one_rank(rank: int, world_size: int, run_dir: str) -> dict[str, int]:
    """A rank of a 1-process world (as under torchrun): ``neural-arch train`` in this process."""
    counts = count_checks()
    assert train_cli.main(["--set", *RUN, f"run.dir={run_dir}"]) == 0
    return dict(counts)


@pytest.mark.multiprocess  # a spawned rank
@pytest.mark.timeout(300)
def test_a_rank_checks_its_layout_once(tmp_path):
    """The CLI worker checks the config, the trainer checks it again for the world it joined,
    build_mesh checks the layout: the rules run once, the others answer from that."""
    counts = run_ranks(train_one_rank, 1, args=(str(tmp_path / "run"),), timeout=240)[0]
    assert counts["build_mesh asks"] == 1, counts  # the mesh was built, so every caller was reached
    assert counts["layout rules"] == 1 and counts["parallel section"] == 1, counts


def test_the_launching_process_checks_once_before_starting_workers(tmp_path, monkeypatch):
    counts = count_checks(monkeypatch)
    launched = []
    monkeypatch.setattr(train_cli, "_launch_workers", lambda cfg, nproc, argv: launched.append(nproc) or 0)
    argv = ["--nproc-per-node", "2", "--set", *RUN, "parallel.dp_shard=2", f"run.dir={tmp_path / 'run'}"]
    assert train_cli.main(argv) == 0
    assert launched == [2]
    assert counts["layout rules"] == 1 and counts["parallel section"] == 1, counts


def test_a_bad_layout_is_refused_before_any_worker_starts(tmp_path, monkeypatch, capsys):
    count_checks(monkeypatch)
    monkeypatch.setattr(train_cli, "_launch_workers", lambda *args: pytest.fail("a worker was started"))
    argv = ["--nproc-per-node", "2", "--set", *RUN, "parallel.dp_shard=4", f"run.dir={tmp_path / 'run'}"]
    assert train_cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "= 4 but the world has 2 processes; make the product 2" in err
    assert not (tmp_path / "run").exists()


def test_validate_runs_the_rules_once_per_layout_and_world(monkeypatch):
    counts = count_checks(monkeypatch)
    layout = ParallelLayout(dp_shard=2, tp=2)
    for _ in range(3):
        assert layout_module.validate(layout, 4) is layout
    layout_module.validate(ParallelLayout(dp_shard=2, tp=2), 4)  # equal values: the same pair
    assert counts["layout rules"] == 1
    with pytest.raises(ValueError, match="but the world has 8 processes"):
        layout_module.validate(layout, 8)  # another world: checked, and refused every time
    with pytest.raises(ValueError, match="but the world has 8 processes"):
        layout_module.validate(layout, 8)
    with pytest.raises(ValueError, match=r"parallel.dp_shard=True must be an integer >= 1"):
        layout_module.validate(ParallelLayout(dp_shard=True), 1)  # == dp_shard=1, but not the same layout
    assert counts["layout rules"] == 4


def test_a_config_edited_after_its_check_is_checked_again(monkeypatch):
    from neural_arch.training.config import ConfigError, load_config, validate_config

    counts = count_checks(monkeypatch)
    cfg = load_config(None, ["parallel.dp_shard=2"], world_size=2)
    validate_config(cfg, world_size=2)
    assert counts["parallel section"] == 1
    cfg.training.global_batch_size = 31
    with pytest.raises(ConfigError, match="training.global_batch_size=31 is not divisible"):
        validate_config(cfg, world_size=2)
    assert counts["parallel section"] == 2
