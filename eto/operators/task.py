"""TASK: a function of a model that no catalogue type describes (softmax, layer norm, GELU, a transpose).

Relax compiles such functions beside a model's convolutions and matmuls, and untuned they run TVM's
default schedules: one thread, scalar loops (a BERT-Base layer's softmax, layer norms and GELU take
about a fifth of its time that way). eto has no loop-nest model for them, so the plan never pairs
two (:func:`eto.runs.pipeline.tune` keeps them out of it); the backend tunes each, except where the
database holds the same function at another size (:func:`same_function_sources`: a model retuned
at a new sequence length), which the reuse tuner derives it from. The result is stored like any
operator's, so ``eto build`` applies it.

The operator is its function: ``hash`` is the PrimFunc's structural hash (the kind of hash
MetaSchedule's database keys workloads by), ``size`` its output's element count (for display), and
the fusion is the task's name without its numbers (``TASK(size=98304,hash=...)+softmax_broadcast_to``).
It has no FLOPs: a model's tuned-FLOPs share counts its catalogue tasks, as before.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterable, Sequence

from eto.errors import InputError
from eto.operators.base import MAX_PARAM, Operator, OperatorType, Param, register

if TYPE_CHECKING:  # pragma: no cover
    from tvm import tirx

#: Backend trials per TASK operator by default (one where its design space holds one program, as an
#: element-wise function's does: :func:`tuner.measure.backend.single_program`). Such functions are
#: memory-bound and their spaces small: on the BERT-Base layer MetaSchedule's 200-trial searches of
#: the softmax and the layer norm took 370 s, more than half of what its five matmuls took, and the
#: best of their first 32 trials was within 1.16x (softmax: 238 against 206 us) and 1.6x (layer
#: norm: 17.5 against 11.1 us, twice a layer) of the 200-trial best: 0.05 ms of a 9 ms layer.
FUNCTION_TRIALS = 32


@register
class ModelFunction(OperatorType):
    name = "TASK"
    description = ("a model's function outside the catalogue (softmax, norms, element-wise): backend-tuned, "
                   "reused only from itself at another size")
    params = (Param("size", "output elements"), Param("hash", "structural hash of the function (31 bits)"))
    space_names = ("i",)
    reduction_names = ()
    structural = ("hash",)  # in the display name: two functions of one size are told apart
    backend_only = True

    def loop_nest(self, p):
        return (p["size"],), ()

    def params_from_loop_nest(self, extents, structural):
        raise ValueError("TASK: a model function is not built from a loop nest (no bridges)")

    def flops(self, p):
        return 0

    def sketch_key(self, p, parallel_limit):
        return f"TASK:{p['hash']}"  # its own kind: never a reuse source or target

    def sketch_count(self, p, parallel_limit):
        return 1

    def input_shapes(self, p):
        raise InputError(_NO_PROGRAM)

    def output_shape(self, p):
        raise InputError(_NO_PROGRAM)

    def te(self, p, dtype):
        raise InputError(_NO_PROGRAM)

    def reference(self, p, *inputs):
        raise InputError(_NO_PROGRAM)


_NO_PROGRAM = "TASK: a model function's program comes from its model (eto tune --model), not from the catalogue"


def model_function(func: "tirx.PrimFunc", fusion: str) -> Operator:
    """The TASK operator of ``func`` (the function Relax compiles), named by ``fusion``."""
    from tvm_ffi import structural_hash

    size = max(1, math.prod(int(d) for d in func.params[-1].shape))
    op = Operator.create("TASK", size=min(size, MAX_PARAM), hash=structural_hash(func) % MAX_PARAM + 1)
    return op.with_fusion(fusion, func)


def same_function_sources(functions: Sequence[Operator], tuned: Iterable[Operator]) -> dict[Operator, Operator]:
    """For each function outside the catalogue, the tuned one of the same fusion (a model's softmax,
    layer norm... at another size: ``eto retune --model``) nearest in output elements, where the
    database holds one. The TASK type has no loop nest, so the plan never pairs them; the reuse
    tuner still can, when α's design space holds the source's sketch (else it says so and the
    backend tunes α). O(functions x tuned)."""
    have = [op for op in tuned if op.spec.backend_only and op.fusion]
    out = {}
    for alpha in functions:
        same = [op for op in have if op.fusion == alpha.fusion and op != alpha]
        if same:
            out[alpha] = min(same, key=lambda op: abs(math.log(op["size"] / alpha["size"])))
    return out
