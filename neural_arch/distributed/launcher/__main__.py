"""``python -m neural_arch.distributed.launcher [options] SCRIPT [args]``: see ``--help``.

Why a separate ``__main__``: ``-m`` on the package runs this file after importing the
package once, so nothing is imported twice (runpy warns when ``-m`` names a module the
package ``__init__`` already imported). ``entry.main`` answers ``--help`` without torch.
"""

import sys

from neural_arch.distributed.launcher.args import seed_order
from neural_arch.distributed.launcher.entry import main

# The seeds' order (script, then launcher options) is kept for this entry point: args.seed_order.
sys.exit(main(seed_order(sys.argv[1:])))
