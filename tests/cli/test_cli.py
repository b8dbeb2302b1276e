"""The ``neural-arch`` dispatcher and its one way of reporting user mistakes.

Run: ``.venv/bin/python -m pytest tests/cli/test_cli.py -q``

Every user error of every subcommand, argparse's included, is one line
``neural-arch SUBCOMMAND: error: ...`` on stderr and exit status 2, with no traceback.
"""

import subprocess
import sys

import pytest

from neural_arch.cli import COMMANDS
from neural_arch.cli.train import build_parser, without_nproc
from tests.helpers.cli import run_main

MISTAKES = [  # argv, subcommand, words the line must contain
    (["train", "--bogus"], "train", ["unrecognized arguments: --bogus"]),
    (["train", "--nproc-per-node", "two"], "train", ["--nproc-per-node", "'two'"]),
    (["train", "--set", "optim.lrr=0.1"], "train", ["optim.lrr", "did you mean 'optim.lr'"]),
    (["train", "--set"], "train", ["--set", "expected at least one argument"]),
    (["train", "--config", "/no/such.yaml"], "train", ["/no/such.yaml"]),
    (["create-data", "--nope"], "create-data", ["unrecognized arguments: --nope"]),
    (["create-data", "--set", "run.task=regression"], "create-data", ["has no data to create"]),
    (["export", "--checkpoint", "x"], "export", ["--output"]),
    (["export", "--checkpoint", "/no/such/dir", "--output", "/tmp/x.ts"], "export", ["does not exist"]),
    (["generate", "--prompt", "x"], "generate", ["--checkpoint"]),
    (["generate", "--checkpoint", "/no/such/dir", "--prompt", "x"], "generate", ["/no/such/dir", "does not exist"]),
    (["generate", "--checkpoint", "d", "--prompt", "x", "--temperature", "-1"], "generate", ["--temperature -1.0"]),
    (["generate", "--checkpoint", "d", "--prompt", "x", "--length", "0"], "generate", ["--length 0"]),
    (["generate", "--checkpoint", "d", "--prompt", "x", "--top-k", "0"], "generate", ["--top-k 0"]),
    (["env", "extra"], "env", ["unrecognized arguments: extra"]),
    (["launch", "--nproc_per_node=2", "/no/such/script.py"], "launch", ["/no/such/script.py"]),
]


@pytest.mark.parametrize("argv,sub,words", MISTAKES, ids=[" ".join(m[0]) for m in MISTAKES])
def test_every_mistake_is_one_line_and_exit_2(argv, sub, words, capsys):
    code, _, err = run_main(argv, capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"neural-arch {sub}: error: ") and "Traceback" not in err
    for word in words:
        assert word in err, (word, err)


def test_unknown_subcommand_gets_a_did_you_mean(capsys):
    code, _, err = run_main(["trian"], capsys)
    assert code == 2 and err.strip() == (
        "neural-arch: error: unknown subcommand 'trian' (did you mean 'train'?); use one of: " + ", ".join(COMMANDS)
    )


def test_help_lists_every_subcommand(capsys):
    code, out, _ = run_main(["--help"], capsys)
    assert code == 0 and all(name in out for name in COMMANDS)
    code, _, _ = run_main([], capsys)
    assert code == 2  # no subcommand is a usage error, after the same help


def test_set_takes_several_values_after_one_flag_or_repeated():
    ns = build_parser().parse_args(
        ["--set", "optim.lr=0.1", "training.steps=50", "--resume", "none", "--set", "run.name=x"]
    )
    assert ns.overrides == ["optim.lr=0.1", "training.steps=50", "run.name=x"] and ns.resume == "none"


def test_workers_do_not_get_the_process_count():
    argv = ["--config", "c.yaml", "--nproc-per-node", "2", "--set", "a.b=1", "--nproc_per_node=3"]
    assert without_nproc(argv) == ["--config", "c.yaml", "--set", "a.b=1"]


def test_env_reports_a_malformed_variable_by_name(capsys, monkeypatch):
    monkeypatch.setenv("RANK", "abc")
    monkeypatch.setenv("WORLD_SIZE", "2")
    code, _, err = run_main(["env"], capsys)
    assert code == 2 and err.startswith("neural-arch env: error: ") and "RANK" in err


@pytest.mark.multiprocess
def test_python_dash_m_entry_and_its_exit_status():
    proc = subprocess.run(
        [sys.executable, "-m", "neural_arch.cli", "train", "--bogus"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and proc.stderr.startswith("neural-arch train: error: ")
    ok = subprocess.run([sys.executable, "-m", "neural_arch.cli", "env"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "cluster:" in ok.stdout
