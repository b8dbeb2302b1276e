"""neural_arch: exact, fault-tolerant distributed training for PyTorch models.

Run a 2-process example with ``make run``; the distributed API lives in
``neural_arch.distributed``. Importing this package has no side effects.
"""

__version__ = "0.1.0"
