"""Directed Steiner tree solvers for OC graphs with bridge operators (paper, Section 6.2).

With bridges, only the requested operators (terminals) must be in the tree; bridge operators are
Steiner nodes that pay off only when enough operators reuse them.  The problem is NP-hard, so:

* :func:`steiner_exact` -- multi-commodity flow MIP solved by SCIP (OR-Tools), warm-started from
  the heuristic's tree, time-limited; reports whether optimality was proven and the best bound.
* :func:`steiner_approx` -- shortest-path heuristic (terminals attached one at a time by their
  cheapest path from the tree built so far), then local search: Edmonds re-solve on the selected
  node set, Steiner-leaf pruning, Steiner-node insertion and deletion; then a few restarts from
  randomly perturbed weights, keeping the best tree.  Every step only lowers the cost, so the
  result is never worse than the first shortest-path tree, whose cost is at most
  Σ_t dist(root, t) ≤ |T| · OPT (each terminal's attachment costs at most its distance from the
  root, and each such distance is at most OPT) -- the same O(|T|) ratio as Watel & Weisser's FLAC
  used by the paper.  It also starts from the min-cost arborescence on root + terminals when that
  exists, so on an OC graph adding bridges never makes the approximate plan worse than the optimal
  plan without bridges.
* :func:`dual_ascent_bound` -- Wong's dual ascent: a lower bound from the directed-cut LP, used
  to certify heuristic trees (and stop restarts early) where the MIP is too large; on the 167-
  operator experiment it bounds the heuristic's plan within about 5%.
* :func:`solve` -- validation, pruning, decomposition, and the per-component choice of method.

Pruning (all exact, i.e. some optimal tree survives):

1. edges into the root and self-loops go;
2. an edge u → v with weight ≥ weight(root → v) goes: in any tree, re-hanging v from the root
   instead costs no more and keeps the tree valid;
3. nodes the root cannot reach, and non-terminals that cannot reach a terminal, go;
4. (components of at most 2000 nodes, before the heuristic and the MIP) an edge u → v goes when a
   path u → x → v is strictly cheaper -- see :func:`_triangle_mask`; on OC graphs with the
   analytic costs this removes about 70% of the edges and speeds the MIP up >10x.

Decomposition: the weakly connected components of the graph without its root are independent
sub-problems (on an OC graph, one per reuse class); each is solved separately and the trees joined.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Hashable, Iterable
from typing import Literal, Optional

import networkx as nx
import numpy as np

from ._indexed import IndexedGraph
from .arborescence import Unreachable, edmonds
from .solution import TreeSolution

__all__ = ["solve", "steiner_exact", "steiner_approx", "dual_ascent_bound", "SolverName",
           "AUTO_EXACT_MAX_FLOW_VARS"]

SolverName = Literal["auto", "exact", "approx", "arborescence"]

#: ``solver="auto"`` runs the MIP on a component only when the flow formulation has at most this
#: many commodity-edge variables (|terminals| × |edges| after pruning); larger ones keep the
#: heuristic's tree (still reporting a lower bound).
AUTO_EXACT_MAX_FLOW_VARS = 60_000

_EPS = 1e-9

#: Perturbed restarts of the heuristic (see ``_Heuristic.run``); on the random 30-60-node
#: instances of experiments/selector_gap.py they cut the mean gap to the optimum about 5x.
RESTARTS = 8


# ----------------------------------------------------------------------------------------------
# tree helpers on an IndexedGraph: a tree is ``pe`` (parent edge index per node, -1 if none)
# ----------------------------------------------------------------------------------------------

def _tree_cost(g: IndexedGraph, pe: np.ndarray) -> float:
    return float(g.w[pe[pe >= 0]].sum())


def _prune_leaves(g: IndexedGraph, pe: np.ndarray) -> np.ndarray:
    """Drop non-terminal leaves repeatedly (never raises the cost; weights are non-negative)."""
    pe = pe.copy()
    is_term = np.zeros(g.n, dtype=bool)
    is_term[g.terminals] = True
    is_term[g.root] = True
    while True:
        in_tree = pe >= 0
        children = np.bincount(g.src[pe[in_tree]], minlength=g.n)
        drop = in_tree & ~is_term & (children == 0)
        if not drop.any():
            return pe
        pe[drop] = -1


def _arborescence_on(g: IndexedGraph, nodes: np.ndarray) -> Optional[np.ndarray]:
    """Optimal tree spanning exactly the node mask ``nodes`` (root included), None if impossible."""
    nodes = nodes.copy()
    nodes[g.root] = True
    sub, old_nodes, old_edges = g.subgraph(nodes)
    try:
        chosen = edmonds(sub.n, sub.root, sub.src, sub.dst, sub.w)
    except Unreachable:
        return None
    pe = np.full(g.n, -1, dtype=np.int64)
    e = old_edges[chosen]
    pe[g.dst[e]] = e
    return pe


def _is_tree(g: IndexedGraph, pe: np.ndarray) -> bool:
    """Every terminal reaches the root through parent edges without cycles."""
    parent = np.full(g.n, -1, dtype=np.int64)
    m = pe >= 0
    parent[m] = g.src[pe[m]]
    for t in g.terminals.tolist():
        v, steps = t, 0
        while v != g.root:
            v = int(parent[v])
            steps += 1
            if v < 0 or steps > g.n:
                return False
    return True


def _dual_ascent(g: IndexedGraph, deadline: float = math.inf) -> float:
    """Lower bound on the optimal tree cost by Wong's dual ascent on the directed-cut LP.

    For a terminal t, C is the set of nodes that reach t through arcs of zero reduced cost; while
    the root is not in C, every tree needs an arc entering C, so the smallest reduced cost on those
    arcs is raised as the dual of that cut and subtracted from them.  The raised total is a
    feasible LP dual at every step, so stopping early (``deadline``) still gives a valid bound.
    Terminals are served round-robin; O(E) numpy work per raise, at most E raises per terminal.
    """
    if len(g.terminals) == 0:
        return 0.0
    cbar = g.w.astype(np.float64).copy()
    src, dst = g.src, g.dst
    tol = 1e-12 * max(1.0, float(cbar.max(initial=0.0)))
    zero = cbar <= tol
    comps = {}
    for t in g.terminals.tolist():
        mask = np.zeros(g.n, dtype=bool)
        mask[t] = True
        comps[t] = mask
    active = list(comps)
    bound = 0.0
    while active and time.perf_counter() < deadline:
        t = active.pop(0)
        C = comps[t]
        while True:  # grow C backwards along zero-reduced-cost arcs (it only ever grows)
            hit = zero & C[dst] & ~C[src]
            if not hit.any():
                break
            C[src[hit]] = True
        if C[g.root]:
            continue
        cut = C[dst] & ~C[src]
        if not cut.any():  # unreachable terminal; solve() rejects these earlier
            continue
        delta = float(cbar[cut].min())
        cbar[cut] -= delta
        bound += delta
        zero |= cut & (cbar <= tol)
        active.append(t)
    return bound


# ----------------------------------------------------------------------------------------------
# heuristic
# ----------------------------------------------------------------------------------------------

class _Heuristic:
    """Shortest-path heuristic + local search on one component (see module docstring)."""

    def __init__(self, g: IndexedGraph, deadline: float):
        self.g = g
        self.deadline = deadline
        self.out = g.out_adj()
        self.inn = g.in_adj()
        self.root_dist: Optional[np.ndarray] = None
        self._lb: Optional[float] = None

    def _timeout(self) -> bool:
        return time.perf_counter() > self.deadline

    def shortest_path_tree(self) -> np.ndarray:
        g, out = self.g, self.out
        inf = math.inf
        dist = [inf] * g.n
        pred = [-1] * g.n
        in_tree = [False] * g.n
        src = g.src.tolist()

        def relax(sources: list[int]) -> None:
            heap = []
            for s in sources:
                dist[s] = 0.0
                pred[s] = -1
                heap.append((0.0, s))
            heapq.heapify(heap)
            while heap:
                d, u = heapq.heappop(heap)
                if d > dist[u]:
                    continue
                for v, w, e in out[u]:
                    nd = d + w
                    if nd < dist[v]:
                        dist[v] = nd
                        pred[v] = e
                        heapq.heappush(heap, (nd, v))

        in_tree[g.root] = True
        relax([g.root])
        self.root_dist = np.array(dist)
        pe = np.full(g.n, -1, dtype=np.int64)
        remaining = set(g.terminals.tolist())
        while remaining:
            t = min(remaining, key=lambda x: (dist[x], x))
            if dist[t] == inf:  # validated by solve(); defensive
                raise Unreachable("terminal not reachable", [t])
            path = []
            v = t
            while not in_tree[v]:
                e = pred[v]
                pe[v] = e
                in_tree[v] = True
                path.append(v)
                v = src[e]
            remaining.difference_update(path)
            relax(path)
        return pe

    def lower_bound(self, deadline: Optional[float] = None) -> float:
        """max(Σ_t cheapest in-edge of t, max_t dist(root, t), dual ascent): all hold for every
        tree.  The dual ascent (cut short at ``deadline``, still valid) is computed once."""
        g = self.g
        if self._lb is not None:
            return self._lb
        if len(g.terminals) == 0:
            return 0.0
        if self.root_dist is None:
            self.shortest_path_tree()
        min_in = np.full(g.n, math.inf)
        np.minimum.at(min_in, g.dst, g.w)
        lb = float(min_in[g.terminals].sum())
        lb = max(lb, float(self.root_dist[g.terminals].max()))
        lb = max(lb, _dual_ascent(g, self.deadline if deadline is None else deadline))
        self._lb = lb
        return lb

    def insertion_pass(self, pe: np.ndarray) -> bool:
        """Add Steiner nodes that pay for themselves by adopting tree nodes; True if any added."""
        g = self.g
        in_tree = pe >= 0
        in_tree[g.root] = True
        cost_in = np.zeros(g.n)
        cost_in[pe >= 0] = g.w[pe[pe >= 0]]
        parent = np.full(g.n, -1, dtype=np.int64)
        parent[pe >= 0] = g.src[pe[pe >= 0]]
        candidates = []
        for v in np.nonzero(~in_tree)[0].tolist():
            gain = sum(max(0.0, cost_in[u] - w) for u, w, _ in self.out[v] if in_tree[u] and u != g.root)
            if gain <= _EPS:
                continue
            best_in = min((w for u, w, _ in self.inn[v] if in_tree[u]), default=math.inf)
            if gain - best_in > _EPS:
                candidates.append((gain - best_in, v))
        candidates.sort(reverse=True)
        changed = False
        for _, v in candidates:
            if self._timeout():
                break
            if in_tree[v]:
                continue
            benefit = [(u, cost_in[u] - w, e) for u, w, e in self.out[v]
                       if in_tree[u] and u != g.root and cost_in[u] - w > _EPS]
            total = sum(d for _, d, _ in benefit)
            best = (_EPS, -1, None)
            for p, wp, ep in sorted((x for x in self.inn[v] if in_tree[x[0]]), key=lambda x: x[1]):
                if total - wp <= best[0]:
                    break
                anc = set()
                a = p
                while a >= 0:
                    anc.add(a)
                    a = int(parent[a])
                gain = sum(d for u, d, _ in benefit if u not in anc) - wp
                if gain > best[0]:
                    best = (gain, ep, anc)
            if best[1] < 0:
                continue
            _, ep, anc = best
            in_tree[v] = True
            pe[v] = ep
            cost_in[v] = g.w[ep]
            parent[v] = g.src[ep]
            for u, _, e in benefit:
                if u not in anc:
                    pe[u] = e
                    cost_in[u] = g.w[e]
                    parent[u] = v
            changed = True
        return changed

    def deletion_pass(self, pe: np.ndarray, cost: float) -> tuple[np.ndarray, float, bool]:
        """Remove Steiner nodes whose removal lowers the optimal arborescence on the node set."""
        g = self.g
        is_term = np.zeros(g.n, dtype=bool)
        is_term[g.terminals] = True
        changed = False
        steiner = [v for v in np.nonzero(pe >= 0)[0].tolist() if not is_term[v]]
        steiner.sort(key=lambda v: -g.w[pe[v]])
        for v in steiner:
            if self._timeout():
                break
            if pe[v] < 0:
                continue
            nodes = pe >= 0
            nodes[v] = False
            cand = _arborescence_on(g, nodes)
            if cand is None:
                continue
            cand = _prune_leaves(g, cand)
            c = _tree_cost(g, cand)
            if c < cost - _EPS * max(1.0, cost):
                pe, cost, changed = cand, c, True
        return pe, cost, changed

    def local_search(self, pe: np.ndarray, cost: float) -> tuple[np.ndarray, float]:
        """Insertion and deletion passes (each followed by an Edmonds re-solve) to a local optimum."""
        g = self.g
        while not self._timeout():
            improved = False
            trial = pe.copy()
            if self.insertion_pass(trial):
                resolved = _arborescence_on(g, trial >= 0)
                if resolved is not None:
                    trial = resolved
                trial = _prune_leaves(g, trial)
                c = _tree_cost(g, trial)
                if c < cost - _EPS * max(1.0, cost):
                    pe, cost, improved = trial, c, True
            pe, cost, deleted = self.deletion_pass(pe, cost)
            if not (improved or deleted):
                break
        return pe, cost

    def descend(self) -> tuple[np.ndarray, float]:
        """Shortest-path tree → Edmonds on its node set → leaf pruning → local search."""
        g = self.g
        pe = _prune_leaves(g, self.shortest_path_tree())
        best = _arborescence_on(g, pe >= 0)
        if best is not None:  # always feasible (the SPH tree spans its own node set)
            pe = _prune_leaves(g, best)
        cost = _tree_cost(g, pe)
        terminals_only = np.zeros(g.n, dtype=bool)
        terminals_only[g.terminals] = True
        alt = _arborescence_on(g, terminals_only)
        if alt is not None and _tree_cost(g, alt) < cost - _EPS * max(1.0, cost):
            pe, cost = alt, _tree_cost(g, alt)
        return self.local_search(pe, cost)

    def run(self, restarts: int = RESTARTS, seed: int = 0) -> tuple[np.ndarray, float]:
        """:meth:`descend`, then ``restarts`` perturbed restarts: descend on weights scaled by
        U(0.8, 1.2) per edge, re-solve that node set with the true weights, local search; keep
        the best.  Deterministic for a given seed; stops at the deadline or the lower bound."""
        g = self.g
        pe, cost = self.descend()
        now = time.perf_counter()
        lb = self.lower_bound(now + 0.3 * max(self.deadline - now, 0.0))
        rng = np.random.default_rng(seed)
        for _ in range(restarts):
            if self._timeout() or cost <= lb + _EPS * max(1.0, cost):
                break
            noisy = IndexedGraph(g.nodes, g.root, g.terminals, g.src, g.dst,
                                 g.w * rng.uniform(0.8, 1.2, len(g.w)))
            start, _ = _Heuristic(noisy, self.deadline).descend()
            cand = _arborescence_on(g, start >= 0)
            if cand is None:
                continue
            cand = _prune_leaves(g, cand)
            cand, c = self.local_search(cand, _tree_cost(g, cand))
            if c < cost - _EPS * max(1.0, cost):
                pe, cost = cand, c
        return pe, cost


# ----------------------------------------------------------------------------------------------
# exact: multi-commodity flow MIP
# ----------------------------------------------------------------------------------------------

def flow_variable_count(g: IndexedGraph) -> int:
    """Upper bound on the MIP's commodity-edge variables (|T| · |E|)."""
    return int(len(g.terminals) * len(g.src))


