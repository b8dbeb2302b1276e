"""Data parallelism past this machine: a step-time model fed by measurements here, checked at 1, 2, 4 processes.

Run: ``.venv/bin/python -m benchmarks.scaling_model.scaling_model [--rounds 3 --steps 16 --repeat 7]`` (7 min here)

1. Measures (scaling_measure.py), 1 thread per process: each model's forward, backward and
   optimizer time at its per-rank batch with the time each gradient becomes ready (the
   MLP of compression.py, configs/icenet.yaml's U-Net, configs/gpt.yaml's GPT), the cost of
   compressing its gradient, and gloo's all-reduce time on 2 and 4 ranks from 4 KiB to 64 MiB.
2. Fits alpha + beta x bytes to the 2-rank curve (relative least squares) and reads it as a
   ring on this machine's loopback: per-hop latency alpha/2, bus bandwidth 1/beta. On
   loopback the "link" is the cores' copying, so with more ranks than cores (4 on 2 here)
   each rank gets cores/N of it: latency and time per byte grow by N/cores (``shared``;
   checked against the 4-rank curve, which the fit does not use).
3. Checks the model (scaling_math.py) against torch DDP steps measured here on 1, 2 and 4
   processes in interleaved rounds. Each round measures, back to back in the same N
   processes, the compute profile taken on all N at once (no communication: what N ranks
   share here, 2 cores and memory bandwidth, slows it as it slows DDP), the all-reduce
   curve and DDP's steps; the error is the median of the per-round errors, so that this
   VM's drift in speed between minutes cancels. On loopback the all-reduce is CPU work
   on the same cores, so the check uses the serial form (overlap shown beside it);
   target: within 15%.
4. Predicts step time and weak-scaling efficiency for N = 1 ... 1024 ranks on the links in
   scaling_math.LINKS, with and without compression (fp16, PowerSGD rank 4), assuming
   each rank computes as fast as one core here; prints tables and writes scaling_model.png.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.two_ranks import load_average, on_ranks
from benchmarks.scaling_model.scaling_chart import chart
from benchmarks.scaling_model.scaling_math import COMPRESSIONS, LINKS, Link, efficiency, ring, step_time
from benchmarks.scaling_model.scaling_measure import MODELS, RANKS, one_round, profile

SHOWN = (2, 8, 64, 256, 1024)


def fit_loopback(curve: dict[int, float]) -> Link:
    """alpha + beta x bytes through the 2-rank points (relative errors), as a ring Link."""
    sizes = np.array(sorted(curve), dtype=float)
    seconds = np.array([curve[int(s)] for s in sizes])
    beta, intercept = np.polyfit(sizes, seconds, 1, w=1 / seconds)
    # A 2-rank ring: 2 hops of latency, 2(N-1)/N = 1 times the bytes over the bus bandwidth.
    return Link("loopback gloo (fitted)", max(float(intercept), 0.0) / 2, 1 / float(beta))


def shared(link: Link, n: int) -> Link:
    """``link`` as each of ``n`` loopback ranks sees it when they time-share this machine's cores."""
    share = max(1.0, n / len(os.sched_getaffinity(0)))
    return Link(link.name, link.alpha * share, link.bandwidth / share)


def check(rounds: dict[int, list[dict[str, Any]]]) -> None:
    """Prediction vs measurement at every N here, each from the same round's measurements
    (``scaling_measure.one_round``; N = 4 uses the ring extrapolation of that round's 2-rank fit,
    ``shared`` by 4 ranks on this machine's cores)."""
    print(
        f"\ncheck against DDP measured here ({len(rounds[1])} interleaved rounds; medians over rounds, "
        "error: median of the per-round errors):"
    )
    print(
        f"{'model':<7} {'N':>2} {'measured':>10} {'serial model':>13} {'error':>7} {'overlap model':>14} {'error':>7}"
    )
    links = [fit_loopback(r["curve"]) for r in rounds[2]]
    for name in MODELS:
        for n in RANKS:
            got, serial, overlap = [], [], []
            for r, link in zip(rounds[n], links):
                got.append(r["ddp"][name])
                seen = shared(link, n)
                serial.append(step_time(r["profile"][name], n, seen, overlap=False))
                overlap.append(step_time(r["profile"][name], n, seen, overlap=True))
            err_s = statistics.median(p / g - 1 for p, g in zip(serial, got))
            err_o = statistics.median(p / g - 1 for p, g in zip(overlap, got))
            print(
                f"{name:<7} {n:>2} {statistics.median(got) * 1e3:8.1f} ms {statistics.median(serial) * 1e3:10.1f} ms "
                f"{err_s:+7.1%} {statistics.median(overlap) * 1e3:11.1f} ms {err_o:+7.1%}"
            )


