"""Recovery time of a job that loses a rank: ``.venv/bin/python -m benchmarks.recovery.recovery`` (a killed rank)
and ``.venv/bin/python -m benchmarks.recovery.hang_recovery`` (a hung rank); see README.md here.
"""
