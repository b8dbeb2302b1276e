"""Fault soak: rounds of a 2-process ``neural-arch train``, one fault each, nothing lost.

Run: ``.venv/bin/python -m benchmarks.soak.soak --rounds 100 [--seed 0] [--jobs 1]``
(``--rounds 5`` for a quick look). Not part of the test suite.

An uninterrupted reference run first; then each round runs the same command
(benchmarks/soak/soak_worker.py, which is ``neural-arch train`` with paced steps) in a fresh
run dir and TMPDIR with one fault, the kinds dealt evenly in a seeded random order:

- ``kill_rank``: SIGKILL of a random rank at a random moment of training;
- ``ckpt``: rank 0 SIGKILLs itself half-way through writing a random checkpoint;
- ``sigstop``: SIGSTOP of a random rank (a hang: its peer times out after training.timeout);
- ``kill_restart``: SIGKILL of a random rank, then of a random NEW worker 0-3 s after it
  appears (importing, meeting at the rendezvous or loading the checkpoint);
- ``exception``: a random rank raises after a random step;
- ``kill_launcher``: SIGKILL of the launcher, then the same command again, which must resume.

A round passes when it ends with final weights bitwise equal to the reference
(``recovered``) or, restarts exhausted, with the launcher's failure summary and a loadable
checkpoint (``exhausted``); and when within 10 s of its last command's exit no process
names the round's directory (``orphans``) and its TMPDIR is empty (``leftovers``).
Recovery time: fault -> first step completed by a process started after it. Prints a
table per kind; writes every round to benchmarks/soak/results/soak.json (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

from benchmarks.soak.soak_faults import inject, wait_clean
from benchmarks.soak.soak_report import final_params, outcome, print_table, recovery
from benchmarks.soak.soak_worker import PLAN_FILE, STEPS_FILE
from neural_arch.distributed.launcher.scratch import TORCH_CACHE

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("kill_rank", "ckpt", "sigstop", "kill_restart", "exception", "kill_launcher")
STEPS, EVERY, PACE = 24, 3, 0.2
TRAIN = [
    "--config",
    str(ROOT / "configs" / "tiny.yaml"),
    "--nproc-per-node",
    "2",
    "--set",
    "training.precision=fp64",
    "data.num_samples=101",
    "data.val_samples=25",
    "training.global_batch_size=12",
    "model.hidden=8",
    f"training.steps={STEPS}",
    f"checkpoint.every_steps={EVERY}",
    "checkpoint.keep_last=3",
    "training.max_restarts=3",
    "training.timeout=15",
    "logging.progress=false",
    "logging.tensorboard=false",
]
"""A tiny float64 run: 101 samples in global batches of 12 (every epoch ends with 5), momentum SGD."""
ROUND_TIMEOUT, GRACE = 400.0, 10.0


def start(round_dir: Path) -> subprocess.Popen:
    """The round's command, output appended to ROUND/out.txt, with the round's own TMPDIR."""
    env = dict(os.environ, TMPDIR=str(round_dir / "tmp"), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    with open(round_dir / "out.txt", "a") as sink:
        return subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).with_name("soak_worker.py")),
                *TRAIN,
                "--set",
                f"run.dir={round_dir / 'run'}",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )


def steps(round_dir: Path) -> list[dict[str, Any]]:
    path = round_dir / STEPS_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_training(round_dir: Path, proc: subprocess.Popen, timeout: float = 240) -> bool:
    """Wait for the first trained step; False if the command ended or took too long first."""
    deadline = time.monotonic() + timeout
    while not any("step" in row and "fault" not in row for row in steps(round_dir)):
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def prepare(round_dir: Path, plan: dict[str, Any]) -> None:
    (round_dir / "tmp").mkdir(parents=True)
    (round_dir / PLAN_FILE).write_text(json.dumps(plan))


def finish(proc: subprocess.Popen) -> Optional[int]:
    """The command's exit code, or None (then killed) if it ran past ROUND_TIMEOUT."""
    try:
        return proc.wait(timeout=ROUND_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None


def one_round(index: int, kind: str, seed: int, work: Path, reference: dict[str, Any]) -> dict[str, Any]:
    """Run round ``index`` with a fault of ``kind``; its record (see the module docstring)."""
    rng = random.Random(f"{seed}-{index}")
    round_dir, began = work / f"round_{index:03d}", time.time()
    plan = {
        "kind": kind,
        "pace": PACE,
        "rank": rng.randrange(2),
        "step": rng.randrange(EVERY, STEPS, EVERY) if kind == "ckpt" else rng.randrange(1, STEPS),
    }
    if kind == "ckpt":
        plan["rank"] = 0  # the checkpoint writer
    prepare(round_dir, plan)
    proc, record = start(round_dir), {"round": index, "kind": kind}
    if kind in ("ckpt", "exception"):
        record.update(rank=plan["rank"], at_step=plan["step"])
    elif wait_training(round_dir, proc):
        time.sleep(rng.uniform(0.0, 0.9 * reference["train_s"]))
        done = inject(kind, proc, rng)
        record.update(rank=done.rank, t_fault=done.t, note=done.note, signalled=done.pids)
        if kind == "kill_launcher":
            proc.wait()
            proc = start(round_dir)  # the same command again
    else:
        record["note"] = "training never started"
    rc = finish(proc)
    left, files, waited = wait_clean(round_dir, round_dir / "tmp", GRACE)
    torch_cache = sorted(p.name for p in (round_dir / "tmp").iterdir() if p.name.startswith(TORCH_CACHE))
    record.update(
        rc=rc,
        orphans=len(left),
        orphan_cmds=list(left.values()),
        leftovers=files,
        torch_cache=torch_cache,
        clean_after_s=round(waited, 2),
        wall_s=round(time.time() - began, 1),
    )
    record.update(recovery(steps(round_dir), record.get("t_fault"), round_dir / "run"))
    record.update(outcome(rc, round_dir, reference["params"]))
    if record["ok"] and not left and not files:
        shutil.rmtree(round_dir, ignore_errors=True)  # keep only what needs a look
    return record


def run_reference(work: Path) -> dict[str, Any]:
    round_dir = work / "reference"
    prepare(round_dir, {"kind": "none", "pace": PACE})
    began = time.time()
    rc = finish(start(round_dir))
    rows = [r for r in steps(round_dir) if r["rank"] == 0]
    if rc != 0 or len(rows) != STEPS:
        sys.exit(f"soak: the reference run failed (exit {rc}, {len(rows)} steps); see {round_dir / 'out.txt'}")
    return {
        "params": final_params(round_dir / "run"),
        "train_s": rows[-1]["t"] - rows[0]["t"],
        "wall_s": time.time() - began,
    }


def save(out: Path, reference: dict[str, Any], load_before: tuple[float, ...], records: list[dict[str, Any]]) -> None:
    """Write the command, the machine's load and every round so far to ``out`` (one JSON object)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = {
        "command": " ".join(["python -m benchmarks.soak.soak", *sys.argv[1:]]),
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_now": os.getloadavg(),
        "reference_train_s": reference["train_s"],
        "rounds": sorted(records, key=lambda r: r["round"]),
    }
    out.write_text(json.dumps(summary, separators=(",", ":")) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1, help="rounds at a time (each has its own ports and dirs)")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("results") / "soak.json")
    parser.add_argument("--work", type=Path, default=None, help="where round dirs go (default: a new temp dir)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="soak_"))
    load_before = os.getloadavg()
    reference = run_reference(work)
    print(
        f"reference: {STEPS} steps trained in {reference['train_s']:.1f} s ({reference['wall_s']:.1f} s wall); "
        f"rounds in {work}",
        flush=True,
    )
    kinds = [KINDS[i % len(KINDS)] for i in range(args.rounds)]
    random.Random(args.seed).shuffle(kinds)
    lock, records = threading.Lock(), []

    def run(index: int) -> None:
        try:
            record = one_round(index, kinds[index], args.seed, work, reference)
        except Exception as exc:  # noqa: BLE001 - a broken round is recorded, the soak goes on
            record = {
                "round": index,
                "kind": kinds[index],
                "outcome": "SOAK_ERROR",
                "ok": False,
                "recovery_s": None,
                "detail": f"{type(exc).__name__}: {exc}",
                "orphans": 0,
                "orphan_cmds": [],
                "leftovers": [],
                "wall_s": None,
            }
        with lock:
            records.append(record)
            save(args.out, reference, load_before, records)  # after every round: an interrupted soak keeps its rounds
            print(
                f"round {index + 1:3d}/{args.rounds} {record['kind']:13s} {record['outcome']:10s} "
                f"recovery {record['recovery_s'] if record['recovery_s'] is not None else '-'} s, "
                f"orphans {record['orphans']}, leftovers {len(record['leftovers'])}, {record['wall_s']} s"
                + (f"; {record['note']}" if record.get("note") else ""),
                flush=True,
            )

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(run, range(args.rounds)))
    records.sort(key=lambda r: r["round"])
    print_table(records)
    save(args.out, reference, load_before, records)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
