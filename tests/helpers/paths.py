"""Where tests find the repository's files, however deep the test module sits.

Use: ``from tests.helpers.paths import REPO, SCRIPTS``; ``SCRIPTS / "launch_probe.py"``.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The repository root (holds ``neural_arch/``, ``hpc/``, ``tests/``)."""
SCRIPTS = REPO / "tests" / "scripts"
"""Scripts the tests run under a launcher, srun or mpirun."""
