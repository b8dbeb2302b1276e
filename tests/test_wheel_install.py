"""An installed wheel works without the checkout: recipes, the trainer and the docs' trainer page.

Run: ``.venv/bin/python -m pytest tests/test_wheel_install.py -q`` (about two minutes on 2 cores).

The wheel is built offline from a copy of the package (``pip wheel --no-deps
--no-build-isolation --no-index``), installed non-editable into a fresh venv whose only view
of the dependencies (torch, numpy, ...) is a ``.pth`` line naming this interpreter's
site-packages (nothing is downloaded), and every command runs from a directory outside the
checkout with no PYTHONPATH: what the package does not ship cannot be found.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.helpers.doc_pages import RUN, blocks
from tests.helpers.paths import REPO

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(600)]

DOCS_PAGES = ("docs/trainer.md",)
"""Pages whose every block runs from the installed wheel: the trainer's."""
COMMAND_TIMEOUT = 240.0


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed in it (its bin/)."""
    root = tmp_path_factory.mktemp("wheel")
    source, dist, env_dir = root / "src", root / "dist", root / "venv"
    # A copy, so the build's build/ and egg-info/ never land in the checkout other runs share.
    shutil.copytree(REPO / "neural_arch", source / "neural_arch", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    checked([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist), str(source)], root)
    wheel = next(dist.glob("neural_arch-*.whl"))
    checked([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], root)
    python = env_dir / "bin" / "python"
    checked([*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)], root)
    own = checked([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root).strip()
    deps = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}  # torch & co., not reinstalled
    (Path(own) / "dependencies.pth").write_text("\n".join(sorted(deps)) + "\n")
    return env_dir / "bin"


def checked(command: list[str], cwd: Path, env: dict[str, str] | None = None, what: str = "") -> str:
    """``command``'s stdout; fails with its output if it exits non-zero. Its own process group,
    killed whole on a timeout (a launcher's workers too)."""
    proc = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=COMMAND_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out = proc.communicate()[0] + f"\n[killed after {COMMAND_TIMEOUT:.0f} s]"
    assert proc.returncode == 0, f"{what or ' '.join(command)} exited {proc.returncode}:\n{out[-3000:]}"
    return out


def user_env(bin_dir: Path) -> dict[str, str]:
    """A user's shell with the fresh venv activated: nothing pointing into the checkout."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "NA_"))}
    path = [p for p in keep.get("PATH", "").split(os.pathsep) if p and not p.startswith(str(REPO))]
    return {**keep, "PATH": os.pathsep.join([str(bin_dir), *path]), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    assert REPO not in tmp_path.resolve().parents
    return tmp_path


def test_the_installed_package_is_the_wheel_and_ships_the_recipes(venv: Path, outside: Path):
    env = user_env(venv)
    where = checked(["python", "-c", "import neural_arch; print(neural_arch.__file__)"], outside, env)
    assert Path(where.strip().splitlines()[-1]).is_relative_to(venv.parent), where
    listing = checked(["neural-arch", "recipes"], outside, env)
    assert all(f"  {name} " in listing for name in ("gpt", "icenet", "tiny")), listing
    assert checked(["neural-arch", "recipes", "tiny"], outside, env).startswith("# A tiny CPU run")
    last = checked(["neural-arch", "train", "--help"], outside, env).rstrip().splitlines()[-1]
    assert last.startswith("details: https://") and last.endswith("/trainer.html"), last


def test_tiny_on_two_processes_from_the_wheel(venv: Path, outside: Path):
    checked(["neural-arch", "train", "--config", "tiny", "--nproc-per-node", "2"], outside, user_env(venv))
    assert (outside / "runs" / "tiny" / "summary.txt").is_file()


@pytest.mark.parametrize("page", DOCS_PAGES)
def test_the_docs_trainer_examples_run_as_written_from_the_wheel(venv: Path, outside: Path, page: str):
    env, scripts = user_env(venv), outside / ".blocks"
    scripts.mkdir()
    for block in blocks((REPO / page).read_text(encoding="utf-8")):
        if block.marker == "file":
            (outside / block.value).parent.mkdir(parents=True, exist_ok=True)
            (outside / block.value).write_text(block.text)
            continue
        if block.marker is not None or block.lang not in RUN:
            continue
        script = scripts / f"line_{block.line}.{'py' if block.lang == 'python' else 'sh'}"
        script.write_text(block.text)
        command = ["python", str(script)] if block.lang == "python" else ["bash", "-euo", "pipefail", str(script)]
        checked(command, outside, env, what=f"{page}:{block.line}")
