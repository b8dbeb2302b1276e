"""Read checkpoint files as untrusted input: no pickle in them may run code.

Use::

    state = safe_torch_load(step_dir / "state.pt")          # torch.load(weights_only=True), clear refusal
    metadata = read_dcp_metadata(step_dir / "shards")        # DCP's pickled .metadata, allowlisted classes only

Why: a pickle can call any importable function while it loads (``os.system`` through a
``__reduce__``). ``torch.load(weights_only=True)`` already refuses that for tensors and
plain data, but DCP's ``FileSystemReader`` reads its ``.metadata`` file with plain
``pickle.load`` (torch 2.13). ``MetadataUnpickler`` resolves only the classes DCP itself
writes there (read off the files our sharded saves produce, and
torch/distributed/checkpoint/metadata.py and filesystem.py); anything else raises
``UnsafeCheckpoint`` naming the file and the class, before that class is even imported.
None of the allowed callables does more than build a value from its arguments.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import IO, Any, Union

import torch

from neural_arch.distributed.checkpoint.errors import CheckpointError, UnsafeCheckpoint

METADATA = ".metadata"
"""DCP's metadata file in a sharded checkpoint directory."""

_DCP_METADATA = "torch.distributed.checkpoint.metadata"
_ALLOWED = frozenset(
    {
        (_DCP_METADATA, "Metadata"),
        (_DCP_METADATA, "MetadataIndex"),
        (_DCP_METADATA, "StorageMeta"),
        (_DCP_METADATA, "TensorStorageMetadata"),
        (_DCP_METADATA, "BytesStorageMetadata"),
        (_DCP_METADATA, "ChunkStorageMetadata"),
        (_DCP_METADATA, "TensorProperties"),
        (_DCP_METADATA, "_MEM_FORMAT_ENCODING"),
        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
        ("torch", "Size"),
        ("torch.serialization", "_get_layout"),  # looks a torch.layout up by its name
        ("collections", "OrderedDict"),
        ("pathlib", "PosixPath"),
        ("pathlib", "PurePosixPath"),  # StorageMeta.checkpoint_id as saved
    }
)


def refusal(file: Union[str, Path], found: str) -> UnsafeCheckpoint:
    """The one-line error for ``file`` holding a pickle that needs ``found``."""
    return UnsafeCheckpoint(
        f"{file} holds a pickle that needs {found}, which no checkpoint contains; the file may be malicious "
        "and was not loaded (nothing in it ran). Use a checkpoint your own run wrote, or restore one from a backup."
    )


class MetadataUnpickler(pickle.Unpickler):
    """Unpickles DCP's ``.metadata``, resolving only the allowlisted classes (plus torch dtypes)."""

    def __init__(self, file: IO[bytes], name: Union[str, Path]):
        super().__init__(file)
        self._name = name

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED or (module == "torch" and _is_dtype(name)):
            return super().find_class(module, name)
        raise refusal(self._name, f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise refusal(self._name, f"persistent id {str(pid)[:60]!r}")


def _is_dtype(name: str) -> bool:
    # Why getattr on torch and not a fixed list: the dtypes differ between torch versions;
    # a dtype object is a plain value, never callable.
    return isinstance(getattr(torch, name, None), torch.dtype)


def read_dcp_metadata(directory: Union[str, Path], file_name: str = METADATA) -> Any:
    """DCP's ``Metadata`` of the sharded checkpoint in ``directory``, read with ``MetadataUnpickler``.

    Raises ``FileNotFoundError`` if there is none, ``UnsafeCheckpoint`` for a class outside the
    allowlist, ``CheckpointError`` for a file that is not DCP metadata at all.
    """
    from torch.distributed.checkpoint.metadata import Metadata  # here: DCP is slow to import, most runs never need it

    path = Path(directory) / file_name
    with open(path, "rb") as stream:
        try:
            found = MetadataUnpickler(stream, path).load()
        except UnsafeCheckpoint:
            raise
        except Exception as exc:  # noqa: BLE001 - truncated or garbage bytes: unusable, say so in one line
            raise CheckpointError(f"{path} is not readable DCP metadata ({type(exc).__name__}: {exc})") from None
    if not isinstance(found, Metadata):
        raise CheckpointError(f"{path} holds a {type(found).__name__}, not DCP metadata; the checkpoint is damaged")
    return found


def safe_torch_load(
    source: Union[str, Path, IO[bytes]],
    where: Union[str, Path, None] = None,
    map_location: Union[str, torch.device] = "cpu",
    mmap: bool = False,
) -> Any:
    """``torch.load(source, weights_only=True)``; a pickle needing anything else raises
    ``UnsafeCheckpoint`` naming ``where`` (default: ``source``) and what it needed. ``mmap``
    (a file path only): the tensors are copy-on-write views of the file, nothing is read yet."""
    try:
        return torch.load(source, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:
        # torch's message suggests retrying with weights_only=False: exactly wrong for a file
        # that may be malicious, so keep only the line that says what it found.
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        found = next((line for line in lines if "GLOBAL" in line or "Unsupported" in line), lines[0] if lines else "?")
        raise refusal(where if where is not None else source, f"something outside plain data ({found})") from None


def load_bytes_entry(value: io.BytesIO, entry: str, directory: Union[str, Path]) -> Any:
    """One non-tensor entry of a DCP checkpoint (DCP saves those with ``torch.save``), read safely."""
    return safe_torch_load(value, f"{directory} (entry {entry!r})")
