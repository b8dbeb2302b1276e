"""Memory per rank for each parallel layout: ``.venv/bin/python -m benchmarks.memory.memory`` (bytes counted),
``memory_peak`` (real peak per process) and ``memory_limit`` (training under a hard limit); see README.md here.
"""
