"""Data parallelism past this machine, a step-time model: ``.venv/bin/python -m benchmarks.scaling_model.scaling_model``
(see README.md here).
"""
