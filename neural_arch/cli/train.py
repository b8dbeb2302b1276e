"""``neural-arch train``: train from a YAML config, here or on N local processes.

Run: ``neural-arch train --config tiny --nproc-per-node 2 --set optim.lr=0.1`` (or ``--nproc-per-node auto``).
With N > 1 and no launcher around it, the command starts N workers through our launcher
(restarts on), each running this file; under torchrun, srun or mpirun it trains in place.
The workers' entry is this file: ``python neural_arch/cli/train.py --config FILE [--set
k=v ...] [--resume auto|none|PATH]``. Config mistakes exit 2 with one line.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from neural_arch.cli.usage import command_parser, run_reporting
from neural_arch.distributed.launcher.nproc import nproc_spelling
from neural_arch.training.typed_config import ConfigError

if TYPE_CHECKING:  # imported lazily at run time, so `--help` and usage errors stay fast
    from neural_arch.training.config import Config

PROG = "neural-arch train"
_NPROC_FLAGS = ("--nproc-per-node", "--nproc_per_node")
PROCS_PER_CORE = 8
"""Most processes per core ``neural-arch train`` starts on one node (tests oversubscribe 2 cores 2x)."""


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """``--config`` and ``--set`` (several values after one flag, or the flag repeated)."""
    parser.add_argument("--config", default=None, help="YAML config file (default: built-in defaults)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="extend",
        nargs="+",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override config values, e.g. --set optim.lr=0.01 training.steps=50 (repeatable)",
    )


def build_parser() -> argparse.ArgumentParser:
    """Arguments of ``neural-arch train`` (its workers take the same ones)."""
    parser = command_parser("train", "Train a model from a YAML config.", "trainer.md")
    add_config_arguments(parser)
    parser.add_argument(
        "--resume", default=None, help="auto (newest good checkpoint, default), none, or a checkpoint path"
    )
    parser.add_argument(
        "--create-data",
        action="store_true",
        help="first create the task's data if it does not exist (e.g. the sea-ice store at data.path)",
    )
    parser.add_argument(
        *_NPROC_FLAGS,
        dest="nproc_per_node",
        type=nproc_value,
        default=None,
        help="processes on this node: N, or auto (GPUs, else CPU cores), cpu or gpu, as `neural-arch launch` "
        "takes it (default: training.nproc_per_node)",
    )
    return parser


def nproc_value(text: str) -> int:
    """``--nproc-per-node``'s value as a count: N, or a device word by the launcher's rule
    (``parse_nproc``, which imports torch: a mistyped count is refused without it)."""
    try:
        spelled = nproc_spelling(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if isinstance(spelled, int):
        return spelled
    from neural_arch.distributed.launcher.config import parse_nproc

    try:
        return parse_nproc(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv: Sequence[str]) -> int:
    """``neural-arch train``: start the workers through the launcher, or train in this process."""
    ns = build_parser().parse_args(argv)
    from neural_arch.distributed.checkpoint.errors import CheckpointError  # imports torch: not for --help

    return run_reporting(PROG, lambda: _train_or_launch(ns, list(argv)), ConfigError, CheckpointError)


def _train_or_launch(ns: argparse.Namespace, argv: list[str]) -> int:
    """Read the config, check it once for the world it will run on, then launch or train here."""
    from neural_arch.distributed.env import detect_cluster_env
    from neural_arch.training.config import read_config

    cfg = read_config(ns.config, ns.overrides)  # keys and types; the rest once the world size is known
    given = ns.nproc_per_node is not None
    nproc = ns.nproc_per_node if given else cfg.training.nproc_per_node
    check_nproc(nproc, "--nproc-per-node" if given else "training.nproc_per_node", os.cpu_count() or 1)
    world = detect_cluster_env().world_size
    if nproc > 1 and world == 1:
        from neural_arch.training.run_lock import RunDirLock

        _check(cfg, ns, nproc)  # the config on nproc ranks, before any data is made or process started
        RunDirLock.probe(Path(cfg.run.dir))  # another job there: one line now, not after starting workers
        if _finished(cfg, ns):
            return 0
        return _launch_workers(cfg, nproc, without_nproc(argv))
    _check(cfg, ns, world)  # this process is a rank of a world already there (or the whole job)
    if world == 1 and _finished(cfg, ns):  # this command is the whole job
        return 0
    return _train_here(cfg, ns)


def _finished(cfg: Config, ns: argparse.Namespace) -> bool:
    """Whether the run in ``run.dir`` is finished (then said in one line): no worker is started
    and no model built for a run with nothing to do (training/finished_run.py)."""
    from neural_arch.training.finished_run import finished_step, nothing_to_do_line

    step = finished_step(cfg, ns.resume)
    if step is not None:
        print(nothing_to_do_line(step, cfg.training.steps, Path(cfg.run.dir)), flush=True)
    return step is not None


def check_nproc(nproc: int, where: str, cores: int) -> None:
    """Refuse more processes than ``PROCS_PER_CORE`` per core (each worker holds its own torch
    and model: a thousand of them exhaust memory and the kernel kills the launcher with them).
    Below 1 is refused earlier, as ``launch`` does (``parse_nproc``, ``training.nproc_per_node >= 1``)."""
    limit = max(PROCS_PER_CORE * cores, PROCS_PER_CORE)
    if nproc > limit:
        raise ConfigError(
            f"{where} {nproc}: more processes than this machine can run ({cores} cores, at most {limit}: "
            f"{PROCS_PER_CORE} per core); use fewer, or more nodes"
        )


def _check(cfg: Config, ns: argparse.Namespace, world_size: int) -> None:
    """``cfg`` on ``world_size`` ranks: ``validate_config`` (every range and cross-field rule, the
    layout's included), then what this machine and the task's data must offer; its task's data
    must exist, or be asked for with inputs the task accepts. One-line ConfigErrors."""
    import torch

    from neural_arch.training.config import validate_config
    from neural_arch.training.device_check import check_devices
    from neural_arch.training.registry import task_class
    from neural_arch.training.tracking_common import require_packages

    validate_config(cfg, world_size=world_size)
    check_devices(cfg, cuda=torch.cuda.is_available())  # before any data is made or worker started
    require_packages(cfg)  # MLflow, W&B: one line now, not an error on rank 0 while the others wait
    task = task_class(cfg.run.task)
    missing = task.data_missing(cfg)
    if missing is not None and not ns.create_data:
        raise ConfigError(missing)
    if missing is not None:
        task.check_data_inputs(cfg)  # a bad data source is one line now, not a failure on every rank


def _launch_workers(cfg: Config, nproc: int, worker_argv: list[str]) -> int:
    from neural_arch.distributed.launcher import DistributedLauncher, LaunchConfig

    launch = LaunchConfig(
        nproc_per_node=nproc,
        max_restarts=cfg.training.max_restarts,
        warm_spares=cfg.training.warm_spares,
        timeout=cfg.training.timeout,
        backend=None if cfg.training.backend == "auto" else cfg.training.backend,
        log_dir=str(Path(cfg.run.dir) / "logs" / "console"),
        rank0_only=True,
        loader_workers=cfg.training.data_workers,  # --cpu-bind auto gives a rank room for them
    )
    from torch.distributed.elastic.multiprocessing.api import SignalException

    checkpoints = Path(cfg.run.dir) / "checkpoints"
    before = newest_step(checkpoints)
    try:
        return DistributedLauncher(launch).launch(__file__, *worker_argv)
    except SignalException as stop:  # Ctrl-C or SIGTERM to this command: the workers were told to save
        name = signal.Signals(stop.sigval).name
        print(f"{PROG}: stopped by {name}; {saved_note(checkpoints, before)}", file=sys.stderr, flush=True)
        return 128 + int(stop.sigval)


def newest_step(checkpoints: Path) -> Optional[int]:
    """The newest step directory's step in ``checkpoints`` (None if there is none)."""
    from neural_arch.distributed.checkpoint.layout import step_dirs

    found = step_dirs(checkpoints)
    return found[-1][0] if found else None


def saved_note(checkpoints: Path, before: Optional[int]) -> str:
    """What a stopped run left, read off the disk: a stop during loading or before the first
    save wrote nothing, and must not claim it did."""
    now = newest_step(checkpoints)
    if now is not None and now != before:
        return f"the workers saved a checkpoint at step {now}. Run the same command to continue from there."
    if now is not None:
        return f"no new checkpoint was saved; the newest is still step {now}, where the same command continues."
    return "no checkpoint was saved; the same command starts from the beginning."


def without_nproc(argv: list[str]) -> list[str]:
    """``argv`` less ``--nproc-per-node N`` (the workers must not start workers again)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _NPROC_FLAGS:
            skip = True
        elif not arg.startswith(tuple(f"{flag}=" for flag in _NPROC_FLAGS)):
            out.append(arg)
    return out


def worker_main(argv: Optional[Sequence[str]] = None) -> int:
    """Train in this process, as one rank of whatever job it belongs to (the workers' entry)."""
    ns = build_parser().parse_args(argv)

    def train_here() -> int:
        from neural_arch.distributed.env import detect_cluster_env
        from neural_arch.training.config import read_config

        cfg = read_config(ns.config, ns.overrides)
        _check(cfg, ns, detect_cluster_env().world_size)  # the world that started: torchrun/srun may name another
        return _train_here(cfg, ns)

    from neural_arch.distributed.checkpoint.errors import CheckpointError

    return run_reporting(PROG, train_here, ConfigError, CheckpointError)  # e.g. --resume names an unusable step


def _train_here(cfg: Config, ns: argparse.Namespace) -> int:
    """Train the checked ``cfg`` in this process; the exit status."""
    from neural_arch.training.stop import TrainingStopped
    from neural_arch.training.trainer import train

    try:
        train(cfg, resume=ns.resume, create_data=ns.create_data)
    except TrainingStopped as stopped:  # a signal, handled: saved, and the way on is said
        if stopped.rank == 0:
            print(f"{PROG}: {stopped}", file=sys.stderr, flush=True)
        return stopped.exit_code
    return 0


if __name__ == "__main__":
    from neural_arch.utils.fast_exit import request_fast_exit

    code = worker_main()
    request_fast_exit()  # our launcher's worker wrapper then skips the interpreter's teardown (1-3 s)
    sys.exit(code)
