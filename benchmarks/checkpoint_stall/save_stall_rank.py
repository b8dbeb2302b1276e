"""A training rank that times how long each checkpoint save holds up training: ``save_stall_rank.py OUT TRAIN_ARGS...``.

Started by benchmarks/checkpoint_stall/save_stall.py under the launcher, never by hand. Wraps
``CheckpointWriter.save`` (which, in the background mode, first waits for the previous save)
and trains like ``neural-arch train TRAIN_ARGS``; writes ``OUT/rank_<R>.json``: the seconds of
every save call the loop made (the step's own save, not the wait at the very end of the run).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from neural_arch.cli.train import build_parser
from neural_arch.distributed.checkpoint import CheckpointWriter
from neural_arch.training.config import load_config
from neural_arch.training.trainer import train


def main() -> None:
    out, args = Path(sys.argv[1]), build_parser().parse_args(sys.argv[2:])
    stalls: list[float] = []
    real_save = CheckpointWriter.save

    def timed_save(self, *a, **k):
        started = time.perf_counter()
        real_save(self, *a, **k)
        stalls.append(time.perf_counter() - started)

    CheckpointWriter.save = timed_save
    train(load_config(args.config, args.overrides))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank_{os.environ['RANK']}.json").write_text(json.dumps({"stalls": stalls}))


if __name__ == "__main__":
    main()
