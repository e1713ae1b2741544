"""Tree solvers over the OC graph: min-cost arborescence and directed Steiner tree (paper section 6.2).

* :mod:`~selector.solvers.arborescence` -- Chu-Liu/Edmonds (no bridges);
* :mod:`~selector.solvers.steiner` -- :func:`~selector.solvers.steiner.solve`: reductions, components, method per component;
* :mod:`~selector.solvers.reduce`, :mod:`~selector.solvers.heuristic`, :mod:`~selector.solvers.mip`,
  :mod:`~selector.solvers.dual_ascent` -- exact reductions, the heuristic, the exact MIP, the lower bound;
* :mod:`~selector.solvers.solution` -- :class:`~selector.solvers.solution.TreeSolution`, what every solver returns;
* :mod:`~selector.solvers.indexed`, :mod:`~selector.solvers.trees` -- integer-indexed graphs and trees underneath.
"""
