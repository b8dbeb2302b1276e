"""The byte-level GPT app: a decoder-only transformer trained on real text, byte by byte.

Run: ``neural-arch train --config gpt --create-data`` (2 processes on CPU).
``config.py`` holds its ``model:``/``data:`` sections, ``corpus.py`` builds and reads the
byte corpus (default: this interpreter's standard-library sources), ``model.py`` the plain
transformer, ``baselines.py`` the unigram/bigram/gzip/lzma bits-per-byte, ``task.py`` the
``Task`` (windows, loss, exact validation bits-per-byte).
"""
