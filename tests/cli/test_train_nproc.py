"""``neural-arch train --nproc-per-node`` takes what ``neural-arch launch`` takes: N, auto, cpu, gpu.

Run: ``.venv/bin/python -m pytest tests/cli/test_train_nproc.py -q``
"""

import os

import torch

from neural_arch.cli.train import build_parser, without_nproc
from tests.helpers.cli import run_main


def test_auto_is_the_gpus_else_the_cpu_cores_as_the_launcher_counts_them():
    expected = torch.cuda.device_count() if torch.cuda.is_available() else os.cpu_count()
    assert build_parser().parse_args(["--nproc-per-node", "auto"]).nproc_per_node == expected
    assert build_parser().parse_args(["--nproc_per_node=cpu"]).nproc_per_node == os.cpu_count()
    assert build_parser().parse_args(["--nproc-per-node", "3"]).nproc_per_node == 3


def test_the_workers_do_not_get_auto_either():
    assert without_nproc(["--config", "tiny", "--nproc-per-node", "auto", "--set", "a.b=1"]) == [
        "--config",
        "tiny",
        "--set",
        "a.b=1",
    ]


def test_a_bad_count_is_one_line_and_exit_2(capsys):
    code, _, err = run_main(["train", "--config", "tiny", "--nproc-per-node", "many"], capsys)
    assert code == 2
    assert err.count("\n") == 1 and "must be a positive integer, 'cpu', 'gpu' or 'auto'" in err
