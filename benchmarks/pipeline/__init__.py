"""Idle (bubble) fraction of each pipeline schedule: ``.venv/bin/python -m benchmarks.pipeline.pipeline``
(see README.md here).
"""
