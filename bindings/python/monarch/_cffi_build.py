"""Build the cffi modules for ``include/monarch.h``.

``generate``: the text of ``monarch/_monarch_cffi.py``, cffi's out-of-line
ABI-mode module (committed; works without a compiler).

Parsing the header with cffi at import time costs ~50 ms (pycparser), paid
by every worker proc at start-up; the pre-built module loads in well under
a millisecond. The generated file is committed and records a digest of
the header it was built from; ``_lib`` falls back to parsing when that does
not match the header it loads, and a test fails when the committed file is
stale. Regenerate with ``make header`` (``python -m monarch._cffi_build``).

``api_ffi``: the builder of the compiled API-mode module ``_monarch_api``,
which the package build (setup.py at the repository root) compiles and
links against the package's ``libmonarch.so.<major>``.
"""

from __future__ import annotations

import os
import sys
import tempfile

from cffi import FFI

from ._cdef import cdef_from_header, header_digest

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
MODULE = "_monarch_cffi"
API_MODULE = "_monarch_api"


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


def api_ffi(header_path: str) -> FFI:
    """The FFI of the API-mode module ``monarch._monarch_api`` for
    ``header_path``; its C source includes ``monarch.h`` and needs the
    library at link time."""
    with open(header_path, encoding="utf-8") as f:
        text = f.read()
    ffi = FFI()
    # The digest lets monarch._lib check that the module matches the header
    # it loads beside it.
    ffi.cdef(cdef_from_header(text) + "\nconst char *monarch_api_header_digest(void);")
    ffi.set_source(
        f"monarch.{API_MODULE}",
        '#include "monarch.h"\n'
        f'static const char *monarch_api_header_digest(void) {{ return "{header_digest(text)}"; }}\n',
    )
    return ffi


def main() -> int:
    repo = os.path.dirname(os.path.dirname(os.path.dirname(_PKG_DIR)))
    header = sys.argv[1] if len(sys.argv) > 1 else os.path.join(repo, "include", "monarch.h")
    out = os.path.join(_PKG_DIR, MODULE + ".py")
    with open(out, "w", encoding="utf-8") as f:
        f.write(generate(header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
