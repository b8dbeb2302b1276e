"""Train with a fixed compute time per forward, rank 1 slower from a step on: ``train_straggler.py SLOW_FROM ARGS...``.

Every rank's forward sleeps 4 ms on top of the model (a stand-in for real compute that does not
depend on the machine); from step SLOW_FROM on (-1: never) rank 1 sleeps 40 ms, ten times more: slow
enough that no load on the machine can hide it (the rule's finer cases: test_straggler_watch.py). ARGS are
``neural-arch train`` arguments. Run under the launcher by tests/training/test_stragglers.py.
"""

import sys
import time

from neural_arch.apps.regression.task import RegressionTask
from neural_arch.cli.train import build_parser
from neural_arch.distributed import get_rank
from neural_arch.training.config import load_config
from neural_arch.training.trainer import train

slow_from, args = int(sys.argv[1]), build_parser().parse_args(sys.argv[2:])
step = [0]
real_loss = RegressionTask.loss


def paced_loss(self, model, batch):
    slow = get_rank() == 1 and slow_from >= 0 and step[0] >= slow_from
    time.sleep(0.04 if slow else 0.004)
    return real_loss(self, model, batch)


def track(done: int) -> None:
    step[0] = done


RegressionTask.loss = paced_loss
train(load_config(args.config, args.overrides), on_step=track)
