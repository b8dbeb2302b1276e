"""FSDP evaluation gathered once: the same outputs, no per-forward gathering, the room checked.

Run: ``.venv/bin/python -m pytest tests/distributed/parallel/test_gathered_eval.py -q``
2 real ranks over gloo, a float64 model of 3 blocks sharded block by block (``fully_shard``).
Inside ``gathered_for_evaluation`` the blocks' parameters stay gathered between forwards (plain
tensors, not DTensors, after a forward returns) and the outputs equal per-forward gathering
bitwise; after it the model is sharded again and a training step's gradients are unchanged.
Where one rank has no room (an injected ``StagingRoom``), no rank gathers and the note names it.
"""

from __future__ import annotations

from typing import Optional

import pytest
import torch
from torch import nn

from neural_arch.distributed import init_process_group
from neural_arch.distributed.checkpoint.staging_room import StagingRoom
from neural_arch.distributed.parallel.gathered_eval import gathered_for_evaluation
from tests.helpers.multiproc import run_ranks

pytestmark = pytest.mark.multiprocess  # spawns ranks


class NoRoomOnRank1(StagingRoom):
    def shortfall(self, need: int, device_need: int = 0, held_through_training: bool = True) -> Optional[str]:
        return f"{need} bytes do not fit" if torch.distributed.get_rank() == 1 else None


def sharded_model(world_size: int) -> nn.Sequential:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(6, 6) for _ in range(3)]).double()
    mesh = init_device_mesh("cpu", (world_size,))
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh, reshard_after_forward=False)
    return model


def worker(rank: int, world_size: int, short_on_rank1: bool) -> dict:
    from torch.distributed.tensor import DTensor

    init_process_group(backend="gloo")
    model = sharded_model(world_size)
    inputs = [torch.randn(4, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    with torch.no_grad():
        per_forward = [model(x) for x in inputs]
    room = NoRoomOnRank1() if short_on_rank1 else None
    with torch.no_grad(), gathered_for_evaluation(model, room) as note:
        gathered = [model(x) for x in inputs]
        held = not isinstance(model[1].weight, DTensor)  # still gathered after its forward returned
    resharded = isinstance(model[1].weight, DTensor)
    model(inputs[0]).sum().backward()
    grad = model[1].weight.grad.full_tensor()
    return {
        "equal": all(torch.equal(a, b) for a, b in zip(per_forward, gathered)),
        "held": held,
        "resharded": resharded,
        "note": note,
        "grad": grad.tolist(),  # plain values: a tensor would travel as shared memory of a process that exits
    }


def reference_grad() -> torch.Tensor:
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(6, 6) for _ in range(3)]).double()
    x = torch.randn(4, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    model(x).sum().backward()
    return model[1].weight.grad


def test_evaluation_keeps_the_model_gathered_with_the_same_outputs_then_shards_it_again():
    want = reference_grad()
    for rank, got in enumerate(run_ranks(worker, 2, args=(False,))):
        assert got["equal"] and got["held"] and got["resharded"] and got["note"] is None, rank
        # each rank's gradient is of its own copy of the batch; FSDP averages the two equal ones
        assert torch.allclose(torch.tensor(got["grad"], dtype=torch.float64), want, rtol=0, atol=1e-12), rank


def test_a_rank_without_room_keeps_every_rank_gathering_per_forward():
    for rank, got in enumerate(run_ranks(worker, 2, args=(True,))):
        assert got["equal"] and not got["held"] and got["resharded"], rank
        assert "on rank 1 " in got["note"] and "stays sharded" in got["note"], rank
