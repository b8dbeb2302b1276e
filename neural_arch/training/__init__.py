"""Training: typed run configuration (``config.py``) and the training loop (``trainer.py``).

Use: ``from neural_arch.training.config import load_config;
cfg = load_config("tiny", ["optim.lr=0.1"])``; ``from neural_arch.training.trainer import train``;
your code in the loop and early stopping: ``from neural_arch.training.callbacks import Callback,
EarlyStopping`` (docs/callbacks.md). Importing this package has no side effects and imports no
submodule; import the ones you need.
"""
