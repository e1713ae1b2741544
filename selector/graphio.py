"""Reading and writing Steiner instances as JSON.

Format (one object)::

    {"root": "r", "terminals": ["a", "b"], "arcs": [["r", "a", 1000], ["a", "b", 40.5], ...]}

Node ids are JSON strings or integers (kept as given, so ``1`` and ``"1"`` are different nodes).
Optional ``"nodes"`` lists nodes that appear in no arc.  Other keys are ignored.  Anything
malformed raises :class:`GraphFormatError` saying what and where.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import networkx as nx

__all__ = ["GraphFormatError", "SteinerInstance", "load_graph", "dump_graph"]


class GraphFormatError(ValueError):
    """A graph file or dict does not follow the documented format."""


@dataclass(frozen=True, kw_only=True)
class SteinerInstance:
    """A weighted digraph (edge attribute ``weight``) with its root and terminals."""

    graph: nx.DiGraph
    root: Hashable
    terminals: tuple[Hashable, ...]


def _node(value: Any, where: str) -> Hashable:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise GraphFormatError(f"{where}: node ids must be strings or integers, got {value!r}")
    return value


def load_graph(source: Union[str, os.PathLike, Mapping[str, Any]]) -> SteinerInstance:
    """Parse and validate a Steiner instance from a JSON file path or an already-loaded dict.

    Checks: required keys ``root``, ``terminals``, ``arcs``; each arc ``[u, v, cost]`` with a
    finite, non-negative number as cost (not NaN, not a string, not a bool); no self-loops or
    repeated arcs; the root and every terminal are nodes of the graph; terminals are distinct and
    do not include the root.  O(|arcs|).
    """
    where = "graph"
    if isinstance(source, Mapping):
        data = source
    else:
        where = str(source)
        try:
            text = Path(source).read_text(encoding="utf-8")
        except OSError as exc:
            raise GraphFormatError(f"{where}: cannot read: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise GraphFormatError(f"{where}: not valid JSON: not UTF-8 text") from None
        try:
            data = json.loads(text)
        except ValueError as exc:  # JSONDecodeError, or an int of too many digits
            raise GraphFormatError(f"{where}: not valid JSON: {exc}") from None
    if not isinstance(data, Mapping):
        raise GraphFormatError(f"{where}: expected a JSON object, got {type(data).__name__}")
    missing = [k for k in ("root", "terminals", "arcs") if k not in data]
    if missing:
        raise GraphFormatError(f"{where}: missing key{'s' if len(missing) > 1 else ''} "
                               + ", ".join(repr(k) for k in missing))
    root = _node(data["root"], f"{where}: 'root'")
    arcs = data["arcs"]
    if not isinstance(arcs, list):
        raise GraphFormatError(f"{where}: 'arcs' must be a list of [u, v, cost]")
    nodes = data.get("nodes", []) or []
    if not isinstance(nodes, list):
        raise GraphFormatError(f"{where}: 'nodes' must be a list of node ids")
    G = nx.DiGraph()
    for node in nodes:
        G.add_node(_node(node, f"{where}: 'nodes'"))
    for i, arc in enumerate(arcs):
        at = f"{where}: arcs[{i}]"
        if not isinstance(arc, (list, tuple)) or len(arc) != 3:
            raise GraphFormatError(f"{at}: expected [u, v, cost], got {arc!r}")
        u, v, cost = _node(arc[0], at), _node(arc[1], at), arc[2]
        if isinstance(cost, bool) or not isinstance(cost, (int, float)):
            raise GraphFormatError(f"{at}: cost must be a number, got {cost!r}")
        try:
            cost = float(cost)
        except OverflowError:  # an int too large for a float
            cost = math.inf if cost > 0 else -math.inf
        if math.isnan(cost):
            raise GraphFormatError(f"{at}: cost of {u!r} -> {v!r} is NaN")
        if cost < 0:
            raise GraphFormatError(f"{at}: cost of {u!r} -> {v!r} is negative ({cost:g})")
        if math.isinf(cost):
            raise GraphFormatError(f"{at}: cost of {u!r} -> {v!r} is infinite")
        if u == v:
            raise GraphFormatError(f"{at}: self-loop on {u!r}")
        if G.has_edge(u, v):
            raise GraphFormatError(f"{at}: repeated arc {u!r} -> {v!r}")
        G.add_edge(u, v, weight=cost)
    if root not in G:
        raise GraphFormatError(f"{where}: root {root!r} is not a node of the graph")
    terms = data["terminals"]
    if not isinstance(terms, list):
        raise GraphFormatError(f"{where}: 'terminals' must be a list")
    seen: set = set()
    for t in terms:
        t = _node(t, f"{where}: 'terminals'")
        if t == root:
            raise GraphFormatError(f"{where}: the root {root!r} cannot be a terminal")
        if t not in G:
            raise GraphFormatError(f"{where}: terminal {t!r} is not a node of the graph")
        if t in seen:
            raise GraphFormatError(f"{where}: terminal {t!r} listed twice")
        seen.add(t)
    G.graph.update(root=root, terminals=tuple(terms))
    return SteinerInstance(graph=G, root=root, terminals=tuple(terms))


def dump_graph(graph: nx.DiGraph, root: Hashable, terminals, *, weight: str = "weight") -> dict:
    """The JSON-ready dict :func:`load_graph` reads (node ids must be strings or ints)."""
    isolated = [v for v in graph if graph.degree(v) == 0]
    out = {
        "root": root,
        "terminals": list(terminals),
        "arcs": [[u, v, float(d[weight])] for u, v, d in graph.edges(data=True)],
    }
    if isolated:
        out["nodes"] = isolated
    return out
