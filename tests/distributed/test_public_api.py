"""The public distributed API resolves as it did when its packages imported everything eagerly.

Run: ``.venv/bin/python -m pytest tests/distributed/test_public_api.py -q`` (about 1 s with torch
loaded, plus one fresh interpreter). ``neural_arch.distributed`` and its ``launcher`` export their
names lazily (PEP 562), so that the launcher's ``--help`` does not load torch; these tests hold
the names of DESIGN.md's API contract and of the seeds' snippets to their real objects.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import neural_arch.distributed as distributed
import neural_arch.distributed.launcher as launcher

# DESIGN.md's API contract (the seeds' names), each with the module that defines it.
CONTRACT = {
    "init_process_group": "runtime",
    "destroy_process_group": "runtime",
    "is_initialized": "runtime",
    "get_rank": "runtime",
    "get_world_size": "runtime",
    "get_local_rank": "runtime",
    "barrier": "runtime",
    "get_distributed_info": "runtime",
    "ReduceOp": "runtime",
    "all_reduce": "runtime",
    "all_gather": "runtime",
    "broadcast": "runtime",
    "reduce_scatter": "runtime",
    "DistributedDataParallel": "data_parallel",
    "no_sync": "data_parallel",
    "DistributedSampler": "data_parallel",
    "LaunchConfig": "launcher",
    "DistributedLauncher": "launcher",
    "launch_distributed_training": "launcher",
}


@pytest.mark.parametrize("package", [distributed, launcher], ids=["distributed", "launcher"])
def test_every_exported_name_resolves_and_star_import_gives_them_all(package):
    assert sorted(package._WHERE) == sorted(package.__all__)
    for name in package.__all__:
        assert getattr(package, name) is not None, name
        assert name in dir(package)
    namespace: dict[str, object] = {}
    exec(f"from {package.__name__} import *", namespace)
    assert set(package.__all__) <= set(namespace)


def test_the_contract_names_are_the_defining_modules_objects():
    import importlib

    for name, module in CONTRACT.items():
        defining = importlib.import_module(f"neural_arch.distributed.{module}")
        assert getattr(distributed, name) is getattr(defining, name), name
    from neural_arch.distributed import ReduceOp

    for op in ("SUM", "AVERAGE", "MAX", "MIN", "PRODUCT"):
        assert hasattr(ReduceOp, op), op


def test_subpackages_are_attributes_and_unknown_names_raise_attribute_error():
    assert distributed.runtime.__name__ == "neural_arch.distributed.runtime"
    assert distributed.checkpoint.__name__ == "neural_arch.distributed.checkpoint"
    with pytest.raises(AttributeError, match="no_such_name"):
        distributed.no_such_name  # noqa: B018 - the attribute access is the test
    with pytest.raises(AttributeError, match="no_such_name"):
        launcher.no_such_name  # noqa: B018
    from neural_arch.distributed.launcher import cpu_bind  # a submodule, not an export

    assert cpu_bind.__name__.endswith("launcher.cpu_bind")


def test_importing_the_packages_does_not_load_torch():
    probe = "import sys, neural_arch.distributed, neural_arch.distributed.launcher; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr
