"""``neural-arch export --checkpoint DIR --output model.ts``: TorchScript for the C++ program.

Run: ``neural-arch export --checkpoint runs/NAME/checkpoints --output model.ts`` then build
and run ``cpp/`` (see cpp/README.md). The checkpoint's ``run.task`` decides how its model is
rebuilt (``Task.build_export``); the file is checked against the eager model (max difference
<= 1e-5) before it replaces ``--output``.
"""

from __future__ import annotations

from typing import Any, Sequence

from neural_arch.cli.usage import command_parser, run_reporting

PROG = "neural-arch export"


def build_for_task(state: dict[str, Any]) -> Any:
    """The export builder of the task that trained the checkpoint ``state``."""
    from neural_arch.training.registry import task_class

    run = state.get("config", {}).get("run", {}) if isinstance(state, dict) else {}
    if "task" not in run:
        raise ValueError("the checkpoint's config names no run.task; it was not written by `neural-arch train`")
    return task_class(run["task"]).build_export(state)


def main(argv: Sequence[str]) -> int:
    parser = command_parser("export", "Export a training checkpoint to TorchScript for C++ (LibTorch) inference.")
    parser.add_argument("--checkpoint", required=True, help="a run's checkpoints/ directory or one step_* directory")
    parser.add_argument("--output", required=True, help="TorchScript file to write, e.g. model.ts")
    ns = parser.parse_args(argv)

    def export() -> int:
        from neural_arch.export import export_checkpoint

        diff = export_checkpoint(ns.checkpoint, ns.output, build_for_task)
        print(f"wrote {ns.output} (TorchScript vs eager max abs difference {diff:.2e})")
        return 0

    return run_reporting(PROG, export, ValueError, KeyError)
