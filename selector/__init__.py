"""Reuse-pair selection for ETO (paper, Section 6): pure algorithms on operators as loop nests.

One module per concept:

* :mod:`selector.loopnest` -- :class:`LoopNestOp`, an operator as (type, sketch-set key, loop nest);
* :mod:`selector.reuse_pairs` -- reuse conditions (Definition 2) and reuse-pair enumeration;
* :mod:`selector.bridge` -- bridge operators (Definition 5), k-hop sets and closure;
* :mod:`selector.analytic_cost` -- a cheap analytic reuse-cost estimate (the tuner's estimator replaces it);
* :mod:`selector.ocgraph` -- the optimization-choice (OC) graph (and :func:`distance_preference`);
* :mod:`selector.solvers` -- min-cost arborescence and directed Steiner tree solvers;
* :mod:`selector.select` -- :func:`select_reuse_pairs`, :class:`Plan`, and :func:`replan`, which
  re-selects once some operators are tuned (e.g. ``Plan.replan_after``);
* :mod:`selector.graphio` -- JSON instances (:func:`load_graph`);
* :mod:`selector.selective` -- Selective Tuning's clustering, the paper's set baseline
  (:func:`selective_plan`).

Imports only the standard library, numpy, networkx and SciPy; costs and sketch checks come in
as caller-supplied functions.
"""

from selector.solvers.arborescence import edmonds, min_cost_arborescence
from selector.bridge import SketchCheck, bridge_of, bridge_operators
from selector.analytic_cost import analytic_cost, analytic_cost_fn
from selector.solvers.dual_ascent import dual_ascent_bound
from selector.graphio import GraphFormatError, SteinerInstance, dump_graph, load_graph
from selector.loopnest import LoopNestOp
from selector.ocgraph import ROOT, BackendCost, CostFn, Preference, build_oc_graph, distance_preference
from selector.select import BridgeMode, Plan, PlanEdge, SelectionRequest, replan, select_reuse_pairs
from selector.reuse_pairs import dominates, is_reuse_pair, nearest_sources, reuse_pair_indices, reuse_pairs
from selector.selective import SIMILARITY_THRESHOLD, selective_clusters, selective_plan, similarity_rate
from selector.solvers.solution import TreeSolution
from selector.solvers.steiner import SolverName, solve, steiner_approx, steiner_exact

__all__ = [
    "LoopNestOp",
    "dominates", "is_reuse_pair", "nearest_sources", "reuse_pairs", "reuse_pair_indices",
    "bridge_of", "bridge_operators", "SketchCheck",
    "analytic_cost", "analytic_cost_fn",
    "ROOT", "build_oc_graph", "CostFn", "BackendCost", "Preference", "distance_preference",
    "edmonds", "min_cost_arborescence",
    "solve", "steiner_exact", "steiner_approx", "dual_ascent_bound", "TreeSolution", "SolverName",
    "Plan", "PlanEdge", "SelectionRequest", "BridgeMode", "select_reuse_pairs", "replan",
    "similarity_rate", "selective_clusters", "selective_plan", "SIMILARITY_THRESHOLD",
    "GraphFormatError", "SteinerInstance", "load_graph", "dump_graph",
]
