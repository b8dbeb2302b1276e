"""Kill-and-recover rounds: our launcher vs plain torchrun, 2 ranks on CPU, interleaved.

Run: ``.venv/bin/python -m benchmarks.recovery.recovery [--rounds 20]``

Each round starts the same 2-rank job (benchmarks/recovery/recovery_worker.py) with
``--max_restarts=1``; rank 1 SIGKILLs itself at step 5 of the first attempt. A round
recovers if the job exits 0 within 60 s. Recovery time = SIGKILL -> first completed step
after the restart. torchrun runs the worker with plain ``torch.distributed.init_process_group``
(what its users write). Targets: 20/20 recovered, median <= 5 s.
"""

from __future__ import annotations

import argparse
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
FLAVOUR = {"neural_arch": "ours", "torchrun": "plain"}


def one_round(name: str) -> tuple[bool, float | None, str]:
    with tempfile.TemporaryDirectory() as out:
        try:
            proc = subprocess.run(
                COMMANDS[name] + [WORKER, out, FLAVOUR[name]], capture_output=True, text=True, timeout=60
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
        killed, after = Path(out, "killed_at"), Path(out, "first_step_after")
        seconds = (
            float(after.read_text()) - float(killed.read_text()) if ok and killed.exists() and after.exists() else None
        )
        return ok, seconds, why


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    results: dict[str, list[tuple[bool, float | None, str]]] = {name: [] for name in COMMANDS}
    for r in range(args.rounds):
        for name in list(COMMANDS) if r % 2 == 0 else list(reversed(COMMANDS)):
            results[name].append(one_round(name))
            ok, sec, why = results[name][-1]
            print(
                f"round {r + 1:2d} {name:11s} {'recovered' if ok else 'FAILED':9s} "
                f"{f'{sec:.2f} s' if sec is not None else why}",
                flush=True,
            )
    print()
    for name, rows in results.items():
        times = [s for ok, s, _ in rows if ok and s is not None]
        median = f"{statistics.median(times):.2f} s" if times else "n/a"
        failures = sorted({why for ok, _, why in rows if not ok})
        print(
            f"{name:11s} recovered {sum(ok for ok, _, _ in rows)}/{len(rows)}, median SIGKILL->first step {median}"
            + (f"; failures: {', '.join(failures)}" if failures else "")
        )


if __name__ == "__main__":
    main()
