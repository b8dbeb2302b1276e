"""``neural-arch train`` for the fault soak, paced and with one fault inside a worker.

Run (what benchmarks/soak/soak.py does): ``python benchmarks/soak/soak_worker.py --config C
--nproc-per-node 2 --set run.dir=ROUND/run ...``; every argument is ``neural-arch train``'s.
This is ``neural-arch train`` itself (``neural_arch.cli.train.main``: config checks, the
run-directory probe, the launcher with training.max_restarts and training.timeout) with
one substitution: the workers run this file instead of ``cli/train.py``, so that they

- sleep ``pace`` seconds after each step, so a moment the driver picks at random falls
  inside training (sleeping changes no number);
- append ``{"t", "pid", "rank", "attempt", "step"}`` per step to ROUND/steps.jsonl (ROUND
  is the run directory's parent), which the driver reads for progress and recovery times;
- inject the round's in-worker fault on the first attempt (TORCHELASTIC_RESTART_COUNT 0),
  as given by ROUND/soak_plan.json: ``ckpt`` (rank 0, the checkpoint writer, SIGKILLs itself half-way
  through writing the checkpoint of step S: state file half written, no manifest) or
  ``exception`` (rank R raises after step S). Other kinds are injected from outside.

The plan travels as a file next to the run directory, not as arguments: the launcher
restarts workers with ``neural-arch train``'s own arguments, which must stay the same
command a user would rerun.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

import neural_arch.cli.train as cli_train

PLAN_FILE, STEPS_FILE = "soak_plan.json", "steps.jsonl"


def append_event(round_dir: Path, row: dict[str, Any]) -> None:
    """One JSON line, written with a single O_APPEND write so ranks never interleave."""
    fd = os.open(round_dir / STEPS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(row) + "\n").encode())
    finally:
        os.close(fd)


def install_faults(round_dir: Path, plan: dict[str, Any], rank: int) -> Callable[[int], None]:
    """Arm the plan's in-worker fault (if any) and return the per-step hook."""
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    armed = attempt == 0  # the restarted group runs clean (the plan's kinds launch only once)
    kind, target, fault_step = plan["kind"], plan.get("rank"), plan.get("step")

    if armed and kind == "ckpt" and rank == 0:
        import torch

        import neural_arch.distributed.checkpoint.replicated as replicated

        real_save = torch.save

        def half_then_die(obj: object, f: Any, *args: Any, **kwargs: Any) -> None:
            if f"step_{fault_step:08d}" in str(getattr(f, "name", f)):
                real_save(obj, f, *args, **kwargs)
                f.flush()
                f.truncate(f.tell() // 2)
                f.flush()
                append_event(
                    round_dir, {"fault": kind, "t": time.time(), "pid": os.getpid(), "rank": rank, "step": fault_step}
                )
                os.kill(os.getpid(), signal.SIGKILL)
            real_save(obj, f, *args, **kwargs)

        replicated.torch.save = half_then_die  # the module's own reference, as tests/scripts/train_fault.py

    def on_step(step: int) -> None:
        append_event(round_dir, {"t": time.time(), "pid": os.getpid(), "rank": rank, "attempt": attempt, "step": step})
        if armed and kind == "exception" and rank == target and step == fault_step:
            append_event(round_dir, {"fault": kind, "t": time.time(), "pid": os.getpid(), "rank": rank, "step": step})
            raise RuntimeError(f"soak: fault injected on rank {rank} after step {step}")
        time.sleep(plan["pace"])

    return on_step


def paced_training(round_dir: Path) -> None:
    """Make the trainer the workers call take the soak's per-step hook."""
    import neural_arch.training.trainer as trainer
    from neural_arch.distributed.env import detect_cluster_env

    plan = json.loads((round_dir / PLAN_FILE).read_text())
    on_step = install_faults(round_dir, plan, detect_cluster_env().rank)
    real_train = trainer.train

    def train(cfg: Any, **kwargs: Any) -> dict[str, float]:
        return real_train(cfg, **kwargs, on_step=on_step)

    trainer.train = train  # worker_main imports it when it runs, so it gets this one


def main(argv: list[str]) -> int:
    from neural_arch.distributed.env import detect_cluster_env

    if detect_cluster_env().world_size > 1:  # a worker (the launcher's process has no rank)
        ns = cli_train.build_parser().parse_args(argv)
        run_dir = next((o.split("=", 1)[1] for o in ns.overrides if o.startswith("run.dir=")), None)
        assert run_dir is not None, "the soak always sets run.dir"
        paced_training(Path(run_dir).parent)
    cli_train.__file__ = __file__  # neural-arch train's launcher starts its workers with this file
    return cli_train.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