def _mip(g: IndexedGraph, hint: np.ndarray, time_limit: float
         ) -> tuple[Optional[np.ndarray], bool, Optional[float]]:
    """min Σ w_e x_e  s.t. one unit of flow root → t for every terminal t, f^t_e ≤ x_e,
    in-degree(t) = 1 for terminals and ≤ 1 for Steiner nodes, x binary.

    The LP relaxation of this formulation equals the directed-cut relaxation, the strongest of the
    classic compact ones.  Commodity t only gets variables on edges whose head can reach t (and
    none leaving t).  Returns (tree or None, proven optimal, best bound or None).
    """
    from ortools.linear_solver import pywraplp

    solver = pywraplp.Solver.CreateSolver("SCIP")
    if solver is None:  # pragma: no cover - SCIP ships with the ortools wheel
        raise RuntimeError("OR-Tools was built without SCIP")
    m = len(g.src)
    src, dst, w = g.src.tolist(), g.dst.tolist(), g.w.tolist()
    x = [solver.BoolVar(f"x{e}") for e in range(m)]
    obj = solver.Objective()
    for e in range(m):
        obj.SetCoefficient(x[e], w[e])
    obj.SetMinimization()
    is_term = np.zeros(g.n, dtype=bool)
    is_term[g.terminals] = True
    indeg = {}
    for v in range(g.n):
        if v != g.root:
            indeg[v] = solver.Constraint(1.0 if is_term[v] else 0.0, 1.0)
    for e in range(m):
        indeg[dst[e]].SetCoefficient(x[e], 1.0)

    on_tree_path: dict[int, set[int]] = {}
    parent_edge = hint.tolist()
    hint_vars, hint_vals = list(x), [1.0 if parent_edge[dst[e]] == e else 0.0 for e in range(m)]
    for t in g.terminals.tolist():
        path = set()
        v = t
        while v != g.root:
            path.add(parent_edge[v])
            v = src[parent_edge[v]]
        on_tree_path[t] = path
        reaches_t = g.reach([t], reverse=True)
        balance: dict[int, object] = {}

        def row(v: int):
            if v not in balance:
                rhs = 1.0 if v == g.root else (-1.0 if v == t else 0.0)
                balance[v] = solver.Constraint(rhs, rhs)
            return balance[v]

        row(g.root)
        row(t)
        for e in range(m):
            if not reaches_t[dst[e]] or src[e] == t:
                continue
            f = solver.NumVar(0.0, 1.0, f"f{t}_{e}")
            row(src[e]).SetCoefficient(f, 1.0)
            row(dst[e]).SetCoefficient(f, -1.0)
            link = solver.Constraint(-solver.infinity(), 0.0)
            link.SetCoefficient(f, 1.0)
            link.SetCoefficient(x[e], -1.0)
            hint_vars.append(f)
            hint_vals.append(1.0 if e in path else 0.0)
    solver.SetHint(hint_vars, hint_vals)
    if math.isfinite(time_limit):
        solver.SetTimeLimit(max(1, int(time_limit * 1000)))
    solver.SetNumThreads(1)
    params = pywraplp.MPSolverParameters()
    params.SetDoubleParam(pywraplp.MPSolverParameters.RELATIVE_MIP_GAP, 0.0)
    status = solver.Solve(params)
    if status not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        return None, False, None
    bound = solver.Objective().BestBound()
    pe = np.full(g.n, -1, dtype=np.int64)
    for e in range(m):
        if x[e].solution_value() > 0.5:
            pe[dst[e]] = e
    # keep what hangs off the root (a zero-cost cycle could float free) and drop useless leaves
    parent = np.full(g.n, -1, dtype=np.int64)
    parent[pe >= 0] = g.src[pe[pe >= 0]]
    keep = np.zeros(g.n, dtype=bool)
    keep[g.root] = True
    changed = True
    while changed:
        nxt = keep | ((parent >= 0) & keep[np.maximum(parent, 0)])
        changed = bool((nxt != keep).any())
        keep = nxt
    pe[~keep] = -1
    pe = _prune_leaves(g, pe)
    if not _is_tree(g, pe):  # pragma: no cover - would be a formulation bug
        return None, False, None
    return pe, status == pywraplp.Solver.OPTIMAL, (bound if math.isfinite(bound) else None)


