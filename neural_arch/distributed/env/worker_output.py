"""What a worker of our launcher reads about its output: the launcher's stream plan and the
folder torch elastic gave this rank for its files.

Use (the worker does, before it starts its log pump)::

    spec_text, folder = output_settings()   # -> ('{"template": ...}', '/logs/run_x/attempt_0/1') or (None, None)

``NEURAL_ARCH_OUTPUT`` is set by the launcher (``launcher/output.py`` writes and parses it);
the folder is that of ``TORCHELASTIC_ERROR_FILE`` (torch's ``<log_dir>/<run_id>_<random>/
attempt_<k>/<local_rank>/error.json``, empty when torch keeps no files), where a ``--tee``'d or
``--redirects``'d stream goes as ``stdout.log`` / ``stderr.log``, as under torchrun.
"""

from __future__ import annotations

import os
from typing import Optional

from neural_arch.distributed.env.record import Environ

OUTPUT_VARIABLE = "NEURAL_ARCH_OUTPUT"
ERROR_FILE_VARIABLE = "TORCHELASTIC_ERROR_FILE"


def output_settings(environ: Optional[Environ] = None) -> tuple[Optional[str], Optional[str]]:
    """(the launcher's output plan, or None; this rank's log folder, or None)."""
    environ = os.environ if environ is None else environ
    error_file = environ.get(ERROR_FILE_VARIABLE) or ""
    folder = os.path.dirname(error_file) if error_file and error_file != os.devnull else None
    return environ.get(OUTPUT_VARIABLE) or None, folder or None
