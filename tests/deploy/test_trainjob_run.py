"""The TrainJob's own command, run as Kubeflow Trainer would run it on two nodes: two local
"pods" with the variables Trainer gives them, the command and args of
deploy/kubernetes/trainjob.yaml expanded as the kubelet expands ``$(VAR)``.

Run: ``.venv/bin/python -m pytest tests/deploy/test_trainjob_run.py -q`` (about 30 s on two busy
cores: two launchers, one worker each, the ``tiny`` recipe). What must hold: both "pods" exit 0
and form one world of 2 (the summary counts 2 processes), with the job token the manifest gives
(the TrainJob's name) and the run directory the manifest sets, moved under the test's folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from neural_arch.utils.ports import free_port
from tests.helpers.trainjob import expand, trainjob

pytestmark = pytest.mark.multiprocess


@pytest.mark.timeout(300)
def test_two_pods_run_the_trainjob_command_as_one_world(tmp_path):
    job = trainjob()
    name, trainer = job["metadata"]["name"], job["spec"]["trainer"]
    port = free_port()
    procs = []
    for node in (0, 1):
        pod = {
            "KUBERNETES_SERVICE_HOST": "10.96.0.1",
            "PET_NNODES": str(trainer["numNodes"]),
            "PET_NPROC_PER_NODE": "1",  # the manifest's 2, halved for two shared cores
            "PET_NODE_RANK": str(node),
            "PET_MASTER_ADDR": "127.0.0.1",  # <name>-node-0-0.<name> in the cluster
            "PET_MASTER_PORT": str(port),
            "NEURAL_ARCH_JOB_TOKEN": name,  # the jobset-name label, through the downward API
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",
        }
        argv = [expand(arg, pod) for arg in trainer["command"] + trainer["args"]]
        assert argv[0] == "neural-arch"
        argv = [arg.replace("run.dir=/runs/", f"run.dir={tmp_path}/") for arg in argv[1:]]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "neural_arch.cli", *argv],
                env=dict(os.environ, **pod),
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    try:
        outputs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], "\n----\n".join(outputs)
    summary = json.loads((tmp_path / name / "summary.json").read_text())
    assert summary["processes"] == 2.0 and summary["steps"] > 0
    assert "no job token" not in "".join(outputs)  # the token the manifest sets was used
