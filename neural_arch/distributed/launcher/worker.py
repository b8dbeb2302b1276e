"""One worker of a launched job: run a script as ``python -u script.py`` would, with per-rank logs
and a clear failure record.

The launcher starts every worker as ``python -u <this file> [--log-dir DIR] [--console
all|rank0|none] [--local-ranks 0,1] [--run-as script|module|executable] [--parent-pid PID]
[--bind-cpus CPUS] [--shown-dir DIR] SCRIPT ARGS`` (``worker_command``); you rarely run it by hand.

- The script runs as under torchrun (``program.py``): its ``__file__``, ``sys.argv``,
  ``sys.path[0]`` and ``__main__``; nothing imported before it that ``python -u script.py``
  does not import (this file runs by path, imports only the standard library and the launcher's
  standard-library modules, without the package ``__init__``s that import torch, and removes
  all of them from ``sys.modules`` before the script starts); its exit codes and signals its
  own (what neural-arch's own code wants the launcher to know goes through ``channel.py``).
  ``--no-python`` replaces the worker with the program (``exec``), as torchrun starts it.
- Lifetime: with ``--parent-pid`` (the launcher passes its own) the worker dies when the
  launcher dies, even by SIGKILL (``lifeline.py``).
- Output: the worker's stdout and stderr (including subprocesses and C++ code, since whole
  file descriptors are redirected) go through a log pump as the launcher planned
  (``output.py``): appended, unprefixed, to ``DIR/rank_N.log``, and shown on the console.
- Stacks: a real-time signal from the launcher writes every thread's stack into the log
  (``stacks.py``), before it stops a failed or hung group.
- Failure: an uncaught exception is printed without the launcher's frames (once per job on
  the console: a restart that repeats it prints one line), followed by a one-line diagnosis
  when it is a collective timeout, and recorded in the elastic error file so the launcher's
  summary can quote it; the process group is then left at once (``crash_report.py``, loaded
  only then).
"""

import sys

STARTUP_MODULES = frozenset(sys.modules)
"""What the interpreter imported before this file ran: all the script will find in ``sys.modules``."""

import argparse  # noqa: E402 - after the snapshot above, on purpose: all of these are forgotten
import atexit  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from types import ModuleType  # noqa: E402
from typing import Any, Optional, Sequence  # noqa: E402

HERE = Path(__file__).resolve().parent
PACKAGE = "neural_arch.distributed.launcher"
PACKAGES = {
    "neural_arch": HERE.parents[1],
    "neural_arch.distributed": HERE.parent,
    PACKAGE: HERE,
}
"""The packages above the launcher's modules, by folder: stood in for while this file imports
them, so that their ``__init__``s (which import torch) do not run."""


WORKER = str(HERE / "worker.py")
"""How the launcher names this file to ``sys.executable``: ``python -u WORKER [options] SCRIPT ARGS``.
By path: ``-m`` would import the package ``__init__``s, and torch, before the script."""


class LauncherImports:
    """``with LauncherImports(): import neural_arch.distributed.launcher.stacks``: the launcher's
    standard-library modules without running ``neural_arch.distributed``'s ``__init__`` (torch);
    when the block ends, every module it added is removed from ``sys.modules`` again (the objects
    stay usable), so nothing of the launcher's is left for the script to find."""

    def __enter__(self) -> "LauncherImports":
        self.before = set(sys.modules)
        for name, folder in PACKAGES.items():
            if name not in sys.modules:
                stand_in = ModuleType(name)
                stand_in.__path__ = [str(folder)]  # type: ignore[attr-defined]
                stand_in.__package__ = name
                sys.modules[name] = stand_in
        return self

    def __exit__(self, *exc: object) -> None:
        forget_modules(self.before)


UNFORGETTABLE = ("torch", "numpy")
"""Packages whose extensions cannot be loaded twice in one process: were one imported before the
script (a bug: test_torchrun_script_contract.py names it), it is kept rather than broken."""


def forget_modules(keep: "set[str] | frozenset[str]") -> None:
    """Remove from ``sys.modules`` every module not named in ``keep`` (but ``UNFORGETTABLE`` ones)."""
    for name in set(sys.modules) - set(keep):
        if name.split(".", 1)[0] not in UNFORGETTABLE:
            del sys.modules[name]


