"""Shared fixtures: every test starts and ends with a clean environment and no process group."""

import os

import pytest
import torch.distributed as dist

_LAUNCHER_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
)


@pytest.fixture(autouse=True)
def clean_distributed_state():
    saved = dict(os.environ)
    for key in _LAUNCHER_VARS:
        os.environ.pop(key, None)
    yield
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    os.environ.clear()
    os.environ.update(saved)


# `make test` runs two pytest workers (pytest-xdist, `--dist loadgroup`): most of the suite's wall time
# is spent waiting (timeouts, keep-alives, partitions, daemons), not computing. Tests that share
# machine-wide state run on one worker, one at a time: the local SLURM daemons and their state
# directory (tests/helpers/clusters.py, and the docs pages, one of which submits SLURM jobs), and a
# local Ray cluster. A module joins a group by what it uses, so a new SLURM or Ray test needs no list.
_SHARED = (("local_slurm", "slurm"), ("tests.helpers.ray_runs", "ray"), ("import ray", "ray"))


def _group_of(path) -> str | None:
    text = path.read_text(encoding="utf-8")
    return next((group for needle, group in _SHARED if needle in text), None)


def pytest_collection_modifyitems(config, items):
    groups: dict = {}
    for item in items:
        path = item.path
        if path not in groups:
            groups[path] = _group_of(path)
        if groups[path] is not None:
            item.add_marker(pytest.mark.xdist_group(groups[path]))
