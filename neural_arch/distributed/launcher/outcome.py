"""What a failed job's launcher prints and exits with: a stop on request, a usage error, or a summary.

Used by ``DistributedLauncher`` (launch.py) once the agent's run has failed::

    return failed_job_exit(agent, log_dir, max_restarts, show_log_path=True)

Test: ``.venv/bin/python -m pytest tests/distributed/launcher/test_launcher.py``.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from neural_arch.distributed.launcher.agent import RobustElasticAgent
from neural_arch.distributed.launcher.failures import format_failure_summary, usage_error_line
from neural_arch.distributed.launcher.restart_policy import USAGE_ERROR

__all__ = ["failed_job_exit"]


def failed_job_exit(agent: RobustElasticAgent, log_dir: Path, max_restarts: int, show_log_path: bool) -> int:
    """Print why the job ended (one line, or the failure summary on stderr); its exit code."""
    if agent.stopped_by is not None:  # a worker said so after saving (restart_policy.stopped_on_request)
        # 128 + the signal, as the workers exited: a script or scheduler may tell it from a crash.
        name = signal.Signals(agent.stopped_by).name
        print(
            f"launcher: the workers stopped on {name} as asked; no restart. A neural-arch trainer says above "
            "which step it saved. Run the same command to continue.",
            file=sys.stderr,
            flush=True,
        )
        return 128 + agent.stopped_by
    refused = usage_error_line(agent.failure_history, log_dir)
    if refused is not None:  # the same command would fail the same way: one line, exit 2
        print(refused, file=sys.stderr, flush=True)
        return USAGE_ERROR
    summary = format_failure_summary(
        agent.failure_history, log_dir, max_restarts, show_log_path=show_log_path, gave_up=agent.gave_up
    )
    print(summary, file=sys.stderr, flush=True)
    return 1
