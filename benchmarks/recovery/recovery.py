"""Kill-and-recover rounds: our launcher vs plain torchrun, 2 ranks on CPU, interleaved.

Run: ``.venv/bin/python -m benchmarks.recovery.recovery [--rounds 20] [--warm]``

Each round starts the same 2-rank job (benchmarks/recovery/recovery_worker.py) with
``--max_restarts=1``; rank 1 SIGKILLs itself at step 5 of the first attempt. A round
recovers if the job exits 0 within 60 s. Recovery time = SIGKILL -> first completed step
after the restart. torchrun runs the worker with plain ``torch.distributed.init_process_group``
(what its users write). Targets: 20/20 recovered, median <= 5 s; issue 36: median <= 0.5 s.
Then the phases: the restarted rank 0 marks when its process started (/proc), when its script
began, when torch was imported, when it joined the group and when its first step ended.
``--warm`` adds our launcher with ``--warm-spares`` (launcher/warm.py) and lets every job run
``WARM_WAIT`` s before the kill, so that the spares have started: a spare started before the
kill, so its "spawn" ends at the kill and its "import torch" is the assignment's few imports.
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

WORKER = str(Path(__file__).with_name("recovery_worker.py"))
COMMANDS = {
    "neural_arch": [sys.executable, "-m", "neural_arch.distributed.launcher", "--nproc_per_node=2", "--max_restarts=1"],
    "torchrun": [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "--max_restarts=1",
    ],
}
FLAVOUR = {"neural_arch": "ours", "torchrun": "plain", "warm": "ours"}
WARM = [*COMMANDS["neural_arch"], "--warm-spares"]
WARM_WAIT = 15.0
"""Seconds every job runs before the kill with ``--warm``: launcher/warm.py's REFILL_DELAY (10 s)
and the spares' own start."""


PHASES = {
    "detect + tear down + spawn": ("killed", "spawned"),
    "interpreter start": ("spawned", "script"),
    "import torch": ("script", "imported"),
    "join the group": ("imported", "joined"),
    "first step": ("joined", "stepped"),
}
"""Where the kill -> first step time goes, cut at the restarted rank 0's marks (recovery_worker.py)."""
Round = tuple[bool, "float | None", str, dict[str, float]]


def _phases(out: str) -> dict[str, float]:
    """Seconds per phase of this round's recovery ({} where a mark is missing)."""
    marks_file, killed, after = Path(out, "phases.json"), Path(out, "killed_at"), Path(out, "first_step_after")
    if not (marks_file.exists() and killed.exists() and after.exists()):
        return {}
    marks = json.loads(marks_file.read_text())
    marks = {
        **marks,
        "spawned": max(marks["spawned"], float(killed.read_text())),  # a warm spare started before the kill
        "killed": float(killed.read_text()),
        "stepped": float(after.read_text()),
    }
    return {name: marks[end] - marks[start] for name, (start, end) in PHASES.items()}


def one_round(name: str, command: list[str], wait: float) -> Round:
    with tempfile.TemporaryDirectory() as out:
        try:
            proc = subprocess.run(
                command + [WORKER, out, FLAVOUR[name], str(wait)], capture_output=True, text=True, timeout=60 + wait
            )
            ok, why = proc.returncode == 0, f"exit {proc.returncode}"
            if not ok and "connectFullMesh" in proc.stderr:
                why += " (connectFullMesh)"
            if not ok:  # keep the evidence
                handle, failed = tempfile.mkstemp(prefix=f"recovery_failed_{name}_", suffix=".log")
                with os.fdopen(handle, "w") as f:
                    f.write(proc.stdout + "\n" + proc.stderr)
                why += f" (log: {failed})"
        except subprocess.TimeoutExpired:
            ok, why = False, "hung > 60 s"
        phases = _phases(out) if ok else {}
        return ok, sum(phases.values()) if phases else None, why, phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--warm", action="store_true", help="also our launcher with --warm-spares")
    args = parser.parse_args()
    commands = {**COMMANDS, "warm": WARM} if args.warm else dict(COMMANDS)
    wait = WARM_WAIT if args.warm else 0.0
    results: dict[str, list[Round]] = {name: [] for name in commands}
    for r in range(args.rounds):
        for name in list(commands) if r % 2 == 0 else list(reversed(commands)):
            results[name].append(one_round(name, commands[name], wait))
            ok, sec, why, _ = results[name][-1]
            print(
                f"round {r + 1:2d} {name:11s} {'recovered' if ok else 'FAILED':9s} "
                f"{f'{sec:.2f} s' if sec is not None else why}",
                flush=True,
            )
    print()
    for name, rows in results.items():
        times = [s for ok, s, _, _ in rows if ok and s is not None]
        median = f"{statistics.median(times):.2f} s" if times else "n/a"
        failures = sorted({why for ok, _, why, _ in rows if not ok})
        print(
            f"{name:11s} recovered {sum(r[0] for r in rows)}/{len(rows)}, median SIGKILL->first step {median}"
            + (f"; failures: {', '.join(failures)}" if failures else "")
        )
    print("\nmedian seconds per phase (the restarted rank 0's marks; phases of one round add up to its total)")
    print(f"{'phase':28s} " + " ".join(f"{name:>11s}" for name in results))
    for phase in PHASES:
        cells = [[p[phase] for *_, p in rows if p] for rows in results.values()]
        print(f"{phase:28s} " + " ".join(f"{statistics.median(c):11.3f}" if c else f"{'n/a':>11s}" for c in cells))


if __name__ == "__main__":
    main()
