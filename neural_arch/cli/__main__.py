"""``python -m neural_arch.cli SUBCOMMAND ...``: the same as the ``neural-arch`` command."""

import sys

from neural_arch.cli import main

sys.exit(main())
