"""Where am I running? ``detect_cluster_env()`` returns a frozen ``ClusterEnv``.

Use: ``from neural_arch.distributed.env import detect_cluster_env; print(detect_cluster_env())``
(or ``neural-arch env``); ``expand_hostlist("node[01-03]")`` expands a SLURM hostlist.

Concern: reading launcher and scheduler environment variables, and nothing else; no other
code in the package reads them (tests/test_scheduler_variables.py). One small detector per
source (``torchrun.py``, ``openmpi.py``, ``flux.py``, ``pbs.py``, ``mpich.py``, ``slurm.py``,
``lsf.py``, ``skypilot.py``, ``kubernetes.py``, ``plain.py``), the helpers they share
(``placement.py``, ``record.py``), and THE order they are tried in, with its reasons, in
``detect.py``. What a detector read (job id, evidence, starter, the enclosing scheduler's
job) is recorded on the ``ClusterEnv`` for the rest of the package.
"""

from neural_arch.distributed.env.detect import DETECTORS, detect_cluster_env
from neural_arch.distributed.env.hostlist import expand_hostlist
from neural_arch.distributed.env.record import ClusterEnv, derived_port, env_int
from neural_arch.distributed.env.slurm import tasks_per_node

__all__ = [
    "ClusterEnv",
    "DETECTORS",
    "derived_port",
    "detect_cluster_env",
    "env_int",
    "expand_hostlist",
    "tasks_per_node",
]
