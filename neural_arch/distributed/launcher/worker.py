"""One worker of a launched job: run a script with per-rank logs and a clear failure record.

The launcher starts every worker as
``python -m neural_arch.distributed.launcher.worker [--log-dir DIR] [--console all|rank0|none]
[--local-ranks 0,1] [--run-as script|module|executable] [--parent-pid PID] [--shown-dir DIR]
SCRIPT ARGS``; you rarely run it by hand.

- Lifetime: with ``--parent-pid`` (the launcher passes its own) the worker dies when the
  launcher dies, even by SIGKILL (``lifeline.py``).
- Output: the worker's stdout and stderr (including subprocesses and C++ code, since whole
  file descriptors are redirected) are appended, unprefixed, to ``DIR/rank_N.log`` and
  shown on the console prefixed ``[rank N]``.
- Failure: an uncaught exception is printed without the launcher's frames (once per job on
  the console: a restart that repeats it prints one line), followed by a one-line diagnosis
  when it is a collective timeout, and recorded in the elastic error file so the launcher's
  summary can quote it; the process group is then left at once (``crash_report.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from neural_arch.distributed.checkpoint.progress import on_checkpoint_saved
from neural_arch.distributed.env import detect_cluster_env
from neural_arch.distributed.env.worker_output import output_settings
from neural_arch.distributed.launcher.cpu_bind import bind_worker, parse_cpus
from neural_arch.distributed.launcher.crash_report import report_failure
from neural_arch.distributed.launcher.lifeline import die_with_parent
from neural_arch.distributed.launcher.log_format import attempt_header, attempt_number, log_path, progress_marker
from neural_arch.distributed.launcher.output import start_output
from neural_arch.distributed.launcher.program import run_executable, run_python
from neural_arch.distributed.launcher.repeats import ShownTracebacks
from neural_arch.distributed.launcher.stacks import dump_stacks_on_request
from neural_arch.utils.safe_files import open_no_follow


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def run_script(
    script: str, args: Sequence[str], run_as: str = "script", shown: Optional[ShownTracebacks] = None
) -> int:
    """Run ``script`` (a Python file, a module, or an executable: ``run_as``) with ``args``;
    returns its exit code. ``shown``: the console's tracebacks (crash_report.py)."""
    if run_as == "executable":
        return run_executable(script, args)
    try:
        run_python(script, args, run_as)
    except SystemExit as exc:
        return _exit_code(exc.code)
    except BaseException as exc:  # noqa: BLE001 - every failure is recorded, then reported
        report_failure(exc, shown)
        return 1
    return 0


def report_checkpoints(log_dir: Path, attempt: str) -> None:
    """Leave this attempt's progress marker once it saves a checkpoint: the launcher then
    knows a repeated failure came after progress and restarts (restart_policy.py)."""
    marker = progress_marker(log_dir, attempt)

    def mark(saved: Path) -> None:  # its name (step_00000100): the launcher's restart line quotes it
        marker.parent.mkdir(parents=True, exist_ok=True)
        partial = marker.with_name(f"{marker.name}.{os.getpid()}")  # every rank writes: each its own, then a rename
        partial.write_text(saved.name)
        os.replace(partial, marker)

    on_checkpoint_saved(mark)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m neural_arch.distributed.launcher.worker", allow_abbrev=False)
    parser.add_argument("--log-dir", default=None)
    parser.add_argument("--console", choices=["all", "rank0", "none"], default="all")
    parser.add_argument("--local-ranks", default=None, help="show only these local ranks (comma-separated)")
    parser.add_argument("--run-as", choices=["script", "module", "executable"], default="script")
    parser.add_argument("--parent-pid", type=int, default=None, help="the launcher's pid: die when it dies")
    parser.add_argument("--bind-cpus", default=None, help="the node's CPUs to share out by local rank (cpu_bind.py)")
    parser.add_argument("--shown-dir", default=None, help="the job's record of tracebacks on the console (repeats.py)")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    if ns.parent_pid is not None:  # first: nothing is started or written for a launcher already gone
        die_with_parent(ns.parent_pid)
    cluster = detect_cluster_env()
    rank = cluster.rank
    log = log_path(Path(ns.log_dir), rank) if ns.log_dir else None
    show = ns.console == "all" or (ns.console == "rank0" and rank == 0)
    if ns.local_ranks is not None:
        show = show and cluster.local_rank in {int(r) for r in ns.local_ranks.split(",") if r}
    if ns.log_dir:
        report_checkpoints(Path(ns.log_dir), cluster.attempt)
    if log is not None:  # lets the launcher's failure summary find this attempt's lines
        log.parent.mkdir(parents=True, exist_ok=True)
        # Not through a symlink: the log's folder may be a run directory someone else prepared.
        try:
            header = open_no_follow(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:  # a planted symlink, a folder in its place: one line, no restart (exit 2)
            print(f"launcher: cannot write rank {rank}'s log {log}: {exc.strerror}; remove it", file=sys.stderr)
            return 2
        try:
            os.write(header, (attempt_header(rank, cluster.attempt, os.getpid()) + "\n").encode())
        finally:
            os.close(header)
    tee = start_output(*output_settings(), rank, cluster.local_rank, log, show)
    stacks = dump_stacks_on_request(log)
    if ns.bind_cpus:  # after the log pump started: it need not share this rank's cores
        bind_worker(parse_cpus(ns.bind_cpus), cluster.local_rank, cluster.local_world_size)
    # Only a rank whose output reaches the console can repeat what the console showed.
    shown = (
        ShownTracebacks(Path(ns.shown_dir), rank, attempt_number(cluster.attempt)) if ns.shown_dir and show else None
    )
    try:
        code = run_script(ns.script, ns.args, ns.run_as, shown)
    finally:
        tee.close()
        if stacks is not None:
            stacks.close()
    return code


if __name__ == "__main__":
    from neural_arch.utils.fast_exit import exit_when_asked

    exit_when_asked(main())  # after the log pump drained; a script that asked skips teardown (utils/fast_exit.py)
