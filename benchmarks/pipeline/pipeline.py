"""Idle (bubble) fraction per rank of each pipeline schedule, against theory.

Run: ``.venv/bin/python -m benchmarks.pipeline.pipeline [--pp 2 4 --micro 2 4 8 --rounds 5 --png PATH]``

One gloo job per pipeline size p (p processes, 1 thread each) builds a GPT (d_model 256,
8 blocks, 4 heads, context 128, float32) with ``build_pipeline`` for every schedule and
micro-batch count m (4 sequences per micro-batch, so the work per micro-batch is the
same for every m), warms each up, then times their steps in interleaved rounds. Busy
time is the wall time inside the stages' ``forward_one_chunk``, ``backward_one_chunk``
and ``backward_weight_one_chunk`` (torch's per-micro-batch compute calls, which do no
communication); idle fraction = 1 - busy / wall time of ``PipelineRunner.step`` on that
rank (all ranks start at a barrier), median over steps. Idle therefore includes waiting
for peers, the activation sends and receives, the loss and tied-gradient reductions and
the schedule's own Python. Theory for equal stages: (p-1)/(v*m+p-1), v = stages per rank
(1 for gpipe and 1f1b, 2 for interleaved_1f1b and zero_bubble, whose split backward aims
below that bound). The script also times one activation send (ping-pong between ranks 0
and 1) against the compute of one micro-batch on one stage, to show the communication is
small. p=4 runs 4 processes on 2 cores: every rank shares a core, so its idle fractions
are not the dedicated-core bubble.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
from torch.distributed.pipelining.stage import _PipelineStageBase

from benchmarks.common.charts import pipeline_chart
from benchmarks.common.gpt_layouts import Case, Run, Shape, build_run
from benchmarks.common.two_ranks import load_average, on_ranks
from neural_arch.distributed.parallel import SCHEDULES, ParallelLayout

MICROBATCH_ROWS = 4
BUSY = [0.0]  # seconds inside per-micro-batch compute calls since the last reset (this process)


def _timed(method: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            BUSY[0] += time.perf_counter() - start

    return run


def install_timers() -> None:
    """Time torch's compute calls for every stage in this process (none of them calls another)."""
    for name in ("forward_one_chunk", "backward_one_chunk", "backward_weight_one_chunk"):
        setattr(_PipelineStageBase, name, _timed(getattr(_PipelineStageBase, name)))


def theory(pp: int, m: int, v: int) -> float:
    return (pp - 1) / (v * m + pp - 1)


@contextlib.contextmanager
def stopwatch(out: list[tuple[float, float]]) -> Iterator[None]:
    """Appends (wall seconds, busy seconds) of the pipeline step it wraps."""
    dist.barrier()
    BUSY[0] = 0.0
    start = time.perf_counter()
    yield
    out.append((time.perf_counter() - start, BUSY[0]))


def send_ms(shape: Shape, repeats: int = 20) -> float:
    """Median one-way time of one micro-batch's activations between ranks 0 and 1 (ping-pong / 2)."""
    t = torch.randn(MICROBATCH_ROWS, shape.context, shape.d_model)
    times = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        if dist.get_rank() == 0:
            dist.send(t, 1)
            dist.recv(t, 1)
        elif dist.get_rank() == 1:
            dist.recv(t, 0)
            dist.send(t, 0)
        times.append((time.perf_counter() - start) / 2)
    return statistics.median(times) * 1e3


def cases(pp: int, micro: list[int]) -> tuple[list[Case], dict[str, str]]:
    """Every schedule x m the layout allows, and why the others are left out."""
    runnable, skipped = [], {}
    for schedule in SCHEDULES:
        for m in micro:
            name = f"pp{pp} {schedule} m{m}"
            layout = ParallelLayout(pp=pp, pp_schedule=schedule, microbatches=m)  # type: ignore[arg-type]
            if m < pp or (layout.stages_per_rank > 1 and m % pp):
                skipped[name] = "layout refused: m must be >= pp (and a multiple of pp for interleaved schedules)"
            else:
                runnable.append(Case(name, layout))
    return runnable, skipped


def body(rank: int, job: tuple[int, argparse.Namespace]) -> list[dict[str, Any]]:
    """Every rank's {case: [(wall, busy) per step]} plus the send time."""
    pp, args = job
    install_timers()
    runs: list[Run] = []
    for case in cases(pp, args.micro)[0]:
        shape = Shape(d_model=256, layers=8, heads=4, context=128, batch=MICROBATCH_ROWS * case.layout.microbatches)
        runs.append(build_run(case, shape))
        for _ in range(args.warmup):
            runs[-1].step()
    steps: dict[str, list[tuple[float, float]]] = {run.case.name: [] for run in runs}
    for r in range(args.rounds):
        for i in range(len(runs)):
            run = runs[(i + r) % len(runs)]
            run.step(around=functools.partial(stopwatch, steps[run.case.name]))
    mine = {"steps": steps, "send_ms": send_ms(Shape(d_model=256, context=128))}
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return everyone


def summarize(pp: int, micro: list[int], everyone: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for case in cases(pp, micro)[0]:
        per_rank = [r["steps"][case.name] for r in everyone]
        idle = [statistics.median(1 - busy / wall for wall, busy in steps) for steps in per_rank]
        chunks = case.layout.microbatches * case.layout.stages_per_rank
        rows.append(
            {
                "pp": pp,
                "schedule": case.layout.pp_schedule,
                "m": case.layout.microbatches,
                "v": case.layout.stages_per_rank,
                "idle_ranks": idle,
                "idle": statistics.mean(idle),
                "theory": theory(pp, case.layout.microbatches, case.layout.stages_per_rank),
                "step_ms": statistics.median(w for w, _ in per_rank[0]) * 1e3,
                "chunk_ms": statistics.median(b / chunks for _, b in per_rank[0]) * 1e3,
                "send_ms": everyone[0]["send_ms"],
            }
        )
    return rows


def print_rows(rows: list[dict[str, Any]], skipped: dict[str, str]) -> None:
    print(
        f"{'pp':>2} {'schedule':17} {'m':>2} {'v':>2} {'step ms':>8} {'idle per rank':30} {'mean':>6} "
        f"{'theory':>6} {'compute/chunk ms':>16} {'send ms':>7}"
    )
    for r in rows:
        ranks = " ".join(f"{x:.3f}" for x in r["idle_ranks"])
        print(
            f"{r['pp']:2d} {r['schedule']:17} {r['m']:2d} {r['v']:2d} {r['step_ms']:8.1f} {ranks:30} "
            f"{r['idle']:6.3f} {r['theory']:6.3f} {r['chunk_ms']:16.1f} {r['send_ms']:7.2f}"
        )
    for name, why in skipped.items():
        print(f"{name}: not run ({why})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pp", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--micro", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--png", default=str(Path(__file__).with_name("pipeline.png")))
    args = parser.parse_args()
    before = load_average()  # taken before our own processes start
    rows, skipped = [], {}
    for pp in args.pp:
        rows += summarize(pp, args.micro, on_ranks(body, (pp, args), pp))
        skipped.update(cases(pp, args.micro)[1])
    print(
        f"GPT d256 x 8 blocks, ctx 128, {MICROBATCH_ROWS} sequences per micro-batch, float32; "
        f"rounds {args.rounds}, warm-up {args.warmup}; compute/chunk: rank 0's busy time per stage per micro-batch"
    )
    print_rows(rows, skipped)
    print(f"before: {before}; after: {load_average()}")
    if args.png:
        pipeline_chart(rows, args.png)
        print(f"chart: {args.png}")


if __name__ == "__main__":
    main()
