"""The GPT corpus: deterministic on any world size, byte-exact windows, one-line refusals.

Run: ``.venv/bin/python -m pytest tests/apps/gpt/test_corpus.py -q``
"""

import json
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from neural_arch.apps.gpt.baselines import byte_baselines
from neural_arch.apps.gpt.corpus import NOT_LIBRARY, Corpus, create_corpus, resolve_sources
from neural_arch.training.typed_config import ConfigError
from tests.helpers.gpt_corpus import CONTEXT, VAL_FRACTION, make_corpus, write_texts
from tests.helpers.multiproc import run_ranks


def corpus_worker(rank, world_size, src, path):
    import neural_arch.distributed as nd

    nd.init_process_group(backend="gloo")
    create_corpus(Path(path), [src], VAL_FRACTION, CONTEXT)
    return rank


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_three_ranks_write_the_same_bytes_as_one(tmp_path):
    one = make_corpus(tmp_path / "one")
    src = str(tmp_path / "one" / "src")
    run_ranks(corpus_worker, 3, args=(src, str(tmp_path / "three")), timeout=90)
    for name in ("train.bin", "val.bin", "manifest.json"):
        assert (tmp_path / "three" / name).read_bytes() == (one / name).read_bytes(), name
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_splits_are_the_sorted_files_concatenated_and_windows_read_them(tmp_path):
    path = make_corpus(tmp_path)
    corpus, src = Corpus(path), tmp_path / "src"
    manifest = json.loads((path / "manifest.json").read_text())
    rels = [f["path"] for f in manifest["files"]]
    assert rels == sorted(rels) and manifest["total_bytes"] == len(corpus.train) + len(corpus.val)
    for split, data in (("train", corpus.train), ("val", corpus.val)):
        expected = b"".join((src / f["path"]).read_bytes() for f in manifest["files"] if f["split"] == split)
        assert data.tobytes() == expected and len(expected) > CONTEXT
    from neural_arch.apps.gpt.task import window_starts

    ids = np.arange(0, 5000, 37)
    starts = window_starts(7, ids, len(corpus.train) - CONTEXT)
    assert starts.min() >= 0 and starts.max() <= len(corpus.train) - CONTEXT - 1
    assert np.array_equal(starts, window_starts(7, ids, len(corpus.train) - CONTEXT))  # (seed, id) decides
    train_bytes = corpus.train.tobytes()
    for s in starts[:20]:
        assert bytes(corpus.train[s : s + CONTEXT + 1]) == train_bytes[s : s + CONTEXT + 1]


def test_an_existing_matching_corpus_is_reused_and_a_stale_one_refused(tmp_path):
    path = make_corpus(tmp_path)
    before = (path / "train.bin").stat().st_mtime_ns
    assert create_corpus(path, [str(tmp_path / "src")], VAL_FRACTION, CONTEXT) == path
    assert (path / "train.bin").stat().st_mtime_ns == before
    with pytest.raises(ConfigError, match="delete that directory") as err:
        create_corpus(path, [str(tmp_path / "src")], 0.5, CONTEXT)
    assert "\n" not in str(err.value)
    (tmp_path / "src" / "doc_01.txt").write_text("edited")
    with pytest.raises(ConfigError, match="stale: 1 source file.*doc_01.txt"):
        create_corpus(path, [str(tmp_path / "src")], VAL_FRACTION, CONTEXT)


def refusal(tmp_path, source, match, val_fraction=VAL_FRACTION, context=CONTEXT):
    with pytest.raises(ConfigError, match=match) as err:
        create_corpus(tmp_path / "out" / "corpus", source, val_fraction, context)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir()), "something was written"


def test_bad_inputs_are_refused_in_one_line_with_nothing_written(tmp_path):
    src = write_texts(tmp_path / "src")
    refusal(tmp_path, [str(tmp_path / "nothing_*.txt")], "matches no file")
    refusal(tmp_path, [str(tmp_path / "missing_dir")], "matches no file")
    empty = tmp_path / "empty"
    empty.mkdir()
    for i in range(3):
        (empty / f"e{i}.txt").write_bytes(b"")
    refusal(tmp_path, [str(empty)], "corpus would be empty")
    binary = tmp_path / "bin"
    write_texts(binary, files=4)
    (binary / "blob.txt").write_bytes(bytes(range(256)))
    refusal(tmp_path, [str(binary)], "blob.txt is not UTF-8 text")
    refusal(tmp_path, [str(src)], "val_fraction=1e-06: no file", val_fraction=1e-6)
    refusal(tmp_path, [str(src)], "model.context=100000 needs 100001 bytes", context=100_000)
    (tmp_path / "out" / "corpus").mkdir(parents=True)
    (tmp_path / "out" / "corpus" / "precious.txt").write_text("mine")
    with pytest.raises(ConfigError, match="exists but holds no corpus"):
        create_corpus(tmp_path / "out" / "corpus", [str(src)], VAL_FRACTION, CONTEXT)
    assert [p.name for p in (tmp_path / "out" / "corpus").iterdir()] == ["precious.txt"]


def test_a_list_of_files_and_a_glob_are_sources(tmp_path):
    src = write_texts(tmp_path / "src")
    listed = resolve_sources([str(src / "doc_01.txt"), str(src / "sub" / "doc_00.txt")], 0.5)
    assert [f.rel for f in listed] == ["doc_01.txt", "sub/doc_00.txt"]
    globbed = resolve_sources([str(src / "**" / "*.txt")], 0.5)
    assert len(globbed) == 12 and {f.split for f in globbed} == {"train", "val"}


def test_the_default_source_is_the_standard_library(tmp_path):
    files = resolve_sources(None, 0.05)
    assert len(files) > 500 and any(f.rel == "os.py" for f in files)
    assert not any("site-packages" in f.rel for f in files)
    assert 0 < sum(f.split == "val" for f in files) < len(files) / 5
    # the pruning walk finds exactly what a full recursive glob, then filtering, finds
    root = Path(sysconfig.get_paths()["stdlib"])
    globbed = sorted(
        {p.resolve() for p in root.rglob("*.py") if p.is_file() and not NOT_LIBRARY & set(p.relative_to(root).parts)}
    )
    assert [f.path for f in files] == globbed


def test_the_baselines_are_computed_at_creation_and_an_older_corpus_computes_them(tmp_path):
    from neural_arch.apps.gpt.task import GPTTask
    from neural_arch.training.config import load_config

    path = make_corpus(tmp_path)
    corpus = Corpus(path)
    assert corpus.manifest["baselines"] == byte_baselines(corpus.train, corpus.val)
    cfg = load_config(
        "configs/gpt.yaml",
        [
            f"data.path={path}",
            f"data.source=[{tmp_path / 'src'}]",
            f"data.val_fraction={VAL_FRACTION}",
            f"model.context={CONTEXT}",
        ],
    )
    task = GPTTask(cfg)
    task.prepare()
    assert task.baselines == corpus.manifest["baselines"]
    manifest = dict(corpus.manifest)
    del manifest["baselines"]  # as written before they were part of it
    (path / "manifest.json").write_text(json.dumps(manifest))
    older = GPTTask(cfg)
    older.prepare()
    assert older.baselines == task.baselines
