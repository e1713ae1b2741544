"""Reuse-pair selection for ETO (paper, Section 6): pure algorithms on operators as loop nests.

One module per concept:

* :mod:`selector.loopnest` -- :class:`LoopNestOp`, an operator as (type, sketch-set key, loop nest);
* :mod:`selector.reuse` -- reuse conditions (Definition 2) and reuse-pair enumeration;
* :mod:`selector.bridge` -- bridge operators (Definition 5), k-hop sets and closure;
* :mod:`selector.costs` -- a cheap analytic reuse-cost estimate (placeholder for the tuner's);
* :mod:`selector.ocgraph` -- the optimization-choice (OC) graph (and :func:`distance_preference`);
* :mod:`selector.arborescence` -- min-cost arborescence (no bridges);
* :mod:`selector.steiner` -- directed Steiner tree: :func:`solve` (reductions, decomposition and
  the per-component choice of method), :func:`steiner_exact`, :func:`steiner_approx`;
* :mod:`selector.steiner_reduce` -- exact reductions and decomposition into components;
* :mod:`selector.steiner_heuristic` -- shortest-path heuristic with local search and restarts;
* :mod:`selector.steiner_mip` -- exact multi-commodity flow MIP (HiGHS through SciPy);
* :mod:`selector.dual_ascent` -- Wong's dual ascent lower bound (:func:`dual_ascent_bound`);
* :mod:`selector.solution` -- :class:`TreeSolution`, what solvers return;
* :mod:`selector.plan` -- :func:`select_reuse_pairs`, :class:`Plan`, and :func:`replan`, which
  re-selects once some operators are tuned (e.g. ``Plan.replan_after``);
* :mod:`selector.graphio` -- JSON instances (:func:`load_graph`);
* :mod:`selector.selective` -- Selective Tuning's clustering, the paper's set baseline
  (:func:`selective_plan`).

Imports only the standard library, numpy, networkx and OR-Tools; costs and sketch checks come in
as caller-supplied functions.
"""

from .arborescence import edmonds, min_cost_arborescence
from .bridge import SketchCheck, bridge_of, bridge_operators
from .costs import analytic_cost, analytic_cost_fn
from .dual_ascent import dual_ascent_bound
from .graphio import GraphFormatError, SteinerInstance, dump_graph, load_graph
from .loopnest import LoopNestOp
from .ocgraph import ROOT, BackendCost, CostFn, Preference, build_oc_graph, distance_preference
from .plan import BridgeMode, Plan, PlanEdge, SelectionRequest, replan, select_reuse_pairs
from .reuse import dominates, is_reuse_pair, reuse_pair_indices, reuse_pairs
from .selective import SIMILARITY_THRESHOLD, selective_clusters, selective_plan, similarity_rate
from .solution import TreeSolution
from .steiner import SolverName, solve, steiner_approx, steiner_exact

__all__ = [
    "LoopNestOp",
    "dominates", "is_reuse_pair", "reuse_pairs", "reuse_pair_indices",
    "bridge_of", "bridge_operators", "SketchCheck",
    "analytic_cost", "analytic_cost_fn",
    "ROOT", "build_oc_graph", "CostFn", "BackendCost", "Preference", "distance_preference",
    "edmonds", "min_cost_arborescence",
    "solve", "steiner_exact", "steiner_approx", "dual_ascent_bound", "TreeSolution", "SolverName",
    "Plan", "PlanEdge", "SelectionRequest", "BridgeMode", "select_reuse_pairs", "replan",
    "similarity_rate", "selective_clusters", "selective_plan", "SIMILARITY_THRESHOLD",
    "GraphFormatError", "SteinerInstance", "load_graph", "dump_graph",
]
