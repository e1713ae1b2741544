"""Program analysis of MetaSchedule traces: sketch signatures, tile structure, decisions.

A MetaSchedule trace is the paper's sketch K plus annotations A: the instructions are the sketch,
the sampling decisions (``SamplePerfectTile`` tile sizes, ``SampleCategorical`` unroll and
cooperative-fetch lengths, ``SampleComputeLocation``) are the annotations.

The **sketch signature** is the instruction sequence without decisions, normalised so that two
operators of the same type and structure compare equal: variable names are renumbered, block
names are dropped, and instructions that only serve element-wise producer blocks (the padding
stage, inlined or computed at a loop) are left out, because whether an operator has padding does
not change how its major loop nest is tiled.

:class:`Sketch` wraps one trace (a design space of α, or β's best program) and can be applied to a
workload with new decisions: that is the paper's GetS.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from tvm.ir import IRModule
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

DECISION_KINDS = ("SamplePerfectTile", "SampleCategorical", "SampleComputeLocation")
TILING_KEY = "meta_schedule.tiling_structure"
UNROLL_KEYS = ("meta_schedule.unroll_explicit", "meta_schedule.unroll_implicit")
FETCH_KEY = "meta_schedule.cooperative_fetch"


def plain(obj: Any) -> Any:
    """TVM containers and IntImm/FloatImm to plain Python (JSON-ready)."""
    name = type(obj).__name__
    if name in ("IntImm", "FloatImm"):
        return obj.value
    if isinstance(obj, (list, tuple)) or name == "Array":
        return [plain(x) for x in obj]
    if isinstance(obj, dict) or name == "Map":
        return {plain(k): plain(v) for k, v in obj.items()}
    return obj


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


class Sketch:
    """One trace split into its instructions (the sketch) and decisions (the annotations)."""

    def __init__(self, trace: "Trace") -> None:
        # MetaSchedule stores tuned traces simplified (dead queries such as GetConsumers dropped):
        # simplify design-space traces the same way so that both compare equal.
        insts, decisions = plain(trace.simplified(remove_postproc=True).as_json(remove_postproc=True))
        self.insts: list[list] = insts
        self.decisions: dict[int, Any] = {int(i): d for i, d in decisions}
        self._tainted = self._taint()
        self.tiles = self._find_tiles()

    # -- structure ------------------------------------------------------------------------
    def _taint(self) -> set[int]:
        """Instructions that only concern element-wise producer blocks (e.g. padding)."""
        anchors = set()
        for inst in self.insts:
            if inst[0] == "Annotate" and inst[2] and inst[2][0] == TILING_KEY:
                anchors.add(inst[1][0])
        block_names = {inst[3][0]: inst[2][0] for inst in self.insts if inst[0] == "GetSBlock"}
        tainted_vars = {v for v, name in block_names.items() if v not in anchors and name != "root"}
        tainted: set[int] = set()
        for i, (kind, inputs, _attrs, outputs) in enumerate(self.insts):
            refs = {x for x in _flatten(inputs) if isinstance(x, str)}
            if kind == "GetSBlock":
                if outputs[0] in tainted_vars:
                    tainted.add(i)
            elif refs & tainted_vars:
                tainted.add(i)
                tainted_vars.update(outputs)
        return tainted

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
            n_s, n_r = structure.count("S"), structure.count("R")
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

    def decision_slots(self) -> list[int]:
        """Indices of the decisions that belong to the sketch (producer-block ones excluded), in order."""
        return [i for i, inst in enumerate(self.insts) if inst[0] in DECISION_KINDS and i not in self._tainted]

    @property
    def signature(self) -> str:
        """Hash of the normalised instruction sequence (see the module docstring)."""
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
            if i in self._tainted:
                continue
            if kind == "GetSBlock":
                attrs = ["<block>"]
            seq.append([kind, norm(inputs), attrs, norm(outputs)])
        return hashlib.sha1(json.dumps(seq, sort_keys=True).encode()).hexdigest()[:16]

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

    def tile_decisions(self) -> tuple[list[list[int]], list[list[int]]]:
        t = self.main_tiles
        return ([list(self.decisions[i]) for i in t.space], [list(self.decisions[i]) for i in t.reduction])


def _flatten(x: Any):
    if isinstance(x, list):
        for y in x:
            yield from _flatten(y)
    else:
        yield x
