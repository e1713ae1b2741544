"""Reuse pair selection for an operator set: eto's operators in, a :class:`selector.Plan` out.

The OC graph's costs are expected tuning *seconds* (:mod:`eto.planning.time_priors`, per target and timing):
a root edge costs the backend's budget in trials at the backend's seconds per trial, a reuse edge the
estimated candidates (:func:`estimator_cost_fn`) at the reuse tuner's seconds per candidate; each edge's
candidates are kept with the plan for the report. ``selector`` works on plain loop nests; this module
translates: each catalogue operator becomes a
:class:`selector.LoopNestOp` (its sketch key as the sketch set, its frequency, whether a prior
database already has it), and a bridge operator is accepted only if the catalogue can build it
(Definition 5: stride 1, padding 0, dilation 1) and it has the same sketch key as the operators it
bridges.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Collection, Iterable, Mapping, Sequence

from selector import (SIMILARITY_THRESHOLD, LoopNestOp, Plan, distance_preference, replan, select_reuse_pairs,
                      selective_plan)
from selector.analytic_cost import analytic_cost_fn
from tuner.reuse.space import target_limits

from eto.operators import Operator
from eto.operators.opsets import OperatorSet
from eto.options import MAX_REDUCTION_RATIO, TuneOptions
from eto.planning.nodes import loop_nest_op, plan_nodes
from eto.planning.time_model import TimeModel
from eto.planning.time_priors import learn_time_model

if TYPE_CHECKING:  # pragma: no cover
    from eto.store.database import Database, ProgramRecord
    from tuner.reuse.options import ReuseOptions

    from eto.target import TargetKind

#: A backend root that holds at most this share of the set's work (frequency x FLOPs) is planned
#: again with its reduction cap doubled (:func:`minor_roots`): the cap may be all that keeps it a root.
MINOR_SHARE = 0.05


class BridgeCatalogue:
    """The catalogue operator behind a bridge loop nest (or None if the catalogue cannot build it).

    Built once per loop nest: the selector asks while checking sketches, the estimator while
    costing edges, and the plan while naming its bridges.
    """

    def __init__(self, members: Mapping[tuple[str, str], Sequence[Operator]]) -> None:
        #: (type, sketch key) -> the set's members of that kind, preferred first: their structural
        #: parameters, and for a model's fused tasks the function a bridge is rebuilt like
        #: (eto.models.bridges.bridge_task; the first member whose recipe applies)
        self.members = {k: tuple(v) for k, v in members.items()}
        self._built: dict[tuple, Operator | None] = {}

    @classmethod
    def of(cls, members: Sequence[Operator]) -> "BridgeCatalogue":
        """Members grouped by kind. A bridge of fused tasks takes the fusion most of its kind's
        members share (the epilogue its reuses will map least), members with a function first: a
        prior database's fused task is read back without one."""
        groups: dict[tuple[str, str], list[Operator]] = {}
        for op in members:
            groups.setdefault((op.type, op.sketch_key()), []).append(op)
        for ops in groups.values():
            share = Counter(op.fusion for op in ops)
            ops.sort(key=lambda op: (op.task is None, -share[op.fusion]))
        return cls(groups)

    def __call__(self, b: LoopNestOp) -> Operator | None:
        key = (b.type, b.sketch, b.space, b.reduction)
        if key not in self._built:
            self._built[key] = self._build(b)
        return self._built[key]

    def _build(self, b: LoopNestOp) -> Operator | None:
        members = self.members.get((b.type, b.sketch), ())
        try:
            op = Operator.from_loop_nest(b.type, b.space + b.reduction,
                                         **(members[0].structural if members else {}))
        except ValueError:
            return None
        if op.sketch_key() != b.sketch:
            return None
        # one member per fusion, in order of preference: the first whose recipe builds op
        fused: dict[str, Operator] = {}
        for m in members:
            if m.fusion and m.task is not None:
                fused.setdefault(m.fusion, m)
        if not fused:
            return op
        from eto.models.bridges import bridge_task

        return next((b for b in (bridge_task(op, m) for m in fused.values()) if b is not None), None)


