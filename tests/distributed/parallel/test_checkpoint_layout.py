"""A DCP checkpoint saved on tensor parallelism loads exactly on FSDP (real gloo ranks).

Run: ``pytest tests/distributed/parallel/test_checkpoint_layout.py -q`` (about 20 s).

The fused q/k/v weight under ``FusedColwiseParallel`` has no one-box-per-rank layout, so
DCP refuses it as is; ``dcp_savable`` makes it savable. The test checks the refusal, then
that model and Adam state saved on TP x2 come back bit for bit on FSDP x2, and that the
checkpoint's tensors are the full model's.
"""

from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

from neural_arch.apps.gpt.parallelize import parallel_plan
from neural_arch.distributed import init_process_group
from neural_arch.distributed.parallel import ParallelLayout, build_mesh, dcp_restore, dcp_savable, parallelize_model
from tests.helpers.gpt_runs import Setup, build_model, data, sample_loss
from tests.helpers.multiproc import run_ranks

pytestmark = pytest.mark.multiprocess
FULL = StateDictOptions(full_state_dict=True)


def _trained(layout: ParallelLayout, scale: float) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The GPT (weights times ``scale``) on ``layout`` after one Adam step, so Adam has state."""
    model = build_model(Setup())
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    parallelize_model(model, layout, build_mesh(layout), parallel_plan())
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    window = data(Setup())[:4]
    sample_loss(model(window[:, :-1]), window[:, 1:]).sum().backward()
    opt.step()
    return model, opt


def _full(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict:
    model_sd, optim_sd = get_state_dict(model, opt, options=FULL)
    adam = {f"{k}.{s}": v[s].numpy() for k, v in optim_sd["state"].items() for s in ("exp_avg", "exp_avg_sq")}
    return {**{k: v.numpy() for k, v in model_sd.items()}, **adam}


def save_then_load_worker(rank: int, world: int, path: str) -> dict:
    init_process_group(backend="gloo")
    model, opt = _trained(ParallelLayout(tp=2), 1.0)
    model_sd, optim_sd = get_state_dict(model, opt)
    try:
        dcp.save({"model": model_sd}, checkpoint_id=path + "_raw")
        refused = ""
    except (CheckpointException, ValueError) as err:  # the coordinator raises ValueError, the others this
        refused = str(err)
    dcp.save(dcp_savable({"model": model_sd, "optim": optim_sd}), checkpoint_id=path)
    other, other_opt = _trained(ParallelLayout(dp_shard=2), 0.5)  # different weights and Adam state
    model_sd, optim_sd = get_state_dict(other, other_opt)
    view = dcp_savable({"model": model_sd, "optim": optim_sd})
    dcp.load(view, checkpoint_id=path)
    loaded = dcp_restore(view)
    set_state_dict(other, other_opt, model_state_dict=loaded["model"], optim_state_dict=loaded["optim"])
    return {"refused": refused, "saved": _full(model, opt), "loaded": _full(other, other_opt)}


@pytest.mark.timeout(300)
def test_tensor_parallel_checkpoint_resumes_on_fsdp(tmp_path: Path):
    results = run_ranks(save_then_load_worker, 2, args=(str(tmp_path / "ck"),), timeout=280)
    assert "overlapping chunks" in results[0]["refused"]
    saved, loaded = results[0]["saved"], results[1]["loaded"]
    assert saved.keys() == loaded.keys() and any(k.endswith("exp_avg_sq") for k in saved)
    assert all((saved[k] == loaded[k]).all() for k in saved)
    dcp_to_torch_save(tmp_path / "ck", tmp_path / "full.pt")
    on_disk = torch.load(tmp_path / "full.pt")["model"]
    assert all(torch.equal(on_disk[k], torch.as_tensor(saved[k])) for k in on_disk)
    assert "blocks.0.attn.qkv.weight" in on_disk
