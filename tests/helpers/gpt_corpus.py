"""A tiny text corpus for the GPT app's tests: a dozen deterministic text files in a folder.

Use: ``from tests.helpers.gpt_corpus import CONTEXT, VAL_FRACTION, make_corpus, write_texts``;
``src = write_texts(tmp_path / "src")``; ``make_corpus(tmp_path)`` also builds the corpus from it.
"""

import random
from pathlib import Path

from neural_arch.apps.gpt.corpus import create_corpus

WORDS = "the of and to in is that for it as with was on be by this are from or an at which but not".split()
VAL_FRACTION = 0.3
CONTEXT = 16


def write_texts(folder: Path, files: int = 12) -> Path:
    """``files`` text files of pseudo-English (seeded), sizes 300-1100 bytes, in nested folders."""
    rng = random.Random(0)
    for i in range(files):
        path = folder / ("sub" if i % 3 == 0 else "") / f"doc_{i:02d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        words = [rng.choice(WORDS) for _ in range(rng.randint(60, 220))]
        path.write_text(" ".join(words) + f"\nfile {i} ends here: é ü ✓\n", encoding="utf-8")
    return folder


def make_corpus(root: Path, context: int = CONTEXT) -> Path:
    """Write the texts under ``root/src`` and the corpus at ``root/corpus`` (this process only)."""
    src = write_texts(root / "src")
    return create_corpus(root / "corpus", [str(src)], VAL_FRACTION, context)
