"""Do two processes get two cores' worth of work here? The ceiling for every 2-process target.

Run: ``.venv/bin/python -m benchmarks.overhead.cores [--seconds 4 --rounds 3]``

Three single-threaded kernels, each run for a fixed time by 1 process alone and then by 2
processes at once (one pinned to each CPU): a pure-Python integer loop (no memory traffic:
what shares a core's pipeline shows here), a 128 x 128 float32 matmul repeated in place
(L1/L2-resident, AVX-512: what shares the vector units shows here) and a 64 MiB array copy
(what shares the memory bandwidth shows here). Prints, per kernel, the work per second of
one process alone, of each process when both run, and the pair's total against the single
process: 2.0x means two independent cores; on a virtual machine whose two vCPUs are one
physical core's hyperthreads, or share a busy host, the compute kernels give well under 2x.
Interleaved rounds; medians.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time

KERNELS = ("python loop", "matmul 128", "copy 64 MiB")


def _work(kernel: str, seconds: float) -> float:
    """Units of ``kernel`` done per second in ``seconds`` of wall time (one thread)."""
    import torch

    torch.set_num_threads(1)
    if kernel == "matmul 128":
        a, b = torch.randn(128, 128), torch.randn(128, 128)
        out = torch.empty(128, 128)
        step = lambda: torch.mm(a, b, out=out)  # noqa: E731 - the timed unit
    elif kernel == "copy 64 MiB":
        src, dst = torch.randn(16 << 20), torch.empty(16 << 20)
        step = lambda: dst.copy_(src)  # noqa: E731
    else:

        def step() -> None:
            total = 0
            for i in range(10_000):
                total += i * i

    step()
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        done += 1
    return done / (time.perf_counter() - start)


def _child(kernel: str, seconds: float, cpu: int, barrier: mp.synchronize.Barrier, out: mp.Queue) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})
    barrier.wait()
    out.put((cpu, _work(kernel, seconds)))


def measure(kernel: str, seconds: float, cpus: list[int]) -> list[float]:
    """Rates of one process per CPU in ``cpus``, all started together."""
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(len(cpus)), ctx.Queue()
    procs = [ctx.Process(target=_child, args=(kernel, seconds, cpu, barrier, out)) for cpu in cpus]
    for p in procs:
        p.start()
    rates = dict(out.get(timeout=seconds * 10 + 120) for _ in procs)
    for p in procs:
        p.join()
    return [rates[cpu] for cpu in cpus]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))[:2] if hasattr(os, "sched_getaffinity") else [0, 1]
    print(f"CPUs {cpus}; load average before: {os.getloadavg()[0]:.2f}")
    for kernel in KERNELS:
        alone, pair = [], []
        for _ in range(args.rounds):
            alone.append(measure(kernel, args.seconds, cpus[:1])[0])
            pair.append(sum(measure(kernel, args.seconds, cpus)))
        one, two = statistics.median(alone), statistics.median(pair)
        print(
            f"{kernel:12s}: 1 process {one:10.1f}/s; 2 processes {two / 2:10.1f}/s each, together "
            f"{two / one:.2f}x one process (rounds: {', '.join(f'{p / a:.2f}' for p, a in zip(pair, alone))})"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