@dataclass(frozen=True)
class OperatorPlan:
    """A plan together with the catalogue operators behind its node names."""

    plan: Plan  # costs in expected seconds
    operators: Mapping[str, Operator]  # node name -> operator (set members and bridges)
    bridges: BridgeCatalogue | None = field(default=None, compare=False, repr=False)
    time_model: TimeModel | None = field(default=None, compare=False)
    #: (parent, child) -> estimated candidates, for every edge the selector costed
    estimates: Mapping[tuple[str, str], float] = field(default_factory=dict, compare=False, repr=False)
    #: each set operator's seconds with the backend alone: the plan's baseline (MetaSchedule's cost: no polish)
    backend_alone: Mapping[str, float] = field(default_factory=dict, compare=False, repr=False)

    def candidates(self, parent: str, child: str) -> float | None:
        """The estimated candidates of an edge (root edges: the backend budget), None if never costed."""
        return self.estimates.get((parent, child))

    @property
    def total_candidates(self) -> float:
        """Estimated candidates of everything the plan tunes (prior operators cost nothing)."""
        return sum(self.estimates.get(e, 0.0) for e in self.plan.edge_costs if e[1] not in self.plan.prior)

    def to_json(self) -> dict:
        out = self.plan.to_json()
        out["cost_unit"] = "seconds"
        out["operator_keys"] = {name: op.key for name, op in self.operators.items()}
        out["edge_candidates"] = [[p, c, self.estimates.get((p, c))] for c, p in self.plan.parent.items()]
        out["total_candidates"] = self.total_candidates
        if self.time_model is not None:
            out["time_model"] = self.time_model.to_json()
        return out

    def replan(self, tuned: Iterable[str]) -> "OperatorPlan":
        """:func:`selector.replan` after the operators named in ``tuned`` got programs.

        They become zero-cost roots and their kinds get estimated reuse costs (section 6.1).
        """
        plan = _baseline(replan(self.plan, tuned=tuned), self.backend_alone)
        return OperatorPlan(plan, _with_bridges(self.operators, plan, self.bridges), self.bridges, self.time_model,
                            self.estimates, self.backend_alone)


def _baseline(plan: Plan, alone: Mapping[str, float]) -> Plan:
    """``plan`` with its baseline the backend alone on the set's operators not yet tuned (``alone``:
    seconds per operator): the selector's sums the root edges, which include the roots' polish."""
    prior = set(plan.prior)
    return replace(plan, baseline_cost=math.fsum(s for n, s in alone.items() if n not in prior))


def _with_bridges(operators: Mapping[str, Operator], plan: Plan, bridges: BridgeCatalogue | None) -> dict:
    out = dict(operators)
    for b in plan.bridges:
        op = bridges(b) if bridges is not None and b.name not in out else None
        if op is not None:
            out[b.name] = op
    return out


def hot_operators(opset: OperatorSet, share: float) -> frozenset[Operator]:
    """Operators whose frequency x FLOPs is at least ``share`` of the whole set's (beyond the paper).

    The paper treats every operator alike, but a network's latency is dominated by a few: these
    are the ones worth full backend tuning with extra budget rather than reuse. Before anything is
    measured, FLOPs stand in for latency. O(n).
    """
    if not 0 < share <= 1:
        raise ValueError(f"hot share must be in (0, 1], got {share}")
    total = opset.total_flops
    return frozenset(e.op for e in opset if total and e.frequency * e.op.flops >= share * total)


