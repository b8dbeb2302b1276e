"""A checkpoint's ``run.task`` never imports code: ``export``/``generate`` resolve it among
installed and registered tasks only; a module is imported only when the user names it.

Run: ``.venv/bin/python -m pytest tests/cli/test_checkpoint_task_import.py -q``
The downloaded run ships ``evilmod.py`` beside itself, whose top-level code creates a marker,
and the command runs from that folder (``python -m`` puts it first on ``sys.path``).
"""

import pytest
import torch

from neural_arch.distributed.checkpoint import save_checkpoint
from neural_arch.training.registry import task_class
from neural_arch.training.typed_config import ConfigError
from tests.helpers.cli import cli


@pytest.fixture
def downloaded(tmp_path):
    marker = tmp_path / "MARKER"
    (tmp_path / "evilmod.py").write_text(f"open({str(marker)!r}, 'w').close()\nclass EvilTask:\n    pass\n")
    state = {"config": {"run": {"task": "evilmod:EvilTask"}}, "model": {"w": torch.ones(1)}}
    save_checkpoint(tmp_path / "run" / "checkpoints", 1, state)
    return tmp_path, marker


@pytest.mark.multiprocess  # the CLI runs in a child process, from the downloaded folder
@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", [["generate", "--prompt", "x"], ["export", "--output", "out.ts"]])
def test_checkpoint_task_is_not_imported(downloaded, command):
    folder, marker = downloaded
    proc = cli(command[0], "--checkpoint", "run", *command[1:], cwd=folder)
    assert proc.returncode == 2, proc.stderr
    assert not marker.exists()  # evilmod's top-level code never ran
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "is never imported" in lines[0] and "--task 'evilmod:EvilTask'" in lines[0]


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_named_on_the_command_line_it_is_imported(downloaded):
    folder, marker = downloaded
    proc = cli("generate", "--checkpoint", "run", "--prompt", "x", "--task", "evilmod:EvilTask", cwd=folder)
    assert marker.exists()  # the user asked for that module: it is theirs to trust
    assert proc.returncode == 2 and "not a subclass of neural_arch.training.task.Task" in proc.stderr


@pytest.mark.parametrize("name", ["../../x:y", "/tmp/x:y", "a/b:C", "x:", ":y", ".x:y"])
def test_path_like_task_names_are_one_line_errors(name):
    with pytest.raises(ConfigError, match="is not 'package.module:TaskClass'"):
        task_class(name)
