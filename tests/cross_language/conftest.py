import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
# tests/support: the session guards shared with bindings/python/tests.
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "support"))

from session_guards import no_leftover_procs, unhandled_failures_do_not_exit_pytest  # noqa: E402, F401

REPO = os.path.dirname(os.path.dirname(HERE))


@pytest.fixture(scope="session")
def cplugin(tmp_path_factory):
    """The C plugin of cplugin.c (actor type "CCounter"), compiled with cc."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler (cc) to build the test plugin"
    out = tmp_path_factory.mktemp("plugin") / "libcplugin.so"
    include = os.path.join(REPO, "bindings", "cpp", "include")
    subprocess.check_call(
        [cc, "-std=c11", "-Wall", "-Werror", "-O1", "-shared", "-fPIC", "-fvisibility=hidden", "-pthread",
         "-I", include, "-o", str(out), os.path.join(HERE, "cplugin.c")]
    )
    return str(out)


@pytest.fixture(scope="session")
def cppplugin(tmp_path_factory):
    """examples/cpp's C++ plugin (actor type "Trainer", monarch/plugin.hpp), compiled with c++."""
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    assert cxx, "no C++ compiler (c++) to build the example plugin"
    out = tmp_path_factory.mktemp("cppplugin") / "libmyactors.so"
    cpp = os.path.join(REPO, "bindings", "cpp")
    subprocess.check_call(
        [cxx, "-std=c++17", "-O1", "-shared", "-fPIC", "-fvisibility=hidden",
         "-I", os.path.join(cpp, "include"), "-I", os.path.join(REPO, "include"),
         "-I", os.path.join(cpp, "third_party", "flatbuffers", "include"),
         "-o", str(out), os.path.join(REPO, "examples", "cpp", "myactors.cpp")]
    )
    return str(out)
