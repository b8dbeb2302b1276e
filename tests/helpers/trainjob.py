"""The TrainJob of deploy/kubernetes/trainjob.yaml, and its command as a pod would run it.

Use: ``job = trainjob()``; ``argv = [expand(a, pod_env) for a in trainer["command"] + trainer["args"]]``.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import yaml

from tests.helpers.paths import REPO

TRAINJOB_YAML = REPO / "deploy" / "kubernetes" / "trainjob.yaml"


def trainjob() -> dict[str, Any]:
    """The ``TrainJob`` document of the manifest (a fresh copy each call)."""
    docs = yaml.safe_load_all(TRAINJOB_YAML.read_text())
    return next(d for d in docs if d and d["kind"] == "TrainJob")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' expansion of ``$(VAR)`` in a container's command and args (``$$`` escapes)."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: "$" if m.group(0) == "$$" else env[m.group(1)], text
    )
