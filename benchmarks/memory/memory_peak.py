"""The real peak memory of every rank process, per parallel layout, at two model sizes.

Run (as root for the cgroups; without a limit that binds): ``.venv/bin/python -m benchmarks.memory.memory_peak
[--sizes 256x8 768x14 --steps 4 --png PATH]``

Each layout trains the byte-level GPT of benchmarks/memory/memory_limit.py for ``--steps`` steps and
saves (synchronously); every rank process's peak resident memory (``VmHWM``: interpreter, torch,
model, training state, activations, the save) is read when it exits. Layouts: DDP x2, FSDP x2,
FSDP x4, FSDP x2 with activation checkpointing, TP x2 and PP x2 (the 4-process one shares the 2
cores: its memory is exact, its time is not). Prints, per size, the largest rank's peak, that
peak as a fraction of DDP's, and the ideal fraction of the training state a rank holds; draws
the peaks. On CUDA the same question is answered by ``torch.cuda.max_memory_allocated`` in the
training process; this script measures the CPU processes.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks.common.jobs import make_corpus
from benchmarks.memory.memory_limit import run_job
from neural_arch.apps.gpt.model import GPT, count_parameters

HERE = Path(__file__).resolve().parent
LAYOUTS: list[tuple[str, list[str], int, float]] = [  # name, --set values, processes, ideal share of the state
    ("DDP x2", [], 2, 1.0),
    ("FSDP x2", ["parallel.dp_shard=2"], 2, 0.5),
    ("FSDP x4", ["parallel.dp_shard=4"], 4, 0.25),
    ("FSDP x2 + AC", ["parallel.dp_shard=2", "parallel.activation_checkpointing=1"], 2, 0.5),
    ("TP x2", ["parallel.tp=2"], 2, 0.5),
    ("PP x2", ["parallel.pp=2"], 2, 0.5),
]
NO_LIMIT = 64 << 30


def measure(size: str, args: argparse.Namespace, root: Path) -> list[tuple[str, float, float]]:
    """(layout, largest rank's peak GiB, ideal share) for one ``DxL`` size."""
    d_model, layers = (int(v) for v in size.split("x"))
    job = argparse.Namespace(d_model=d_model, layers=layers, steps=args.steps, timeout=args.timeout)
    params = count_parameters(GPT(d_model=d_model, n_layers=layers, n_heads=d_model // 64, context=64))
    print(
        f"GPT d_model {d_model}, {layers} blocks: {params / 1e6:.1f}M parameters, "
        f"{params * 16 / 2**30:.2f} GiB of fp32 training state"
    )
    rows = []
    for name, layout, ranks, ideal in [row for row in LAYOUTS if row[0] in args.layouts or row[0] == "DDP x2"]:
        result = run_job(f"{name} {size}", job, root, NO_LIMIT, layout=layout, ranks=ranks)
        shutil.rmtree(result["run_dir"], ignore_errors=True)  # a large model's checkpoints fill the disk
        if result["outcome"] != "trained and saved":
            raise SystemExit(f"{name} at {size}: {result['outcome']}")
        peak = max(r["vm_hwm"] for r in result["ranks"]) / 2**30
        rows.append((name, peak, ideal))
    ddp = rows[0][1]
    for name, peak, ideal in rows:
        print(
            f"  {name:14s} peak {peak:5.2f} GiB = {peak / ddp:5.1%} of DDP's (ideal share of the state {ideal:.0%}; "
            f"{peak / (ddp * ideal):.2f}x DDP's peak x that share, target <= 1.25x for FSDP)"
        )
    return rows


def chart(results: dict[str, list[tuple[str, float, float]]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.6), squeeze=False)
    for ax, (size, rows) in zip(axes[0], results.items()):
        names = [r[0] for r in rows]
        ax.bar(names, [r[1] for r in rows], color="#4c72b0")
        ax.set_title(f"GPT {size}: peak per rank (VmHWM)")
        ax.set_ylabel("GiB")
        ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["256x8", "768x14"], help="d_model x blocks")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--png", type=Path, default=HERE / "memory_peak.png")
    parser.add_argument(
        "--layouts",
        nargs="+",
        default=[row[0] for row in LAYOUTS],
        help='a subset by name, e.g. "FSDP x2" (DDP always)',
    )
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="memory_peak_") as tmp:
        make_corpus(Path(tmp))
        for size in args.sizes:
            results[size] = measure(size, args, Path(tmp))
    chart(results, args.png)
    print(f"chart: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