class Options(argparse.Namespace):
    log_dir: Optional[str]
    console: str
    local_ranks: Optional[str]
    run_as: str
    parent_pid: Optional[int]
    bind_cpus: Optional[str]
    shown_dir: Optional[str]
    script: str
    args: list[str]


def parse(argv: Optional[Sequence[str]]) -> Options:
    parser = argparse.ArgumentParser(prog="python -u worker.py", allow_abbrev=False)
    parser.add_argument("--log-dir", default=None)
    parser.add_argument("--console", choices=["all", "rank0", "none"], default="all")
    parser.add_argument("--local-ranks", default=None, help="show only these local ranks (comma-separated)")
    parser.add_argument("--run-as", choices=["script", "module", "executable"], default="script")
    parser.add_argument("--parent-pid", type=int, default=None, help="the launcher's pid: die when it dies")
    parser.add_argument("--bind-cpus", default=None, help="the node's CPUs to share out by local rank (cpu_bind.py)")
    parser.add_argument("--shown-dir", default=None, help="the job's record of tracebacks on the console (repeats.py)")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    return parser.parse_args(argv, namespace=Options())


class Ending:
    """How the script ended, for the worker's exit (``finish``)."""

    code = 0
    interrupted = False
    """The script died of KeyboardInterrupt: python then ends by SIGINT, and so does the worker."""


def run_script(run_python: Any, ns: Options, cluster: Any, show: bool, ending: Ending) -> int:
    """Run the script (``program.run_python``, loaded before it); its exit code, the failure
    reported as python would, plus the launcher's record of it (crash_report.py)."""
    try:
        run_python(ns.script, ns.args, ns.run_as)
    except SystemExit as exc:
        return exit_code(exc.code)
    except BaseException as exc:  # noqa: BLE001 - every failure is recorded, then reported
        ending.interrupted = isinstance(exc, KeyboardInterrupt)
        report(exc, ns, cluster, show)
        return 1
    return 0


def exit_code(code: object) -> int:
    """The exit status of ``SystemExit(code)``, as python computes it (printing a non-integer)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr, flush=True)
    return 1


def report(exc: BaseException, ns: Options, cluster: Any, show: bool) -> None:
    """Print and record the script's failure (crash_report.py), loaded only now. ``cluster``:
    this worker's ``ClusterEnv`` (``env/``)."""
    with LauncherImports():
        from neural_arch.distributed.launcher.crash_report import report_failure
        from neural_arch.distributed.launcher.log_format import attempt_number
        from neural_arch.distributed.launcher.repeats import ShownTracebacks
    # Only a rank whose output reaches the console can repeat what the console showed.
    shown = None
    if ns.shown_dir and show:
        shown = ShownTracebacks(Path(ns.shown_dir), cluster.rank, attempt_number(cluster.attempt))
    report_failure(exc, shown)


