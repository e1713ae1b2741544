"""Where a reuse search's lead tiles come from, besides β's best program (beyond the paper).

Algorithm 1 derives every candidate from one program, β's best, and so inherits its luck: a bridge
whose backend run happened on tiles that suit its own small size hands them to every operator
derived from it. Round T is therefore led by a few other tile configurations, kept on α's loops
and measured first: the best programs of other tuned operators of α's type and sketch
(:func:`alternate_sources`), and β's runner-up programs with other inner tiles (:func:`runner_ups`).
"""

from __future__ import annotations

from typing import Iterable

from eto.store.database import PREDICTED, Database
from eto.operators import Operator

#: Tuned programs besides β whose tiles lead a reuse search's round T (:func:`alternate_sources`).
ALTERNATE_SOURCES = 2
#: β's other programs whose inner tiles lead round T too (:func:`runner_ups`): how many, and how much
#: slower than β's best on β they may be.
RUNNER_UPS, RUNNER_UP_RATIO = 2, 1.5


def runner_ups(beta: Operator, source, database: Database, target, k: int = RUNNER_UPS,
               ratio: float = RUNNER_UP_RATIO) -> list:
    """Up to ``k`` of β's measured programs (ProgramRecords) within ``ratio`` of its best ``source``, fastest
    first, each with inner (register and vector) tiles other than the best's and each other's.

    Every candidate of a reuse search keeps β's best program's inner tiles, and those suit β's size,
    not α's: a 2 MFLOP bridge with 64 columns vectorised all 64 (its best by 1.24x over 8-wide
    tiles), and BERT-Base's feed-forward matmuls derived from it kept the 64-wide tile in all 15
    candidates, at 0.10 and 0.24 of MetaSchedule's throughput (set benchmark, N = 200). β's
    runner-ups with other inner tiles lead round T beside β's own tiles, and the rounds after T keep
    the winner's inner tiles (:meth:`tuner.reuse.space.ReuseSpace.m_round`). O(r) in β's r programs,
    each read from its stored trace (no TVM): a plan reads every prior root's runner-ups."""
    from tuner.analysis.sketch import Sketch

    if source is None:
        return []

    def inner(program):
        try:
            space, _ = Sketch.from_json(program.stored_trace).tile_decisions()
        except (ValueError, KeyError, IndexError, AttributeError, TypeError):
            return None
        return tuple(f[-1] for f in space)

    seen, out = {inner(source)}, []
    for p in sorted(database.programs(target=target, op=beta), key=lambda p: p.latency_s):
        if len(out) >= k or p.latency_s > ratio * source.latency_s:
            break
        tiles = inner(p)
        if tiles is not None and tiles not in seen:
            seen.add(tiles)
            out.append(p)
    return out


def _unit(op: Operator) -> tuple[bool, ...]:
    return tuple(e == 1 for e in op.extents)


def _kin(op: Operator) -> tuple:
    """What an alternate source must share with α (:func:`alternate_sources`): type, sketch, unit loops."""
    return op.type, op.sketch_key(), _unit(op)


def leads(alpha: Operator, beta: Operator, source, database: Database, target) -> tuple[list, list]:
    """Round T's leads besides β's kept and grown tiles, as the reuse tuner takes them: ``seeds``
    (α's instant program, measured as it is) and ``alternates`` (the tiles of up to
    ``ALTERNATE_SOURCES`` other operators' programs and of up to ``RUNNER_UPS`` of β's runner-ups,
    kept on α's loops). :class:`LeadCount` counts the same rules for the plan."""
    seeds = [p.tuning_record for p in database.programs(target=target, op=alpha) if p.method == PREDICTED]
    alternates = [p.tuning_record for p in alternate_sources(alpha, beta, database, target)]
    return seeds, alternates + [p.tuning_record for p in runner_ups(beta, source, database, target)]


class LeadCount:
    """How many tile configurations besides β's kept and grown tiles lead α's round T: the records
    :func:`leads` hands the reuse tuner (α's instant program, up to ``ALTERNATE_SOURCES`` other
    operators' tiles, up to ``RUNNER_UPS`` of β's runner-ups).

    The trial estimator counts β's kept and grown tiles; a plan that left these out under-costed
    every reuse by up to five candidates (retune at N = 200: 13-15 estimated, 13-23 measured). Before
    the plan is tuned, the set's other members stand for the operators tuned ahead of α, and a β not
    yet tuned is expected to give all ``RUNNER_UPS``. An upper bound: the tuner measures a
    configuration once, so seeds equal to β's tiles or to each other count once there (retuning
    BERT-Base at two new lengths measured 0.69-1.00 of the estimates with them, README).
    Built in O(programs); each call O(1) after β's runner-ups are read once (they parse β's records).
    """

    def __init__(self, database: Database | None, target, members: Iterable[Operator] = (),
                 tuned: Iterable[Operator] | None = None) -> None:
        """``tuned``: ``database.tuned(target)`` when the caller has it (the plan reads it once)."""
        self.database, self.target = database, target
        programs = database.programs(target=target) if database is not None and target is not None else []
        self._instant = {p.op for p in programs if p.method == PREDICTED}
        self._tuned = (set(tuned) if tuned is not None else set(database.tuned(target))) if programs else set()
        self._peers: dict[tuple, set[Operator]] = {}
        for op in [*members, *self._tuned]:
            self._peers.setdefault(_kin(op), set()).add(op)
        self._runner_ups: dict[Operator, int] = {}

    def __call__(self, alpha: Operator, beta: Operator) -> int:
        peers = self._peers.get(_kin(alpha), set()) - {alpha, beta}
        return int(alpha in self._instant) + min(ALTERNATE_SOURCES, len(peers)) + self.runner_ups(beta)

    def runner_ups(self, beta: Operator) -> int:
        if beta not in self._tuned:
            return RUNNER_UPS
        if beta not in self._runner_ups:
            assert self.database is not None
            source = self.database.best(beta, self.target, predicted=False)
            self._runner_ups[beta] = len(runner_ups(beta, source, self.database, self.target))
        return self._runner_ups[beta]


def alternate_sources(alpha: Operator, beta: Operator, database: Database, target, k: int = ALTERNATE_SOURCES) -> list:
    """The ``k`` tuned operators nearest α (log distance of the loop extents) of α's type and sketch,
    with α's loops of extent 1, besides α and β: their programs' tiles are measured first in the
    reuse search beside β's, so a derived program does not rest on one source, a bridge's say,
    whose best program the backend found by luck. Measured on ResNet-50 (README, "Whole sets")."""
    from tuner.analysis.tiling import log_distance

    found = [p for p in database.sources(op_type=alpha.type, target=target, sketch=alpha.sketch_key())
             if p.op not in (alpha, beta) and _unit(p.op) == _unit(alpha)]
    found.sort(key=lambda p: (log_distance(p.op.extents, alpha.extents), p.op.key))
    return found[:k]
