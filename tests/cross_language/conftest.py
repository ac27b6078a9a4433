import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# tests/support: the session guards shared with bindings/python/tests.
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "support"))

from session_guards import no_leftover_procs, unhandled_failures_do_not_exit_pytest  # noqa: E402, F401