def projections(profs: dict[str, Any]) -> None:
    for name in MODELS:
        prof = profs[name]
        grad_mb = sum(prof["bytes"]) / 1e6
        one = step_time(prof, 1, LINKS[0])
        print(
            f"\n{name}: {grad_mb:.2f} MB of gradients, {prof['batch']} samples per rank, one rank {one * 1e3:.1f} ms "
            f"per step ({(prof['forward'] + prof['backward']) / prof['batch'] * 1e3:.2f} ms compute per sample)"
        )
        print(
            f"  measured: forward {prof['forward'] * 1e3:.1f} ms, backward {prof['backward'] * 1e3:.1f} ms, optimizer "
            f"{prof['optimizer'] * 1e3:.1f} ms, DDP's gradient copies {prof['ddp_copies'] * 1e3:.1f} ms; "
            "compression compute per step: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in prof["compress"].items())
        )
        print(f"{'link':<15} {'compression':<11} " + " ".join(f"{'N=' + str(n):>14}" for n in SHOWN))
        for link in LINKS:
            for comp in COMPRESSIONS:
                cells = [
                    f"{step_time(prof, n, link, comp) * 1e3:7.1f}ms {efficiency(prof, n, link, comp):4.0%}"
                    for n in SHOWN
                ]
                print(f"{link.name:<15} {comp:<11} " + " ".join(f"{c:>14}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=16, help="timed steps per model and run (after 3 warm-up)")
    parser.add_argument("--repeat", type=int, default=7, help="all-reduce repeats per size")
    parser.add_argument("--chart", default=str(Path(__file__).with_name("scaling_model.png")))
    args = parser.parse_args()
    print(f"start: {load_average()}", flush=True)
    profs = on_ranks(profile, args, 1)
    rounds: dict[int, list[dict[str, Any]]] = {n: [] for n in RANKS}
    for r in range(args.rounds):
        for n in RANKS[r % len(RANKS) :] + RANKS[: r % len(RANKS)]:
            rounds[n].append(on_ranks(one_round, args, n))
            print(f"round {r + 1}: {n} process(es), DDP step {rounds[n][-1]['ddp']}", flush=True)
    print(f"end of measurements: {load_average()}")
    curves = {n: rounds[n][-1]["curve"] for n in (2, 4)}
    link = fit_loopback(curves[2])
    print(
        f"\nloopback gloo fit (2 ranks, last round): alpha {link.alpha * 2e6:.0f} us per all-reduce, "
        f"bus bandwidth {link.bandwidth / 1e9:.2f} GB/s"
    )
    print(f"{'bytes':>10} {'2 ranks':>10} {'fit':>10} {'4 ranks':>10} {'ring from fit':>14} {'shared cores':>13}")
    for size, seconds in sorted(curves[2].items()):
        print(
            f"{size:>10} {seconds * 1e3:8.2f}ms {ring(size, 2, link) * 1e3:8.2f}ms {curves[4][size] * 1e3:8.2f}ms "
            f"{ring(size, 4, link) * 1e3:12.2f}ms {ring(size, 4, shared(link, 4)) * 1e3:11.2f}ms"
        )
    check(rounds)
    projections(profs)
    chart(profs, args.chart)
    print(f"\nchart: {args.chart}")


if __name__ == "__main__":
    main()
