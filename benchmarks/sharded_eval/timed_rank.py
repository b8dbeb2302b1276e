"""One rank of a sharded-evaluation job: trains, and times the final validation and the report.

Run by ``sharded_eval.py`` under the launcher (not on its own):
``python -m neural_arch.distributed.launcher --nproc_per_node=2 timed_rank.py OUT.json KEY=VALUE ...``.
Wraps the trainer's validation and report in timers (measurement only: the trainer runs as
``neural-arch train`` runs it) and writes, from rank 0, the seconds each took and the final
validation metrics to ``OUT.json``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import neural_arch.distributed as nd
import neural_arch.training.trainer as trainer_module
from neural_arch.training.config import load_config
from neural_arch.training.trainer import Trainer, train

TIMES: dict[str, float] = {}


def timed(name: str, method):
    def wrapper(self, *args, **kwargs):
        started = time.perf_counter()
        result = method(self, *args, **kwargs)
        TIMES[name] = TIMES.get(name, 0.0) + time.perf_counter() - started
        return result

    return wrapper


def main() -> None:
    out, overrides = Path(sys.argv[1]), sys.argv[2:]
    Trainer._validate = timed("validation_s", Trainer._validate)
    trainer_module.task_report = timed("report_s", trainer_module.task_report)  # run_end.task_report, as called
    final = train(load_config(None, overrides))
    if nd.get_rank() == 0:
        out.write_text(json.dumps({**TIMES, "final": final}))


if __name__ == "__main__":
    main()
