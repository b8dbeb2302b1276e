"""What the config asks of the machine's devices, checked once in the launching process.

Used by cli/train.py before any data is created or worker started::

    check_devices(cfg, cuda=torch.cuda.is_available())   # ConfigError, one line

Why here: ``training.precision=fp16`` or ``training.backend=nccl`` on a machine without a
CUDA GPU used to fail inside every worker (a 40-line traceback, or a failure summary after a
wasted restart, after the data had been created); the launching process knows the answer first.
"""

from __future__ import annotations

from neural_arch.training.config import Config
from neural_arch.training.typed_config import ConfigError


def check_devices(cfg: Config, cuda: bool) -> None:
    """One-line ``ConfigError`` for a setting this machine's devices cannot run."""
    if cuda:
        return
    if cfg.training.precision == "fp16":
        raise ConfigError(
            "training.precision=fp16 needs a CUDA GPU and this machine has none (fp16 autocast and its loss "
            "scaler are CUDA-only); use training.precision=bf16 or fp32 here"
        )
    if cfg.training.backend == "nccl":
        raise ConfigError(
            "training.backend=nccl needs CUDA GPUs and this machine has none; use training.backend=gloo (or auto)"
        )
