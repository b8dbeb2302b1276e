"""Per-rank memory and step time of a GPT on each parallel layout, checkpointing on and off.

Run: ``.venv/bin/python -m benchmarks.memory.memory [--rounds 9 --steps 2 --png PATH]``

One job per world size (1, 2, 4 gloo processes, 1 thread each) builds all its layouts
(GPT d_model 128, 8 blocks, 4 heads, context 128, float32, global batch 16 sequences),
warms each up, counts its memory in one extra step, then times them in interleaved rounds
(the order rotates per round, so drift and other load hit every layout alike). Per rank:
parameter, gradient and Adam-state bytes from the tensors' own local storages, bytes saved
for backward (memory_count.SavedBytes: pack hooks around the forward only; around the
whole step for the pipeline, whose forwards and backwards interleave; peak of what is
alive), and the median step time. Prints the table and the targets: FSDP x N per-rank
state <= 1.05/N of DDP's, full checkpointing >= 60% fewer saved bytes and <= 40% more
step time. The 4-process layouts share 2 cores: their memory is exact, their times are not.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import time
from pathlib import Path
from typing import Any, Iterator

import torch.distributed as dist

from benchmarks.common.charts import memory_chart
from benchmarks.common.gpt_layouts import Case, Run, Shape, build_run, time_steps
from benchmarks.common.two_ranks import load_average, on_ranks
from benchmarks.memory.memory_count import SavedBytes, state_bytes
from neural_arch.distributed.parallel import ParallelLayout as L

JOBS: dict[int, list[Case]] = {
    1: [Case("single", L()), Case("single + AC", L(activation_checkpointing=1))],
    2: [
        Case("DDP x2", L(dp_replicate=2), ddp=True),
        Case("FSDP x2", L(dp_shard=2)),
        Case("FSDP x2 + AC", L(dp_shard=2, activation_checkpointing=1)),
        Case("TP x2", L(tp=2)),
        Case("PP x2 1f1b m4", L(pp=2, pp_schedule="1f1b", microbatches=4)),
        Case("PP x2 gpipe m4", L(pp=2, pp_schedule="gpipe", microbatches=4)),
    ],  # for 1f1b's activation saving
    4: [Case("FSDP x4", L(dp_shard=4)), Case("FSDP x2 + TP x2", L(dp_shard=2, tp=2))],
}
AC_PAIRS = (("single + AC", "single"), ("FSDP x2 + AC", "FSDP x2"))
MB = 2**20


@contextlib.contextmanager
def cpu_clock(out: list[float]) -> Iterator[None]:
    start = time.process_time()
    yield
    out.append(time.process_time() - start)


def forward_share(run: Run, steps: int = 3) -> float:
    """Median CPU-time share of the forward in a step: what recomputing every forward may add."""
    forward: list[float] = []
    shares = []
    for _ in range(steps):
        start = time.process_time()
        run.step(around=functools.partial(cpu_clock, forward))
        shares.append(forward[-1] / (time.process_time() - start))
    return statistics.median(shares)


def measure(run: Run, warmup: int) -> dict[str, Any]:
    """Warm ``run`` up, then count its state and its saved bytes in one more step."""
    for _ in range(warmup):
        run.step()
    counter = SavedBytes()
    run.step(around=lambda: counter.counting(run.modules, run.checkpointed))
    share = forward_share(run) if run.pipe is None else None  # a pipeline's forwards and backwards interleave
    return {**state_bytes(run.modules, run.opt), "saved": counter.peak, "forward_share": share, "times": []}


def body(rank: int, job: tuple[list[Case], argparse.Namespace]) -> list[dict[str, dict[str, Any]]]:
    """Every rank's results for one job's cases: {case: {param, grad, optim, saved, times}}."""
    cases, args = job
    runs = [build_run(case, Shape()) for case in cases]
    mine = {run.case.name: measure(run, args.warmup) for run in runs}
    for r in range(args.rounds):
        for i in range(len(runs)):
            run = runs[(i + r) % len(runs)]
            mine[run.case.name]["times"].append(time_steps(run, args.steps))
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return everyone


def summarize(results: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """Per case: the largest rank's bytes (what must fit), rank 0's median step time."""
    rows = {}
    for name, ranks in results.items():
        worst = max(ranks, key=lambda r: r["param"] + r["grad"] + r["optim"] + r["saved"])
        rows[name] = {k: worst[k] for k in ("param", "grad", "optim", "saved")}
        rows[name]["state"] = worst["param"] + worst["grad"] + worst["optim"]
        rows[name]["step"] = statistics.median(wall for wall, _ in ranks[0]["times"])
        rows[name]["cpu"] = statistics.median(cpu for _, cpu in ranks[0]["times"])
        rows[name]["ranks"] = len(ranks)
    return rows


def print_table(results: dict[str, list[dict[str, Any]]], rows: dict[str, dict[str, float]]) -> None:
    print(
        f"{'layout':18} {'ranks':>5} {'param MB':>9} {'grad MB':>8} {'Adam MB':>8} {'sum MB':>8} "
        f"{'saved MB':>9} {'step ms':>8} {'CPU ms':>7}"
    )
    for name, row in rows.items():
        print(
            f"{name:18} {row['ranks']:5d} {row['param'] / MB:9.3f} {row['grad'] / MB:8.3f} "
            f"{row['optim'] / MB:8.3f} {row['state'] / MB:8.3f} {row['saved'] / MB:9.3f} "
            f"{row['step'] * 1e3:8.1f} {row['cpu'] * 1e3:7.1f}"
        )
        sums = [(r["param"] + r["grad"] + r["optim"]) / MB for r in results[name]]
        saved = [r["saved"] / MB for r in results[name]]
        if max(sums) - min(sums) > 0.01 * max(sums) or max(saved) - min(saved) > 0.01 * max(saved):
            print(f"{'':18} per rank: sum MB {[round(s, 3) for s in sums]}, saved MB {[round(s, 3) for s in saved]}")


def print_targets(results: dict[str, list[dict[str, Any]]], rows: dict[str, dict[str, float]]) -> None:
    for n in (2, 4):
        if "DDP x2" not in rows or f"FSDP x{n}" not in rows:
            continue  # --worlds left one of them out
        ratio = rows[f"FSDP x{n}"]["state"] / rows["DDP x2"]["state"]
        print(
            f"FSDP x{n} / DDP per-rank param+grad+Adam: {ratio:.4f} (ideal {1 / n:.4f}, target <= {1.05 / n:.4f}: "
            f"{'met' if ratio <= 1.05 / n else 'NOT met'})"
        )
    for on, off in (pair for pair in AC_PAIRS if set(pair) <= set(rows)):
        fewer = 1 - rows[on]["saved"] / rows[off]["saved"]
        verdict = "met" if fewer >= 0.6 else "NOT met"
        print(f"{on} vs {off}: saved bytes {100 * fewer:.1f}% fewer (target >= 60%: {verdict})")
        share = results[off][0]["forward_share"]
        print(
            f"    forward = {100 * share:.1f}% of a {off} step (CPU time): recomputing every block's forward "
            f"can add up to about that"
        )
        pairs = list(zip(results[on][0]["times"], results[off][0]["times"], strict=True))
        for i, (what, key) in enumerate((("wall", "step"), ("CPU", "cpu"))):
            ratio = rows[on][key] / rows[off][key]
            paired = statistics.median(a[i] / b[i] for a, b in pairs)
            print(
                f"    {what} time per step x{ratio:.3f}, median of per-round ratios x{paired:.3f} "
                f"(target <= 1.40: {'met' if max(ratio, paired) <= 1.40 else 'NOT met'})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=2, help="steps per layout per round")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--png", default=str(Path(__file__).with_name("memory.png")))
    parser.add_argument("--worlds", type=int, nargs="+", default=list(JOBS), help="which jobs to run (world sizes)")
    args = parser.parse_args()
    before = load_average()  # taken before our own processes start
    results: dict[str, list[dict[str, Any]]] = {}
    for world in args.worlds:
        cases = JOBS[world]
        everyone = on_ranks(body, (cases, args), world)
        results.update({c.name: [r[c.name] for r in everyone] for c in cases})
    print(Shape(), f"rounds {args.rounds} x {args.steps} steps, warm-up {args.warmup}")
    rows = summarize(results)
    print_table(results, rows)
    print_targets(results, rows)
    print(f"before: {before}; after: {load_average()}")
    if args.png:
        memory_chart(rows, args.png)
        print(f"chart: {args.png}")


if __name__ == "__main__":
    main()
