"""``neural-arch evaluate PATH``: the validation metrics of a checkpoint, on any layout.

Run: ``neural-arch evaluate runs/tiny`` (the newest usable checkpoint; or ``runs/tiny/checkpoints/step_00000004``)
prints ``val/loss`` and the task's other validation metrics, exactly as the trainer computed
them at that step, and writes them as JSON to ``RUN_DIR/eval_step_N.json`` (``--output FILE``
elsewhere, ``--json`` prints the JSON instead of lines). The config is the run's own
``config.yaml`` (``--config FILE`` for another, ``--set k=v`` overrides either, e.g. a
parallel layout). ``--nproc-per-node N`` starts N workers through our launcher, each running
this file; under torchrun, srun or mpirun it evaluates in place. Logic: training/checkpoint_eval.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from neural_arch.cli.train import add_config_arguments, nproc_value, without_nproc
from neural_arch.cli.usage import command_parser, run_reporting
from neural_arch.training.typed_config import ConfigError

if TYPE_CHECKING:  # imported lazily at run time, so `--help` and usage errors stay fast
    from neural_arch.training.config import Config

PROG = "neural-arch evaluate"


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("evaluate", "Validation metrics of a training checkpoint.", "checkpoints.md")
    parser.add_argument("path", metavar="PATH", help="a run directory, its checkpoints/ or one step_* directory")
    add_config_arguments(parser)
    parser.add_argument(
        "--nproc-per-node",
        "--nproc_per_node",
        dest="nproc_per_node",
        type=nproc_value,
        default=1,
        help="processes on this node (default 1); the metrics are the same on any number",
    )
    parser.add_argument("--output", default=None, help="JSON file to write (default: RUN_DIR/eval_step_N.json)")
    parser.add_argument("--json", action="store_true", help="print the JSON instead of one line per metric")
    return parser


def main(argv: Sequence[str]) -> int:
    ns = build_parser().parse_args(argv)
    from neural_arch.distributed.checkpoint.errors import CheckpointError

    return run_reporting(PROG, lambda: _evaluate_or_launch(ns, list(argv)), ConfigError, CheckpointError)


def _config_file(ns: argparse.Namespace) -> str:
    from neural_arch.training.checkpoint_eval import check_checkpoint_path, checkpoint_config

    check_checkpoint_path(ns.path)
    return ns.config if ns.config is not None else checkpoint_config(ns.path, ns.overrides)


def _evaluate_or_launch(ns: argparse.Namespace, argv: list[str]) -> int:
    from neural_arch.distributed.env import detect_cluster_env
    from neural_arch.training.config import load_config

    world = detect_cluster_env().world_size
    if ns.nproc_per_node > 1 and world == 1:
        import os

        from neural_arch.cli.train import check_nproc
        from neural_arch.distributed.launcher import DistributedLauncher, LaunchConfig

        check_nproc(ns.nproc_per_node, "--nproc-per-node", os.cpu_count() or 1)
        cfg = load_config(_config_file(ns), ns.overrides, world_size=ns.nproc_per_node)  # mistakes: one line, now
        launch = LaunchConfig(
            nproc_per_node=ns.nproc_per_node,
            timeout=cfg.training.timeout,
            backend=None if cfg.training.backend == "auto" else cfg.training.backend,
            rank0_only=True,
            output_prefix="torchrun",  # rank 0's lines as one process prints them: --json stays parseable JSON
        )
        return DistributedLauncher(launch).launch(__file__, *without_nproc(argv))
    return _evaluate_here(ns, load_config(_config_file(ns), ns.overrides, world_size=world))


def worker_main(argv: Optional[Sequence[str]] = None) -> int:
    """Evaluate in this process, as one rank of whatever job it belongs to (the workers' entry)."""
    ns = build_parser().parse_args(argv)

    def evaluate_here() -> int:
        from neural_arch.distributed.env import detect_cluster_env
        from neural_arch.training.config import load_config

        world = detect_cluster_env().world_size
        return _evaluate_here(ns, load_config(_config_file(ns), ns.overrides, world_size=world))

    from neural_arch.distributed.checkpoint.errors import CheckpointError

    return run_reporting(PROG, evaluate_here, ConfigError, CheckpointError)


def _evaluate_here(ns: argparse.Namespace, cfg: Config) -> int:
    """The checked ``cfg``'s metrics on the checkpoint at ``ns.path``; rank 0 reports them."""
    import neural_arch.distributed as nd
    from neural_arch.training.checkpoint_eval import evaluate_checkpoint

    step, metrics = evaluate_checkpoint(cfg, ns.path)
    if nd.get_rank() == 0:
        _report(ns, step, metrics, nd.get_world_size())
    return 0


def _report(ns: argparse.Namespace, step: int, metrics: dict[str, float], world_size: int) -> None:
    """Print the metrics (or their JSON) and write the JSON file."""
    from neural_arch.training.checkpoint_eval import report, run_dir_of, write_report

    result = report(ns.path, step, metrics, world_size)
    run_dir = run_dir_of(ns.path)
    output = Path(ns.output) if ns.output else (run_dir / f"eval_step_{step}.json" if run_dir else None)
    if output is not None:
        write_report(result, output)
    if ns.json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        print(f"checkpoint {ns.path}: step {step}, {world_size} process(es)")
        for name, value in metrics.items():
            print(f"  {name} {value!r}")
        if output is not None:
            print(f"wrote {output}")
    sys.stdout.flush()


if __name__ == "__main__":
    from neural_arch.utils.fast_exit import request_fast_exit

    code = worker_main()
    request_fast_exit()
    sys.exit(code)
