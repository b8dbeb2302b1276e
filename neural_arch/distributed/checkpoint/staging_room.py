"""Whether an asynchronous save's staging copy fits in memory, so a default never OOM-kills a run.

Use: ``room = StagingRoom()``; ``room.shortfall(need)`` is None where ``need`` bytes of host
memory can be held beside training at its peak, else a one-line reason with the numbers.
``CheckpointWriter`` (background.py) asks it on every rank before copying and saves
synchronously (no copy at all) on every rank when any rank lacks the room.

The room is what the kernel can give this process without killing it, minus what training will
take back before the copy is written: the copy lives through the next steps, so a rank that is
now below its peak (activations freed after the step) grows back to it while the copy is held.

- host: the lower of ``MemAvailable`` (/proc/meminfo) and the memory cgroup's room (v1
  ``memory.limit_in_bytes - memory.usage_in_bytes`` plus reclaimable ``total_inactive_file``;
  v2 ``memory.max - memory.current`` plus ``inactive_file``), minus ``VmHWM - VmRSS`` of this
  process (/proc/self/status), minus a margin (``MARGIN`` of the copy plus ``SLACK``).
- a value the kernel does not expose (no cgroup limit, no /proc) does not limit the room.

Device tensors are copied on their device: their room is CUDA's free memory minus the same
peak-to-now growth (``torch.cuda.max_memory_allocated() - memory_allocated()``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch
from torch.utils._pytree import tree_leaves

MARGIN = 0.10
"""Fraction of the copy kept free on top of it (allocator rounding, the writer's buffers)."""
SLACK = 64 << 20
"""Bytes kept free on top of the copy whatever its size (the interpreter, the writer thread)."""
MiB = 1 << 20


@dataclass
class StagingRoom:
    """Reads the memory limits from ``proc`` and ``cgroup`` (folders; tests point them at fakes)."""

    proc: Path = Path("/proc")
    cgroup: Path = Path("/sys/fs/cgroup")

    def shortfall(self, need: int, device_need: int = 0, held_through_training: bool = True) -> Optional[str]:
        """None when ``need`` host bytes (and ``device_need`` CUDA bytes) fit, else why not.
        ``held_through_training=False``: held only while training waits (evaluation), so the
        growth back to training's peak is not counted."""
        room = self.host_room(held_through_training)
        if room is not None and need * (1 + MARGIN) + SLACK > room:
            return _short(need, room, "host")
        device_room = _cuda_room(held_through_training) if device_need else None
        if device_room is not None and device_need * (1 + MARGIN) > device_room:
            return _short(device_need, device_room, "device")
        return None

    def host_room(self, held_through_training: bool = True) -> Optional[int]:
        """Bytes of host memory this process can still take (at its peak, where the bytes are held
        through training); None if nothing limits it."""
        limits = [x for x in (self._mem_available(), self._cgroup_room()) if x is not None]
        if not limits:
            return None
        return min(limits) - (self._growth_to_peak() if held_through_training else 0)

    def _mem_available(self) -> Optional[int]:
        fields = _fields(self.proc / "meminfo")
        return fields["MemAvailable"] * 1024 if "MemAvailable" in fields else None

    def _growth_to_peak(self) -> int:
        fields = _fields(self.proc / "self" / "status")
        return max(fields.get("VmHWM", 0) - fields.get("VmRSS", 0), 0) * 1024

    def _cgroup_room(self) -> Optional[int]:
        """The room in this process's memory cgroup (v1 or v2), None without a limit."""
        v1 = self._own_group("memory")
        if v1 is not None:
            limit, used = _number(v1 / "memory.limit_in_bytes"), _number(v1 / "memory.usage_in_bytes")
            cache = _stat(v1 / "memory.stat", "total_inactive_file")
        else:
            v2 = self._own_group("")
            if v2 is None:
                return None
            limit, used, cache = (
                _number(v2 / "memory.max"),
                _number(v2 / "memory.current"),
                _stat(v2 / "memory.stat", "inactive_file"),
            )
        if limit is None or used is None or limit >= 1 << 60:  # "max" or the v1 page-rounded unlimited value
            return None
        return limit - used + cache

    def _own_group(self, controller: str) -> Optional[Path]:
        """This process's cgroup folder of ``controller`` (``""``: the v2 unified hierarchy)."""
        try:
            lines = (self.proc / "self" / "cgroup").read_text().splitlines()
        except OSError:
            return None
        for line in lines:
            _, names, path = line.split(":", 2)
            if (controller and controller in names.split(",")) or (not controller and names == ""):
                base = self.cgroup / controller if controller else self.cgroup
                for folder in (base / path.lstrip("/"), base):  # inside a container the root is its own group
                    if (folder / ("memory.limit_in_bytes" if controller else "memory.max")).exists():
                        return folder
        return None


def copy_bytes(tree: Any) -> tuple[int, int]:
    """Bytes a copy of every tensor in ``tree`` takes: (host, device). DTensors count their local shard."""
    host = device = 0
    for leaf in tree_leaves(tree):
        if not isinstance(leaf, torch.Tensor):
            continue
        local = leaf.to_local() if hasattr(leaf, "to_local") else leaf
        size = local.numel() * local.element_size()
        if local.device.type == "cpu":
            host += size
        else:
            device += size
    return host, device


def _short(need: int, room: int, where: str) -> str:
    return (
        f"a {need / MiB:.0f} MiB staging copy does not fit in the {max(room, 0) / MiB:.0f} MiB of {where} memory left"
    )


def _cuda_room(held_through_training: bool) -> Optional[int]:
    if not torch.cuda.is_available():
        return None
    free, _ = torch.cuda.mem_get_info()
    growth = torch.cuda.max_memory_allocated() - torch.cuda.memory_allocated() if held_through_training else 0
    return free - growth


def _fields(path: Path) -> dict[str, int]:
    """``Name: 123 kB`` lines as {name: 123}; empty where the file cannot be read."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[name.strip()] = int(parts[0])
    return out


def _number(path: Path) -> Optional[int]:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # v2 writes "max" for no limit


def _stat(path: Path, name: str) -> int:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        key, _, value = line.partition(" ")
        if key == name and value.strip().isdigit():
            return int(value)
    return 0
