"""No compiler import in an eager run, with the same numbers (lazy_dynamo.py); no DTensor import
in a replicated one (snapshot_parts.py).

Run: ``.venv/bin/python -m pytest tests/training/test_lazy_dynamo.py``
Each case runs in a fresh interpreter (``torch._dynamo`` is imported for good once imported):
SGD with momentum, Adam and AdamW step under a ``TorchDispatchMode`` (as the FLOP counter's
first step does), save and load their state; with the shims the parameters are bitwise those
of stock torch and ``torch._dynamo`` is never imported.
"""

import json
import subprocess
import sys

import pytest

STEPS = """
import json, sys
import torch
from torch.utils._python_dispatch import TorchDispatchMode
if sys.argv[1] == "lazy":
    from neural_arch.training.lazy_dynamo import defer_dynamo_imports

class Passthrough(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))

if sys.argv[1] == "lazy":
    defer_dynamo_imports()
torch.manual_seed(0)
out = {}
for name in ("SGD", "Adam", "AdamW"):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()
    kwargs = {"momentum": 0.9} if name == "SGD" else {}
    opt = getattr(torch.optim, name)(model.parameters(), lr=0.01, **kwargs)
    for step in range(3):
        opt.zero_grad(set_to_none=True)
        with Passthrough():
            loss = model(torch.randn(5, 4, dtype=torch.float64)).pow(2).mean()
            loss.backward()
        opt.step()
    opt.load_state_dict(opt.state_dict())
    out[name] = [p.detach().flatten().tolist() for p in model.parameters()]
out["dynamo"] = "torch._dynamo" in sys.modules
print(json.dumps(out))
"""


def _run(mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", STEPS, mode], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_optimizers_step_without_dynamo_and_bitwise_as_stock_torch() -> None:
    lazy, stock = _run("lazy"), _run("stock")
    assert stock["dynamo"], "stock torch imports torch._dynamo here: the test no longer shows anything"
    assert not lazy["dynamo"]
    for name in ("SGD", "Adam", "AdamW"):
        assert lazy[name] == stock[name], name  # floats through JSON repr: bitwise


def test_once_dynamo_is_imported_torch_own_wrappers_take_over() -> None:
    code = """
import sys, torch
from neural_arch.training.lazy_dynamo import defer_dynamo_imports
assert defer_dynamo_imports() > 0
fn = torch.optim.Optimizer.zero_grad.__wrapped__
shim = getattr(fn, "__dynamo_disable")
import torch._dynamo
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.ones(1, 2)).sum().backward()
opt.step()
opt.zero_grad()
assert getattr(fn, "__dynamo_disable") is not shim, "torch's disabled function was not built"
assert defer_dynamo_imports() == 0
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


@pytest.mark.timeout(300)
def test_a_one_process_training_run_never_imports_the_compiler(tmp_path) -> None:
    code = f"""
import sys
from neural_arch.training.config import load_config
from neural_arch.training.trainer import train
cfg = load_config("configs/tiny.yaml", ["training.steps=2", "run.dir={tmp_path / "run"}"])
train(cfg)
print("compiler imported:", "torch._dynamo" in sys.modules)
print("DTensor imported:", "torch.distributed.tensor" in sys.modules, "sympy:", "sympy" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "compiler imported: False" in done.stdout
    # a replicated run holds no DTensor: its import (0.7 s, sympy with it) is for sharded layouts
    assert "DTensor imported: False sympy: False" in done.stdout, done.stdout


def ddp_worker(rank: int, world_size: int, lazy: bool) -> dict:
    import torch

    from neural_arch.distributed import DistributedDataParallel, init_process_group
    from neural_arch.training.lazy_dynamo import ddp_without_compiler, defer_dynamo_imports

    before = "torch._dynamo" in sys.modules
    init_process_group(backend="gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()
    if lazy:
        defer_dynamo_imports()
        with ddp_without_compiler():
            ddp = DistributedDataParallel(model)
    else:
        ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    inputs = torch.randn(6, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(rank))
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        ddp(inputs).pow(2).mean().backward()
        opt.step()
    return {
        "before": before,
        "dynamo": "torch._dynamo" in sys.modules,
        "weights": [p.detach().flatten().tolist() for p in model.parameters()],
    }


@pytest.mark.multiprocess
def test_ddp_built_without_the_compiler_trains_bitwise_as_stock_ddp() -> None:
    from tests.helpers.multiproc import run_ranks

    lazy, stock = run_ranks(ddp_worker, 2, args=(True,)), run_ranks(ddp_worker, 2, args=(False,))
    assert not any(r["before"] for r in lazy + stock), "ranks start with the compiler imported: nothing shown"
    assert all(r["dynamo"] for r in stock), "stock DDP no longer imports torch._dynamo: the shim is moot"
    assert not any(r["dynamo"] for r in lazy)
    assert [r["weights"] for r in lazy] == [r["weights"] for r in stock]  # floats as Python values: bitwise
