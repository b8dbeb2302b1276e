"""Every example in README.md and docs/**/*.md runs: the code-block convention, one test per page.

Run: ``.venv/bin/python -m pytest tests/test_docs_examples.py -q`` (about a minute per page with
CLI runs, docs/cluster.md 2.5 to 5 minutes on a loaded 2-core machine: three SLURM jobs, mpirun and
two-node launches; ``-k getting-started`` for one page). The convention is in tests/helpers/doc_pages.py:
``python`` and ``bash`` blocks run in order in one fresh directory per page, with the venv's
bin/ first on PATH, one intra-op thread (``OMP_NUM_THREADS=1``) and nothing telling them where
the checkout is (a recipe is named, not a path: tests/test_wheel_install.py runs pages from an
installed wheel); ``<!-- not run: REASON -->`` skips
a block, ``<!-- file: NAME -->`` writes it to NAME, ``<!-- needs: slurm -->`` (or ``mpirun``) runs it
on the real program, started here for the page (a local SLURM: tests/helpers/clusters.py), and
where that program is missing the page's other blocks still run and the test is skipped with the
reason. A failure names the page, the block's line and its output.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable, ContextManager, Iterator, Optional

import pytest

from tests.helpers.clusters import local_slurm, slurm_missing_reason
from tests.helpers.doc_pages import PAGES, REFUSED, RUN, Block, blocks, page_id
from tests.helpers.paths import REPO

BLOCK_TIMEOUT = 240.0  # a hang guard only: a loaded machine took over 120 s for one block
"""Seconds one block may run before its process group is killed: examples are tiny."""
OUTPUT_TAIL = 4000
"""Characters of a failed block's output shown in the failure."""


def venv_bin() -> Path:
    """The repository's .venv/bin, or this interpreter's bin/ where the venv lives elsewhere."""
    own = REPO / ".venv" / "bin"
    return own if (own / "python").exists() else Path(sys.executable).parent


def block_env() -> dict[str, str]:
    # One intra-op thread, as for every process the suite starts (tests/helpers/cli.py): the models
    # are tiny, and a second thread on a shared, loaded machine only waits for a core (a 1-process
    # GPT run's report: 20 s with torch's default 2 threads at load 5, 2 s with 1).
    env = dict(os.environ, PYTHONUNBUFFERED="1", NO_MKDOCS_2_WARNING="1", OMP_NUM_THREADS="1")
    env["PATH"] = os.pathsep.join([str(venv_bin()), env.get("PATH", "")])
    # the checkout under test, also where the venv's editable install points elsewhere
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def mpirun_missing_reason() -> Optional[str]:
    return None if shutil.which("mpirun") else "mpirun not found: install Debian's openmpi-bin (.ci/run does)"


@contextlib.contextmanager
def openmpi_settings() -> Iterator[dict[str, str]]:
    """What the suite's machine needs and a user's does not: CI runs as root, on 2 cores."""
    yield {
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMPI_MCA_rmaps_base_oversubscribe": "1",
    }


@contextlib.contextmanager
def slurm_settings() -> Iterator[dict[str, str]]:
    """A local single-node SLURM for the page; its blocks find it through SLURM_CONF."""
    with local_slurm() as cluster:
        yield {"SLURM_CONF": str(cluster.conf)}


NEEDS: dict[str, tuple[Callable[[], Optional[str]], Callable[[], ContextManager[dict[str, str]]]]] = {
    "mpirun": (mpirun_missing_reason, openmpi_settings),
    "slurm": (slurm_missing_reason, slurm_settings),
}
"""``<!-- needs: NAME -->``: why NAME cannot run here (None: it can), and what starts it for a page."""


