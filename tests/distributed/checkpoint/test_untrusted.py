"""Checkpoint files are untrusted input: a planted pickle is refused and never runs.

Run: ``.venv/bin/python -m pytest tests/distributed/checkpoint/test_untrusted.py -q``
Two real one-process ``neural-arch train`` runs of the regression app (checkpoints at steps
2 and 4), one per format. A payload whose ``__reduce__`` calls ``os.system("touch MARKER")``
is planted in (a) a full checkpoint's ``state.pt``, (b) a sharded checkpoint's DCP
``.metadata`` and (c) one non-tensor entry of a sharded checkpoint's ``.distcp`` data, with
the manifest's sha256 updated each time, so only the unpicklers stand in the way. Every
public path refuses with one line naming the file and what it needed, and the marker never
appears; the same file opened the way torch does by default does create it, so the payload is real.
"""

import json
import os
import pickle
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from neural_arch.distributed.checkpoint import (
    UnsafeCheckpoint,
    load_checkpoint,
    load_shards,
    read_whole_shards,
)
from neural_arch.distributed.checkpoint.untrusted import MetadataUnpickler, read_dcp_metadata
from neural_arch.utils.atomic import sha256
from tests.helpers.cli import cli

TRAIN = [
    "--set",
    "training.precision=fp64",
    "--set",
    "logging.progress=false",
    "--set",
    "logging.tensorboard=false",
    "--set",
    "checkpoint.every_steps=2",
    "--set",
    "data.num_samples=40",
    "--set",
    "data.val_samples=8",
    "--set",
    "training.global_batch_size=8",
    "--set",
    "model.hidden=4",
]
STEP2, STEP4 = "checkpoints/step_00000002", "checkpoints/step_00000004"


class Payload:
    """Pickles as ``os.system("touch MARKER")``: what a malicious checkpoint would carry."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def train(run: Path, steps: int, *extra: str) -> subprocess.CompletedProcess:
    proc = cli("train", *TRAIN, "--set", f"run.dir={run}", "--set", f"training.steps={steps}", *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("untrusted")
    train(root / "full", 4)
    train(root / "sharded", 4, "--set", "checkpoint.format=sharded")
    return {"full": root / "full", "sharded": root / "sharded"}


def copy_run(runs: dict[str, Path], kind: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(runs[kind], tmp_path / kind, symlinks=True))


def reseal(step_dir: Path) -> None:
    """Rewrite the manifest's size and sha256 of every file, as an attacker with write access would."""
    manifest = json.loads((step_dir / "manifest.json").read_text())
    manifest["files"] = {
        p.relative_to(step_dir).as_posix(): {"sha256": sha256(p), "bytes": p.stat().st_size}
        for p in sorted(step_dir.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }
    (step_dir / "manifest.json").write_text(json.dumps(manifest))


def runs_in_child(code: str) -> None:
    """Run ``code`` in a fresh interpreter (the way torch opens the file by default)."""
    subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)


