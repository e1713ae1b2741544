"""The operator catalogue: the paper's ten operator types plus DENSE, and TASK for a model's other functions.

>>> from eto.operators import Operator
>>> op = Operator.create("C2D", N=1, CI=512, H=28, W=28, CO=128, KH=1, KW=1)
>>> op.extents                      # [N, CO, OH, OW, CI, KH, KW]
(1, 128, 28, 28, 512, 1, 1)
"""

from eto.operators.base import (DEFAULT_PARALLEL_LIMIT, MAX_PARAM, Operator, OperatorType, Param, operator_type,
    operator_types)
from eto.operators import channels_last, conv, matmul, norm, task, winograd  # noqa: F401  (registers the types)
from eto.operators.winograd import transform_weight

__all__ = [
    "DEFAULT_PARALLEL_LIMIT",
    "MAX_PARAM",
    "Operator",
    "OperatorType",
    "Param",
    "operator_type",
    "operator_types",
    "transform_weight",
]
