"""``neural-arch export --checkpoint DIR --output FILE``: TorchScript for the C++ program, or safetensors.

Run: ``neural-arch export --checkpoint runs/NAME --output model.ts`` then build and run
``cpp/`` (see cpp/README.md). The checkpoint's ``run.task`` decides what is exported
(``Task.build_export``); the file is checked against the eager model on an example input
before it replaces ``--output``. ``--format safetensors`` writes the weights and the model
settings instead (``neural_arch/export_weights.py``), for any app.
"""

from __future__ import annotations

from typing import Sequence

from neural_arch.cli.checkpoints import add_checkpoint_argument, read_checkpoint, task_of
from neural_arch.cli.usage import command_parser, run_reporting

PROG = "neural-arch export"


def main(argv: Sequence[str]) -> int:
    parser = command_parser(
        "export", "Export a training checkpoint to TorchScript for C++ (LibTorch) inference.", "checkpoints.md"
    )
    add_checkpoint_argument(parser)
    parser.add_argument("--output", required=True, help="file to write, e.g. model.ts or model.safetensors")
    parser.add_argument(
        "--format",
        choices=["torchscript", "safetensors"],
        default="torchscript",
        help="torchscript: the module for LibTorch (default); safetensors: weights + the model settings as JSON",
    )
    ns = parser.parse_args(argv)

    def export() -> int:
        from neural_arch.export import export_module

        state = read_checkpoint(ns.checkpoint)
        if ns.format == "safetensors":
            from neural_arch.export_weights import write_safetensors

            write_safetensors(state, ns.output)
            print(f"wrote {ns.output} ({len(state['model'])} tensors and the model settings)")
            return 0
        spec = task_of(state, ns.task).build_export(state)
        diff = export_module(spec.module, spec.example, ns.output, spec.atol)
        print(f"wrote {ns.output} (TorchScript vs eager max abs difference {diff:.2e})")
        return 0

    from neural_arch.distributed.checkpoint.errors import CheckpointError  # torch: once the arguments are fine

    # An unusable or refused (possibly malicious) checkpoint is bad input: one line, exit 2.
    return run_reporting(PROG, export, ValueError, KeyError, CheckpointError)
