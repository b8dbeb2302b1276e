"""Where in a recorded traceback an error happened, the user's code first: ``place(frames)``.

Used by the restart policy and the failure summary::

    place(parse_frames(traceback_text))  # "train.py:12 in step (in torch/nn/functional.py:3104 in mse_loss)"

A frame is the *library's* when its file lies in Python's standard library, in an installed
package (``site-packages``, ``dist-packages``), in neural_arch itself, or is no file
(``<frozen runpy>``); every other frame is the user's. The innermost user frame is the
line to fix; when the error was raised deeper, inside a library, that innermost library
frame is named beside it (the library's path from its package folder: ``torch/_tensor.py``).
"""

from __future__ import annotations

import os
import re
import sysconfig
from typing import Sequence

Frame = tuple[str, int, str]
"""(file, line, function) of one traceback entry."""

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))))
"""The folder neural_arch's package lies in: its frames are the library's, not the user's."""
_ROOTS = tuple(
    sorted(
        {
            os.path.realpath(sysconfig.get_paths()[key]) + os.sep
            for key in ("stdlib", "platstdlib", "purelib", "platlib")
        },
        key=len,
        reverse=True,  # site-packages before the standard library folder it lies in
    )
)


def parse_frames(text: str) -> list[Frame]:
    """Every ``File "...", line N, in f`` entry of a printed traceback, outermost first."""
    return [(m["file"], int(m["line"]), m["func"]) for m in map(_FRAME.match, text.splitlines()) if m]


def _real(path: str) -> str:
    return os.path.realpath(path) if os.path.isabs(path) else path


def is_library(path: str) -> bool:
    """Whether a frame of file ``path`` is the library's (see the module docstring)."""
    if path.startswith("<"):
        return True
    real = _real(path)
    own = real.startswith(os.path.join(_PACKAGE_PARENT, "neural_arch") + os.sep)
    return own or real.startswith(_ROOTS) or "-packages/" in real


def short(path: str) -> str:
    """A library file from its package folder (``torch/_tensor.py``); a user's file as recorded."""
    if not is_library(path):  # relative to the working directory when inside it, as a user types it
        inside = os.path.isabs(path) and _real(path).startswith(os.path.realpath(os.getcwd()) + os.sep)
        return os.path.relpath(_real(path)) if inside else path
    real = _real(path)
    for root in (*_ROOTS, _PACKAGE_PARENT + os.sep):
        if real.startswith(root):
            return real[len(root) :]
    return real.split("-packages/", 1)[-1]


def place(frames: Sequence[Frame]) -> str:
    """The user's innermost frame, with the library's innermost beside it when the error was
    raised inside a library; the innermost frame alone when no frame is the user's."""
    if not frames:
        return "?"
    file, line, func = frames[-1]
    inner = f"{short(file)}:{line} in {func}"
    own = [frame for frame in frames if not is_library(frame[0])]
    if not own or own[-1] == frames[-1]:
        return inner
    file, line, func = own[-1]
    return f"{short(file)}:{line} in {func} (in {inner})"
