"""What a running job looks like from /proc: its process tree and which of its processes still run.

Use (Linux): ``from benchmarks.common.proc_tree import PROC, alive, process_tree``;
``tree = process_tree(launcher.pid)``; ``alive(tree)`` -> the pids still running (zombies do
not count). Reads only /proc, so it sees exactly what the kernel sees (the soak's fault
injection and its orphan check use it).
"""

from __future__ import annotations

from pathlib import Path

PROC = Path("/proc")


def _stat(pid: int) -> tuple[str, int]:
    """(state, parent pid) of ``pid``; raises OSError when it is gone."""
    fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    return fields[0], int(fields[1])


def process_tree(root: int) -> set[int]:
    """``root`` and every process descended from it, as of now."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                children.setdefault(_stat(int(entry.name))[1], []).append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue  # exited while we looked
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def alive(pids: set[int]) -> set[int]:
    """The ``pids`` still running; a zombie holds no port, file or CPU, so it counts as gone."""
    running = set()
    for pid in pids:
        try:
            if _stat(pid)[0] != "Z":
                running.add(pid)
        except (OSError, IndexError):
            continue
    return running