# ----------------------------------------------------------------------------------------------
# pruning, decomposition, dispatch
# ----------------------------------------------------------------------------------------------

def _prune(g: IndexedGraph) -> tuple[IndexedGraph, np.ndarray, np.ndarray]:
    mask = (g.dst != g.root) & (g.src != g.dst)
    root_w = np.full(g.n, math.inf)
    from_root = mask & (g.src == g.root)
    root_w[g.dst[from_root]] = g.w[from_root]
    mask &= (g.src == g.root) | (g.w < root_w[g.dst])
    fwd = g.reach([g.root], edge_mask=mask)
    bwd = g.reach(g.terminals.tolist(), reverse=True, edge_mask=mask) if len(g.terminals) else \
        np.zeros(g.n, dtype=bool)
    keep = fwd & bwd
    keep[g.root] = True
    return g.subgraph(keep, mask)


def _components(g: IndexedGraph) -> list[np.ndarray]:
    """Node masks (root included in each) of the weakly connected components of g − root."""
    label = np.arange(g.n)
    m = (g.src != g.root) & (g.dst != g.root)
    a, b = g.src[m], g.dst[m]
    while True:
        low = np.minimum(label[a], label[b])
        new = label.copy()
        np.minimum.at(new, a, low)
        np.minimum.at(new, b, low)
        new = new[new]  # pointer jumping
        if (new == label).all():
            break
        label = new
    out = []
    for c in np.unique(label[np.arange(g.n) != g.root]).tolist():
        nodes = label == c
        nodes[g.root] = True
        out.append(nodes)
    return out


