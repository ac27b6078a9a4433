"""Walks over the argument and result structures of tensor ops, for the hot
paths of the controller and the workers.

Plain tuples, lists and dicts are walked here; every other type is a leaf,
unless torch's pytree treats it as a container (named tuples, ``OrderedDict``,
``torch.return_types``): those are opened with pytree's own functions for
their type. Both sides of the wire use these functions,
so the controller's leaf order is the worker's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

_NODE, _LEAF = 1, 2
# Per type: walked by pytree (_NODE) or a leaf (_LEAF). ``torch.Size`` is a
# leaf here (its ints never hold tensors).
_KIND: dict[type, int] = {
    t: _LEAF
    for t in (
        int,
        float,
        bool,
        complex,
        str,
        bytes,
        type(None),
        type(Ellipsis),
        slice,
        torch.Size,
        torch.dtype,
        torch.device,
        torch.layout,
        torch.memory_format,
    )
}


def _kind(t: type) -> int:
    k = _KIND.get(t)
    if k is None:
        node = t in pytree.SUPPORTED_NODES or pytree.is_namedtuple_class(t) or pytree.is_structseq_class(t)
        k = _KIND[t] = _NODE if node else _LEAF
    return k


def children(x: Any) -> tuple[list, Any, Callable]:
    """One level of a container pytree knows: ``(children, context,
    unflatten)``, ``unflatten(children, context)`` rebuilding it."""
    h = pytree.SUPPORTED_NODES[pytree._get_node_type(x)]
    kids, ctx = h.flatten_fn(x)
    return list(kids), ctx, h.unflatten_fn


def is_leaf_type(t: type) -> bool:
    return (_KIND.get(t) or _kind(t)) == _LEAF


def tree_map(fn: Callable, x: Any) -> Any:
    """``fn`` applied to every leaf of ``x``, in the same structure."""
    t = type(x)
    if t is tuple:
        return tuple([tree_map(fn, v) for v in x])
    if t is list:
        return [tree_map(fn, v) for v in x]
    if t is dict:
        return {k: tree_map(fn, v) for k, v in x.items()}
    if (_KIND.get(t) or _kind(t)) == _LEAF:
        return fn(x)
    kids, ctx, unflatten = children(x)
    return unflatten([tree_map(fn, v) for v in kids], ctx)


def _flatten(x: Any, out: list) -> Any:
    t = type(x)
    if t is tuple or t is list:
        return (t, [_flatten(v, out) for v in x])
    if t is dict:
        return (dict, list(x), [_flatten(v, out) for v in x.values()])
    if (_KIND.get(t) or _kind(t)) == _LEAF:
        out.append(x)
        return None
    kids, ctx, unflatten = children(x)
    return (unflatten, ctx, [_flatten(v, out) for v in kids])


def tree_flatten(x: Any) -> tuple[list, Any]:
    """``(leaves, spec)``; ``tree_unflatten(leaves, spec)`` rebuilds ``x``."""
    out: list = []
    spec = _flatten(x, out)
    return out, spec


def _unflatten(it: Any, spec: Any) -> Any:
    if spec is None:
        return next(it)
    head = spec[0]
    if head is dict:
        return {k: _unflatten(it, s) for k, s in zip(spec[1], spec[2])}
    if head is tuple:
        return tuple([_unflatten(it, s) for s in spec[1]])
    if head is list:
        return [_unflatten(it, s) for s in spec[1]]
    return head([_unflatten(it, s) for s in spec[2]], spec[1])


def tree_unflatten(leaves: list, spec: Any) -> Any:
    return _unflatten(iter(leaves), spec)
