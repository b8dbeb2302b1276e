"""The agent stops a group with the launcher's ``--shutdown-timeout``, not torch's 30 s default.

Run: ``.venv/bin/python -m pytest tests/distributed/launcher/test_agent_shutdown.py -q`` (one
process, no workers: the grace period is read off the call, not timed; under 1 s after imports).

Why: torch 2.13's ``LocalElasticAgent._stop_workers`` (every restart) calls ``self._shutdown()``
without a timeout, so a worker ignoring SIGTERM held each restart for 30 s whatever the user set.
"""

from __future__ import annotations

import signal
from types import SimpleNamespace

import pytest
from torch.distributed.elastic.agent.server.api import WorkerSpec
from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs

from neural_arch.distributed.launcher.agent import RobustElasticAgent


@pytest.mark.parametrize("timeout", [1, 7])
def test_stopping_workers_for_a_restart_uses_the_launchers_shutdown_timeout(tmp_path, timeout):
    spec = WorkerSpec(role="t", local_world_size=1, rdzv_handler=SimpleNamespace(), entrypoint="x", args=())
    agent = RobustElasticAgent(spec=spec, logs_specs=DefaultLogsSpecs(log_dir=str(tmp_path)), shutdown_timeout=timeout)
    closed: list[tuple[signal.Signals, int]] = []
    agent._pcontext = SimpleNamespace(  # the running group's processes: here, how they would be closed
        close=lambda sig, grace: closed.append((sig, grace)), pids=dict, error_files={}
    )
    agent._stop_workers(agent._worker_group)
    agent._shutdown(signal.SIGINT, 3)  # an explicit grace (torch's run loop on a signal) is kept
    assert closed == [(signal.SIGTERM, timeout), (signal.SIGINT, 3)]