def write_header(log: Path, rank: int, attempt: str) -> Optional[str]:
    """Start this attempt's lines in ``log`` (the launcher's failure summary finds them by it);
    the one-line error when the log cannot be written, or None."""
    with LauncherImports():
        from neural_arch.distributed.launcher.log_format import attempt_header
        from neural_arch.utils.safe_files import open_no_follow
    log.parent.mkdir(parents=True, exist_ok=True)
    # Not through a symlink: the log's folder may be a run directory someone else prepared.
    try:
        header = open_no_follow(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:  # a planted symlink, a folder in its place: one line, no restart (exit 2)
        return f"launcher: cannot write rank {rank}'s log {log}: {exc.strerror}; remove it"
    try:
        os.write(header, (attempt_header(rank, attempt, os.getpid()) + "\n").encode())
    finally:
        os.close(header)
    return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    ns = parse(argv)
    with LauncherImports():
        from neural_arch.distributed.launcher.lifeline import die_with_parent

        if ns.parent_pid is not None:  # first: nothing is started or written for a launcher already gone
            die_with_parent(ns.parent_pid)
        from neural_arch.distributed.env import detect_cluster_env
        from neural_arch.distributed.env.worker_output import output_settings
        from neural_arch.distributed.launcher import program
        from neural_arch.distributed.launcher.channel import USAGE, open_channel, tell
        from neural_arch.distributed.launcher.cpu_bind import bind_worker, parse_cpus
        from neural_arch.distributed.launcher.log_format import log_path
        from neural_arch.distributed.launcher.output import start_output
        from neural_arch.distributed.launcher.stacks import dump_stacks_on_request

        open_channel()  # from now on this worker's messages reach the launcher (channel.py)
        cluster = detect_cluster_env()  # rank, local rank and attempt, as our agent set them
        rank, local_rank = cluster.rank, cluster.local_rank
        log = log_path(Path(ns.log_dir), rank) if ns.log_dir else None
        show = ns.console == "all" or (ns.console == "rank0" and rank == 0)
        if ns.local_ranks is not None:
            show = show and local_rank in {int(r) for r in ns.local_ranks.split(",") if r}
        refused = write_header(log, rank, cluster.attempt) if log is not None else None
        if refused is not None:
            print(refused, file=sys.stderr, flush=True)
            tell(USAGE, refused)
            return 2
        tee = start_output(*output_settings(), rank, local_rank, log, show)  # the log pump (output.py)
        # The interpreter's own streams, as python -u gives them (unbuffered: write-through), now
        # writing through the pump's pipes, whatever stream objects the pump's start made.
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        if ns.bind_cpus:  # after the log pump started: it need not share this rank's cores
            bind_worker(parse_cpus(ns.bind_cpus), local_rank, cluster.local_world_size)
        if ns.run_as == "executable":
            program.exec_program(ns.script, ns.args)
        dump_stacks_on_request(log)
    ending = Ending()
    atexit.register(finish, ending)  # registered first, so it runs last of all at exit
    atexit.register(close_output, tee)  # after the script's own exit handlers: see close_output
    start_as_python_would()
    ending.code = run_script(program.run_python, ns, cluster, show, ending)
    return ending.code


def close_output(tee: Any, wait: float = 10.0) -> None:
    """The worker's last step (an exit handler, after the script's own): its fds 1 and 2 back to
    the launcher's, then a wait until the log pump has read all this process wrote (so the
    launcher's next lines come after the worker's last ones), at most ``wait`` seconds. Not until
    the pump ends: a process the script started that lives until this one exits holds the pump's
    pipe to the end (a spawn-context ``multiprocessing`` program's resource tracker does), and
    waiting for it made such a script exit 10 s late."""
    if not hasattr(tee, "saved") or not hasattr(tee, "pump"):  # another pump than output.py's: its own close
        tee.close()
        return
    import fcntl
    import struct
    import termios

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    pipes = (os.dup(1), os.dup(2))  # the pump's pipes, to see what is still unread in them
    os.dup2(tee.saved[0], 1)
    os.dup2(tee.saved[1], 2)

    def unread(fd: int) -> int:
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]

    deadline, empty = time.monotonic() + wait, 0
    try:
        while time.monotonic() < deadline and tee.pump.poll() is None:
            empty = empty + 1 if not any(unread(fd) for fd in pipes) else 0
            if empty >= 3:  # read, and a moment to write it out
                break
            time.sleep(0.01)
    finally:
        for fd in pipes:
            os.close(fd)


def start_as_python_would() -> None:
    """Leave the script what ``python -u script.py`` leaves it: the interpreter's modules only,
    and none of this file's ``sys.path`` entry (program.py puts the script's own first)."""
    forget_modules(STARTUP_MODULES)
    if sys.path and not getattr(sys.flags, "safe_path", False) and Path(sys.path[0]).resolve() == HERE:
        sys.path_importer_cache.pop(sys.path.pop(0), None)


def finish(ending: Ending) -> None:
    """The very last exit handler: a script that died of KeyboardInterrupt ends by SIGINT, as
    python ends then (so the launcher reports it as such)."""
    if ending.interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)


def exit_as_asked(code: int) -> Any:
    """``sys.exit(code)``; or, for a script that asked to skip the interpreter's teardown
    (``neural_arch.utils.fast_exit.request_fast_exit``: our trainer does), exit without it."""
    fast = sys.modules.get("neural_arch.utils.fast_exit")
    if fast is not None:
        fast.exit_when_asked(code)
    sys.exit(code)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--warm-spare"]:  # warm.py's spare: torch first, then the worker it is told to be
        with LauncherImports():
            from neural_arch.distributed.launcher.spare import wait_for_work
        work = wait_for_work(int(sys.argv[2]), int(sys.argv[3]))
        STARTUP_MODULES = frozenset(sys.modules)  # torch's modules stay: a second copy would break it
        exit_as_asked(0 if work is None else main(work))
    else:
        exit_as_asked(main())
