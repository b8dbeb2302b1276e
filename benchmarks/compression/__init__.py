"""Gradient compression against exact DDP: ``.venv/bin/python -m benchmarks.compression.compression --link-gbit 5``
(see README.md here; shaped_link.py limits loopback to a network link's rate).
"""
