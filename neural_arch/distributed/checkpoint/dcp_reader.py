"""DCP loading that runs no code from the checkpoint: every sharded load goes through here.

Use::

    load_dcp(state_dict, directory)     # every rank: fill state_dict in place (DCP reshards)
    whole = read_whole_dcp(directory)   # one process: the whole saved state, tensors in full

Two places in torch 2.13's DCP unpickle without limits: ``FileSystemReader.read_metadata``
(``pickle.load`` of ``.metadata``) and ``DefaultLoadPlanner.load_bytes``
(``torch.load(weights_only=False)`` of every non-tensor entry, e.g. an optimizer's
``param_groups``). ``SafeFileSystemReader`` and the planners below replace exactly those two
methods with ``untrusted.py``'s readers and leave the rest of DCP as it is.
"""

from __future__ import annotations

import io
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional, Union

from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, _EmptyStateDictLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import ReadItem

from neural_arch.distributed.checkpoint.errors import CheckpointError, UnsafeCheckpoint
from neural_arch.distributed.checkpoint.quiet import quiet_single_process
from neural_arch.distributed.checkpoint.untrusted import METADATA, load_bytes_entry, read_dcp_metadata


class SafeFileSystemReader(FileSystemReader):
    """``FileSystemReader`` whose metadata is read with the allowlisting unpickler."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        rank: Optional[int] = kwargs.get("rank")
        # Same file names and post-processing as FileSystemReader.read_metadata in torch 2.13.
        metadata = read_dcp_metadata(self.path, METADATA if rank is None else f"__{rank}{METADATA}")
        _check_storage_files(Path(self.path), metadata)
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


def _check_storage_files(directory: Path, metadata: Metadata) -> None:
    """Every data file the metadata names is a plain file name in ``directory`` (DCP joins
    it to the directory as given, so ``../../dev/zero`` would be read)."""
    for info in (metadata.storage_data or {}).values():
        name = getattr(info, "relative_path", None)
        if not isinstance(name, str) or not name or "/" in name or name in (".", "..") or "\x00" in name:
            shown = repr(name)[:120]
            raise CheckpointError(f"{directory / METADATA} names data file {shown}, which is not a file in {directory}")
        try:
            regular = stat.S_ISREG(os.lstat(directory / name).st_mode)
        except OSError:
            continue  # missing: DCP says so itself
        if not regular:  # a link, FIFO or device: could point anywhere, block, or never end
            raise CheckpointError(f"{directory / METADATA} names data file {name!r}, which is not a regular file")


class _SafeBytes:
    """``load_bytes`` of DefaultLoadPlanner (torch 2.13) with ``torch.load(weights_only=True)``."""

    flatten_state_dict: bool
    original_state_dict: dict[str, Any]
    state_dict: dict[str, Any]
    mappings: dict[str, Any]
    source: Path

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        fqn = read_item.dest_index.fqn
        loaded = load_bytes_entry(value, fqn, self.source)
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], loaded)
        else:
            self.state_dict[fqn] = loaded


class SafeLoadPlanner(_SafeBytes, DefaultLoadPlanner):
    """DCP's default load planner (fills a given state dict), non-tensor entries read safely."""

    def __init__(self, source: Path):
        super().__init__()
        self.source = source


class SafeWholePlanner(_SafeBytes, _EmptyStateDictLoadPlanner):
    """Rebuilds the whole saved state from the metadata (what torch's ``dcp_to_torch_save``
    uses, private in torch 2.13), non-tensor entries read safely; keeps the result."""

    def __init__(self, source: Path):
        super().__init__()
        self.source = source
        self.loaded: dict[str, Any] = {}

    def set_up_planner(
        self, state_dict: dict[str, Any], metadata: Optional[Metadata] = None, is_coordinator: bool = False
    ) -> None:
        self.loaded = state_dict  # filled in place; dcp.load does not hand an empty dict's contents back
        super().set_up_planner(state_dict, metadata, is_coordinator)


def load_dcp(state_dict: dict[str, Any], directory: Union[str, Path], no_dist: bool) -> None:
    """Every rank: fill ``state_dict`` from the DCP checkpoint in ``directory``."""
    import torch.distributed.checkpoint as dcp

    path = Path(directory)
    with _unwrapped(path), quiet_single_process():
        dcp.load(state_dict, storage_reader=SafeFileSystemReader(path), planner=SafeLoadPlanner(path), no_dist=no_dist)


def read_whole_dcp(directory: Union[str, Path]) -> dict[str, Any]:
    """One process, no process group: the whole state saved in ``directory``, nested as saved."""
    import torch.distributed.checkpoint as dcp

    path = Path(directory)
    read_dcp_metadata(path)  # refuse a planted pickle in one line here; inside DCP it would be one of several
    planner = SafeWholePlanner(path)
    with _unwrapped(path), quiet_single_process():
        dcp.load({}, storage_reader=SafeFileSystemReader(path), planner=planner, no_dist=True)
    return planner.loaded


@contextmanager
def _unwrapped(path: Path) -> Iterator[None]:
    """Turn DCP's multi-line ``CheckpointException`` (a BaseException holding every rank's
    traceback) into one ``CheckpointError``; a refused pickle keeps its own message."""
    try:
        yield
    except CheckpointException as exc:
        causes = [cause for cause, _ in exc.failures.values()]
        unsafe = next((c for c in causes if isinstance(c, UnsafeCheckpoint)), None)
        if unsafe is not None:
            raise unsafe.with_traceback(None) from None
        said = "; ".join(
            f"rank {rank}: {type(c).__name__}: {' '.join(str(c).split())}"
            for rank, (c, _) in sorted(exc.failures.items())
        )
        raise CheckpointError(f"could not load sharded checkpoint {path}: {said}") from None
