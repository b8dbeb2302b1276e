"""Only ``neural_arch/distributed/env/`` knows a scheduler's variables: no other file of the
package names one, so a new scheduler is one detector file plus one line in its order list.

Run: ``.venv/bin/python -m pytest tests/test_scheduler_variables.py -q`` (torch-free, < 1 s).

A read of an environment variable names it as a whole string (``os.environ.get("SLURM_JOB_ID")``,
``environ["PBS_JOBID"]``, ``"FLUX_" + name``), so every string literal of every Python file
outside ``env/`` that is exactly a scheduler's variable name, or one of their prefixes, is
reported as ``file:line``. A variable mentioned inside a longer text (a help line, a message:
"the scheduler's job id, e.g. SLURM_JOB_ID") is not a read and passes. Code outside ``env/``
asks ``detect_cluster_env()``: ``job_id``, ``evidence``, ``started_by``, ``scheduler``,
``scheduler_job_id``.
"""

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "neural_arch"
ENV = PACKAGE / "distributed" / "env"

SCHEDULER_VARIABLE = re.compile(
    r"(SLURM_|SBATCH_|SRUN_|OMPI_|PMI_|PMIX_|MPI_LOCAL|MV2_|LSB_|LSF_|JSM_|PBS_|PALS_|FLUX_|SKYPILOT_"
    r"|KUBERNETES_|KUBEFLOW_|PET_|RAY_|TORCHX_)[A-Z0-9_]*|JOB_COMPLETION_INDEX"
)
"""PET_*: torchrun's options as variables (Kubeflow Trainer sets them); env/torchrun_options.py reads them.
RAY_*: a Ray Train worker's job (env/ray_train.py); TORCHX_*: what torchx sets in an app's replicas."""


def scheduler_reads(text: str, name: str) -> list[str]:
    """``name:line: 'VARIABLE'`` for each string literal of ``text`` that is a scheduler variable's name."""
    found = []
    for node in ast.walk(ast.parse(text, filename=name)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and SCHEDULER_VARIABLE.fullmatch(node.value):
            found.append(f"{name}:{node.lineno}: {node.value!r}")
    return sorted(found, key=lambda where: int(where.split(":")[1]))


def test_no_file_outside_env_reads_a_scheduler_variable():
    outside = [path for path in sorted(PACKAGE.rglob("*.py")) if ENV not in path.parents]
    assert len(outside) > 50, "the package's files were not found"
    reads = [hit for path in outside for hit in scheduler_reads(path.read_text(), str(path.relative_to(REPO)))]
    assert not reads, (
        "scheduler variables read outside neural_arch/distributed/env/ (record what you need on "
        "ClusterEnv in the scheduler's detector instead):\n" + "\n".join(reads)
    )


def test_the_detectors_themselves_are_found():
    """The pattern matches what the detectors really read (so the test above is not vacuous)."""
    reads = "\n".join(hit for path in ENV.glob("*.py") for hit in scheduler_reads(path.read_text(), path.name))
    for name in ("SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "LSB_JOBID", "PBS_NODEFILE", "PALS_RANKID"):
        assert repr(name) in reads, name
    for name in ("FLUX_TASK_RANK", "SKYPILOT_NODE_IPS", "KUBERNETES_SERVICE_HOST", "JOB_COMPLETION_INDEX", "PET_"):
        assert repr(name) in reads, name
    for name in ("RAY_JOB_ID", "KUBEFLOW_TRAINER_SERVER_URL", "KUBEFLOW_TRAINER_SERVER_TOKEN"):
        assert repr(name) in reads, name


PLANTED = {
    "get": ('import os\njob = os.environ.get("SLURM_JOB_ID")\n', ["x.py:2: 'SLURM_JOB_ID'"]),
    "index": ('import os\n\n\nnode = os.environ["PBS_NODEFILE"]\n', ["x.py:4: 'PBS_NODEFILE'"]),
    "prefix": ('def f(env, k):\n    return env["FLUX_" + k]\n', ["x.py:2: 'FLUX_'"]),
    "in": ('def f(env):\n    return "JOB_COMPLETION_INDEX" in env\n', ["x.py:2: 'JOB_COMPLETION_INDEX'"]),
    "getenv": ('import os\na = os.getenv("SKYPILOT_NODE_RANK")\nb = os.getenv("PALS_RANKID")\n', None),
    "torchrun option": ('import os\nn = os.environ.get("PET_NPROC_PER_NODE")\n', ["x.py:2: 'PET_NPROC_PER_NODE'"]),
    "ray": ('import os\njob = os.environ.get("RAY_JOB_ID")\n', ["x.py:2: 'RAY_JOB_ID'"]),
    "torchx": ('import os\napp = os.environ["TORCHX_APP_NAME"]\n', ["x.py:2: 'TORCHX_APP_NAME'"]),
    "help text": ('HELP = "the scheduler\'s job id, such as SLURM_JOB_ID"\n', []),
    "f-string message": ('def f(j):\n    return f"SLURM job {j}: scontrol requeue $SLURM_JOB_ID"\n', []),
    "torchrun's own": ('import os\nrank = os.environ["RANK"]\nrun = os.environ.get("TORCHELASTIC_RUN_ID")\n', []),
}


@pytest.mark.parametrize("case", PLANTED)
def test_planted_reads_are_named_with_file_and_line(case):
    text, expected = PLANTED[case]
    got = scheduler_reads(text, "x.py")
    if expected is None:
        assert got == ["x.py:2: 'SKYPILOT_NODE_RANK'", "x.py:3: 'PALS_RANKID'"]
    else:
        assert got == expected
