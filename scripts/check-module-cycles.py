#!/usr/bin/env python3
"""Find import circles among the modules of a Python package and of Rust crates.

    python3 scripts/check-module-cycles.py --python bindings/python/monarch --rust core/src --rust ffi/src

Python (``--python DIR``, DIR a package directory): every ``.py`` file is a
module (``__init__.py`` is the package itself). Edges come from every
``import``/``from ... import`` statement, wherever it is (module level,
inside functions, under ``if TYPE_CHECKING``), resolved within the package,
relative or absolute; ``from pkg import name`` is an edge to the submodule
``pkg.name`` when there is one, else to ``pkg``. Imports of other packages
are ignored.

Rust (``--rust DIR``, DIR a crate's ``src``): every ``.rs`` file is a module
named by its path (``a.rs`` and ``a/mod.rs`` are ``a``, ``a/b.rs`` is
``a::b``; ``lib.rs``/``main.rs`` are the crate root; ``bin/`` holds other
crates and is skipped). Edges come from ``use`` trees and from ``crate::``,
``self::`` and ``super::`` paths in the code (comments and literals
removed; inline ``mod x { ... }`` blocks are followed), and in each
module from paths through its child modules (``hosts::f`` in ``lib.rs``).
A path through a name the crate root brings in (``crate::Runtime`` with
``pub use runtime::Runtime`` in ``lib.rs``) counts as a use of the module
it comes from; a name the root defines itself, as a use of the root. Each
module counts as its top-level module (``a::b`` is ``a``): edges between a
module and its own submodules vanish, and the circles reported are between
the top-level modules of the crate and its root (``crate (lib.rs)``, whose
``use`` and ``pub use`` items count as its edges).

Prints each circle, with the line of every edge in it (marked when the
edge is only seen in ``#[cfg(test)]`` code), and exits with 1 if there is
any; else prints a summary and exits with 0. Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import sys
from collections.abc import Iterable

# An edge: (from module, to module) -> first place it was seen ("file:line",
# ending in TEST_ONLY when it is only seen in #[cfg(test)] code).
Edges = dict[tuple[str, str], str]
TEST_ONLY = ", only in #[cfg(test)] code"


# ---------------------------------------------------------------------------
# Python


def python_modules(pkg_dir: str) -> dict[str, str]:
    """Dotted module name -> file, for every .py file of the package."""
    pkg_dir = os.path.normpath(pkg_dir)
    root_name = os.path.basename(pkg_dir)
    base = os.path.dirname(pkg_dir)
    modules = {}
    for dirpath, dirnames, filenames in os.walk(pkg_dir):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        for f in sorted(filenames):
            if not f.endswith(".py"):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, base)[: -len(".py")].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            name = ".".join(rel)
            if name.split(".")[0] == root_name:
                modules[name] = path
    return modules


def _resolve_python(name: str, modules: dict[str, str]) -> str | None:
    """The module ``name`` denotes: itself, or its longest module prefix
    (``pkg.mod.attr`` names ``pkg.mod``)."""
    parts = name.split(".")
    while parts:
        cand = ".".join(parts)
        if cand in modules:
            return cand
        parts.pop()
    return None


def python_edges(pkg_dir: str) -> tuple[dict[str, str], Edges]:
    modules = python_modules(pkg_dir)
    edges: Edges = {}
    for mod, path in modules.items():
        is_pkg = os.path.basename(path) == "__init__.py"
        package = mod if is_pkg else mod.rpartition(".")[0]
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".") if package else []
                    if node.level - 1 > len(base):
                        continue
                    base = base[: len(base) - (node.level - 1)]
                    if node.module:
                        base += node.module.split(".")
                    source = ".".join(base)
                else:
                    source = node.module or ""
                for alias in node.names:
                    sub = f"{source}.{alias.name}" if source else alias.name
                    targets.append(sub if sub in modules else source)
            for t in targets:
                to = _resolve_python(t, modules)
                if to is not None and to != mod:
                    edges.setdefault((mod, to), f"{path}:{node.lineno}")
    return modules, edges


# ---------------------------------------------------------------------------
# Rust


def _strip_rust(text: str) -> str:
    """``text`` with comments, string and char literals blanked (newlines
    kept, so line numbers stay)."""
    out = []
    i, n = 0, len(text)
    raw_str = re.compile(r'b?r(#*)"')
    char_lit = re.compile(r"b?'(\\u\{[0-9a-fA-F]+\}|\\x[0-9a-fA-F]{2}|\\.|[^\\'\n])'")
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
            continue
        prev_ident = i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")
        m = None if prev_ident else raw_str.match(text, i)
        if m:
            end = text.find('"' + m.group(1), m.end())
            end = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
            continue
        if c == '"' or (c == "b" and text.startswith('b"', i) and not prev_ident):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
            continue
        m = None if prev_ident else char_lit.match(text, i)
        if m:
            out.append("' '")
            i = m.end()
            continue
        out.append(c)
        i += 1
    return "".join(out)


def rust_modules(src_dir: str) -> dict[tuple[str, ...], str]:
    """Module path -> file, for every .rs file of the crate (``()`` is the root)."""
    src_dir = os.path.normpath(src_dir)
    modules = {}
    for dirpath, dirnames, filenames in os.walk(src_dir):
        rel_dir = os.path.relpath(dirpath, src_dir)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d != "bin"]
        dirnames.sort()
        for f in sorted(filenames):
            if not f.endswith(".rs"):
                continue
            parts = [] if rel_dir == "." else rel_dir.split(os.sep)
            stem = f[: -len(".rs")]
            if stem == "mod" or (not parts and stem in ("lib", "main")):
                path = tuple(parts)
            else:
                path = (*parts, stem)
            modules.setdefault(path, os.path.join(dirpath, f))
    return modules


def _expand_use_tree(tree: str) -> list[str]:
    """``a::{b, c::{d, self}}`` -> ``["a::b", "a::c::d", "a::c"]`` (``as``
    renames already removed)."""
    tree = re.sub(r"\s+", "", tree)
    out: list[str] = []

    def split_top(s: str) -> list[str]:
        items, depth, cur = [], 0, []
        for ch in s:
            if ch == "," and depth == 0:
                items.append("".join(cur))
                cur = []
                continue
            depth += ch == "{"
            depth -= ch == "}"
            cur.append(ch)
        items.append("".join(cur))
        return [x for x in items if x]

    def walk(prefix: str, s: str) -> None:
        brace = s.find("{")
        if brace < 0:
            full = f"{prefix}{s}"
            if full.endswith("::self"):
                full = full[: -len("::self")]
            out.append(full)
            return
        head = s[:brace]
        body = s[brace + 1 : s.rfind("}")]
        for item in split_top(body):
            walk(prefix + head, item)

    for item in split_top(tree):
        walk("", item)
    return out


_USE = re.compile(r"(\bpub(?:\s*\([^)]*\))?\s+)?\buse\s+([^;]*);")
_PATH = re.compile(r"(?<![\w:])(\$?crate|self|super)((?:\s*::\s*\w+)+)")
_CHILD_PATH = re.compile(r"(?<![\w:$])([A-Za-z_]\w*)\s*::\s*\w")
_INLINE_MOD = re.compile(r"\bmod\s+(\w+)\s*\{")
_ITEM = re.compile(r"\b(?:fn|struct|enum|type|const|static|trait|union)\s+(\w+)|\bmacro_rules!\s*(\w+)")
_ALIAS = re.compile(r"\s+as\s+\w+")


def _root_reexports(text: str) -> tuple[dict[str, list[str]], list[list[str]]]:
    """What the crate root brings in with ``use``: name -> path, and the
    paths of its glob imports."""
    names: dict[str, list[str]] = {}
    globs: list[list[str]] = []
    for m in _USE.finditer(text):
        body = m.group(2)
        aliases = {am.group(1).split("::")[-1]: am.group(2) for am in re.finditer(r"([\w:]+)\s+as\s+(\w+)", body)}
        for p in _expand_use_tree(_ALIAS.sub("", body)):
            segs = [x for x in p.split("::") if x]
            if segs and segs[0] in ("crate", "self"):
                segs = segs[1:]
            if not segs:
                continue
            if segs[-1] == "*":
                globs.append(segs[:-1])
            else:
                names[aliases.get(segs[-1], segs[-1])] = segs
    return names, globs


def rust_edges(src_dir: str) -> tuple[dict[str, str], Edges]:
    modules = rust_modules(src_dir)
    texts = {}
    for mod_path, path in modules.items():
        with open(path, encoding="utf-8") as f:
            texts[mod_path] = _strip_rust(f.read())
    # Items each file defines (for names reached through the crate root).
    defines: dict[tuple[str, ...], set[str]] = {m: {a or b for a, b in _ITEM.findall(t)} for m, t in texts.items()}
    macro_home = {}
    for m, t in texts.items():
        for mm in re.finditer(r"#\[macro_export\][^\n]*\n\s*macro_rules!\s*(\w+)", t):
            macro_home[mm.group(1)] = m
    reexports, globs = _root_reexports(texts.get((), ""))

    def resolve(segs: list[str], depth: int = 0) -> tuple[str, ...]:
        """The module a crate-absolute path ``segs`` lives in (``()``: the root)."""
        best: tuple[str, ...] = ()
        for k in range(1, len(segs) + 1):
            if tuple(segs[:k]) in modules:
                best = tuple(segs[:k])
        if best or not segs or depth > 4:
            return best
        name = segs[0]
        if name in defines.get((), ()):
            return ()
        if name in reexports:
            return resolve(reexports[name] + segs[1:], depth + 1)
        for g in globs:
            home = resolve(g, depth + 1)
            if home and name in defines.get(home, ()):
                return home
        return macro_home.get(name, ())

    edges: Edges = {}
    for mod_path, path in modules.items():
        text = texts[mod_path]
        # Inline modules: (start offset, end offset, name) of each block.
        inline = []
        for m in _INLINE_MOD.finditer(text):
            depth, j = 1, m.end()
            while j < len(text) and depth:
                depth += text[j] == "{"
                depth -= text[j] == "}"
                j += 1
            is_test = re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?$", text[: m.start()]) is not None
            inline.append((m.start(), j, m.group(1), is_test))

        def scope_at(offset: int, mod_path=mod_path, inline=inline) -> list[str]:
            return list(mod_path) + [name for a, b, name, _ in inline if a <= offset < b]

        def in_test(offset: int, inline=inline) -> bool:
            return any(t for a, b, _, t in inline if a <= offset < b)

        found: list[tuple[int, list[str]]] = []
        for m in _USE.finditer(text):
            for p in _expand_use_tree(_ALIAS.sub("", m.group(2))):
                found.append((m.start(), [x for x in p.split("::") if x]))
        no_use = _USE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
        for m in _PATH.finditer(no_use):
            segs = [m.group(1).lstrip("$")] + [x.strip() for x in m.group(2).split("::") if x.strip()]
            found.append((m.start(), segs))
        for m in _CHILD_PATH.finditer(no_use):
            if m.group(1) not in ("crate", "self", "super", "Self"):
                found.append((m.start(), [m.group(1)]))
        for off, segs in found:
            if not segs:
                continue
            scope = scope_at(off)
            if segs[0] == "crate":
                absolute = segs[1:]
            elif segs[0] in ("self", "super"):
                base, rest = scope, segs
                if rest[0] == "self":
                    rest = rest[1:]
                while rest and rest[0] == "super":
                    base, rest = base[:-1], rest[1:]
                absolute = base + rest
            elif tuple(scope + segs[:1]) in modules:
                absolute = scope + segs
            else:
                continue  # another crate, std, or a local name
            to = resolve([x for x in absolute if x != "*"])
            a, b = mod_path[:1], to[:1]
            if a == b:
                continue
            line = text.count("\n", 0, off) + 1
            key = (_rust_name(a, modules), _rust_name(b, modules))
            if in_test(off):
                edges.setdefault(key, f"{path}:{line}{TEST_ONLY}")
            elif key not in edges or edges[key].endswith(TEST_ONLY):
                edges[key] = f"{path}:{line}"
    names = {_rust_name(p[:1], modules): f for p, f in modules.items() if len(p) <= 1}
    return names, edges


def _rust_name(top: tuple[str, ...], modules: dict[tuple[str, ...], str]) -> str:
    """A top-level module's name; the root is ``crate (lib.rs)``."""
    if top:
        return top[0]
    return f"crate ({os.path.basename(modules.get((), 'lib.rs'))})"


