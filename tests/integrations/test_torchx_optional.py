"""torchx stays optional: the package imports without it, and the component's module says which
extra to install.

Run: ``.venv/bin/python -m pytest tests/integrations/test_torchx_optional.py -q`` (about 15 s on
the loaded 2-core machine: one fresh interpreter importing torch). Runs with or without torchx
installed (it is hidden from that interpreter).
"""

from __future__ import annotations

import subprocess
import sys

HIDDEN = """
import sys
sys.modules["torchx"] = None  # as if torchx were not installed
import neural_arch, neural_arch.distributed, neural_arch.integrations, neural_arch.training.trainer
assert "torchx" not in [m.split(".")[0] for m in sys.modules if sys.modules[m] is not None], "imported torchx"
try:
    import neural_arch.integrations.torchx
except ImportError as e:
    print(e)
"""


def test_package_imports_without_torchx_and_the_component_names_its_extra():
    done = subprocess.run([sys.executable, "-c", HIDDEN], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "neural_arch.integrations.torchx needs torchx" in done.stdout, done.stdout
    assert "pip install 'neural_arch[torchx]'" in done.stdout, done.stdout
