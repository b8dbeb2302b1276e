"""What a worker tells the launcher that started it, besides its exit code: ``tell(STOP, "15")``.

A worker's exit code and signals are its script's own, as under torchrun: a script's
``sys.exit(143)`` is a failure like any other, restarted. Only what neural-arch's own code in a
worker *says* changes the launcher's course:

- ``STOP``: the trainer stopped on a signal after saving a checkpoint (``training/stop.py``),
  so a restart would undo what was asked; text: the signal's number.
- ``USAGE``: one of neural-arch's commands refused its input in one line and exits 2
  (``cli/usage.py``, the worker wrapper's own), so a restart would give the same answer; text:
  that line.
- ``PROGRESS``: a checkpoint was saved (``checkpoint/progress.py``), so a failure repeated
  after it is not a deterministic bug (``restart_policy.py``); text: the checkpoint's name.
- ``STACKS``: the worker wrapper writes the threads' stacks on this signal (``stacks.py``), so
  the agent may send it before stopping the group; text: the signal's number.

Where: small files in the folder torch elastic's agent makes for each worker of each attempt,
the folder of the worker's ``TORCHELASTIC_ERROR_FILE`` (a new one per attempt; with
``--log-dir``, torchrun's ``attempt_<k>/<local_rank>/``, from which the agent removes them
once the attempt is over: ``forget``). Under our launcher only: our worker wrapper opens the
channel (``open_channel``, a file ``neural_arch.open`` in that folder) before the script
starts, and ``tell`` says nothing where nobody opened it (a worker of torchrun's, whose
``--log_dir`` folders are the user's, gets no files of ours). No variable of our own says
"under our launcher": the folder does. Each file names the pid that wrote it, and the agent
believes a message about a worker only from that worker's pid: a child process of the script,
which inherits the environment, cannot speak for it. A script cannot say any of this by accident.

Standard library only: the worker wrapper loads it before the script, without torch.
"""

import os
from pathlib import Path
from typing import Mapping, Optional

STOP = "stop"
USAGE = "usage"
PROGRESS = "progress"
STACKS = "stacks"
PREFIX = "neural_arch."
"""File names: ``neural_arch.stop`` and so on, beside torch's ``error.json``."""
OPENED = f"{PREFIX}open"
"""The file our worker wrapper leaves in the folder (``open_channel``): the launcher listens."""


def error_folder(environ: Mapping[str, str]) -> Optional[Path]:
    """The folder of this worker's torch elastic error file, where there is one."""
    error_file = environ.get("TORCHELASTIC_ERROR_FILE")
    if not error_file or error_file == os.devnull:
        return None
    return Path(error_file).parent


def open_channel(environ: Mapping[str, str] = os.environ) -> bool:
    """Open this worker's channel (our worker wrapper does, before the script starts); whether
    it is open. Never raises: without it the launcher takes the exit code alone."""
    folder = error_folder(environ)
    if folder is None:
        return False
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / OPENED).write_text(f"{os.getpid()}\n")
    except OSError:
        return False
    return True


def worker_folder(environ: Mapping[str, str] = os.environ) -> Optional[Path]:
    """This worker's folder for messages to our launcher; None when not a worker of ours (its
    wrapper did not open the channel there)."""
    folder = error_folder(environ)
    return folder if folder is not None and (folder / OPENED).is_file() else None


def tell(name: str, text: str = "", environ: Mapping[str, str] = os.environ) -> bool:
    """Leave message ``name`` (with ``text``, one line) for the launcher; whether it was left.
    Never raises: the launcher's course is a detail, the caller's work is not."""
    folder = worker_folder(environ)
    if folder is None:
        return False
    target = folder / f"{PREFIX}{name}"
    partial = folder / f"{PREFIX}{name}.{os.getpid()}"
    try:
        partial.write_text(f"{os.getpid()} {' '.join(text.split())}\n")
        os.replace(partial, target)  # whole or not at all: the agent may read it at any moment
    except OSError:
        return False
    return True


def heard(error_file: str, name: str, pid: Optional[int] = None) -> Optional[str]:
    """The text of message ``name`` from the worker whose error file is ``error_file`` ('' for a
    message without text), or None when it left none; with ``pid``, only if that process wrote it."""
    try:
        said = (Path(error_file).parent / f"{PREFIX}{name}").read_text()
    except (OSError, ValueError):  # none, or os.devnull's folder
        return None
    writer, _, text = said.rstrip("\n").partition(" ")
    if pid is not None and writer != str(pid):
        return None
    return text


def forget(error_file: str) -> None:
    """Remove every message left beside ``error_file`` (the agent does once the attempt is over:
    with ``--log-dir`` the folder is the user's, laid out as torchrun lays it out)."""
    folder = Path(error_file).parent
    if error_file and error_file != os.devnull and folder.is_dir():
        for message in folder.glob(f"{PREFIX}*"):
            try:
                message.unlink()
            except OSError:
                pass
