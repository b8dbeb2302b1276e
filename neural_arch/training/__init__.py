"""Training: typed run configuration (``config.py``) and the training loop (``trainer.py``).

Use: ``from neural_arch.training.config import load_config;
cfg = load_config("tiny", ["optim.lr=0.1"])``. Importing this package has no
side effects and imports no submodule; import the ones you need.
"""
