"""Bad GPT inputs through the command line: one line, exit 2, nothing written.

Run: ``.venv/bin/python -m pytest tests/apps/gpt/test_cli.py -q``
``neural-arch train --config configs/gpt.yaml --create-data`` asks for 2 processes; every
refusal here comes before any rank starts, so nothing is created: no corpus, no run dir.
"""

from pathlib import Path

import pytest

from tests.helpers.cli import run_main
from tests.helpers.gpt_corpus import CONTEXT, VAL_FRACTION, make_corpus, write_texts
from tests.helpers.paths import REPO


def bad_sources(root: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (extra --set values, words the error must contain), with their files made."""
    src = write_texts(root / "src")
    empty = root / "empty"
    empty.mkdir()
    (empty / "a.txt").write_bytes(b"")
    binary = write_texts(root / "bin", files=3)
    (binary / "blob.txt").write_bytes(bytes(range(256)))
    return {
        "no-match": ([f"data.source={root / 'nothing_*.txt'}"], "matches no file"),
        "empty": ([f"data.source={empty}"], "corpus would be empty"),
        "binary": ([f"data.source={binary}"], "blob.txt is not UTF-8 text"),
        "empty-val": ([f"data.source={src}", "data.val_fraction=0.000001"], "no file of data.source"),
        "context": (
            [f"data.source={src}", f"data.val_fraction={VAL_FRACTION}", "model.context=100000"],
            "model.context=100000 needs 100001 bytes",
        ),
    }


@pytest.mark.parametrize("case", ["no-match", "empty", "binary", "empty-val", "context"])
@pytest.mark.parametrize("command", ["train", "create-data"])
def test_bad_source_is_one_line_exit_2_and_nothing_is_written(tmp_path, capsys, case, command):
    extra, words = bad_sources(tmp_path / "inputs")[case]
    out = tmp_path / "out"
    argv = [
        command,
        "--config",
        str(REPO / "configs" / "gpt.yaml"),
        "--set",
        f"data.path={out / 'corpus'}",
        f"run.dir={out / 'run'}",
        *extra,
    ]
    code, _, err = run_main(argv + (["--create-data"] if command == "train" else []), capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith(f"neural-arch {command}: error: ") and words in err, err
    assert not out.exists()


def test_a_stale_corpus_is_refused_and_left_as_it_was(tmp_path, capsys):
    corpus = make_corpus(tmp_path, context=CONTEXT)
    before = {p.name: p.read_bytes() for p in corpus.iterdir()}
    argv = [
        "train",
        "--config",
        str(REPO / "configs" / "gpt.yaml"),
        "--create-data",
        "--set",
        f"data.source={tmp_path / 'src'}",
        f"data.path={corpus}",
        f"data.val_fraction={VAL_FRACTION / 2}",
        f"run.dir={tmp_path / 'run'}",
        f"model.context={CONTEXT}",
    ]
    code, _, err = run_main(argv, capsys)
    assert code == 2 and err.count("\n") == 1 and "delete that directory" in err, err
    assert {p.name: p.read_bytes() for p in corpus.iterdir()} == before
    assert not (tmp_path / "run").exists()
