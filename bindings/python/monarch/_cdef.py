"""Turn ``monarch.h`` into text cffi's ``cdef`` accepts: keep the
declarations and integer ``#define``s, drop other preprocessor lines and
the C++ ``extern "C"`` guards."""

from __future__ import annotations

import re
import zlib

_DEFINE_INT = re.compile(r"^\s*#\s*define\s+[A-Za-z_][A-Za-z0-9_]*\s+-?(0x[0-9a-fA-F]+|\d+)\s*$")


def cdef_from_header(text: str) -> str:
    out = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("#"):
            if _DEFINE_INT.match(s):
                out.append(s)
            continue
        if s.startswith('extern "C"') or (s.startswith("}") and 'extern "C"' in s):
            continue
        out.append(line)
    return "\n".join(out)


def header_digest(text: str) -> str:
    """A cheap fingerprint of the header text (not a security check: it
    only tells whether the pre-built cffi module matches the header)."""
    data = text.encode()
    return f"{len(data)}-{zlib.crc32(data):08x}"
