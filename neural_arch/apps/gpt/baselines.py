"""Bits-per-byte of simple predictors on the validation bytes, to judge the model against.

Try it::

    >>> from pathlib import Path
    >>> from neural_arch.apps.gpt.corpus import Corpus
    >>> from neural_arch.apps.gpt.baselines import byte_baselines
    >>> corpus = Corpus(Path("data/gpt_corpus"))
    >>> byte_baselines(corpus.train, corpus.val)

Unigram and bigram byte models (add-one smoothed) are fitted on the training split and
scored on the same predicted bytes as the model (every validation byte but the first);
``gzip -9`` and ``lzma`` (preset 9) are the compressed size of the whole validation text.
"""

from __future__ import annotations

import gzip
import lzma

import numpy as np

CHUNK = 1 << 22
"""Bytes per bincount pass: bounds the int64 temporaries to ~32 MiB on a large corpus."""


def _bigram_counts(data: np.ndarray) -> np.ndarray:
    counts = np.zeros(256 * 256, dtype=np.int64)
    for start in range(0, len(data) - 1, CHUNK):
        chunk = np.asarray(data[start : start + CHUNK + 1], dtype=np.int64)  # +1: the pair across the cut
        counts += np.bincount(chunk[:-1] * 256 + chunk[1:], minlength=256 * 256)
    return counts.reshape(256, 256)


def _unigram_counts(data: np.ndarray) -> np.ndarray:
    counts = np.zeros(256, dtype=np.int64)
    for start in range(0, len(data), CHUNK):
        counts += np.bincount(np.asarray(data[start : start + CHUNK]), minlength=256)
    return counts


def byte_baselines(train: np.ndarray, val: np.ndarray) -> dict[str, float]:
    """{unigram, bigram, gzip, lzma} bits per byte on ``val`` (needs at least 2 bytes)."""
    val = np.asarray(val)
    prev, nxt = val[:-1].astype(np.int64), val[1:].astype(np.int64)
    unigram = _unigram_counts(train) + 1.0  # add-one: an unseen byte costs bits, not infinity
    bigram = _bigram_counts(train) + 1.0
    uni_bits = -np.log2(unigram[nxt] / unigram.sum()).sum()
    bi_bits = -np.log2(bigram[prev, nxt] / bigram.sum(axis=1)[prev]).sum()
    text = val.tobytes()
    return {
        "unigram": float(uni_bits / len(nxt)),
        "bigram": float(bi_bits / len(nxt)),
        "gzip": 8.0 * len(gzip.compress(text, compresslevel=9)) / len(text),
        "lzma": 8.0 * len(lzma.compress(text, preset=9)) / len(text),
    }
