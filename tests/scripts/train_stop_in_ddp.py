"""Train where rank 1 SIGSTOPs itself in its forward at step 3 (first attempt only), so rank 0 waits in
DDP's own gradient all-reduce: ``train_stop_in_ddp.py ARGS...`` (``neural-arch train`` arguments).

Run under the launcher by tests/distributed/launcher/test_hang_evidence.py.
"""

import os
import signal
import sys

from neural_arch.apps.regression.task import RegressionTask
from neural_arch.cli.train import build_parser
from neural_arch.distributed import get_rank
from neural_arch.training.config import load_config
from neural_arch.training.trainer import train

args = build_parser().parse_args(sys.argv[1:])
first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
done = [0]
real_loss = RegressionTask.loss


def stopping_loss(self, model, batch):
    if first_attempt and get_rank() == 1 and done[0] == 2:
        os.kill(os.getpid(), signal.SIGSTOP)  # the peer now waits in DDP's all-reduce of step 3
    return real_loss(self, model, batch)


def track(step: int) -> None:
    done[0] = step


RegressionTask.loss = stopping_loss
train(load_config(args.config, args.overrides), on_step=track)
