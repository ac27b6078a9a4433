"""Helpers shared by the bench scripts: percentiles and the printed table."""

from __future__ import annotations


def pct(xs, q):
    """The q-quantile (0..1) of xs, nearest rank."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def print_table(header, rows) -> None:
    """Print rows of strings as a column-aligned table under `header`."""
    widths = [max(len(r[i]) for r in [*rows, header]) for i in range(len(header))]
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths)))
