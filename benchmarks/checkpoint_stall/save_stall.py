"""How long a checkpoint save stops training, synchronous against asynchronous, on a large model.

Run: ``.venv/bin/python -m benchmarks.checkpoint_stall.save_stall``
[``--d-model 768 --layers 14 --layout parallel.dp_shard=2``]

The byte-level GPT of benchmarks/memory/memory_limit.py (99M parameters at the defaults) trains 8
steps on 2 gloo ranks with a checkpoint every 2 steps, once with ``checkpoint.async_save=false``
and once with it on (benchmarks/checkpoint_stall/save_stall_rank.py times every save call of the loop; in the
asynchronous mode a save first waits for the previous one, so a write slower than 2 steps would
show here). Prints each mode's median stall per save (the slower rank's) and their ratio; the
target is at most 10% of the synchronous stall.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common.jobs import launcher, make_corpus

HERE = Path(__file__).resolve().parent


def stalls(args: argparse.Namespace, root: Path, background: bool) -> list[float]:
    """Per save, the slowest rank's seconds in the save call."""
    out, run = root / f"out_{background}", root / f"run_{background}"
    settings = [
        "run.task=gpt",
        f"run.dir={run}",
        f"model.d_model={args.d_model}",
        f"model.n_layers={args.layers}",
        f"model.n_heads={args.d_model // 64}",
        "model.context=64",
        f"data.source={root / 'source'}",
        f"data.path={root / 'corpus'}",
        "data.val_fraction=0.05",
        "data.samples_per_epoch=512",
        "training.steps=8",
        "training.global_batch_size=4",
        "training.val_batches=1",
        "checkpoint.every_steps=2",
        "checkpoint.keep_last=2",
        f"checkpoint.async_save={str(background).lower()}",
        "logging.progress=false",
        "logging.tensorboard=false",
        *args.layout,
    ]
    command = launcher(2, 0, str(HERE / "save_stall_rank.py"), str(out), "--set", *settings)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=args.timeout)
    if proc.returncode != 0:
        raise SystemExit(f"the {'asynchronous' if background else 'synchronous'} run failed:\n{proc.stderr[-3000:]}")
    per_rank = [json.loads((out / f"rank_{r}.json").read_text())["stalls"] for r in range(2)]
    return [max(times) for times in zip(*per_rank)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--layers", type=int, default=14)
    parser.add_argument("--layout", nargs="*", default=["parallel.dp_shard=2"], help="--set values of the layout")
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="save_stall_") as tmp:
        make_corpus(Path(tmp))
        sync, background = stalls(args, Path(tmp), False), stalls(args, Path(tmp), True)
    median_sync, median_async = statistics.median(sync), statistics.median(background)
    print(f"GPT d_model {args.d_model}, {args.layers} blocks, {' '.join(args.layout) or 'DDP'}, 2 ranks")
    print(f"synchronous save stall per save:  {', '.join(f'{s:.2f}' for s in sync)} s (median {median_sync:.2f} s)")
    print(
        f"asynchronous save stall per save: {', '.join(f'{s:.2f}' for s in background)} s (median {median_async:.2f} s)"
    )
    ratio = median_async / median_sync
    print(f"asynchronous / synchronous: {ratio:.1%} (target <= 10%)")
    return 0 if ratio <= 0.10 else 1


if __name__ == "__main__":
    sys.exit(main())
