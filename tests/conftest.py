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


MACHINE_GROUP = "machine"
"""The pytest-xdist group of every test marked ``machine``: with ``--dist loadgroup`` (``make test``)
they all run on one worker, so two never share a local SLURM, the namespaces' addresses or Ray."""


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups into the test ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("machine"):
            item.add_marker(pytest.mark.xdist_group(MACHINE_GROUP))
    # The longest first (the machine group is ~10 minutes on one worker, the long tests minutes
    # each): started last, they would leave one worker running alone at the end.
    items.sort(key=lambda item: 0 if item.get_closest_marker("machine") or item.get_closest_marker("long") else 1)


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
