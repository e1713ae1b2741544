"""B, T, M: the features the paper reads from a program (section 3), on GPU and on CPU.

The analytic cost models that rank BShapes and TShapes by these features are in
:mod:`tuner.reuse.cost_model`.

Tile decisions of a multi-level tile sketch give, per loop of the major loop nest, one factor per
tile level. Each level has a role:

======  =====================================  ==================================
level   GPU "SSSRRSRS"                          CPU "SSRSRS" (eto's analogue)
======  =====================================  ==================================
S0      blockIdx: thread blocks                 parallel tasks (the fused outer loop)
S1      vthread                                 --
S2      threadIdx: threads of a block           sub-tiles of a task ("threads")
S3, S4  one thread's work                       S2, S3: the register tile (S3 vectorised)
R0      cooperative fetches (LShape)            cache blocks of the reduction (LShape)
R1, R2  one fetch's reduction                   R1: reduction inside a cache block
======  =====================================  ==================================

BShape = the output tile of one block (task): extent / S0 per space loop. TShape = (vthread
factors, the output tile of one thread). LShape = the R0 factors. B = blocks, T = threads in all
blocks, M = bytes staged per block for one fetch (the shared-memory tile on GPU, the per-task
working set of one cache block on CPU) times B. On CUDA :func:`lowered_btm` reads B, T and the
shared bytes from the lowered function, which is what the hardware sees.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Sequence

from tuner.analysis.kinds import Kind

if TYPE_CHECKING:  # pragma: no cover
    from tvm.ir import IRModule
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.target import Target

    from tuner.analysis.sketch import Sketch

class cached_property:  # noqa: N801 (named as the functools one it replaces)
    """``functools.cached_property`` without Python 3.11's per-class lock (a measurable share of ResNet-50's
    planning time: ~10^5 tile configurations per plan); writes ``__dict__``, so it works on frozen dataclasses."""

    def __init__(self, func):
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.func(obj)
        return value


@functools.lru_cache(maxsize=1 << 18)
def _footprint(shape: tuple[int, ...], coeffs: tuple[tuple[int, ...], ...], tile: tuple[int, ...]) -> tuple[int, ...]:
    # cached: the trial estimator asks for the same boxes thousands of times per pair
    return tuple(min(s, sum(abs(c) * (t - 1) for c, t in zip(row, tile)) + 1) for s, row in zip(shape, coeffs))


@functools.lru_cache(maxsize=1 << 12)
def _strides(shape: tuple[int, ...], coeffs: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    # cached: the register model asks for every input's strides per block it scores
    dims = [math.prod(shape[j + 1:]) for j in range(len(shape))]
    return tuple(sum(c[loop] * dims[j] for j, c in enumerate(coeffs)) for loop in range(len(coeffs[0]))) \
        if coeffs else ()


@dataclass(frozen=True)
class Access:
    """How one input of the major loop nest is indexed: per buffer dim, coefficients per loop."""

    name: str
    shape: tuple[int, ...]
    coeffs: tuple[tuple[int, ...], ...]  # [buffer dim][loop] (space loops then reduction loops)
    dtype_bytes: int = 4
    packed: bool = False  # layout-free (a model's weight): RewriteLayout stores it as the tiles read it

    def footprint(self, tile: Sequence[int]) -> tuple[int, ...]:
        """Extent per buffer dim of the box touched when each loop ranges over ``tile`` values."""
        return _footprint(self.shape, self.coeffs, tuple(tile))

    def elements(self, tile: Sequence[int]) -> int:
        return math.prod(_footprint(self.shape, self.coeffs, tuple(tile)))

    def strides(self) -> tuple[int, ...]:
        """Elements between neighbours along each loop of the nest (row-major buffer); 1 along each loop
        that indexes a :attr:`packed` input (an NHWC convolution's OHWI weight along the output channels)."""
        strides = _strides(self.shape, self.coeffs)
        return tuple(1 if s else 0 for s in strides) if self.packed else strides

    def cache_lines(self, tile: Sequence[int], line_bytes: int) -> int:
        """Cache lines of the box, row-major: trailing dims covered whole form one contiguous run."""
        fp = self.footprint(tile)
        k = len(fp) - 1
        while k > 0 and fp[k] == self.shape[k]:
            k -= 1
        run = math.prod(fp[k:]) * self.dtype_bytes
        return math.prod(fp[:k]) * math.ceil(run / line_bytes)


@dataclass(frozen=True)
class LoopNest:
    """The major loop nest of an operator and how its inputs are read."""

    space: tuple[int, ...]
    reduction: tuple[int, ...]
    inputs: tuple[Access, ...]

    def __hash__(self) -> int:  # cached: loop nests key the reuse search's caches (tuner.reuse.space)
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.space, self.reduction, self.inputs))
            object.__setattr__(self, "_hash", h)
        return h

    @property
    def extents(self) -> tuple[int, ...]:
        return self.space + self.reduction

    def staged_bytes(self, tile: tuple[int, ...]) -> int:
        """Bytes of all inputs touched by one ``tile`` of the loops (space then reduction)."""
        return _staged_bytes(self, tile)

    def gathers(self, loop: int) -> int:
        """The inputs a vector along ``loop`` gathers: those read with a stride there, neither
        contiguous nor broadcast (BMM's ``Y[b, j, k]`` along ``j``). O(inputs x dims x loops)."""
        return sum(1 for a in self.inputs if a.strides()[loop] not in (0, 1))

    def gathered(self, loop: int) -> bool:
        """Whether a vector along ``loop`` gathers some input (:meth:`gathers`)."""
        return self.gathers(loop) > 0


