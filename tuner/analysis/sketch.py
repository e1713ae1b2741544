"""Program analysis of MetaSchedule traces: sketch signatures, tile structure, decisions.

A MetaSchedule trace is the paper's sketch K plus annotations A: the instructions are the sketch,
the sampling decisions (``SamplePerfectTile`` tile sizes, ``SampleCategorical`` unroll and
cooperative-fetch lengths, ``SampleComputeLocation``) are the annotations.

The **sketch signature** is the instruction sequence without decisions, normalised so that two
operators of the same type and structure compare equal: variable names are renumbered, block
names are dropped, and instructions that only place element-wise producer blocks (the padding
stage, inlined or computed at a loop, never tiled) are left out, because whether an operator has
padding does not change how its major loop nest is tiled. Blocks with tiling of their own (rfactor,
cross-thread reduction, Winograd's transforms) are sub-sketches: they stay in the signature and
:mod:`tuner.analysis.subsketch` tunes their decisions.

The **sketch family** (:attr:`Sketch.family`) abstracts further what differs between fused tasks of
one anchor: the write stage (MetaSchedule's cache write, or the element-wise consumer it writes
through) and the number of loops. The reuse tuner falls back to it when α's design space has no
sketch with β's signature (a ``matmul`` reusing a ``matmul+add`` program).

:class:`Sketch` wraps one trace (a design space of α, or β's best program) and can be applied to a
workload with new decisions: that is the paper's GetS.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from tuner.tvm_errors import TVM_ERRORS

if TYPE_CHECKING:  # pragma: no cover
    from tvm.ir import IRModule
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

DECISION_KINDS = ("SamplePerfectTile", "SampleCategorical", "SampleComputeLocation")
TILING_KEY = "meta_schedule.tiling_structure"
UNROLL_KEYS = ("meta_schedule.unroll_explicit", "meta_schedule.unroll_implicit")
FETCH_KEY = "meta_schedule.cooperative_fetch"
#: Annotations whose *value* MetaSchedule's mutators change (MutateParallel): part of the program's
#: annotations A, not of its sketch K, so signatures ignore the value and GetS takes β's.
VALUE_KEYS = ("meta_schedule.parallel",)
#: What is done to a block that only produces elements for another: placed, never tiled.
PLACEMENT_KINDS = frozenset({"GetSBlock", "SampleComputeLocation", "ComputeAt", "ReverseComputeAt", "ComputeInline",
                             "ReverseComputeInline", "GetProducers", "GetConsumers", "Annotate", "Unannotate",
                             "GetLoops"})
#: The instructions that create and place a tiled block's write stage (MetaSchedule's ``reuse_write``).
WRITE_STAGE_KINDS = frozenset({"CacheWrite", "GetConsumers", "ReverseComputeAt"})
#: Instructions a :attr:`Sketch.family` leaves out: which blocks and loops exist, how many tile
#: splits there are, and how the write stage is created vary with the epilogue and the rank.
_FAMILY_SKIP = frozenset({"GetSBlock", "GetLoops", "GetConsumers", "CacheWrite", "SamplePerfectTile", "Split",
                          "Reorder"})


def plain(obj: Any, other: Callable[[Any], Any] = lambda o: o) -> Any:
    """TVM containers and IntImm/FloatImm to plain Python (JSON-ready); any other object through ``other``."""
    name = type(obj).__name__
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if name in ("IntImm", "FloatImm"):
        return obj.value
    if isinstance(obj, (list, tuple)) or name == "Array":
        return [plain(x, other) for x in obj]
    if isinstance(obj, dict) or name == "Map":
        return {plain(k, other): plain(v, other) for k, v in obj.items()}
    return other(obj)


@dataclass(frozen=True)
class TileLevels:
    """The multi-level tiling of one block: which instruction tiles which loop, at how many levels."""

    block: str
    structure: str  # e.g. "SSRSRS" (CPU) or "SSSRRSRS" (GPU)
    space: tuple[int, ...]  # instruction indices of the SamplePerfectTile of each space loop, loop order
    reduction: tuple[int, ...]  # same for the reduction loops
    unroll: int | None  # instruction index of the unroll SampleCategorical
    fetch: tuple[int, ...]  # cooperative-fetch SampleCategorical per cached input (GPU)

    @property
    def s_levels(self) -> int:
        return self.structure.count("S")

    @property
    def r_levels(self) -> int:
        return self.structure.count("R")

    @property
    def decisions(self) -> set[int]:
        """The decisions Algorithm 1 sets on this block (tiles, unroll, cooperative fetch)."""
        return set(self.space + self.reduction + self.fetch) | ({self.unroll} if self.unroll is not None else set())


class Sketch:
    """One trace split into its instructions (the sketch) and decisions (the annotations)."""

    def __init__(self, trace: "Trace") -> None:
        # MetaSchedule stores tuned traces simplified (dead queries such as GetConsumers dropped):
        # simplify design-space traces the same way so that both compare equal.
        self._load(*plain(trace.simplified(remove_postproc=True).as_json(remove_postproc=True)))

    @classmethod
    def from_json(cls, trace_json: list) -> "Sketch":
        """A tuned program's trace as its database line stores it (``[instructions, decisions]``, which
        MetaSchedule writes simplified), read without TVM: a TuningRecord replays its trace on the
        workload, about 7 ms a program, where this reads the same decisions in 0.1 ms (the tile
        decisions of 1,200 stored programs of three databases, CNNs and BERT, were equal both ways)."""
        if not (isinstance(trace_json, list) and len(trace_json) == 2):
            raise ValueError(f"not a stored trace ([instructions, decisions]): {str(trace_json)[:80]}")
        sketch = cls.__new__(cls)
        sketch._load(*trace_json)
        return sketch

    def _load(self, insts: list, decisions: list) -> None:
        self.insts: list[list] = insts
        self.decisions: dict[int, Any] = {int(i): d for i, d in decisions}
        self._tainted = self._taint()
        self.tiles = self._find_tiles()

    # -- structure ------------------------------------------------------------------------
    def _taint(self) -> set[int]:
        """Instructions that only place element-wise producer blocks (padding, input tiles).

        A block is such a producer when nothing tiles it: its instructions are compute-at / inline
        placements only. Blocks with tiling of their own (rfactor, two-level tiles, cross-thread
        reduction) are sub-sketches and stay in the signature.
        """
        anchors = {inst[1][0] for inst in self.insts if inst[0] == "Annotate" and inst[2] and inst[2][0] == TILING_KEY}
        names = {inst[3][0]: inst[2][0] for inst in self.insts if inst[0] == "GetSBlock"}
        producers = {v for v, kinds in self._block_kinds().items()
                     if names.get(v) != "root" and v not in anchors and kinds <= PLACEMENT_KINDS}
        tainted: set[int] = set()
        for i, (inst, roots) in enumerate(zip(self.insts, self._roots)):
            if inst[0] == "GetSBlock":
                if inst[3][0] in producers:
                    tainted.add(i)
            elif roots and roots <= producers:
                tainted.add(i)
        return tainted

    def _block_kinds(self) -> dict[str, set[str]]:
        """Per block variable, the instruction kinds that act on it or on what derives from it."""
        owner = {inst[3][0]: inst[3][0] for inst in self.insts if inst[0] == "GetSBlock"}
        kinds: dict[str, set[str]] = {v: set() for v in owner}
        self._roots: list[set[str]] = []
        for kind, inputs, _attrs, outputs in self.insts:
            roots = {owner[x] for x in _flatten(inputs) if isinstance(x, str) and x in owner}
            for o in _flatten(outputs):
                if isinstance(o, str) and o not in owner and roots:
                    owner[o] = min(roots)
            self._roots.append(roots)
            for r in roots:
                kinds[r].add(kind)
        self._owner = owner
        return kinds

    def _find_tiles(self) -> list[TileLevels]:
        tiles = []
        var_owner: dict[str, int] = {}  # SampleCategorical output var -> instruction index
        for i, inst in enumerate(self.insts):
            if inst[0] == "SampleCategorical":
                var_owner[inst[3][0]] = i
        for i, inst in enumerate(self.insts):
            if not (inst[0] == "Annotate" and inst[2] and inst[2][0] == TILING_KEY):
                continue
            block_var = inst[1][0]
            structure = json.loads(inst[1][1]) if isinstance(inst[1][1], str) else str(inst[1][1])
            n_s = structure.count("S")
            loops = next(x[3] for x in self.insts[i:] if x[0] == "GetLoops" and x[1][0] == block_var)
            space, reduction = [], []
            for j, x in enumerate(self.insts):
                if x[0] == "SamplePerfectTile" and x[1][0] in loops:
                    # space loops are split into n_s levels, reduction loops into n_r (n_s != n_r)
                    (space if x[2][0] == n_s else reduction).append(j)
            tiles.append(TileLevels(block=self._block_name(block_var), structure=structure,
                                    space=tuple(space), reduction=tuple(reduction), unroll=None, fetch=()))
        unroll = fetch = None
        fetches = []
        for inst in self.insts:
            if inst[0] == "Annotate" and inst[2] and inst[2][0] in UNROLL_KEYS and inst[1][1] in var_owner:
                unroll = var_owner[inst[1][1]]
            if inst[0] == "Annotate" and inst[2] and inst[2][0] == FETCH_KEY and inst[1][1] in var_owner:
                fetches.append(var_owner[inst[1][1]])
        fetch = tuple(fetches)
        return [TileLevels(t.block, t.structure, t.space, t.reduction, unroll, fetch) for t in tiles]

    def _block_name(self, var: str) -> str:
        for inst in self.insts:
            if inst[0] == "GetSBlock" and inst[3][0] == var:
                return inst[2][0]
        return var

    @property
    def main_tiles(self) -> TileLevels:
        """The multi-level tiling of the major loop nest (the block with the most tiled loops)."""
        if not self.tiles:
            raise ValueError("the trace has no multi-level tiling (not a multi-level tile sketch)")
        return max(self.tiles, key=lambda t: len(t.space) + len(t.reduction))

    def decision_blocks(self) -> dict[int, str]:
        """The block each decision concerns (by name), for reports and round names."""
        names = {inst[3][0]: inst[2][0] for inst in self.insts if inst[0] == "GetSBlock"}
        return {i: names.get(min(self._roots[i]), "") if self._roots[i] else ""
                for i, inst in enumerate(self.insts) if inst[0] in DECISION_KINDS}

    def unroll_slots(self) -> set[int]:
        """The ``SampleCategorical`` instructions whose value is an auto-unroll limit."""
        owner = {inst[3][0]: i for i, inst in enumerate(self.insts) if inst[0] == "SampleCategorical"}
        return {owner[inst[1][1]] for inst in self.insts
                if inst[0] == "Annotate" and inst[2] and inst[2][0] in UNROLL_KEYS and inst[1][1] in owner}

    def tainted_decisions(self) -> set[int]:
        return {i for i in self._tainted if self.insts[i][0] in DECISION_KINDS}

    def decision_slots(self) -> list[int]:
        """Indices of the decisions that belong to the sketch (producer-block ones excluded), in order."""
        return [i for i, inst in enumerate(self.insts) if inst[0] in DECISION_KINDS and i not in self._tainted]

    @property
    def signature(self) -> str:
        """Hash of the normalised instruction sequence (see the module docstring)."""
        return self._hash(frozenset())

    @property
    def stageless(self) -> str:
        """The :attr:`signature` without the write stage (:data:`WRITE_STAGE_KINDS`): equal for the
        sketches MetaSchedule's multi-level tiling makes of one block that differ only in where, or
        whether, the tile is written back through a cache or a consumer."""
        return self._hash(WRITE_STAGE_KINDS)

    def _hash(self, skip: frozenset) -> str:
        rename: dict[str, str] = {}

        def norm(x: Any) -> Any:
            if isinstance(x, list):
                return [norm(y) for y in x]
            if isinstance(x, str) and x[:1] in ("b", "l", "v") and x[1:].isdigit():
                rename.setdefault(x, f"{x[0]}{len(rename)}")
                return rename[x]
            return x

        seq = []
        for i, (kind, inputs, attrs, outputs) in enumerate(self.insts):
            if i in self._tainted or kind in skip:
                continue
            if kind == "GetSBlock":
                attrs = ["<block>"]
            elif _annotates_value(self.insts[i]):
                inputs = [inputs[0], "<value>"]
            seq.append([kind, norm(inputs), attrs, norm(outputs)])
        return hashlib.sha1(json.dumps(seq, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def family(self) -> str:
        """Hash of the sketch with its epilogue and loop counts abstracted: what a fused task shares
        with the same anchor under another epilogue (``matmul`` and ``matmul+add``) or another rank
        (a 3-loop dense, a 4-loop batch matmul).

        MetaSchedule writes a tiled block's result back through a stage placed at one of its tile
        loops: a cache it creates (``CacheWrite``) when the anchor has no element-wise consumer, the
        consumer itself (``GetConsumers``) when it has one. Both are the same write stage here,
        named by where it sits: its tile level and the loop's position counted from the innermost
        space loop. Tile splits are named by their level count only, so one family spans loop nests
        of different ranks. Defined for sketches with one multi-level tiled block and nothing else
        tiled; others get their :attr:`signature`. O(trace length).
        """
        t = self.tiles[0] if len(self.tiles) == 1 else None
        tiled = set(t.space + t.reduction) if t is not None else set()
        if t is None or any(inst[0] == "SamplePerfectTile" and i not in self._tainted and i not in tiled
                            for i, inst in enumerate(self.insts)):
            return self.signature
        level = self._space_levels()
        seq: list = [t.structure]
        for i, (kind, inputs, attrs, _outputs) in enumerate(self.insts):
            if i in self._tainted or kind in _FAMILY_SKIP:
                continue
            if kind == "ReverseComputeAt":
                seq.append(["write-stage", level.get(inputs[1], "?"), attrs])
            elif kind == "Annotate":  # literal values only: sampled ones (variables) and VALUE_KEYS vary
                value = inputs[1] if isinstance(inputs[1], int) and not _annotates_value(self.insts[i]) else None
                seq.append([kind, attrs, value])
            else:
                seq.append([kind, attrs])
        return hashlib.sha1(json.dumps(seq, sort_keys=True).encode()).hexdigest()[:16]

    def _space_levels(self) -> dict[str, tuple[int, int]]:
        """Per tile loop of the main block's space loops: (tile level, position from the innermost loop)."""
        t = self.main_tiles
        out = {}
        for pos, i in enumerate(reversed(t.space)):
            split = next((x for x in self.insts if x[0] == "Split" and x[1][1:] == self.insts[i][3]), None)
            for lvl, loop in enumerate(split[3] if split is not None else ()):
                out[loop] = (lvl, pos)
        return out

    def decision_map(self, other: "Sketch") -> dict[int, int] | None:
        """This sketch's decision instructions paired in order with ``other``'s (index -> index), or
        None when their kinds and tile levels differ: a GetS decision set moved to a sibling sketch."""
        mine = [i for i, inst in enumerate(self.insts) if inst[0] in DECISION_KINDS]
        theirs = [i for i, inst in enumerate(other.insts) if inst[0] in DECISION_KINDS]
        if len(mine) != len(theirs) or any(self.insts[i][0::2] != other.insts[j][0::2] for i, j in zip(mine, theirs)):
            return None
        return dict(zip(mine, theirs))

    def with_values_of(self, other: "Sketch") -> "Sketch":
        """This sketch with ``other``'s values of the :data:`VALUE_KEYS` annotations (in order)."""
        mine = [i for i, inst in enumerate(self.insts) if _annotates_value(inst)]
        theirs = [inst for inst in other.insts if _annotates_value(inst)]
        if len(mine) != len(theirs):
            return self
        out = copy.copy(self)
        out.insts = [list(inst) for inst in self.insts]
        for i, inst in zip(mine, theirs):
            out.insts[i][1] = [out.insts[i][1][0], inst[1][1]]
        return out

    # -- GetS ---------------------------------------------------------------------------------
    def apply(self, mod: "IRModule", decisions: Mapping[int, Any] | None = None) -> "Schedule":
        """Replay this sketch on ``mod`` with ``decisions`` overriding the trace's own."""
        from tvm.s_tir import Schedule
        from tvm.s_tir.schedule import Trace

        merged = dict(self.decisions)
        merged.update(decisions or {})
        sch = Schedule(mod)
        Trace.apply_json_to_schedule([self.insts, [[i, d] for i, d in sorted(merged.items())]], sch)
        return sch

    def applied(self, mod: "IRModule", decisions: Mapping[int, Any]) -> "Schedule | None":
        """:meth:`apply`, or None where a schedule primitive refuses a decision (a tile that does not
        divide, a vector lane count the loop cannot take): a candidate that does not exist."""
        try:
            return self.apply(mod, decisions)
        except TVM_ERRORS:  # the primitives' refusals (ScheduleError, or a check failed in TVM's C++)
            return None

    def tile_decisions(self) -> tuple[list[list[int]], list[list[int]]]:
        t = self.main_tiles
        return ([list(self.decisions[i]) for i in t.space], [list(self.decisions[i]) for i in t.reduction])


def _annotates_value(inst: list) -> bool:
    return inst[0] == "Annotate" and bool(inst[2]) and inst[2][0] in VALUE_KEYS and len(inst[1]) == 2


def _flatten(x: Any):
    if isinstance(x, list):
        for y in x:
            yield from _flatten(y)
    else:
        yield x
