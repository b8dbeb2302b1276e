"""Code more than one study uses: ``from benchmarks.common.two_ranks import on_ranks`` and the like.

Not run on its own: spawned gloo ranks (two_ranks.py), the launcher command and GPT corpus of
the launched jobs (jobs.py), GPT layouts (gpt_layouts.py), the communication-bound MLP (mlp.py),
charts (charts.py) and the /proc view of a running job (proc_tree.py).
"""