def estimator_cost_fn(operator_of: Callable[[LoopNestOp], "Operator | None"], target_kind: "TargetKind",
                      budget: float, options: "ReuseOptions", *, samples: int = 8,
                      limits: Mapping[str, int] | None = None,
                      leads: Callable[[Operator, Operator], int] | None = None
                      ) -> Callable[[LoopNestOp, LoopNestOp], float]:
    """Edge costs in candidates from the tuner's trial estimator (paper section 6.1), capped at the budget.

    ``options`` must be the ones the reuse tuner will run, ``top_k`` resolved for the target: the
    estimate counts that strategy's rounds, each cut to the ranked few when ``top_k`` is set;
    ``limits`` are the target's (:func:`tuner.reuse.space.target_limits`, default this machine's).
    ``leads(α, β)``: the seeds the pipeline adds to round T's lead (:class:`eto.planning.lead_sources.LeadCount`),
    each measured once. Loop nests (with their access patterns) are read from each operator's
    program once; an operator the catalogue cannot build costs the budget.
    """
    from tvm.ir import IRModule

    from tuner.reuse.estimate import estimate_many, estimate_trials, placement_trials
    from tuner.analysis.features import loop_nest_of, major_block, producer_count

    kind = target_kind
    nests: dict[str, object] = {}
    producers: dict[object, int] = {}

    def nest(n: LoopNestOp):
        key = f"{n.type}:{n.sketch}:{n.space}:{n.reduction}"
        if key not in nests:
            op = operator_of(n)
            if op is None:
                nests[key] = None
            else:
                mod = IRModule({"main": op.prim_func()})
                nests[key] = loop_nest_of(mod, major_block(mod))
                producers[nests[key]] = producer_count(mod)
        return nests[key]

    options = dict(options=options, samples=samples, limits=limits)
    known: dict[tuple[object, object], float] = {}

    def prefetch(pairs: list[tuple[LoopNestOp, LoopNestOp]]) -> None:
        todo = list(dict.fromkeys((a, b) for a, b in ((nest(x), nest(y)) for x, y in pairs)
                                  if a is not None and b is not None and (a, b) not in known))
        for key, est in zip(todo, estimate_many(kind, todo, **options)):
            known[key] = est.mean

    def cost(alpha: LoopNestOp, beta: LoopNestOp) -> float:
        a, b = nest(alpha), nest(beta)
        if a is None or b is None:
            return float(budget)
        if (a, b) not in known:
            known[(a, b)] = estimate_trials(kind, a, b, **options).mean  # type: ignore[arg-type]
        seeds = leads(operator_of(alpha), operator_of(beta)) if leads is not None else 0  # type: ignore[arg-type]
        return float(min(budget, known[(a, b)] + placement_trials(producers[a]) + seeds))

    cost.__name__ = f"estimated_trials_{kind}"
    cost.prefetch = prefetch  # type: ignore[attr-defined]
    return cost


