"""eto: reuse-driven operator tuning on Apache TVM MetaSchedule (the ETO paper, PVLDB 2022).

Importing ``eto`` does not import TVM; modules that build or tune programs import it lazily.
"""

from eto.operators import Operator, operator_type, operator_types
from eto.operators.opsets import OperatorSet, builtin_opset, builtin_opsets

__version__ = "0.1.0"

__all__ = ["Operator", "OperatorSet", "builtin_opset", "builtin_opsets", "operator_type", "operator_types"]