@functools.lru_cache(maxsize=1 << 16)
def _staged_bytes(nest: LoopNest, tile: tuple[int, ...]) -> int:
    # cached: the reuse search and the estimator ask for the same block tiles many times
    return sum(a.elements(tile) * a.dtype_bytes for a in nest.inputs)


def loop_nest_of(mod: "IRModule", block: str) -> LoopNest:
    """Read the block's loop extents and the affine index coefficients of its inputs."""
    from tvm.s_tir import Schedule

    sch = Schedule(mod)
    blk = sch.get(sch.get_sblock(block))
    packed = _layout_free(mod)
    ivs = list(blk.iter_vars)
    space = [iv for iv in ivs if int(iv.iter_type) == 0]
    red = [iv for iv in ivs if int(iv.iter_type) != 0]
    order = space + red
    inputs = []
    for r in blk.reads:
        buf = region_buffer(r)
        if any(region_buffer(w).same_as(buf) for w in blk.writes):  # the accumulator
            continue
        rows = []
        for rng in r.region:
            expr = rng.min
            base = _eval(expr, {iv.var: 0 for iv in order})
            row = []
            for iv in order:
                one = _eval(expr, {v.var: (1 if v is iv else 0) for v in order})
                row.append(one - base if one is not None and base is not None else 1)
            rows.append(tuple(row))
        shape = tuple(int(s) for s in buf.shape)
        inputs.append(Access(buf.name, shape, tuple(rows), _bytes(buf.dtype), packed=buf.name in packed))
    return LoopNest(tuple(int(iv.dom.extent) for iv in space), tuple(int(iv.dom.extent) for iv in red),
                    tuple(inputs))


def _layout_free(mod: "IRModule") -> frozenset[str]:
    """Names of the layout-free arguments of ``mod``'s function (``layout_free_buffers``: positions)."""
    func = next(iter(mod.functions.values()))
    return frozenset(func.params[int(i)].name for i in (func.attrs or {}).get("layout_free_buffers", ()))