def plan_operator_set(
    opset: OperatorSet,
    options: TuneOptions | None = None,
    *,
    database: "Database | None" = None,
    target=None,
    hot: Collection[Operator] = (),
    cost_fn: Callable[[LoopNestOp, LoopNestOp], float] | None = None,
    time_limit: float | None = 30.0,
    time_model: TimeModel | None = None,
) -> OperatorPlan:
    """Select reuse pairs for ``opset``; operators already in ``database`` for ``target`` are free roots.

    ``options`` (:class:`eto.options.TuneOptions`, default its defaults) are the run's the plan is for:
    the backend costs ``options.plan_budget`` trials per operator, and ``hot`` operators (see
    :func:`hot_operators`) ``options.plan.hot_budget`` of it: they are never derived by reuse, and are
    reuse sources for the rest. ``cost_fn`` estimates the candidates of tuning α from β; by default
    ``options.plan.cost`` picks it: ``"estimate"`` is the tuner's trial estimator for the reuse tuner's
    strategy and ``top_k`` (the ranked few per round; ``"auto"`` as :func:`tuner.reuse.ranked.default_top_k`
    gives it for ``target``; None, or a budget too small to train the ranker: every candidate; it reads every
    operator's program), ``"analytic"`` the selector's TVM-free stand-in (milliseconds). Candidates become
    seconds by ``time_model`` (default: learned from ``database`` for ``target``, see
    :mod:`eto.planning.time_model`). ``max_reduction_ratio``: no reuse edge where α's reduction grows more
    (:func:`reduction_ratio`). ``distance_weight``: the selection's preference for near sources (0: by
    cost alone, as in the paper); the plan's costs stay estimated seconds. With polish, each root edge
    costs a self-reuse too, as the pipeline polishes its roots (:mod:`eto.runs.polish`).
    """
    options = options or TuneOptions()
    budget, p = options.plan_budget, options.plan
    bridges, solver, cost, max_reduction_ratio, distance_weight = (
        p.bridges, p.solver, p.cost, p.max_reduction_ratio, p.distance_weight)
    top_k, polish, hot_budget = options.reuse.top_k, options.polishes, p.hot_budget(budget)
    from eto.target import parse_target, target_kind

    kind = target_kind(target) if target is not None else "cpu"
    tuned = _tuned(database, target)
    names, nodes = plan_nodes(opset, tuned)
    catalogue = BridgeCatalogue.of([names[n.name] for n in nodes])
    if cost_fn is None and cost == "estimate":
        from tuner.reuse.cost_model import LearnedRanker
        from tuner.reuse.ranked import resolve_top_k

        from eto.planning.lead_sources import LeadCount

        def operator_of(n: LoopNestOp) -> Operator | None:
            return names.get(n.name) or catalogue(n)

        parsed = parse_target(target if target is not None else "cpu")
        # a backend run too short to train the ranker leaves the reuse tuner measuring everything
        counted = resolve_top_k(top_k, parsed) if budget >= LearnedRanker.MIN_SAMPLES else None
        cost_fn = estimator_cost_fn(operator_of, kind, budget, replace(options.reuse, top_k=counted),
                                    limits=target_limits(kind, parsed if target is not None else None),
                                    leads=LeadCount(database, target, names.values(), tuned=tuned))
    cost_fn = cost_fn or analytic_cost_fn(float(budget))
    tm = time_model or learn_time_model(database, target, kind, options.timing)
    hot_names = {n for n, op in names.items() if op in set(hot)}
    relaxed: set[str] = set()  # minor roots the cap is doubled for (read by ``edge`` at each call)
    capped: set[str] = set()  # operators that lost a reuse edge to the cap (written by ``edge``)
    edge, root, estimates = _seconds(cost_fn, tm, hot_names, float(budget), float(hot_budget),
                                     max_reduction_ratio, relaxed, capped, polish)
    plan = select_reuse_pairs(nodes, cost_fn=edge, backend_cost=root, bridges=bridges, solver=solver,
                              sketch_check=lambda b: catalogue(b) is not None, time_limit=time_limit,
                              preference=distance_preference(distance_weight) if distance_weight else None)
    if max_reduction_ratio is not None:
        relaxed |= minor_roots(plan, capped)
        if relaxed:  # the same request; its edge costs now admit them (kept for later replans)
            plan = replan(plan)
    alone = {n.name: tm.backend_seconds(hot_budget if n.name in hot_names else budget, gflops(n))
             for n in nodes if not n.tuned and n.name in names}
    return OperatorPlan(_baseline(plan, alone), _with_bridges(names, plan, catalogue), catalogue, tm, estimates, alone)


