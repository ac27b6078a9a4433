import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
# The test actor modules here (actors.py, ...), and tests/support: the
# session guards shared with tests/cross_language.
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(HERE))), "tests", "support"))

from session_guards import no_leftover_procs, unhandled_failures_do_not_exit_pytest  # noqa: E402, F401


@pytest.fixture(scope="module")
def procs():
    from monarch.actor import this_host

    pm = this_host().spawn_procs(per_host={"gpus": 4})
    yield pm
    pm.stop().get(timeout=30)


@pytest.fixture(scope="module")
def counters(procs):
    from actors import Counter

    return procs.spawn("counters", Counter, 10)