def run_block(block: Block, script: Path, workdir: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    script.write_text(block.text)
    command = [str(venv_bin() / "python"), str(script)]
    if block.lang == "bash":
        command = ["bash", "-euo", "pipefail", str(script)]
    proc = subprocess.Popen(
        command,
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the block's launcher and its workers too
        out, _ = proc.communicate()
        out += f"\n[killed after {BLOCK_TIMEOUT:.0f} s]"
    return subprocess.CompletedProcess(command, proc.returncode, out)


def check_markers(page: str, found: list[Block]) -> None:
    for block in found:
        where = f"{page}:{block.line}"
        assert block.lang not in REFUSED, f"{where}: a ```{block.lang} block; write ```bash so it runs"
        assert block.marker != "not run" or block.value, f"{where}: <!-- not run: --> needs a reason"
        assert block.marker != "file" or block.value, f"{where}: <!-- file: --> needs a file name"
        assert block.marker != "needs" or block.value in NEEDS, f"{where}: <!-- needs: --> takes one of {sorted(NEEDS)}"


def runnable(found: list[Block]) -> list[Block]:
    return [b for b in found if b.marker in ("file", "needs") or (b.marker is None and b.lang in RUN)]


def page_params() -> list:
    """One case per page, its hard timeout the sum of its blocks' (a hang fails, never blocks CI)."""
    cases = []
    for page in PAGES:
        found = blocks(page.read_text(encoding="utf-8"))
        marks = [pytest.mark.timeout(60 + BLOCK_TIMEOUT * len(runnable(found)))]
        if any(block.marker == "needs" for block in found):
            marks.append(pytest.mark.machine)  # a local SLURM or mpirun, one at a time
        cases.append(pytest.param(page, id=page_id(page), marks=marks))
    return cases


def page_failure(name: str, text: str, tmp_path: Path) -> Optional[str]:
    """Run the page's blocks in order; the first failure as a message naming page and line, or None."""
    return run_page(name, text, tmp_path)[0]


def run_page(name: str, text: str, tmp_path: Path) -> tuple[Optional[str], list[str]]:
    """The first failure (or None) and the ``needs`` blocks left out here, each with its reason."""
    workdir, scripts, env = tmp_path / "work", tmp_path / "blocks", block_env()
    workdir.mkdir()
    scripts.mkdir()
    left_out: list[str] = []
    started: dict[str, dict[str, str]] = {}
    with contextlib.ExitStack() as stack:  # a program a block needs runs until the page's end
        for block in runnable(blocks(text)):
            if block.marker == "file":
                target = workdir / block.value
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(block.text)
                continue
            extra: dict[str, str] = {}
            if block.marker == "needs":
                missing, start = NEEDS[block.value]
                reason = None if block.value in started else missing()
                if reason:
                    left_out.append(f"{name}:{block.line} needs {block.value}: {reason}")
                    continue
                if block.value not in started:
                    started[block.value] = stack.enter_context(start())
                extra = started[block.value]
            suffix = ".py" if block.lang == "python" else ".sh"
            result = run_block(block, scripts / f"line_{block.line}{suffix}", workdir, {**env, **extra})
            if result.returncode != 0:
                failure = (
                    f"{name}:{block.line}: the ```{block.lang} block exited {result.returncode}; its output "
                    f"(last {OUTPUT_TAIL} characters):\n{result.stdout[-OUTPUT_TAIL:]}"
                )
                return failure, left_out
    return None, left_out


@pytest.mark.multiprocess
@pytest.mark.parametrize("page", page_params())
def test_page_examples_run(page: Path, tmp_path: Path):
    name, text = page_id(page), page.read_text(encoding="utf-8")
    check_markers(name, blocks(text))
    if not runnable(blocks(text)):
        pytest.skip(f"{name} has no block to run")
    failure, left_out = run_page(name, text, tmp_path)
    assert failure is None, failure
    if left_out:
        pytest.skip("the other blocks ran; not here: " + "; ".join(left_out))


PAGE_WITH_A_FAILURE = """# Example

<!-- file: data.txt -->
```text
hello
```

<!-- not run: shows a command that would fail here -->
```bash
false
```

```bash
test "$(cat data.txt)" = hello
```

```python
import sys

print("about to fail")
sys.exit(3)
```
"""


@pytest.mark.multiprocess
def test_a_failing_block_is_reported_with_page_line_and_output(tmp_path: Path):
    failure = page_failure("example.md", PAGE_WITH_A_FAILURE, tmp_path)
    assert failure is not None and failure.startswith("example.md:17: the ```python block exited 3"), failure
    assert "about to fail" in failure
    with pytest.raises(AssertionError, match="example.md:1: a ```console block; write ```bash"):
        check_markers("example.md", blocks("```console\nls\n```\n"))


def test_no_page_needs_the_checkout():
    """Examples run from an installed package: they name recipes, never a checkout's path."""
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        assert "NA_REPO" not in text, f"{page_id(page)}: $NA_REPO (name a recipe: --config tiny)"
        for block in runnable(blocks(text)):
            assert "configs/" not in block.text, f"{page_id(page)}:{block.line}: configs/... (name a recipe)"


PAGE_WITH_A_NEEDS_BLOCK = """# Example

<!-- needs: mpirun -->
```bash
test "$FROM_THE_PROGRAM" = started
```

```bash
echo the next block runs
```
"""


@contextlib.contextmanager
def fake_program() -> Iterator[dict[str, str]]:
    yield {"FROM_THE_PROGRAM": "started"}


@pytest.mark.multiprocess
def test_a_needs_block_runs_with_its_program_or_is_left_out_with_the_reason(tmp_path: Path, monkeypatch):
    (tmp_path / "here").mkdir()
    (tmp_path / "not_here").mkdir()
    monkeypatch.setitem(NEEDS, "mpirun", (lambda: None, fake_program))
    assert run_page("example.md", PAGE_WITH_A_NEEDS_BLOCK, tmp_path / "here") == (None, [])
    monkeypatch.setitem(NEEDS, "mpirun", (lambda: "mpirun not found", fake_program))
    assert run_page("example.md", PAGE_WITH_A_NEEDS_BLOCK, tmp_path / "not_here") == (
        None,
        ["example.md:4 needs mpirun: mpirun not found"],
    )
    with pytest.raises(AssertionError, match="example.md:2: <!-- needs: --> takes one of"):
        check_markers("example.md", blocks("<!-- needs: pbs -->\n```bash\nqsub job.sh\n```\n"))
