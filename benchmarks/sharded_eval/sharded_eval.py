"""Final validation and report on FSDP x2 against DDP x2: the model gathered once, not per forward.

Run: ``.venv/bin/python -m benchmarks.sharded_eval.sharded_eval [--d-model 768 --layers 14
--val-batches 8] [--skip-per-forward]``

Trains the byte-level GPT (99M parameters at the defaults, context 16, global batch 2) for 2
steps on 2 gloo ranks, three ways: DDP x2; FSDP x2 (``parallel.dp_shard=2``) with the default
``parallel.gather_for_eval: true`` (validation and the report hold the gathered parameters);
FSDP x2 with ``gather_for_eval=false`` (a gather per validation batch and per generated token,
as before). Each rank is ``timed_rank.py``, which times the trainer's final validation and its
report. Prints each job's seconds, the ratio to DDP x2's, and whether the final validation
metrics are those of DDP x2 (float32 here: FSDP's reduce-scatter sums in another order, so
equal to ~1e-6 relative, not bitwise; the exactness tests use float64). Target: FSDP x2
validation + report <= 2x DDP x2's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

from benchmarks.common.jobs import launcher, make_corpus

HERE = Path(__file__).resolve().parent
JOBS = {
    "DDP x2": [],
    "FSDP x2": ["parallel.dp_shard=2"],
    "FSDP x2, per forward": ["parallel.dp_shard=2", "parallel.gather_for_eval=false"],
}


def settings(args: argparse.Namespace, run_dir: Path, corpus: Path) -> list[str]:
    return [
        "run.task=gpt",
        f"run.dir={run_dir}",
        f"model.d_model={args.d_model}",
        f"model.n_layers={args.layers}",
        f"model.n_heads={args.d_model // 64}",
        "model.context=16",
        f"data.source={corpus.parent / 'source'}",
        f"data.path={corpus}",
        "data.val_fraction=0.05",
        "training.steps=2",
        "training.global_batch_size=2",
        f"training.val_batches={args.val_batches}",
        "checkpoint.every_steps=0",
        "logging.progress=false",
        "logging.tensorboard=false",
    ]


def run_job(name: str, args: argparse.Namespace, root: Path, corpus: Path) -> dict:
    out = root / f"{len(name)}_{name.split()[0]}.json"
    run_dir = root / f"run_{len(name)}"
    cmd = launcher(2, 0, str(HERE / "timed_rank.py"), str(out), *settings(args, run_dir, corpus), *JOBS[name])
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--layers", type=int, default=14)
    parser.add_argument("--val-batches", type=int, default=8)
    parser.add_argument("--skip-per-forward", action="store_true", help="leave out the slow per-forward job")
    args = parser.parse_args()
    names = [n for n in JOBS if not (args.skip_per_forward and "per forward" in n)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        corpus = make_corpus(root)
        results = {name: run_job(name, args, root, corpus) for name in names}
    base = results["DDP x2"]
    base_total = base["validation_s"] + base["report_s"]
    print(
        f"GPT d_model {args.d_model}, {args.layers} blocks, context 16, global batch 2, val_batches {args.val_batches}"
    )
    print(f"{'job':<22} {'validation s':>12} {'report s':>9} {'total s':>8} {'x DDP x2':>9}  val/loss")
    for name, got in results.items():
        total = got["validation_s"] + got["report_s"]
        loss = got["final"].get("val/loss")
        times = f"{got['validation_s']:>12.1f} {got['report_s']:>9.1f} {total:>8.1f}"
        print(f"{name:<22} {times} {total / base_total:>9.2f}  {loss:.6f}")


if __name__ == "__main__":
    main()
