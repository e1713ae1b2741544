"""eto: reuse-driven operator tuning on Apache TVM MetaSchedule (the ETO paper, PVLDB 2022).

Tune a model's operators several times faster than MetaSchedule alone, reuse what earlier runs
tuned, and retune new shapes from a database:

>>> import eto
>>> report = eto.tune("quickstart", database="eto-db")       # doctest: +SKIP
>>> model = eto.build("model.onnx", database="eto-db")        # doctest: +SKIP

The entry points (:func:`tune`, :func:`retune`, :func:`build`, :func:`load`, :class:`Database`,
:class:`TuneOptions`) live in :mod:`eto.api`. Importing ``eto`` does not import TVM; they import it
when they run.
"""

from eto.operators import Operator, operator_type, operator_types
from eto.operators.opsets import OperatorSet, builtin_opset, builtin_opsets
from eto.options import TuneOptions

__version__ = "0.1.0"

_API = ("tune", "retune", "build", "load", "operator_set", "open_database", "Database", "Model")
_LAZY = ("profile_model",)  # from eto.models.profile, imported on first use too


def __getattr__(name: str):
    """The API's functions, imported on first use (so that ``import eto`` stays light)."""
    if name in _API:
        from eto import api

        return getattr(api, name)
    if name == "profile_model":
        from eto.models.profile import profile_model

        return profile_model
    raise AttributeError(f"module 'eto' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API, *_LAZY])


__all__ = ["Database", "Model", "Operator", "OperatorSet", "TuneOptions", "build", "builtin_opset", "builtin_opsets",
           "load", "open_database", "operator_set", "operator_type", "operator_types", "profile_model", "retune",
           "tune"]
