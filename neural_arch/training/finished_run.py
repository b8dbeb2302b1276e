"""Is this run finished already? Answered from its directory, before any process starts.

Used by ``neural-arch train`` in the launching process (no worker is spawned, no model built)::

    step = finished_step(cfg, resume)      # None: there is training (or checking) to do
    if step is not None:
        print(nothing_to_do_line(step, cfg.training.steps, Path(cfg.run.dir)))

and by the trainer (``finished_at``, ``run_start.finished_run_metrics``) for the same line when a
finished run reaches it anyway (``train()`` called from Python, or under torchrun).

A run is finished when its ``summary.json`` is readable (rank 0 writes it last) and its newest
checkpoint is intact (every file matches its manifest's size and sha256) at ``training.steps``
or later, or at the step a callback stopped it early (``stopped_early_at_step`` of that summary):
exactly what the trainer would find on resuming. Why an early stop counts: the same command
started again (the same script, the same callbacks) must not silently undo the stop a callback
decided; to train on from there on purpose, name that checkpoint (``--resume PATH``,
``train(cfg, resume=PATH)``), as the line says. Anything else (a damaged newest checkpoint,
``--resume none`` or a path) is left to the workers, which fall back or refuse as they always did.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from neural_arch.training.config import Config
from neural_arch.utils.safe_files import read_regular


def finished_step(cfg: Config, resume: Optional[str]) -> Optional[int]:
    """The step of the finished run in ``cfg.run.dir`` (``resume`` auto, the default), else None."""
    from neural_arch.distributed.checkpoint.errors import DamagedCheckpoint
    from neural_arch.distributed.checkpoint.layout import step_dirs, verified_manifest

    run_dir = Path(cfg.run.dir)
    resume = resume or cfg.checkpoint.resume
    if resume != "auto" or finished_summary(run_dir) is None:
        return None
    found = step_dirs(run_dir / "checkpoints")
    if not found or not finished_at(found[-1][0], cfg.training.steps, run_dir, resume):
        return None
    try:
        step = verified_manifest(found[-1][1])["step"]
    except DamagedCheckpoint:  # the workers fall back to an older one, and train on from there
        return None
    return step if finished_at(step, cfg.training.steps, run_dir, resume) else None


def finished_at(step: int, steps: int, run_dir: Path, resume: str) -> bool:
    """Whether a run in ``run_dir`` whose newest checkpoint is at ``step`` has nothing left to do:
    it wrote its summary, and reached ``steps`` or (``resume`` auto) a callback stopped it there."""
    return finished_summary(run_dir) is not None and (
        step >= steps or (resume == "auto" and stopped_early(run_dir, step) is not None)
    )


def stopped_early(run_dir: Path, step: int) -> Optional[str]:
    """Why a callback stopped the run in ``run_dir`` at ``step`` (its ``summary.json``), or None
    when it did not stop there (it ran to its end, or was continued past that step)."""
    summary = finished_summary(run_dir) or {}
    if summary.get("stopped_early_at_step") != step:
        return None
    return str(summary.get("stopped_early_reason") or "a callback asked to stop")


def nothing_to_do_line(step: int, steps: int, run_dir: Path) -> str:
    """What a finished run started again says (its outputs are left untouched)."""
    from neural_arch.distributed.checkpoint.layout import step_name

    why = stopped_early(run_dir, step) if step < steps else None
    if why is not None:
        return (
            f"stopped early at step {step} of {steps} ({why}); nothing to do (to train on to step {steps} "
            f"anyway, resume from its checkpoint by name: --resume {run_dir / 'checkpoints' / step_name(step)})"
        )
    return (
        f"already at step {step} of {steps}; nothing to do (use --resume none or a new run.dir to start over, "
        "or raise training.steps to train on)"
    )


def finished_summary(run_dir: Path) -> Optional[dict[str, Any]]:
    """``summary.json`` of a run that finished, or None if there is none or it is unreadable
    (left empty or cut short by a full disk): then the run is finished again, not reported broken."""
    try:
        values = json.loads(read_regular(run_dir / "summary.json", 1 << 20))
    except (OSError, ValueError):
        return None
    return values if isinstance(values, dict) else None
