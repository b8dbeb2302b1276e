"""torchrun's options (torch 2.13, both spellings) do what torchrun does, or say in one line
why not; unknown options get "did you mean"; --help shows every default.

Run: ``.venv/bin/python -m pytest tests/distributed/launcher/test_torchrun_flags.py -q``
"""

import argparse
import json
import os
import socket
import subprocess
import sys

import pytest

from neural_arch.distributed.launcher import main
from neural_arch.distributed.launcher.args import build_parser, split_argv
from tests.helpers.cli import LAUNCHER
from tests.helpers.multiproc import free_port
from tests.helpers.paths import SCRIPTS

PROBE = str(SCRIPTS / "launch_probe.py")


def launch(*args: str, cwd=None, timeout: float = 120, cmd=LAUNCHER) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*cmd, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.getcwd()),
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--nprocs_per_node=2", PROBE],
            "unknown launcher option '--nprocs_per_node=2'; did you mean --nproc-per-node?",
        ),
        (["--max-restars", "1", PROBE], "did you mean --max-restarts?"),
        (["--max-restarts=x", PROBE], "argument --max-restarts/--max_restarts: invalid int value: 'x'"),
        (["--numa-binding=node", PROBE], "--numa-binding='node' is not supported by this launcher"),
        (["--rdzv-backend=etcd", PROBE], "--rdzv-backend=etcd is not supported by this launcher"),
        (["--rdzv-backend=etcd-v2", PROBE], "use --rdzv-backend=c10d with --rdzv-endpoint=HOST:PORT"),
        (["--rdzv-backend=zk", PROBE], "rdzv_backend='zk' must be 'static', 'c10d' or None (automatic)"),
        (["--redirects=5", PROBE], "--redirects='5' must be 0-3 (1 stdout, 2 stderr, 3 both)"),
        (["--tee=x", PROBE], "--tee='x' must be 0-3"),
        (["--run-path", PROBE], "--run-path is not supported by this launcher"),
        (["--standalone", "--nnodes=2", PROBE], "--standalone is a one-node job"),
        (["-m", "no_such_module_xyz"], "module 'no_such_module_xyz' not found"),
        (["--no_python", "no_such_program_xyz"], "executable 'no_such_program_xyz' not found"),
        (["-m", "--no-python", "x"], "--module and --no-python exclude each other"),
    ],
)
def test_usage_errors_are_one_line_naming_the_program(capsys, args, message):
    for prog in ("python -m neural_arch.distributed.launcher", "neural-arch launch"):
        assert main(args, prog) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"{prog}: error: ") and message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.multiprocess
def test_both_commands_exit_2_with_their_own_name():
    for cmd, prog in (
        (LAUNCHER, "python -m neural_arch.distributed.launcher"),
        ([sys.executable, "-m", "neural_arch.cli", "launch"], "neural-arch launch"),
    ):
        proc = launch("--nprocs_per_node=2", PROBE, cmd=cmd, timeout=60)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert (
            proc.stderr == f"{prog}: error: unknown launcher option '--nprocs_per_node=2'; did you mean "
            "--nproc-per-node? (script options go after the script)\n"
        ), proc.stderr


def test_help_shows_every_default_and_both_spellings():
    parser = build_parser()
    text = parser.format_help()
    options = [a for a in parser._actions if a.option_strings and a.dest != "help" and a.help != argparse.SUPPRESS]
    assert text.count("(default:") == len(options)
    # Only what works is listed: torchrun's refused options are parsed (to say why) but never shown.
    for refused in (
        "etcd",
        "--numa-binding",
        "--logs-specs",
        "--duplicate-stdout-filters",
        "--run-path",
        "not supported",
    ):
        assert refused not in text, refused
    assert "--rdzv-backend {static,c10d}" in text
    assert "--max-restarts MAX_RESTARTS, --max_restarts MAX_RESTARTS" in text and "(default: 3)" in text
    for flag in (
        "-m, --module",
        "--no-python, --no_python",
        "--rdzv-backend",
        "--rdzv_endpoint",
        "--rdzv-id",
        "--rdzv-conf",
        "--tee",
        "--local-ranks-filter",
        "--role",
        "-r REDIRECTS, --redirects",
        "--log-dir",
        "--monitor-interval",
        "--start-method",
        "--standalone",
        "--local-addr",
        "--output-prefix",
        "--signals-to-handle",
        "--shutdown-timeout",
        "--virtual-local-rank",
        "--event-log-handler",
    ):
        assert flag in text, flag


def test_short_options_split_and_the_rest_is_the_scripts():
    assert split_argv(["-m", "pkg.train", "--lr", "1"]) == (["-m"], "pkg.train", ["--lr", "1"])
    assert split_argv(["-r3", "--tee", "3", "t.py", "-r"]) == (["-r3", "--tee", "3"], "t.py", ["-r"])
    assert split_argv(["t.py", "--rdzv_endpoint=h:1", "-m", "x"]) == ([], "t.py", ["--rdzv_endpoint=h:1", "-m", "x"])


MODULE = """
import os
print(f"module rank {os.environ['RANK']} role {os.environ['ROLE_NAME']}", flush=True)
"""


@pytest.mark.multiprocess
def test_module_role_filter_and_tee(tmp_path):
    (tmp_path / "probe_mod.py").write_text(MODULE)
    proc = launch(
        "--nproc-per-node=2",
        "--role=trainer",
        "--local_ranks_filter=1",
        "--tee=3",
        f"--log-dir={tmp_path / 'logs'}",
        "-m",
        "probe_mod",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "[rank 1] module rank 1 role trainer" in proc.stdout and "[rank 0]" not in proc.stdout
    assert "module rank 0 role trainer" in (tmp_path / "logs" / "rank_0.log").read_text()


@pytest.mark.multiprocess
def test_no_python_runs_an_executable_and_redirects_hide_a_rank(tmp_path):
    program = tmp_path / "hello.sh"
    program.write_text('#!/bin/sh\necho "exec rank $RANK of $WORLD_SIZE: $1"\n')
    program.chmod(0o755)
    proc = launch(
        "--nproc_per_node=2", "--no-python", "--redirects=0:3", f"--log_dir={tmp_path / 'logs'}", str(program), "arg"
    )
    assert proc.returncode == 0, proc.stderr
    assert "[rank 1] exec rank 1 of 2: arg" in proc.stdout and "[rank 0]" not in proc.stdout
    assert "exec rank 0 of 2: arg" in (tmp_path / "logs" / "rank_0.log").read_text()


@pytest.mark.multiprocess
def test_rdzv_endpoint_sets_where_nodes_meet(tmp_path):
    with socket.socket() as busy:  # static rendezvous: the endpoint's port is node 0's port
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = launch("--rdzv-backend=static", f"--rdzv-endpoint=127.0.0.1:{port}", PROBE, str(tmp_path), "ok")
    assert proc.returncode != 0 and f"master port {port} on 127.0.0.1 is already in use" in proc.stderr
    # c10d: two launchers meet at the endpoint and get their node ranks from the rendezvous.
    common = [
        "--nnodes=2",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{free_port()}",
        "--rdzv-id=flags-test",
        PROBE,
        str(tmp_path),
        "ok",
    ]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    nodes = [
        subprocess.Popen(LAUNCHER + common, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], outputs
    got = [json.loads(p.read_text()) for p in tmp_path.glob("rank_*.json")]
    assert sorted(r["rank"] for r in got) == [0, 1] and all(r["world"] == 2 and r["sum"] == 1.0 for r in got)