def _triangle_mask(g: IndexedGraph) -> np.ndarray:
    """Edges to keep: drop u → v when some u → x → v is strictly cheaper.

    Exact: every shortest path consists of edges that are shortest paths themselves, which this
    test never drops, so each dropped edge of a tree can be replaced by a surviving path that costs
    less, and an arborescence inside the union costs no more.  O(n³) dense numpy, so it is only run
    on components of at most ``_TRIANGLE_MAX_NODES`` nodes; the work per middle node x is
    in-degree(x) × out-degree(x), so sparse graphs cost far less.
    """
    n = g.n
    W = np.full((n, n), np.inf)
    W[g.src, g.dst] = g.w
    np.fill_diagonal(W, np.inf)
    best = np.full((n, n), np.inf)
    finite = np.isfinite(W)
    for x in range(n):
        rows = np.nonzero(finite[:, x])[0]
        cols = np.nonzero(finite[x, :])[0]
        if len(rows) == 0 or len(cols) == 0:
            continue
        block = W[rows, x][:, None] + W[x, cols][None, :]
        best[np.ix_(rows, cols)] = np.minimum(best[np.ix_(rows, cols)], block)
    return g.w <= best[g.src, g.dst] + 1e-9 * np.maximum(1.0, g.w)


_TRIANGLE_MAX_NODES = 2000


