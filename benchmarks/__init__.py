"""The benchmark studies, one package per study, and their shared code (``benchmarks.common``).

Run a study from the repository root as its README says, e.g.
``.venv/bin/python -m benchmarks.overhead.step_overhead``; benchmarks/README.md lists them.
"""
