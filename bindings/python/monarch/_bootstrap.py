"""Entry point of a worker proc: ``python -m monarch._bootstrap`` (the argv
C, C++ and Python controllers give the procs that host Python actors). The
loop itself is ``monarch._src.actor.bootstrap.main``.
"""

from __future__ import annotations

import os
import sys

from ._src.actor.bootstrap import main

if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: actors may hold threads or views over freed
    # memory; nothing useful happens after the runtime is gone.
    os._exit(code)
