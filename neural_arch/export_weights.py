"""Export a checkpoint's weights as safetensors, with the model settings that rebuild them.

Run: ``neural-arch export --checkpoint runs/NAME --format safetensors --output model.safetensors``,
or from Python ``write_safetensors(state, "model.safetensors")`` with a checkpoint ``state``
(``neural_arch.cli.checkpoints.read_checkpoint``: full or sharded, gathered in one process).

The file holds every tensor of the model's state dict by name (a tied matrix under each of its
names) and, in its string metadata, ``neural_arch.task`` (the app) and ``neural_arch.model`` (the
checkpoint's ``model:`` section as JSON), so a reader can rebuild the module and call
``load_state_dict(safetensors.torch.load_file(path))``. Written beside ``output`` and renamed
over it once complete: a failed export never leaves half a file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Union

import torch


def write_safetensors(state: dict[str, Any], output: Union[str, Path]) -> dict[str, str]:
    """Write ``state["model"]`` to ``output``; returns the metadata it carries."""
    from safetensors.torch import save_file  # here: only export needs it

    config = state.get("config", {})
    metadata = {
        "format": "pt",
        "neural_arch.task": str(config.get("run", {}).get("task", "")),
        "neural_arch.model": json.dumps(config.get("model", {}), sort_keys=True),
    }
    output = Path(output)
    partial = output.with_name(output.name + ".partial")
    try:
        save_file(_unshared(state["model"]), str(partial), metadata=metadata)
        os.replace(partial, output)
    finally:
        partial.unlink(missing_ok=True)
    return metadata


def _unshared(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Contiguous tensors, a tied one copied under its second name (safetensors stores no aliases)."""
    seen: set[tuple[int, int]] = set()
    out = {}
    for name, tensor in tensors.items():
        tensor = tensor.detach().contiguous()
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        out[name] = tensor.clone() if key in seen else tensor
        seen.add(key)
    return out