# ---------------------------------------------------------------------------
# Circles


def strongly_connected(nodes: Iterable[str], edges: Edges) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one node."""
    succ: dict[str, list[str]] = {}
    for a, b in edges:
        succ.setdefault(a, []).append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(succ.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(succ.get(w, ())))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def a_cycle(component: list[str], edges: Edges) -> list[str]:
    """A shortest circle through a module of ``component`` (a path that
    starts and ends there), by breadth-first search; one whose edges are
    not all test-only when there is one."""
    live = {k: v for k, v in edges.items() if not v.endswith(TEST_ONLY)}
    for graph in (live, edges):
        for start in component:
            cyc = _cycle_from(start, component, graph)
            if cyc:
                return cyc
    return component


def _cycle_from(start: str, component: list[str], edges: Edges) -> list[str] | None:
    members = set(component)
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for a, b in sorted(edges):
                if a != v or b not in members:
                    continue
                if b == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [*reversed(path), start]
                if b not in prev:
                    prev[b] = v
                    nxt.append(b)
        frontier = nxt
    return None


def report(kind: str, where: str, nodes: Iterable[str], edges: Edges) -> int:
    """Print the circles of one graph; their number."""
    nodes = list(nodes)
    comps = strongly_connected(nodes, edges)
    if not comps:
        print(f"{kind} {where}: no import circles among {len(nodes)} modules ({len(edges)} edges)")
        return 0
    for comp in comps:
        print(f"{kind} {where}: import circle among {len(comp)} modules: {', '.join(comp)}")
        cyc = a_cycle(comp, edges)
        print("  " + " -> ".join(cyc))
        for a, b in zip(cyc, cyc[1:]):
            print(f"    {a} -> {b}  ({edges[(a, b)]})")
    return len(comps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Find import circles among the modules of a Python package and of Rust crates "
        "(exit status 1 if there is any).",
    )
    parser.add_argument(
        "--python", action="append", default=[], metavar="PKG_DIR", help="a Python package directory (repeatable)"
    )
    parser.add_argument(
        "--rust", action="append", default=[], metavar="SRC_DIR", help="a Rust crate's src directory (repeatable)"
    )
    args = parser.parse_args(argv)
    if not args.python and not args.rust:
        parser.error("give at least one --python or --rust directory")
    found = 0
    for d in args.python:
        if not os.path.isdir(d):
            parser.error(f"{d} is not a directory")
        modules, edges = python_edges(d)
        found += report("python", d, modules, edges)
    for d in args.rust:
        if not os.path.isdir(d):
            parser.error(f"{d} is not a directory")
        modules, edges = rust_edges(d)
        found += report("rust", d, modules, edges)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
