"""Train with a callback that raises on rank 1 only, after step 3: ``train_callback_error.py ARGS...``
(``neural-arch train`` arguments).

Run under the launcher by tests/training/test_callbacks.py: the user's error must reach the console.
"""

import sys

from neural_arch.cli.train import build_parser
from neural_arch.training.callbacks import Callback
from neural_arch.training.config import load_config
from neural_arch.training.trainer import train


class FailsOnRank1(Callback):
    def on_step(self, event):
        if event.rank == 1 and event.step == 3:
            raise LookupError(f"the user's callback failed at step {event.step} on rank {event.rank}")


args = build_parser().parse_args(sys.argv[1:])
train(load_config(args.config, args.overrides), callbacks=[FailsOnRank1()])
