"""The four hand-written peers of peers.py: raw torch DDP, Lightning Fabric, Accelerate, our bare wrapper.

Run (peers.py does, with these launchers; OMP_NUM_THREADS=1):
  ``python -m torch.distributed.run --standalone --nproc_per_node=2 -m benchmarks.peers.peers_workers raw ARGS``
  ``python -m benchmarks.peers.peers_workers fabric ARGS``            (Fabric starts rank 1 itself)
  ``accelerate launch --multi_gpu --num_processes 2 --module benchmarks.peers.peers_workers accelerate ARGS``
  ``python -m neural_arch.distributed.launcher --nproc_per_node=2 -m benchmarks.peers.peers_workers ours ARGS``
with ``ARGS = --workload mlp|gpt --steps N --data DIR --out DIR``, from the repository root (the
workers import ``benchmarks.peers.peers_setup``, found there as ``python -m`` finds it).

Each is what a user of that framework writes, following its documentation, around the same
``Setup`` (peers_setup.py): wrap, then per step zero_grad, forward, mean loss, backward
(the framework's call), clip when the config clips, optimizer and schedule step. The
framework's import is inside its function, so the command-to-first-step time includes it.
"""

from __future__ import annotations

import time

LAUNCHED = time.time()  # before any other import: the launcher's cost is the gap from the command's start

# The imports below come after LAUNCHED on purpose (E402): their cost counts as start-up.
import argparse  # noqa: E402
from typing import Any, Callable  # noqa: E402

import torch  # noqa: E402

from benchmarks.peers.peers_setup import WORLD, Setup, build, global_loss, stamp, write_result  # noqa: E402

PHASES: dict[str, float] = {"launched": LAUNCHED}
"""Rank 0's wall-clock times of its start-up phases (launched, joined the process group), written with its record."""


def train(
    s: Setup,
    model: Any,
    optimizer: Any,
    backward: Callable[[torch.Tensor], None],
    clip: Callable[[float], None],
    rank: int,
) -> float:
    """The shared loop; the exact global loss of the last step's batch."""
    clip_to = s.clip()
    for step in range(len(s.shares)):
        batch = s.batch(step)
        optimizer.zero_grad(set_to_none=True)
        per_sample = s.task.loss(model, batch)
        backward(per_sample.mean())  # equal shares: the mean of rank means is the global mean
        if clip_to is not None:
            clip(clip_to)
        optimizer.step()
        s.scheduler.step()
        if rank == 0:
            stamp(s.stamps)
    return global_loss(per_sample)


def raw(args: argparse.Namespace) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    PHASES["joined"] = time.time()
    s = build(args.workload, args.steps, args.data, rank)
    model = torch.nn.parallel.DistributedDataParallel(s.model)
    loss = train(
        s,
        model,
        s.optimizer,
        lambda x: x.backward(),
        lambda c: torch.nn.utils.clip_grad_norm_(model.parameters(), c),
        rank,
    )
    write_result(args.out, rank, s.stamps, loss, PHASES)
    dist.destroy_process_group()


def fabric(args: argparse.Namespace) -> None:
    from lightning.fabric import Fabric

    fab = Fabric(accelerator="cpu", strategy="ddp", devices=WORLD, num_nodes=1, precision="32-true")
    fab.launch()
    rank = fab.global_rank
    PHASES["joined"] = time.time()
    s = build(args.workload, args.steps, args.data, rank)
    model, optimizer = fab.setup(s.model, s.optimizer)
    loss = train(s, model, optimizer, fab.backward, lambda c: fab.clip_gradients(model, optimizer, max_norm=c), rank)
    write_result(args.out, rank, s.stamps, loss, PHASES)


def accelerate(args: argparse.Namespace) -> None:
    from accelerate import Accelerator

    acc = Accelerator(cpu=True)
    rank = acc.process_index
    PHASES["joined"] = time.time()
    s = build(args.workload, args.steps, args.data, rank)
    # The scheduler is not prepared: Accelerate would step it once per process per step.
    model, optimizer = acc.prepare(s.model, s.optimizer)
    loss = train(s, model, optimizer, acc.backward, lambda c: acc.clip_grad_norm_(model.parameters(), c), rank)
    write_result(args.out, rank, s.stamps, loss, {**PHASES, "distributed_type": str(acc.distributed_type)})
    acc.end_training()


def ours(args: argparse.Namespace) -> None:
    import neural_arch.distributed as nd

    nd.init_process_group(backend="gloo")
    rank = nd.get_rank()
    PHASES["joined"] = time.time()
    s = build(args.workload, args.steps, args.data, rank)
    model = nd.DistributedDataParallel(s.model)
    loss = train(
        s,
        model,
        s.optimizer,
        lambda x: x.backward(),
        lambda c: torch.nn.utils.clip_grad_norm_(model.parameters(), c),
        rank,
    )
    write_result(args.out, rank, s.stamps, loss, PHASES)
    nd.destroy_process_group()


PEERS = {"raw": raw, "fabric": fabric, "accelerate": accelerate, "ours": ours}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("peer", choices=list(PEERS))
    parser.add_argument("--workload", choices=["mlp", "gpt"], required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--data", required=True, help="folder holding gpt_corpus (the GPT workload's data)")
    parser.add_argument("--out", required=True, help="folder for rank_N.json")
    ns = parser.parse_args()
    PEERS[ns.peer](ns)
