"""The Julia binding's generated ccall layer (bindings/julia/src/generated/capi.jl)
matches include/monarch.h and wraps every function of it (make header)."""

import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GEN = os.path.join(REPO, "scripts", "gen-julia-ccall.py")
CAPI = os.path.join(REPO, "bindings", "julia", "src", "generated", "capi.jl")


def test_julia_capi_is_fresh():
    r = subprocess.run([sys.executable, GEN, "--check"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_every_c_function_is_wrapped():
    with open(os.path.join(REPO, "include", "monarch.h"), encoding="utf-8") as f:
        header = f.read()
    declared = set(re.findall(r"\b(monarch_\w+)\(", re.sub(r"//[^\n]*", "", header)))
    with open(CAPI, encoding="utf-8") as f:
        wrapped = set(re.findall(r"^(monarch_\w+)\(.*\) = ccall\(", f.read(), flags=re.M))
    assert declared and declared == wrapped