def major_block(mod: "IRModule") -> str:
    """The name of the block of the major loop nest: the one with the most loops among reductions."""
    from tvm.s_tir import Schedule

    sch = Schedule(mod)
    blocks = [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root"))]
    if not blocks:
        raise ValueError("the program has no blocks")
    return max(blocks, key=lambda b: (any(int(iv.iter_type) != 0 for iv in b.iter_vars), len(b.iter_vars))).name_hint


def major_extents(mod: "IRModule") -> tuple[int, ...] | None:
    """Loop extents of ``mod``'s major loop nest (space, then reduction); None if it cannot be read.
    What tells a learned ranker whether it has seen workloads of α's shape."""
    try:
        return loop_nest_of(mod, major_block(mod)).extents
    except (ValueError, TypeError, RuntimeError):  # no blocks; a symbolic extent (int() of a Var); TVM's refusal
        return None


def producer_count(mod: "IRModule") -> int:
    """Blocks besides the major loop nest's (e.g. a convolution's padding stage): a reuse from a
    program without them places them in a round of its own (:mod:`tuner.analysis.subsketch`, "place")."""
    from tvm.s_tir import Schedule

    sch = Schedule(mod)
    return max(0, len(sch.get_child_blocks(sch.get_sblock("root"))) - 1)


def region_buffer(region):
    return region.buffer if hasattr(region, "buffer") else region.source


def _eval(expr, values) -> int | None:
    """The integer value of ``expr`` with its variables bound to ``values`` (None if not constant)."""
    from tvm.sym import Analyzer

    ana = Analyzer()
    for var, value in values.items():
        ana.bind(var, value)
    out = ana.simplify(expr)
    return int(out.value) if hasattr(out, "value") else None


def _bytes(dtype) -> int:
    s = str(dtype)
    digits = "".join(ch for ch in s if ch.isdigit())
    return max(1, int(digits or 32) // 8)


# -- tile configurations ------------------------------------------------------------------------
@dataclass(frozen=True)
class TileConfig:
    """Tile factors per loop and level, with the features the paper derives from them."""

    kind: Kind
    space: tuple[tuple[int, ...], ...]
    reduction: tuple[tuple[int, ...], ...]

    # level roles
    @property
    def _thread_level(self) -> int:
        return 2 if self.kind == "cuda" else 1

    @property
    def _vthread_level(self) -> int | None:
        return 1 if self.kind == "cuda" else None

    @cached_property
    def block_counts(self) -> tuple[int, ...]:
        return tuple(f[0] for f in self.space)

    @cached_property
    def bshape(self) -> tuple[int, ...]:
        return tuple(math.prod(f[1:]) for f in self.space)

    @cached_property
    def thread_counts(self) -> tuple[int, ...]:
        return tuple(f[self._thread_level] for f in self.space)

    @cached_property
    def vthreads(self) -> tuple[int, ...]:
        v = self._vthread_level
        return tuple(f[v] if v is not None else 1 for f in self.space)

    @cached_property
    def thread_tile(self) -> tuple[int, ...]:
        return tuple(math.prod(f[self._thread_level + 1:]) for f in self.space)

    @property
    def tshape(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return self.vthreads, self.thread_tile

    @cached_property
    def lshape(self) -> tuple[int, ...]:
        return tuple(f[0] for f in self.reduction)

    @property
    def B(self) -> int:
        return math.prod(self.block_counts)

    @property
    def threads_per_block(self) -> int:
        return math.prod(self.thread_counts)

    @property
    def T(self) -> int:
        return self.B * self.threads_per_block

    def chunk(self) -> tuple[int, ...]:
        """Reduction extent of one fetch: ext / LShape."""
        return tuple(math.prod(f[1:]) for f in self.reduction)

    def thread_work(self) -> int:
        """Iterations one thread (CPU: one sub-task) runs per fetch: its tile times the fetch's chunk."""
        return math.prod(self.thread_tile) * math.prod(math.prod(f[1:]) for f in self.reduction)

    def block_bytes(self, nest: LoopNest) -> int:
        """Bytes one block stages for one fetch (shared memory on GPU, a cache block on CPU)."""
        return nest.staged_bytes(self.bshape + self.chunk())

    def M(self, nest: LoopNest) -> int:
        return self.B * self.block_bytes(nest)

    def decisions(self) -> list[list[int]]:
        return [list(f) for f in self.space] + [list(f) for f in self.reduction]

    def features(self, nest: LoopNest) -> dict:
        """B, T, M and the three shapes as plain data (what the database stores with a program)."""
        return {"B": self.B, "T": self.T, "M": self.M(nest), "bshape": list(self.bshape),
                "tshape": [list(x) for x in self.tshape], "lshape": list(self.lshape)}


def program_features(record: "TuningRecord", kind: Kind, *,
                     sketch: "Sketch | None" = None) -> tuple[TileConfig, LoopNest]:
    """The tile configuration of a tuned program (its B/T/M features) and its major loop nest.

    ``sketch``: the record's trace already parsed (saves parsing it again).
    """
    from tuner.analysis.sketch import Sketch

    sketch = sketch or Sketch(record.trace)
    space, reduction = sketch.tile_decisions()
    cfg = TileConfig(kind, tuple(map(tuple, space)), tuple(map(tuple, reduction)))
    return cfg, loop_nest_of(record.workload.mod, sketch.main_tiles.block)


def align_loops(nest: LoopNest, cfg: TileConfig, to: LoopNest) -> tuple[LoopNest, TileConfig] | None:
    """β's loop nest and tiles on α's loop ranks: a program of a fused task of another rank (a
    3-loop dense under ``matmul+add`` for a 4-loop batch matmul) speaks for α's loops.

    Space loops pair from the innermost out (a batch or an unsqueezed unit dimension is outermost
    in every anchor here); a loop α has and β lacks is a unit loop of β (one tile at every level),
    a loop β has and α lacks is dropped. Reduction loops and tile levels must match, else None.
    O(loops x inputs)."""
    if len(nest.reduction) != len(to.reduction) or len({len(f) for f in cfg.space}) > 1:
        return None
    extra = len(to.space) - len(nest.space)
    if extra == 0:
        return nest, cfg
    levels = len(cfg.space[0]) if cfg.space else 0
    if extra > 0:
        space = (1,) * extra + nest.space
        tiles = ((1,) * levels,) * extra + cfg.space
        inputs = tuple(replace(a, coeffs=tuple((0,) * extra + row for row in a.coeffs))
                       for a in nest.inputs)
    else:
        space, tiles = nest.space[-extra:], cfg.space[-extra:]
        inputs = tuple(replace(a, coeffs=tuple(row[-extra:] for row in a.coeffs)) for a in nest.inputs)
    return LoopNest(space, nest.reduction, inputs), TileConfig(cfg.kind, tiles, cfg.reduction)


# -- reading B/T/M from a lowered CUDA function -------------------------------------------------
@dataclass(frozen=True)
class LoweredBTM:
    blocks: int
    threads_per_block: int
    shared_bytes_per_block: int

    @property
    def B(self) -> int:
        return self.blocks

    @property
    def T(self) -> int:
        return self.blocks * self.threads_per_block

    @property
    def M(self) -> int:
        return self.blocks * self.shared_bytes_per_block


def lowered_btm(mod: "IRModule", target: "Target") -> LoweredBTM:
    """B, threads per block and shared bytes per block of the (single-kernel) lowered program, read after
    the default TIR pipeline (shared allocations are final only there; vthread is not threads) from the
    kernel's TVMScript (``T.launch_thread``, ``T.alloc_shared``): TVM 0.27 has no Python statement visitor."""
    import re

    import tvm
    from tvm import tirx
    from tvm.tirx.compilation_pipeline import get_default_tir_pipeline

    with target:
        lowered = tirx.transform.BindTarget(target)(mod)
        lowered = get_default_tir_pipeline(target)[0](lowered)
    extents: dict[str, int] = {}
    shared = kernels = 0
    for _gv, func in lowered.functions_items():
        if not isinstance(func, tirx.PrimFunc) or func.attrs is None or int(func.attrs.get("calling_conv", 0)) != 2:
            continue  # device kernels only
        kernels += 1
        text = func.script()
        for tag, value in re.findall(r'T\.launch_thread\("((?:blockIdx|threadIdx)\.[xyz])", (\d+)\)', text):
            extents[tag] = int(value)
        for shape, dtype in re.findall(r'T\.alloc_shared\(\(([\d, ]+)\)(?:, "(\w+)")?', text):
            shared += math.prod(int(x) for x in shape.replace(" ", "").strip(",").split(",")) * _bytes(dtype or "float32")
    if kernels != 1:
        raise ValueError(f"expected one CUDA kernel, found {kernels}")
    blocks = math.prod(v for k, v in extents.items() if k.startswith("blockIdx"))
    threads = math.prod(v for k, v in extents.items() if k.startswith("threadIdx"))
    del tvm
    return LoweredBTM(blocks, threads, shared)