def assert_one_line_refusal(proc: subprocess.CompletedProcess, *named: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for text in ("may be malicious", "posix.system", *named):
        assert text in lines[0], lines[0]


@pytest.mark.multiprocess  # neural-arch train and the CLI run in child processes
@pytest.mark.timeout(300)
def test_full_format_state_file(runs, tmp_path):
    run, marker = copy_run(runs, "full", tmp_path), tmp_path / "MARKER"
    step = run / STEP4
    torch.save({"model": Payload(marker), "step": 4}, step / "state.pt")
    reseal(step)

    export = cli("export", "--checkpoint", str(step), "--output", str(tmp_path / "m.ts"))
    assert_one_line_refusal(export, str(step / "state.pt"))
    with pytest.warns(RuntimeWarning, match="may be malicious"):  # resume falls back to the intact step 2
        info, state = load_checkpoint(run / "checkpoints")
    assert info.step == 2 and state["step"] == 2
    assert not marker.exists() and not (tmp_path / "m.ts").exists()

    runs_in_child(f"import torch; torch.load({str(step / 'state.pt')!r}, weights_only=False)")
    assert marker.exists(), "the payload is real: unrestricted unpickling runs it"


@pytest.mark.multiprocess  # neural-arch train and the CLI run in child processes
@pytest.mark.timeout(300)
def test_sharded_metadata(runs, tmp_path):
    run, marker = copy_run(runs, "sharded", tmp_path), tmp_path / "MARKER"
    step = run / STEP4
    metadata = step / "shards" / ".metadata"
    legit = pickle.loads(metadata.read_bytes())  # a real one, from our own save
    legit.planner_data["extra"] = Payload(marker)
    metadata.write_bytes(pickle.dumps(legit))
    reseal(step)
    assert load_checkpoint(run / STEP2) is not None  # the intact step still loads

    generate = cli("generate", "--checkpoint", str(step), "--prompt", "a")
    assert_one_line_refusal(generate, str(metadata))
    target = read_whole_shards(run / STEP2)  # the layout resume allocates; step 2 is intact
    with pytest.raises(UnsafeCheckpoint, match="posix.system"):
        load_shards(step, target)  # the loader resume calls, past the manifest check
    with pytest.raises(UnsafeCheckpoint, match="posix.system"):
        read_whole_shards(step)  # the loader export and generate call
    resumed = train(run, 6, "--set", "checkpoint.format=sharded")  # (it saves a new, clean step 4)
    assert "resuming from step 2" in resumed.stdout and "may be malicious" in resumed.stderr
    assert not marker.exists()

    metadata.write_bytes(pickle.dumps(legit))
    runs_in_child(
        "from torch.distributed.checkpoint.format_utils import dcp_to_torch_save as c; "
        f"c({str(step / 'shards')!r}, {str(tmp_path / 'out.pt')!r})"
    )
    assert marker.exists(), "the payload is real: torch's own FileSystemReader runs it"


@pytest.mark.multiprocess  # neural-arch train and the CLI run in child processes
@pytest.mark.timeout(300)
def test_sharded_non_tensor_entry(runs, tmp_path):
    """DCP stores non-tensor entries (an optimizer's param_groups) with torch.save and loads them
    with torch.load(weights_only=False); the metadata here is legitimate."""
    import torch.distributed.checkpoint as dcp

    run, marker = copy_run(runs, "sharded", tmp_path), tmp_path / "MARKER"
    step = run / STEP4
    whole = read_whole_shards(step)
    whole["optim"]["param_groups"][0]["lr"] = Payload(marker)
    shutil.rmtree(step / "shards")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DCP: "assuming ... a single process"
        dcp.save(whole, checkpoint_id=step / "shards", no_dist=True)
    reseal(step)
    read_dcp_metadata(step / "shards")  # nothing to refuse there
    assert load_checkpoint(step) is not None

    with pytest.raises(UnsafeCheckpoint, match=r"entry 'optim\.param_groups\.0\.lr'.*posix\.system"):
        load_shards(step, read_whole_shards(run / STEP2))
    with pytest.raises(UnsafeCheckpoint, match="may be malicious"):
        read_whole_shards(step)
    planted = shutil.copytree(step / "shards", tmp_path / "planted")
    resumed = train(run, 6, "--set", "checkpoint.format=sharded")  # falls back past step 4 (and saves a clean one)
    assert "resuming from step 2" in resumed.stdout, resumed.stdout + resumed.stderr
    assert f"checkpoint {step} cannot be restored into this run (" in resumed.stderr, resumed.stderr
    assert "may be malicious" in resumed.stderr and "falling back to step 2" in resumed.stderr
    assert not marker.exists()

    runs_in_child(
        "from torch.distributed.checkpoint.format_utils import dcp_to_torch_save as c; "
        f"c({str(planted)!r}, {str(tmp_path / 'out.pt')!r})"
    )
    assert marker.exists(), "the payload is real: torch's default load planner runs it"


@pytest.mark.multiprocess  # neural-arch train and the CLI run in child processes
@pytest.mark.timeout(300)
def test_legit_sharded_checkpoint_loads(runs):
    """The safe readers change nothing for our own files: the metadata unpickles to what plain
    pickle gives, and the sharded run's weights equal the full-format run's, bitwise."""
    shards = runs["sharded"] / STEP4 / "shards"
    assert read_dcp_metadata(shards) == pickle.loads((shards / ".metadata").read_bytes())
    whole = read_whole_shards(runs["sharded"] / STEP4)
    _, full = load_checkpoint(runs["full"] / STEP4)
    assert whole["model"].keys() == full["model"].keys()
    for name, tensor in full["model"].items():
        assert torch.equal(whole["model"][name], tensor), name
    assert whole["optim"]["param_groups"][0]["momentum"] == full["optimizer"]["param_groups"][0]["momentum"]


@pytest.mark.parametrize(
    "module, name",
    [
        ("builtins", "eval"),
        ("posix", "system"),
        ("torch", "load"),
        ("torch.serialization", "load"),
        ("torch.distributed.checkpoint.metadata", "os"),
        ("pathlib", "Path"),
    ],
)
def test_unpickler_allowlist(tmp_path, module, name):
    """Protocol-0 pickles calling ``module.name('x')``: refused by name, never imported or called."""
    file = tmp_path / ".metadata"
    file.write_bytes(f"c{module}\n{name}\n(S'x'\ntR.".encode())
    with pytest.raises(UnsafeCheckpoint, match=rf"{file}.*needs {module}\.{name},.*may be malicious"):
        read_dcp_metadata(tmp_path)
    file.write_bytes(b"ctorch\nfloat64\n.")
    with open(file, "rb") as stream:  # a dtype is a plain value: allowed
        assert MetadataUnpickler(stream, file).load() is torch.float64
