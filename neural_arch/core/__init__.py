"""Core types shared by the package (``neural_arch.core.tensor.Tensor``)."""
