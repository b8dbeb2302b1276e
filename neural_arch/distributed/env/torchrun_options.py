"""torchrun's ``PET_*`` variables: the launcher options a scheduler sets in the environment.

Use (``launcher/args.py`` does, for its parser's defaults)::

    for pet in pet_options():  # PET_NPROC_PER_NODE=2 in the environment ->
        ...                    # PetOption("PET_NPROC_PER_NODE", "nproc_per_node", "2", flag=False)

torchrun (torch 2.13, ``torch/distributed/argparse_util.py``) reads every option's default
from ``PET_<DEST>`` (the option's long name in capitals, ``-`` as ``_``: ``--nproc-per-node``
-> ``PET_NPROC_PER_NODE``); a value on the command line wins. A flag (``--standalone``, ...)
is on when its variable is a non-zero integer (``PET_STANDALONE=1``), off for ``0``. Kubeflow
Trainer v2's ``torch-distributed`` runtime starts ``torchrun`` with only PET_NNODES,
PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT set.

Only torchrun's own options have a ``PET_`` variable (``--logs-specs`` and ``--numa-binding``
have none in torchrun either); this launcher's options (``--backend``, ``--cpu-bind``, ...)
do not read one. ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE`` (torchrun's prefix of a ``--tee``'d
line) is read here too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from neural_arch.distributed.env.record import Environ

PREFIX = "PET_"

VALUE_OPTIONS = (
    "nnodes",
    "nproc_per_node",
    "rdzv_backend",
    "rdzv_endpoint",
    "rdzv_id",
    "rdzv_conf",
    "max_restarts",
    "monitor_interval",
    "start_method",
    "event_log_handler",
    "role",
    "log_dir",
    "redirects",
    "tee",
    "local_ranks_filter",
    "duplicate_stdout_filters",
    "duplicate_stderr_filters",
    "node_rank",
    "master_addr",
    "master_port",
    "local_addr",
    "signals_to_handle",
    "shutdown_timeout",
)
"""torchrun's options read with its ``env`` action (a value), by their ``dest``."""

FLAG_OPTIONS = ("standalone", "module", "no_python", "run_path", "virtual_local_rank")
"""torchrun's options read with its ``check_env`` action (a flag), by their ``dest``."""

LINE_PREFIX_TEMPLATE = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"


@dataclass(frozen=True)
class PetOption:
    """One torchrun option set through the environment."""

    variable: str
    """``PET_NPROC_PER_NODE``"""
    option: str
    """torchrun's name of it (its argparse ``dest``): ``nproc_per_node``"""
    value: str
    """The variable's text, as set (torchrun converts it with the option's type)."""
    flag: bool
    """Whether the option is a flag (on when ``value`` is a non-zero integer)."""

    def flag_value(self) -> bool:
        """A flag's value as torchrun reads it (``bool(int(value))``); ``ValueError`` naming the variable."""
        try:
            return bool(int(self.value))
        except ValueError:
            raise ValueError(
                f"{self.variable}={self.value!r}: a flag's variable is 1 (on) or 0 (off), as torchrun reads it."
            ) from None


def pet_options(environ: Optional[Environ] = None) -> list[PetOption]:
    """Every torchrun option that ``environ`` (default: this process's) sets through ``PET_<OPTION>``."""
    environ = os.environ if environ is None else environ
    found = []
    for names, flag in ((VALUE_OPTIONS, False), (FLAG_OPTIONS, True)):
        for name in names:
            variable = PREFIX + name.upper()
            if variable in environ:  # torchrun: os.environ.get(name, default), so "" counts as set
                found.append(PetOption(variable, name, environ[variable], flag))
    return found


def line_prefix_template(environ: Optional[Environ] = None) -> Optional[str]:
    """torchrun's ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE`` (``${role_name}``, ``${rank}``,
    ``${local_rank}``), the prefix of a ``--tee``'d line; None when unset."""
    return (os.environ if environ is None else environ).get(LINE_PREFIX_TEMPLATE) or None
