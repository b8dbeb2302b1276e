"""The framework's own cost per step: ``.venv/bin/python -m benchmarks.overhead.step_overhead`` (see README.md here).

Also ddp_overhead.py (our DDP wrapper against torch's), trainer_overhead.py (the trainer against a
hand-written loop, 2 ranks), cores.py (what 2 processes get from this machine's cores) and
gpt_shapes.py (compute per step of candidate GPT shapes).
"""