def _pairs(g: IndexedGraph, pe: np.ndarray) -> list[tuple[Hashable, Hashable]]:
    return [(g.nodes[g.src[k]], g.nodes[g.dst[k]]) for k in pe[pe >= 0].tolist()]


def _solve_component(comp: IndexedGraph, solver: str, deadline: float, exact_max_flow_vars: int
                     ) -> tuple[list, float, bool, float, str]:
    """(edges as node pairs, cost, proven optimal, lower bound, method) for one component."""
    n_steiner = comp.n - 1 - len(comp.terminals)
    if n_steiner == 0 or solver == "arborescence":
        pe = _arborescence_on(comp, np.ones(comp.n, dtype=bool))
        assert pe is not None  # reachability was validated and pruning keeps paths
        cost = _tree_cost(comp, pe)
        return _pairs(comp, pe), cost, True, cost, "arborescence"
    start = time.perf_counter()
    red = comp
    if comp.n <= _TRIANGLE_MAX_NODES:
        red = comp.subgraph(np.ones(comp.n, dtype=bool), _triangle_mask(comp))[0]
    budget = max(deadline - start, 0.0)
    want_mip = solver == "exact" or (
        solver == "auto" and flow_variable_count(red) <= exact_max_flow_vars)
    h = _Heuristic(red, start + 0.5 * budget if want_mip else deadline)
    pe, cost = h.run()
    pairs, lb, method = _pairs(red, pe), h.lower_bound(), "approx"
    # The no-bridge optimum on the unreduced component: the heuristic never returns worse.
    only_terminals = np.zeros(comp.n, dtype=bool)
    only_terminals[comp.terminals] = True
    alt = _arborescence_on(comp, only_terminals)
    if alt is not None and _tree_cost(comp, alt) < cost - _EPS * max(1.0, cost):
        pairs, cost = _pairs(comp, alt), _tree_cost(comp, alt)
    optimal = cost <= lb + _EPS * max(1.0, cost)
    if optimal:
        lb = cost
    elif want_mip and time.perf_counter() < deadline:
        mip_pe, proven, mip_bound = _mip(red, pe, deadline - time.perf_counter())
        method = "exact"
        if mip_pe is not None and _tree_cost(red, mip_pe) < cost - _EPS * max(1.0, cost):
            pairs, cost = _pairs(red, mip_pe), _tree_cost(red, mip_pe)
        if proven:
            optimal, lb = True, cost
        elif mip_bound is not None:
            lb = max(lb, min(mip_bound, cost))
    return pairs, cost, optimal, lb, method


