"""``from neural_arch.core.tensor import Tensor`` — the tensor type scripts can import from neural_arch.

A neural_arch tensor *is* a ``torch.Tensor``; there is no wrapper type. ``Tensor(np_array)``
therefore builds a float32 torch tensor, exactly as ``torch.Tensor(np_array)`` does.
"""

import torch

Tensor = torch.Tensor

__all__ = ["Tensor"]
