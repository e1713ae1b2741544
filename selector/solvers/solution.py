"""The result record every tree solver returns."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Optional

__all__ = ["TreeSolution"]


@dataclass(frozen=True, kw_only=True)
class TreeSolution:
    """An arborescence rooted at the root that reaches every terminal.

    Attributes
    ----------
    edges:
        Selected ``(parent, child)`` edges; every non-root node of the tree has exactly one.
    cost:
        Sum of the selected edges' weights.
    solver:
        Methods actually used, ``"+"``-joined when components were solved differently:
        ``"arborescence"`` (Edmonds, exact when there are no Steiner nodes), ``"exact"`` (flow MIP,
        optimal when ``optimal``), ``"approx"`` (shortest-path heuristic + local search).
    optimal:
        True only when optimality was proven (Edmonds on a Steiner-free instance, or the MIP
        closing its gap, or the heuristic meeting the lower bound).
    lower_bound:
        A proven lower bound on the optimum (equal to ``cost`` when ``optimal``), or None.
    seconds:
        Wall time spent in the solver.
    parts:
        Each independent component's instance (nodes, terminals, edges, weights, solver) mapped to
        its result, so that a re-selection after a local change (``solve(..., known=...)``) re-solves
        only the components that changed.
    """

    edges: tuple[tuple[Hashable, Hashable], ...]
    cost: float
    solver: str
    optimal: bool
    lower_bound: Optional[float] = None
    seconds: float = 0.0
    parts: Mapping[Hashable, tuple] = field(default_factory=dict, compare=False, repr=False)

    @property
    def parent(self) -> dict[Hashable, Hashable]:
        """Parent of every non-root tree node."""
        return {v: u for u, v in self.edges}

    @property
    def nodes(self) -> set[Hashable]:
        """Tree nodes other than the root (terminals and used Steiner nodes)."""
        return {v for _, v in self.edges}

    @property
    def gap(self) -> Optional[float]:
        """Relative gap (cost - bound) / cost, 0 when optimal, None without a bound."""
        if self.optimal:
            return 0.0
        if self.lower_bound is None:
            return None
        return (self.cost - self.lower_bound) / self.cost if self.cost > 0 else 0.0
