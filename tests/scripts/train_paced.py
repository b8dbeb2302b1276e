"""Train like ``neural-arch train``, holding after chosen steps: ``train_paced.py GATE_DIR ARGS...``.

For tests that act on a run while it trains (a node joins or leaves mid-run): a tiny float64
run finishes a step in milliseconds, too fast to act on. After step S the worker waits while
the file GATE_DIR/hold_S exists (the test removes it when it has acted), or until a stop
signal arrives (the trainer's handler has noted it and saves at once); while it holds, the
file GATE_DIR/holding_S_R says rank R is there (every callback the trainer runs before the
user's, e.g. memory snapshots, has run for step S). Holding changes no number. ARGS are
``neural-arch train`` arguments (--config, --set, --resume).
"""

import os
import signal
import sys
import time
from pathlib import Path

from neural_arch.cli.train import build_parser
from neural_arch.training.config import load_config
from neural_arch.training.trainer import train

gate, args = Path(sys.argv[1]), build_parser().parse_args(sys.argv[2:])


def hold(step: int) -> None:
    # The trainer's handler is a bound method of its StopSignals, which notes the signal in
    # ``received`` and then puts the previous handler back: take the instance before waiting.
    stop = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
    if (gate / f"hold_{step}").exists():
        (gate / f"holding_{step}_{os.environ.get('RANK', '0')}").touch()
    deadline = time.monotonic() + 300  # a test that died leaves no worker waiting for ever
    while (gate / f"hold_{step}").exists() and not getattr(stop, "received", None) and time.monotonic() < deadline:
        time.sleep(0.05)


train(load_config(args.config, args.overrides), resume=args.resume, on_step=hold)