def plan_selective(opset: OperatorSet, *, budget: int, k: int, database: "Database | None" = None, target=None,
                   threshold: float = SIMILARITY_THRESHOLD, time_model: TimeModel | None = None) -> OperatorPlan:
    """Selective Tuning's plan (the paper's set baseline, :mod:`selector.selective`): one backend
    root per cluster, every other member derived from it by TopK (``k`` programs measured).

    Costs are in the same seconds as :func:`plan_operator_set`'s, so both plans read alike.
    """
    from selector import ROOT

    from eto.target import target_kind

    if budget < 1 or k < 1:
        raise ValueError(f"budget and k must be positive, got {budget} and {k}")
    kind = target_kind(target) if target is not None else "cpu"
    tuned = _tuned(database, target)
    names, nodes = plan_nodes(opset, tuned)
    nodes = [n for n in nodes if not n.name.startswith("prior:")]  # ST does not reuse earlier runs
    tm = time_model or learn_time_model(database, target, kind)
    estimates: dict[tuple[str, str], float] = {}

    def root(op: LoopNestOp) -> float:
        estimates[(ROOT, op.name)] = float(budget)
        return tm.backend_seconds(budget, gflops(op))

    def topk(alpha: LoopNestOp, beta: LoopNestOp) -> float:
        estimates[(beta.name, alpha.name)] = float(k)
        return tm.reuse_seconds(k, gflops(alpha), alpha.type)

    from tuner.reuse.estimate import LEVELS

    # ST's knobs are the tile splits of the target's multi-level tiling: 4 + 2 levels on CPU, 5 + 3 on GPU
    plan = selective_plan(nodes, backend_cost=root, reuse_cost=topk, threshold=threshold, levels=LEVELS[kind])
    return OperatorPlan(plan, {n.name: names[n.name] for n in nodes}, None, tm, estimates)


def _tuned(database: "Database | None", target) -> "Mapping[Operator, ProgramRecord]":
    """The operators ``database`` holds tuned programs of on ``target`` (none without either)."""
    return database.tuned(target) if database is not None and target is not None else {}


def gflops(n: LoopNestOp) -> float:
    """GFLOPs of a loop nest: one multiply-add per iteration (as :attr:`Operator.flops`)."""
    return 2 * math.prod(n.space) * math.prod(n.reduction) / 1e9


def carries_reduction(alpha: LoopNestOp, beta: LoopNestOp) -> bool:
    """Whether β's program has a tile decision for every reduction loop α has: both have the
    same reduction loops of extent 1.

    Beyond the paper (its Definition 5 example bridges a 3x3 and a 1x1 convolution): β's program
    carries nothing about a loop of extent 1, so GetS tiles α's kernel loops blind. Measured
    here (experiments/results/set_bench_resnet50_N100_before_unit_rule.json), a
    3x3 convolution reused from a 1x1 bridge ran at 0.25 of MetaSchedule's speed. The block
    search re-tiles all of α's space loops, so they need no such rule.
    """
    return all((a == 1) == (b == 1) for a, b in zip(alpha.reduction, beta.reduction))


def reduction_ratio(alpha: LoopNestOp, beta: LoopNestOp) -> float:
    """α's reduction iterations over β's: how far α's reduction tiling is from anything β's program tried.

    Beyond the paper. A reuse keeps β's reduction tiling as its starting point and searches near it
    (the block search re-tiles the space loops), so a β with a much smaller reduction seeds α's
    inner loops badly. Measured over the 75 reuses of two 3-seed set benchmarks
    (``python experiments/tools/reuse_quality.py``, ResNet-50 and BERT-Base): median quality against
    MetaSchedule 0.97 (42 reuses) where this ratio is at most 4, 0.87 (12) at 4-8 and 0.79 (21)
    above 8, where the plan had seeded the sets' largest operators from small bridges. As a cap
    of 4 (the default): BERT-Base N = 200 0.95 instead of 0.76 at 5.0x instead of 5.5x; ResNet-50
    N = 100 0.85 instead of 0.81 at 2.8x instead of 4.1x (experiments/README.md, "E3 with the
    reduction cap").
    """
    return math.prod(alpha.reduction) / max(1, math.prod(beta.reduction))


