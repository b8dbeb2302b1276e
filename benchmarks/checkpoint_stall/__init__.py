"""How long a checkpoint save holds up training: ``.venv/bin/python -m benchmarks.checkpoint_stall.save_stall``
(synchronous against asynchronous saves; see README.md here).
"""
