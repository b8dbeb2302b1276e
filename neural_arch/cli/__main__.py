"""``python -m neural_arch.cli SUBCOMMAND ...``: the same as the ``neural-arch`` command."""

from neural_arch.cli import run

run()