def _validate(G: nx.DiGraph, root: Optional[Hashable], terminals: Optional[Iterable[Hashable]],
              weight: str) -> tuple[IndexedGraph, Hashable]:
    if root is None:
        root = G.graph.get("root")
        if root is None:
            raise ValueError("no root given and the graph has no 'root' graph attribute")
    if terminals is None:
        terminals = G.graph.get("terminals")
        if terminals is None:
            raise ValueError("no terminals given and the graph has no 'terminals' graph attribute")
    g = IndexedGraph.from_networkx(G, root, terminals, weight=weight)
    missing = g.unreachable_terminals()
    if missing:
        raise ValueError(f"terminal{'s' if len(missing) > 1 else ''} not reachable from root {root!r}: "
                         + ", ".join(map(repr, missing)))
    return g, root


def solve(
    G: nx.DiGraph,
    root: Optional[Hashable] = None,
    terminals: Optional[Iterable[Hashable]] = None,
    *,
    solver: SolverName = "auto",
    weight: str = "weight",
    time_limit: Optional[float] = 30.0,
    exact_max_flow_vars: int = AUTO_EXACT_MAX_FLOW_VARS,
) -> TreeSolution:
    """Cheapest arborescence rooted at ``root`` reaching every terminal (a directed Steiner tree).

    ``root`` and ``terminals`` default to ``G.graph["root"]`` / ``G.graph["terminals"]`` (set by
    :func:`selector.build_oc_graph`).  ``solver``:

    * ``"arborescence"``: ignore non-terminal nodes, Edmonds on root + terminals (exact for that
      restricted problem; the paper's no-bridge selection);
    * ``"exact"``: MIP per component (Edmonds where a component has no Steiner nodes), warm-started
      from the heuristic; ``optimal`` tells whether it finished within ``time_limit``;
    * ``"approx"``: the heuristic (guarantee in the module docstring);
    * ``"auto"``: Edmonds on Steiner-free components, otherwise the heuristic, then the MIP when
      the component is small enough (``exact_max_flow_vars``) and time is left.

    Heuristic trees are certified against :func:`dual_ascent_bound` (plus two trivial bounds):
    when they meet it, ``optimal`` is True without the MIP; otherwise ``lower_bound`` reports it.

    ``time_limit`` (seconds, None = unlimited) bounds the local search and the MIP together.
    Raises ValueError when a terminal is unreachable (naming it) or a weight is missing, negative,
    NaN or infinite.
    """
    if solver not in ("auto", "exact", "approx", "arborescence"):
        raise ValueError(f"unknown solver {solver!r}; use 'auto', 'exact', 'approx' or 'arborescence'")
    t0 = time.perf_counter()
    deadline = math.inf if time_limit is None else t0 + float(time_limit)
    g, root = _validate(G, root, terminals, weight)

    if solver == "arborescence":
        keep = np.zeros(g.n, dtype=bool)
        keep[g.terminals] = True
        keep[g.root] = True
        sub, _, _ = g.subgraph(keep)
        lost = sub.unreachable_terminals()
        if lost:
            raise ValueError("without Steiner nodes, not reachable from root "
                             f"{root!r}: {', '.join(map(repr, lost))}")
        g = sub

    pruned, _, _ = _prune(g)
    comps = [pruned.subgraph(c)[0] for c in _components(pruned)]
    sizes = [max(1, len(c.src)) for c in comps]
    edges: list[tuple[Hashable, Hashable]] = []
    total, bound, all_optimal, methods = 0.0, 0.0, True, set()
    for i, comp in enumerate(comps):
        now = time.perf_counter()
        share = (deadline - now) * sizes[i] / sum(sizes[i:]) if math.isfinite(deadline) else math.inf
        pairs, cost, optimal, lb, method = _solve_component(
            comp, solver, now + max(share, 0.0), exact_max_flow_vars)
        edges.extend(pairs)
        methods.add(method)
        all_optimal &= optimal
        total += cost
        bound += lb
    return TreeSolution(
        edges=tuple(edges),
        cost=total,
        solver="+".join(sorted(methods)) if methods else "arborescence",
        optimal=all_optimal,
        lower_bound=min(bound, total),
        seconds=time.perf_counter() - t0,
    )


