"""tools/check_layout.py: the real package passes; each rule catches one planted violation.

Run: ``python -m pytest tests/test_layout.py -q``. Fast and torch-free: fixture packages are
small trees written to ``tmp_path`` and checked by the script in a subprocess.
"""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tools" / "check_layout.py"


def run_check(cwd: Path, package: str = "neural_arch") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), package], cwd=cwd, capture_output=True, text=True, timeout=60)


def make_package(root: Path, files: dict) -> None:
    """Write ``neural_arch/`` under ``root``; every folder gets an ``__init__.py``."""
    for rel, text in {"__init__.py": "", **files}.items():
        path = root / "neural_arch" / rel
        for folder in [path.parent, *path.parent.parents]:
            if folder == root:
                break
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "__init__.py").touch()
        path.write_text(textwrap.dedent(text))


def lines_of(count: int) -> str:
    return "".join(f"X{i} = {i}\n" for i in range(count))


def function_of(count: int) -> str:
    """A function whose def line through its last line spans ``count`` lines, decorated."""
    body = "".join(f"    y{i} = {i}\n" for i in range(count - 2))
    return f"import functools\n\n\n@functools.lru_cache\ndef f():\n{body}    return 0\n"


def test_real_package_passes():
    result = run_check(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("OK:")


VIOLATIONS = {
    "cycle of 2": (
        {"a.py": "import neural_arch.b\n", "b.py": "X = 1\nfrom neural_arch.a import Y\n"},
        "neural_arch/a.py:1:",
        "import cycle neural_arch.a -> neural_arch.b -> neural_arch.a",
    ),
    "cycle of 3 (relative)": (
        {"a.py": "from . import b\n", "b.py": "from .c import C\n", "c.py": "from .a import A\n"},
        "neural_arch/a.py:1:",
        "import cycle neural_arch.a -> neural_arch.b -> neural_arch.c -> neural_arch.a",
    ),
    "cycle through a package __init__ run as a parent": (
        {"x.py": "import neural_arch.sub.y\n", "sub/__init__.py": "from neural_arch import x\n", "sub/y.py": ""},
        "neural_arch/sub/__init__.py:1:",
        "import cycle neural_arch.sub -> neural_arch.x -> neural_arch.sub",
    ),
    "cycle importing a name from its own package's __init__": (
        {
            "sub/__init__.py": "from .a import A\n\nHELPER = 1\n",
            "sub/a.py": "from neural_arch.sub import HELPER\n\nA = HELPER\n",
        },
        "neural_arch/sub/__init__.py:1:",
        "import cycle neural_arch.sub -> neural_arch.sub.a -> neural_arch.sub",
    ),
    "cycle hidden behind a function-level import": (
        {"a.py": "from neural_arch import b\n", "b.py": "def f():\n    from neural_arch.a import A\n    return A\n"},
        "neural_arch/a.py:1:",
        "import cycle neural_arch.a -> neural_arch.b -> neural_arch.a",
    ),
    "cycle of two function-level imports": (
        {"a.py": "def f():\n    import neural_arch.b\n", "b.py": "async def g():\n    from . import a\n"},
        "neural_arch/a.py:2:",
        "import cycle neural_arch.a -> neural_arch.b -> neural_arch.a",
    ),
    "file of 301 lines": ({"big.py": lines_of(301)}, "neural_arch/big.py:1:", "file has 301 lines (limit 300)"),
    "function of 61 lines": (
        {"long.py": function_of(61)},
        "neural_arch/long.py:5:",
        "function f has 61 lines (limit 60)",
    ),
    "method of 61 lines": (
        {"long.py": "class K:\n" + textwrap.indent(function_of(61).split("\n\n\n")[1], "    ")},
        "neural_arch/long.py:3:",
        "function K.f has 61 lines (limit 60)",
    ),
    "model file imports torch.distributed": (
        {"apps/foo/model.py": "import torch\nimport torch.distributed as dist\n"},
        "neural_arch/apps/foo/model.py:2:",
        "model file imports torch.distributed",
    ),
    "models file imports torch's distributed by from-import, lazily": (
        {"apps/foo/models_big.py": "def f():\n    from torch import distributed\n"},
        "neural_arch/apps/foo/models_big.py:2:",
        "model file imports torch.distributed",
    ),
    "model file imports neural_arch.distributed": (
        {
            "distributed/__init__.py": "",
            "distributed/ddp.py": "",
            "apps/foo/model.py": "from neural_arch.distributed.ddp import DDP\n",
        },
        "neural_arch/apps/foo/model.py:1:",
        "model file imports neural_arch.distributed.ddp",
    ),
    "training module imports neural_arch.apps.foo": (
        {
            "apps/foo/__init__.py": "",
            "apps/foo/task.py": "",
            "training/loop.py": "import os\nimport neural_arch.apps.foo\n",
        },
        "neural_arch/training/loop.py:2:",
        "framework module imports neural_arch.apps.foo (limit:",
    ),
    "cli module imports an app lazily by from-import": (
        {"apps/foo/task.py": "", "cli/train.py": "def main():\n    from ..apps.foo import task\n"},
        "neural_arch/cli/train.py:2:",
        "framework module imports neural_arch.apps.foo.task",
    ),
    "training module imports the apps package itself (a registry of built-in apps)": (
        {"apps/__init__.py": "BUILTIN = {}\n", "training/registry.py": "from neural_arch.apps import BUILTIN\n"},
        "neural_arch/training/registry.py:1:",
        "framework module imports neural_arch.apps (limit:",
    ),
    "distributed module imports the apps package in a function": (
        {"apps/__init__.py": "", "distributed/plan.py": "def f():\n    from neural_arch import apps\n"},
        "neural_arch/distributed/plan.py:2:",
        "framework module imports neural_arch.apps (limit:",
    ),
}


@pytest.mark.parametrize("files, where, what", VIOLATIONS.values(), ids=list(VIOLATIONS))
def test_violation_is_reported(tmp_path, files, where, what):
    make_package(tmp_path, files)
    result = run_check(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    reported = result.stdout.splitlines()
    assert len(reported) == 1, result.stdout
    assert reported[0].startswith(where), reported[0]
    assert what in reported[0], reported[0]


NEAR_MISSES = {
    "file of exactly 300 lines": {"big.py": lines_of(300)},
    "function of exactly 60 lines": {"long.py": function_of(60)},
    "shared piece in its own module: both import it, neither imports the other": {
        "a.py": "from neural_arch import shared\n",
        "b.py": "from neural_arch.shared import S\n\n\ndef f():\n    import neural_arch.a\n",
        "shared.py": "S = 1\n",
    },
    "lazy import of a heavy outside module (no cycle among the package's modules)": {
        "a.py": "from neural_arch import b\n",
        "b.py": "def f():\n    import torch.distributed.checkpoint as dcp\n    return dcp\n",
    },
    "package __init__ re-exports its submodules; a submodule imports a sibling": {
        "__init__.py": "from neural_arch.sub import X, Y\n",
        "sub/__init__.py": "from neural_arch.sub.x import X\nfrom .y import Y\n",
        "sub/x.py": "X = 1\n",
        "sub/y.py": "import neural_arch.sub.x\nfrom . import x\nfrom neural_arch.sub.x import X\n",
    },
    "import under TYPE_CHECKING": {
        "a.py": "import neural_arch.b\n",
        "b.py": "import typing\nif typing.TYPE_CHECKING:\n    from neural_arch.a import A\n",
    },
    "apps import the framework; model imports torch; plan imports torch.distributed": {
        "apps/foo/task.py": "from neural_arch.training.task import Task\n",
        "apps/foo/model.py": "import torch\nfrom torch import nn\n",
        "apps/foo/parallelize.py": "import torch.distributed as dist\n",
        "training/task.py": "import importlib.metadata\n\nclass Task:\n    pass\n",
    },
}


@pytest.mark.parametrize("files", NEAR_MISSES.values(), ids=list(NEAR_MISSES))
def test_near_miss_passes(tmp_path, files):
    make_package(tmp_path, files)
    result = run_check(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("OK:"), result.stdout


def test_missing_package_is_a_usage_error(tmp_path):
    result = run_check(tmp_path, "no_such_dir")
    assert result.returncode == 2
    assert "no_such_dir is not a directory" in result.stderr
