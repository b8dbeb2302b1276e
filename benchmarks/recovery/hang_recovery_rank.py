"""A training rank for benchmarks/recovery/hang_recovery.py: ``hang_recovery_rank.py OUT TRAIN_ARGS...``.

On the first attempt rank 1 writes the time to ``OUT/stopped`` and SIGSTOPs itself in its forward
at step 3, so rank 0 waits in DDP's gradient all-reduce until ``training.timeout``. On the
restarted attempt rank 0 writes the time its first step finished to ``OUT/recovered``.
"""

import os
import signal
import sys
import time
from pathlib import Path

from neural_arch.apps.regression.task import RegressionTask
from neural_arch.cli.train import build_parser
from neural_arch.distributed import get_rank
from neural_arch.training.config import load_config
from neural_arch.training.trainer import train

out, args = Path(sys.argv[1]), build_parser().parse_args(sys.argv[2:])
first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
done = [0]
real_loss = RegressionTask.loss


def stopping_loss(self, model, batch):
    if first_attempt and get_rank() == 1 and done[0] == 2:
        (out / "stopped").write_text(repr(time.time()))
        os.kill(os.getpid(), signal.SIGSTOP)
    return real_loss(self, model, batch)


def track(step: int) -> None:
    if not first_attempt and get_rank() == 0 and not (out / "recovered").exists():
        (out / "recovered").write_text(repr(time.time()))
    done[0] = step


RegressionTask.loss = stopping_loss
train(load_config(args.config, args.overrides), on_step=track)