def dual_ascent_bound(G: nx.DiGraph, root: Optional[Hashable] = None,
                      terminals: Optional[Iterable[Hashable]] = None, *, weight: str = "weight",
                      time_limit: Optional[float] = None) -> float:
    """Lower bound on the cheapest tree reaching ``terminals`` (Wong's dual ascent, see
    :func:`_dual_ascent`), on the graph as given (no pruning).  Valid even when cut short."""
    g, _ = _validate(G, root, terminals, weight)
    deadline = math.inf if time_limit is None else time.perf_counter() + time_limit
    return _dual_ascent(g, deadline)


def steiner_exact(G: nx.DiGraph, root: Optional[Hashable] = None,
                  terminals: Optional[Iterable[Hashable]] = None, *, weight: str = "weight",
                  time_limit: Optional[float] = 60.0) -> TreeSolution:
    """Directed Steiner tree by the flow MIP (see :func:`solve`, ``solver="exact"``)."""
    return solve(G, root, terminals, solver="exact", weight=weight, time_limit=time_limit)


def steiner_approx(G: nx.DiGraph, root: Optional[Hashable] = None,
                   terminals: Optional[Iterable[Hashable]] = None, *, weight: str = "weight",
                   time_limit: Optional[float] = 10.0) -> TreeSolution:
    """Directed Steiner tree by the heuristic (see :func:`solve`, ``solver="approx"``)."""
    return solve(G, root, terminals, solver="approx", weight=weight, time_limit=time_limit)
