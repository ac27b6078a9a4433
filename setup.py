"""Build of the Python distribution ``libmonarch`` (import name ``monarch``).

setuptools-rust builds, with cargo in this workspace:

- libmonarch (crate monarch-ffi) into the package as
  ``monarch/libmonarch.so.<major>``, its SONAME;
- the ``monarch`` CLI (crate monarch-cli) as a script, so it lands on
  ``PATH`` (``monarch.actor.monarch_binary()`` finds it there).

Then cffi's API-mode module ``monarch._monarch_api`` is compiled against
``include/monarch.h`` and that library (found beside the module at run
time through an ``$ORIGIN`` run path); without a C compiler the build
fails. The header goes into the package too (``monarch._lib`` reads it).

The version is the workspace's (``[workspace.package]`` in Cargo.toml).
"""

import os
import shutil
import sys
import tomllib

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext
from setuptools_rust import Binding, RustBin, RustExtension, Strip
from setuptools_rust.build import build_rust

ROOT = os.path.dirname(os.path.abspath(__file__))
PYTHON_SRC = os.path.join("bindings", "python")
HEADER = os.path.join("include", "monarch.h")

sys.path.insert(0, os.path.join(ROOT, PYTHON_SRC))
from monarch._cffi_build import API_MODULE, api_ffi  # noqa: E402


def workspace_version() -> str:
    with open(os.path.join(ROOT, "Cargo.toml"), "rb") as f:
        return tomllib.load(f)["workspace"]["package"]["version"]


VERSION = workspace_version()
SONAME = f"libmonarch.so.{VERSION.split('.')[0]}"


class BuildRust(build_rust):
    """Names the library by its SONAME, and builds once although both the
    cffi step (first, to link against it) and setuptools-rust's own hook on
    build_ext (after the C extensions) run it."""

    _built = False

    def run(self):
        if not self._built:
            super().run()
            self._built = True

    def get_dylib_ext_path(self, ext, target_fname):
        return os.path.join(os.path.dirname(super().get_dylib_ext_path(ext, target_fname)), SONAME)


class BuildExt(build_ext):
    """libmonarch first, then the cffi module linked against it."""

    def run(self):
        rust = self.get_finalized_command("build_rust")
        rust.inplace = self.inplace
        rust.run()
        super().run()

    def build_extensions(self):
        # The module's only run path is $ORIGIN: the build interpreter's own
        # (from its LDSHARED) means nothing where the wheel is installed.
        self.compiler.linker_so = [a for a in self.compiler.linker_so if not a.startswith("-Wl,-rpath")]
        super().build_extensions()

    def build_extension(self, ext):
        pkg_dir = os.path.dirname(self.get_ext_fullpath(ext.name))
        os.makedirs(pkg_dir, exist_ok=True)
        shutil.copy2(HEADER, os.path.join(pkg_dir, "monarch.h"))
        os.makedirs(self.build_temp, exist_ok=True)
        source = os.path.join(self.build_temp, API_MODULE + ".c")
        api_ffi(HEADER).emit_c_code(source)
        ext.sources = [source]
        ext.library_dirs = [pkg_dir]
        super().build_extension(ext)


setup(
    version=VERSION,
    package_dir={"": PYTHON_SRC},
    packages=find_packages(where=PYTHON_SRC, include=["monarch", "monarch.*"]),
    rust_extensions=[
        RustExtension(
            "monarch.libmonarch",
            path="ffi/Cargo.toml",
            binding=Binding.NoBinding,
            strip=Strip.Debug,
            cargo_manifest_args=["--locked"],
        ),
        RustBin("monarch", path="cli/Cargo.toml", strip=Strip.Debug, cargo_manifest_args=["--locked"]),
    ],
    ext_modules=[
        Extension(
            f"monarch.{API_MODULE}",
            sources=[],
            include_dirs=["include"],
            py_limited_api=True,
            extra_link_args=[f"-l:{SONAME}", "-Wl,-rpath,$ORIGIN"],
        )
    ],
    cmdclass={"build_rust": BuildRust, "build_ext": BuildExt},
    options={
        # One wheel for every CPython the package supports (cffi's modules
        # use only the stable ABI).
        "bdist_wheel": {"py_limited_api": "cp311"},
        # Beside the C++ build trees, out of the way of the sources.
        "build": {"build_base": os.path.join("build", "python")},
    },
    zip_safe=False,
)