def minor_roots(plan: Plan, capped: Collection[str], share: float = MINOR_SHARE) -> set[str]:
    """The plan's requested backend roots that lost a reuse edge to the reduction cap (``capped``:
    :func:`_seconds` collects them; hot operators lose theirs before the cap) and hold at most
    ``share`` of the set's work (frequency x FLOPs). O(n).

    Beyond the paper. The reduction cap (:func:`reduction_ratio`) protects the quality of the
    operators that carry a set's latency; it also leaves a network's first convolution (3 input
    channels, a 7x7 kernel) a backend root, since every path to it grows the kernel taps 5.4x:
    ResNet-50's stem holds 2.9% of its FLOPs and took 143 of eto's 652 s in E9 (README). Reuses at
    ratios 4-8 reached 0.87 of MetaSchedule at the median (``experiments/tools/reuse_quality.py``), which
    on at most 5% of the work costs under 1% of the set's throughput.
    """
    ops = plan.operators
    work = {n: op.frequency * gflops(op) for n, op in ops.items() if not op.bridge and not op.tuned}
    total = sum(work.values()) or 1.0
    return {n for n in plan.backend if n in work and n in capped and work[n] <= share * total}


def _seconds(candidates: Callable[[LoopNestOp, LoopNestOp], float], tm: TimeModel, hot_names: set[str],
             budget: float, hot_budget: float, max_reduction_ratio: float | None = MAX_REDUCTION_RATIO,
             relaxed: Collection[str] = (), capped: set[str] | None = None, polish: bool = False):
    """Edge and root costs in seconds, recording each edge's candidates as the selector asks.

    A reuse never costs more than tuning α with the backend; hot operators are never derived by reuse.
    Both grow with α's size (its loop nest's FLOPs), as the time model says. ``relaxed``: operators
    whose reduction cap is doubled (:func:`minor_roots`; read at each call); ``capped`` collects the
    operators that lost an edge to the cap. ``polish``: a root costs its self-reuse's estimate too.
    """
    from selector import ROOT

    estimates: dict[tuple[str, str], float] = {}

    def over_cap(alpha: LoopNestOp, beta: LoopNestOp) -> bool:
        return max_reduction_ratio is not None and reduction_ratio(alpha, beta) > max_reduction_ratio * (
            2 if alpha.name in relaxed else 1)

    def admits(alpha: LoopNestOp, beta: LoopNestOp) -> bool:  # the edges with a finite cost (selector.bridge asks)
        return alpha.name not in hot_names and carries_reduction(alpha, beta) and not over_cap(alpha, beta)

    def edge(alpha: LoopNestOp, beta: LoopNestOp) -> float:
        if not admits(alpha, beta):
            if capped is not None and alpha.name not in hot_names and carries_reduction(alpha, beta):
                capped.add(alpha.name)  # it lost the edge to the cap
            return math.inf
        c = tm.reuse_candidates(float(candidates(alpha, beta)))
        estimates[(beta.name, alpha.name)] = c
        g = gflops(alpha)
        return min(tm.backend_seconds(budget, g), tm.reuse_seconds(c, g, alpha.type))

    def root(op: LoopNestOp) -> float:
        trials, g = hot_budget if op.name in hot_names else budget, gflops(op)
        c = tm.reuse_candidates(float(candidates(op, op))) if polish else 0.0
        estimates[(ROOT, op.name)] = trials + c
        return tm.backend_seconds(trials, g) + (tm.polish_seconds(c, g, op.type) if polish else 0.0)

    edge.admits = admits  # type: ignore[attr-defined]
    if hasattr(candidates, "prefetch"):  # the estimator works in a batch (see selector.CostFn)
        def prefetch(pairs: list[tuple[LoopNestOp, LoopNestOp]]) -> None:
            # only edges ``edge`` admits (a quarter of ResNet-50's are over the cap), and with the
            # polish each operator's self-reuse, which ``root`` will ask for
            selves = list({a.name: (a, a) for a, _ in pairs if not a.tuned}.values()) if polish else []
            candidates.prefetch([(a, b) for a, b in pairs if admits(a, b)] + selves)
        edge.prefetch = prefetch  # type: ignore[attr-defined]

    return edge, root, estimates
