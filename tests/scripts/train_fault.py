"""Train like ``neural-arch train``, with a fault on the first attempt: ``train_fault.py MODE STEP ARGS...``.

MODE ``none``: no fault. ``kill``: rank 1 SIGKILLs itself right after finishing step STEP.
``ckpt``: rank 0 SIGKILLs itself half-way through writing the checkpoint of step STEP (the
state file is half written, the manifest not yet). ``val``: rank 1 SIGKILLs itself as the
validation after step STEP begins. Faults fire only when
TORCHELASTIC_RESTART_COUNT is 0, so the restarted group runs clean. ``kills``: attempts 0 to
STEP - 1 each SIGKILL one rank, 1 to 3 steps after the attempt's first step (rank and steps drawn
from a generator seeded with the attempt's number: the same kills every run); later attempts
run clean. ARGS are ``neural-arch train`` arguments (--config, --set, --resume).
"""

import os
import random
import signal
import sys
import threading

import torch

import neural_arch.distributed.checkpoint.replicated as checkpoint
import neural_arch.training.trainer as trainer_module
from neural_arch.cli.train import build_parser
from neural_arch.distributed import get_rank, get_world_size
from neural_arch.training.config import load_config

mode, fault_step, args = sys.argv[1], int(sys.argv[2]), build_parser().parse_args(sys.argv[3:])
first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"


attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
first_step: list[int] = []


def kill_after(step: int) -> None:
    if mode == "kill" and first_attempt and step == fault_step and get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "kills" and attempt < fault_step:
        first_step[:] = first_step or [step]
        draw = random.Random(attempt)
        rank, after = draw.randrange(get_world_size()), draw.randint(1, 3)
        if get_rank() == rank and step == first_step[0] + after - 1:
            print(f"train_fault: attempt {attempt} kills rank {rank} after step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)


real_save = torch.save


def half_then_die(obj, f, *a, **k):
    name = getattr(f, "name", str(f))
    if first_attempt and get_rank() == 0 and f"step_{fault_step:08d}" in str(name):
        real_save(obj, f, *a, **k)
        f.flush()
        f.truncate(f.tell() // 2)
        f.flush()
        print(f"train_fault: killed while writing, in thread {threading.current_thread().name}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    return real_save(obj, f, *a, **k)


real_evaluate = trainer_module.evaluate


def die_in_validation(components):
    """Rank 1 dies as the validation after step STEP starts: its peers wait in its collective."""
    if first_attempt and get_rank() == 1 and components.step == fault_step:
        os.kill(os.getpid(), signal.SIGKILL)
    return real_evaluate(components)


if mode == "ckpt":
    checkpoint.torch.save = half_then_die
if mode == "val":
    trainer_module.evaluate = die_in_validation
trainer_module.train(load_config(args.config, args.overrides), resume=args.resume, on_step=kill_after)
