"""Memory recovery against the disk reload, on a model with >= 1.5 GB of training state.

Run: ``.venv/bin/python -m benchmarks.recovery.state --rounds 5`` (about 5 minutes on 2 cores;
``--d-model 768 --layers 14``: the 99M-parameter GPT of benchmarks/memory, AdamW).

What it measures: the state phase of a restart, the seconds a restarted rank spends from
"restore the newest state" to "ready for the next step", in a fresh process each time
(``state_rank.py``: nothing allocated yet, as after a real failure). The keeper runs in its own
process, as the launcher does. One short training run (``state_rank.py train``, 4 steps, world
size 1) leaves step 2 both in the keeper (``checkpoint.memory_every`` 2) and on disk
(``every_steps`` 2); then, interleaved round by round:

- ``mapped``: the memory restore as the trainer does it (the keeper's own file mapped);
- ``bytes``: the memory restore over the connection (the fallback; how it worked before);
- ``disk``: the trainer's disk resume with the checkpoint in the page cache (written by this node);
- ``disk-cold``: the same with the checkpoint's files evicted from the page cache first (a node
  that did not write them, or a parallel file system).

Prints a table of medians (total and phases) and each mode's ratio to ``mapped``, and checks that
every restore gave the same weights and optimizer state, byte for byte.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common.jobs import gpt_settings, make_corpus
from neural_arch.distributed.launcher.job_token import JobToken

MODES = ("mapped", "bytes", "disk", "disk-cold")
STEP = 2


def train_settings(args: argparse.Namespace, corpus: Path) -> list[str]:
    return [
        *gpt_settings(args.d_model, args.layers, corpus),
        f"training.steps={2 * STEP}",
        "training.global_batch_size=4",
        "training.val_batches=1",
        "training.val_every=0",
        "training.report=false",
        f"checkpoint.every_steps={STEP}",
        "checkpoint.keep_last=2",
        "optim.name=adamw",
        "logging.progress=false",
        "logging.tensorboard=false",
    ]


def keep(conn: Any, token: str, capacity: int) -> None:
    """The keeper's process: serve until the parent closes the pipe."""
    from neural_arch.distributed.checkpoint.memory_keeper import SnapshotKeeper

    with SnapshotKeeper(JobToken(token, "the benchmark"), capacity) as keeper:
        conn.send((keeper.address.host, keeper.address.port))
        try:
            conn.recv()
        except EOFError:
            pass


def run_rank(mode: str, root: Path, settings: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.recovery.state_rank", mode, str(root), str(STEP)],
        input=json.dumps(settings) + "\n",
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        raise SystemExit(f"{mode} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]) if mode != "train" else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--layers", type=int, default=14)
    parser.add_argument("--capacity-gib", type=float, default=6.0, help="the keeper's byte cap")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="na_state_") as tmp:
        root = Path(tmp)
        corpus = make_corpus(root)
        token = "benchmark-" + root.name
        parent, child = multiprocessing.get_context("spawn").Pipe()
        keeper = multiprocessing.get_context("spawn").Process(
            target=keep, args=(child, token, int(args.capacity_gib * (1 << 30)))
        )
        keeper.start()
        host, port = parent.recv()
        settings = {"train": train_settings(args, corpus), "host": host, "port": port, "token": token}
        try:
            run_rank("train", root, settings)
            results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
            for round_ in range(args.rounds):
                for mode in MODES:
                    results[mode].append(run_rank(mode, root, settings))
                    print(f"round {round_ + 1} {mode}: {results[mode][-1]['total']:.3f} s", flush=True)
        finally:
            parent.close()
            keeper.join(timeout=30)
    report(results, args)


def report(results: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> None:
    digests = {r["digest"] for runs in results.values() for r in runs}
    size = results["mapped"][0]["bytes"]
    mapped = statistics.median(r["total"] for r in results["mapped"])
    print(f"\nGPT d_model {args.d_model}, {args.layers} blocks: {size / 1e9:.2f} GB of weights and optimizer state")
    print("| restore | median total | phases (median) | / mapped |")
    print("|---|---|---|---|")
    for mode, runs in results.items():
        total = statistics.median(r["total"] for r in runs)
        names = runs[0]["phases"].keys()
        phases = ", ".join(f"{n} {statistics.median(r['phases'][n] for r in runs):.3f}" for n in names)
        print(f"| {mode} | {total:.3f} s | {phases} | {total / mapped:.1f}x |")
    print(f"every restore byte-identical: {len(digests) == 1} ({len(digests)} distinct digests)")
    if len(digests) != 1:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
