"""``neural-arch generate --checkpoint DIR --prompt TEXT``: continue a prompt with a trained model.

Run: ``neural-arch generate --checkpoint runs/NAME --prompt "def " --length 300`` (temperature
0.8), ``--temperature 0`` for greedy decoding, ``--top-k 20`` to sample among the 20 likeliest
bytes, ``--no-cache`` to recompute every position instead of using the KV cache (same text,
slower). The prompt and its continuation are printed as UTF-8 (invalid bytes replaced).
The checkpoint's ``run.task`` must be a language model (a task that implements ``Task.generate``).
"""

from __future__ import annotations

import sys
from typing import Sequence

from neural_arch.cli.checkpoints import add_checkpoint_argument, read_checkpoint, task_of
from neural_arch.cli.usage import command_parser, run_reporting

PROG = "neural-arch generate"


def main(argv: Sequence[str]) -> int:
    parser = command_parser("generate", "Continue a prompt with a trained language model.", "checkpoints.md")
    add_checkpoint_argument(parser)
    parser.add_argument("--prompt", required=True, help="text to continue (UTF-8)")
    parser.add_argument("--length", type=int, default=200, help="bytes to generate (default 200)")
    parser.add_argument("--temperature", type=float, default=0.8, help="0 = greedy (default 0.8)")
    parser.add_argument("--top-k", type=int, default=None, help="sample among the k likeliest bytes (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed; the same seed gives the same text")
    parser.add_argument("--no-cache", action="store_true", help="recompute every position (no KV cache)")
    ns = parser.parse_args(argv)
    if ns.length < 1:
        parser.error(f"--length {ns.length}: must be >= 1")
    if not ns.temperature >= 0:
        parser.error(f"--temperature {ns.temperature}: must be >= 0 (0 = greedy)")
    if ns.top_k is not None and ns.top_k < 1:
        parser.error(f"--top-k {ns.top_k}: must be >= 1")

    def generate() -> int:
        from neural_arch.training.task import GenerationSettings

        state = read_checkpoint(ns.checkpoint)
        settings = GenerationSettings(
            length=ns.length, temperature=ns.temperature, top_k=ns.top_k, seed=ns.seed, use_cache=not ns.no_cache
        )
        prompt = ns.prompt.encode("utf-8")
        text = task_of(state, ns.task).generate(state, prompt, settings)
        sys.stdout.write((prompt + text).decode("utf-8", "replace") + "\n")
        return 0

    from neural_arch.distributed.checkpoint.errors import CheckpointError  # torch: once the arguments are fine

    # An unusable or refused (possibly malicious) checkpoint is bad input: one line, exit 2.
    return run_reporting(PROG, generate, ValueError, KeyError, CheckpointError)
