"""monarch.__version__ is the workspace version (Cargo.toml), which the
library's header carries too."""

import os
import re

import monarch

_ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..")


def _workspace_version() -> str:
    with open(os.path.join(_ROOT, "Cargo.toml"), encoding="utf-8") as f:
        cargo = f.read()
    return re.search(r'\[workspace\.package\][^\[]*?\nversion = "([^"]+)"', cargo).group(1)


def test_package_version_is_the_workspace_version():
    assert monarch.__version__ == _workspace_version(), "update __version__ in monarch/__init__.py"


def test_header_version_is_the_package_version():
    with open(os.path.join(_ROOT, "include", "monarch.h"), encoding="utf-8") as f:
        header = f.read()
    parts = [re.search(rf"#define MONARCH_VERSION_{p} (\d+)", header).group(1) for p in ("MAJOR", "MINOR", "PATCH")]
    assert ".".join(parts) == monarch.__version__
