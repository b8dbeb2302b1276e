"""A training rank for benchmarks/recovery/goodput.py: ``goodput_rank.py OUT FAULTS TRAIN_ARGS...``.

``FAULTS``: JSON, a list of ``[step, rank, kind]`` (``kill``: SIGKILL, ``hang``: SIGSTOP, found
by ``training.timeout``). After finishing step ``step`` the named rank faults, once: a marker
file ``OUT/fault_<i>`` written before the fault keeps the replayed step from faulting again.
Rank 0 appends ``step time`` to ``OUT/steps`` after every step of every attempt.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

from neural_arch.cli.train import build_parser
from neural_arch.distributed import get_rank
from neural_arch.training.config import load_config
from neural_arch.training.trainer import train

out, faults, args = Path(sys.argv[1]), json.loads(sys.argv[2]), build_parser().parse_args(sys.argv[3:])
SIGNALS = {"kill": signal.SIGKILL, "hang": signal.SIGSTOP}


def after(step: int) -> None:
    rank = get_rank()
    if rank == 0:
        with open(out / "steps", "a") as f:
            f.write(f"{step} {time.time()}\n")
    for i, (at, who, kind) in enumerate(faults):
        marker = out / f"fault_{i}"
        if at == step and who == rank and not marker.exists():
            marker.write_text(repr(time.time()))
            os.kill(os.getpid(), SIGNALS[kind])


train(load_config(args.config, args.overrides), on_step=after)
