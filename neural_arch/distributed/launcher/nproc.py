"""The spelling of a worker count (``--nproc-per-node``), checked without torch.

Use: ``nproc_spelling("4")`` -> ``4``; ``nproc_spelling("auto")`` -> ``"auto"``;
``nproc_spelling("x")`` raises ``ValueError`` naming the value and what is allowed.

Why apart from ``config.parse_nproc``: counting ``auto``/``gpu`` needs torch (seconds to
import), but a mistyped count is a usage error that ``neural-arch launch`` and
``neural-arch train`` refuse in one line before any of that (launcher/args.py, cli/train.py).
"""

from __future__ import annotations

from typing import Union

NPROC_WORDS = ("cpu", "gpu", "auto")
"""Counts taken from the machine: CPU cores, GPUs, GPUs else CPU cores (torchrun's words)."""


def nproc_spelling(value: Union[int, str], name: str = "nproc_per_node") -> Union[int, str]:
    """``value`` as a count >= 1 or one of ``NPROC_WORDS``; ``ValueError`` naming ``name`` (the
    field or option the value came from) for anything else."""
    if str(value) in NPROC_WORDS:
        return str(value)
    try:
        count = int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} must be a positive integer, 'cpu', 'gpu' or 'auto'.") from None
    if count < 1:
        raise ValueError(f"{name}={value!r} must be a positive integer (>= 1), 'cpu', 'gpu' or 'auto'.")
    return count
