"""Build the cffi modules for ``include/monarch.h``.

``generate``: the text of ``monarch/_monarch_cffi.py``, cffi's out-of-line
ABI-mode module (committed; works without a compiler).

Parsing the header with cffi at import time costs ~50 ms (pycparser), paid
by every worker proc at start-up; the pre-built module loads in well under
a millisecond. The generated file is committed and records a digest of
the header it was built from; ``_lib`` falls back to parsing when that does
not match the header it loads, and a test fails when the committed file is
stale. Regenerate with ``make header`` (``python -m monarch._cffi_build``).

``compile_api_module``: the compiled API-mode module ``_monarch_api``,
built by ``pip install`` (setup.py) beside the package's library.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

from cffi import FFI

from ._cdef import cdef_from_header, header_digest

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
MODULE = "_monarch_cffi"


def generate(header_path: str) -> str:
    """Return the text of the out-of-line module for ``header_path``."""
    with open(header_path, encoding="utf-8") as f:
        text = f.read()
    ffi = FFI()
    ffi.cdef(cdef_from_header(text))
    ffi.set_source(f"monarch.{MODULE}", None)
    with tempfile.TemporaryDirectory() as d:
        path = ffi.emit_python_code(os.path.join(d, MODULE + ".py"))
        with open(os.path.join(d, MODULE + ".py"), encoding="utf-8") as f:
            body = f.read()
    del path
    return body + f"\nHEADER_DIGEST = {header_digest(text)!r}\n"


def compile_api_module(pkg_dir: str) -> None:
    """Build ``_monarch_api`` (cffi API mode) into ``pkg_dir``, which holds
    ``monarch.h`` and ``libmonarch.so`` (found at run time beside the
    module, through an ``$ORIGIN`` run path)."""
    pkg_dir = os.path.abspath(pkg_dir)
    with open(os.path.join(pkg_dir, "monarch.h"), encoding="utf-8") as f:
        text = f.read()
    ffi = FFI()
    # The digest lets monarch._lib check that the module matches the header
    # it loads beside it.
    ffi.cdef(cdef_from_header(text) + "\nconst char *monarch_api_header_digest(void);")
    ffi.set_source(
        "monarch._monarch_api",
        '#include "monarch.h"\n'
        f'static const char *monarch_api_header_digest(void) {{ return "{header_digest(text)}"; }}\n',
        include_dirs=[pkg_dir],
        library_dirs=[pkg_dir],
        libraries=["monarch"],
        extra_link_args=["-Wl,-rpath,$ORIGIN"],
    )
    with tempfile.TemporaryDirectory() as tmp:
        built = ffi.compile(tmpdir=tmp)
        shutil.copy2(built, os.path.join(pkg_dir, os.path.basename(built)))


def main() -> int:
    repo = os.path.dirname(os.path.dirname(os.path.dirname(_PKG_DIR)))
    header = sys.argv[1] if len(sys.argv) > 1 else os.path.join(repo, "include", "monarch.h")
    out = os.path.join(_PKG_DIR, MODULE + ".py")
    with open(out, "w", encoding="utf-8") as f:
        f.write(generate(header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
