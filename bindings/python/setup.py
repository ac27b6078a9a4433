"""Build hook: compile libmonarch with cargo and ship it inside the package.

``pip install ./bindings/python`` runs ``cargo build --release -p
monarch-ffi -p monarch-cli`` in the workspace root (two levels up, reusing
its target directory and cache) and copies ``libmonarch.so`` and
``include/monarch.h`` into the installed ``monarch`` package, where
``monarch._lib`` looks first, and the ``monarch`` CLI to ``monarch/bin/``,
where ``monarch.actor.monarch_binary()`` finds it (``monarch worker
--plugin`` procs host native plugin actors).

It then compiles cffi's API-mode module ``monarch._monarch_api`` against
that header and library (a C compiler and Python's headers are needed; the
library is found beside the module through an ``$ORIGIN`` run path). A
call through it costs a few hundred instructions instead of the ~2,000 of
the ABI-mode module, which stays the fallback when the compiler is missing
or the library is loaded from elsewhere (``monarch._lib``).
"""

import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

try:
    from wheel.bdist_wheel import bdist_wheel as _bdist_wheel
except ImportError:  # pragma: no cover
    _bdist_wheel = None

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _cargo() -> str:
    """cargo from $CARGO, PATH, or rustup's default location."""
    found = os.environ.get("CARGO") or shutil.which("cargo")
    if found:
        return found
    home = os.path.join(os.path.expanduser("~"), ".cargo", "bin", "cargo")
    if os.path.exists(home):
        return home
    raise RuntimeError("cargo not found: install Rust (rustup) or set $CARGO")


class BuildWithCargo(build_py):
    def run(self):
        super().run()
        target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
        subprocess.check_call([_cargo(), "build", "--release", "-p", "monarch-ffi", "-p", "monarch-cli"], cwd=ROOT)
        dest = os.path.join(self.build_lib, "monarch")
        os.makedirs(dest, exist_ok=True)
        shutil.copy2(os.path.join(target, "release", "libmonarch.so"), os.path.join(dest, "libmonarch.so"))
        shutil.copy2(os.path.join(ROOT, "include", "monarch.h"), os.path.join(dest, "monarch.h"))
        os.makedirs(os.path.join(dest, "bin"), exist_ok=True)
        shutil.copy2(os.path.join(target, "release", "monarch"), os.path.join(dest, "bin", "monarch"))
        try:
            # The package's own builder of cffi modules (needs cffi, which a
            # build without it skips: the ABI-mode module still works).
            sys.path.insert(0, HERE)
            from monarch._cffi_build import compile_api_module

            compile_api_module(dest)
        except Exception as e:  # noqa: BLE001 (the ABI-mode module still works)
            sys.stderr.write(f"monarch: not building the compiled cffi module ({e}); using ABI mode\n")


cmdclass = {"build_py": BuildWithCargo}

if _bdist_wheel is not None:

    class PlatformWheel(_bdist_wheel):
        """The wheel carries a native library: tag it for this platform."""

        def finalize_options(self):
            super().finalize_options()
            self.root_is_pure = False

        def get_tag(self):
            _, _, plat = super().get_tag()
            return "py3", "none", plat

    cmdclass["bdist_wheel"] = PlatformWheel

setup(cmdclass=cmdclass)
