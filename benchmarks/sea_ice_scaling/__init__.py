"""Threads or processes for the sea-ice model: ``.venv/bin/python -m benchmarks.sea_ice_scaling.icenet_scaling``.

icenet_sync.py splits a 2-rank step into own work, all-reduce and the wait for the peer (see README.md here).
"""
