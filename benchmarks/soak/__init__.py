"""Fault soak: ``.venv/bin/python -m benchmarks.soak.soak --rounds 100`` (see README.md here)."""
