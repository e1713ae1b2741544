"""Reading a model into a Relax ``IRModule`` with TVM's own frontends (no operator extraction here).

ONNX goes through ``tvm.relax.frontend.onnx.from_onnx``; PyTorch through ``torch.export`` and
``tvm.relax.frontend.torch.from_exported_program``, so the module is exactly what TVM would compile.
Extraction (:mod:`eto.models.extract`) and, later, building the tuned model both start from the
:class:`RelaxModel` returned here. TVM and the optional ``onnx``/``torch`` packages are imported
only when a model is read, so importing this module stays cheap.
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple, Sequence

if TYPE_CHECKING:  # pragma: no cover
    import tvm

_ONNX_EXTRA = "pip install 'eto[onnx]'"
_TORCH_EXTRA = "pip install 'eto[torch]'"


class ModelImportError(ValueError):
    """A model that could not be read or converted to Relax (the CLI exits with code 2)."""


class ModelFileError(ModelImportError):
    """A file that is not a readable ONNX model or ``torch.export`` archive; the message names it."""


class MissingExtraError(ImportError):
    """An optional dependency (``onnx``, ``torch``) is not installed; the message says what to install."""


class RelaxModel(NamedTuple):
    """A model converted to Relax: the module, the name its operator set gets, where it came from, and
    the layout its convolutions are compiled in (:mod:`eto.models.layout`; applied when it is prepared),
    with, for ``auto``, the ``(convolution key, by Winograd)`` decisions a database recorded (None: predicted)."""

    mod: "tvm.IRModule"
    name: str
    source: str
    layout: str = "NCHW"
    winograd: "tuple[tuple[str, bool], ...] | None" = None


# -- optional packages ------------------------------------------------------------------------------
def _require_onnx():
    try:
        import onnx
    except ImportError as exc:
        raise MissingExtraError(f"reading ONNX models needs the onnx package: {_ONNX_EXTRA}") from exc
    return onnx


def _require_torch():
    try:
        import torch
        import torch.export  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(f"reading PyTorch models needs PyTorch (torch.export): {_TORCH_EXTRA}") from exc
    return torch


# -- ONNX ---------------------------------------------------------------------------------------
def onnx_to_relax(model: Any, *, name: str | None = None,
                  shapes: Mapping[str, Sequence[int]] | None = None) -> RelaxModel:
    """An ONNX model (a path, serialized bytes or an ``onnx.ModelProto``) as a Relax module.

    ``shapes`` gives static shapes to inputs whose dimensions are symbolic (e.g. a dynamic batch).
    """
    onnx = _require_onnx()
    if isinstance(model, (str, os.PathLike)):
        label = os.fspath(model)
        proto = _load_onnx_file(label)
        name = name or _stem(label)
    elif isinstance(model, (bytes, bytearray)):
        label = "<onnx bytes>"
        proto = _parse_onnx(bytes(model), label)
    elif isinstance(model, onnx.ModelProto):
        label = "<onnx model>"
        proto = model
    else:
        raise TypeError(f"an ONNX model is a path, bytes or an onnx.ModelProto, got {type(model).__name__}")
    _check_onnx(proto, label)
    shape_dict = {k: list(v) for k, v in (shapes or {}).items()} or None
    how = "via tvm.relax.frontend.onnx"
    folded_how = "constant-folded by ONNX Runtime, then via tvm.relax.frontend.onnx"
    try:
        mod = _from_onnx(proto, shape_dict)
    except Exception as exc:  # noqa: BLE001 -- the frontend raises any type for a graph it cannot import: named below
        folded = _constant_folded(proto) if not shape_dict else None
        try:
            if folded is None:
                raise exc
            mod, how = _from_onnx(folded, None), folded_how
        except Exception:  # noqa: BLE001 -- the first error is the one to report
            raise ModelImportError(f"{label}: TVM's Relax ONNX frontend could not import the model: "
                                   f"{type(exc).__name__}: {_first_line(exc)}") from exc
    if not shape_dict and _unknown_shapes(mod) and (folded := _constant_folded(proto)) is not None:
        # static inputs, yet values of unknown shape (a shape computed in the graph): fold it, if that helps
        try:
            refolded = _from_onnx(folded, None)
        except Exception:  # noqa: BLE001 -- the first import stands
            refolded = None
        if refolded is not None and not _unknown_shapes(refolded):
            mod, how = refolded, folded_how
    opset = proto.opset_import[0].version if proto.opset_import else "?"
    return RelaxModel(mod, name or proto.graph.name or "onnx_model", f"ONNX ({os.path.basename(label)}, opset {opset}) {how}")


def _from_onnx(proto, shape_dict):
    from tvm.relax.frontend.onnx import from_onnx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the checker's and the importer's warnings about dynamic inputs
        return from_onnx(proto, shape_dict=shape_dict, keep_params_in_input=True)


def _unknown_shapes(mod) -> bool:
    """Whether a tensor of ``mod``'s main function has no static shape while every input has one: the
    importer could not follow a shape through the graph. O(bindings)."""
    from tvm import relax

    from eto.models.mapping import relax_type, static_shape

    def dynamic(expr) -> bool:
        ty = relax_type(expr)
        return hasattr(ty, "dtype") and hasattr(ty, "ndim") and static_shape(expr) is None

    func = mod["main"]
    if any(dynamic(p) for p in func.params):
        return False
    found: list = []
    relax.analysis.post_order_visit(func, lambda e: found.append(e) if isinstance(e, relax.Var) and dynamic(e) else None)
    return bool(found)


def _constant_folded(proto):
    """``proto`` with what its static input shapes make constant folded by ONNX Runtime's basic graph
    optimizations (standard ONNX operators only), or None without ONNX Runtime. TVM's importer fails
    on shapes computed in the graph (``Shape``, ``Gather``, ``Div`` into a ``Reshape``: the TorchScript
    exporter writes ShuffleNet's channel shuffle so); folded, they are constants it reads."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    import tempfile

    onnx = _require_onnx()
    with tempfile.TemporaryDirectory(prefix="eto-onnx-") as tmp:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        opts.optimized_model_filepath = os.path.join(tmp, "folded.onnx")
        try:
            ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
            return onnx.load(opts.optimized_model_filepath)
        except Exception:  # noqa: BLE001 -- ONNX Runtime's errors derive from Exception: the importer's error stands
            return None


def _parse_onnx(data: bytes, label: str):
    onnx = _require_onnx()
    from google.protobuf.message import DecodeError

    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except DecodeError as exc:  # the only error protobuf raises for bytes that are not a ModelProto
        raise ModelFileError(f"{label}: not an ONNX model or a torch.export .pt2 archive "
                             f"(protobuf parse failed: {_first_line(exc) or type(exc).__name__})") from None
    return proto


def _check_onnx(proto, label: str) -> None:
    if proto.ir_version < 3 or not proto.HasField("graph") or len(proto.graph.node) == 0:
        raise ModelFileError(f"{label}: not an ONNX model (no graph with nodes; ir_version {proto.ir_version})")


def _load_onnx_file(path: str):
    data = _read(path)
    proto = _parse_onnx(data, path)
    _check_onnx(proto, path)
    if any(t.data_location == 1 for t in proto.graph.initializer):  # EXTERNAL: weights beside the file
        onnx = _require_onnx()
        try:
            onnx.load_external_data_for_model(proto, os.path.dirname(os.path.abspath(path)))
        except Exception as exc:  # noqa: BLE001 -- OSError, ValueError or onnx's ValidationError (an Exception itself)
            raise ModelFileError(f"{path}: cannot read its external weight files: {_first_line(exc)}") from None
    return proto


# -- PyTorch ------------------------------------------------------------------------------------
def torch_to_relax(module: Any, example_inputs: Any, *, name: str | None = None,
                   example_kwargs: Mapping[str, Any] | None = None, decompose: bool = True) -> RelaxModel:
    """A ``torch.nn.Module`` run on ``example_inputs`` (a tensor or a tuple) as a Relax module.

    The module is exported in eval mode (restored afterwards) with ``torch.export``, so shapes are
    those of the example inputs. ``decompose`` runs PyTorch's decompositions before conversion
    (TVM's default; without it some models, e.g. BERT's boolean attention masks, fail to convert).
    """
    torch = _require_torch()
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    name = name or type(module).__name__.lower()
    was_training = getattr(module, "training", False)
    module.eval()
    try:
        with torch.no_grad():
            ep = torch.export.export(module, tuple(example_inputs), kwargs=dict(example_kwargs or {}))
    finally:
        module.train(was_training)
    return exported_program_to_relax(ep, name=name, decompose=decompose,
                                     source=f"PyTorch module {type(module).__name__}")


def exported_program_to_relax(ep: Any, *, name: str = "model", decompose: bool = True,
                              source: str = "torch.export ExportedProgram") -> RelaxModel:
    """A ``torch.export.ExportedProgram`` as a Relax module."""
    _require_torch()
    from tvm.relax.frontend.torch import from_exported_program

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mod = from_exported_program(ep, keep_params_as_input=True, run_ep_decomposition=decompose)
    except Exception as exc:  # noqa: BLE001 -- as the ONNX frontend: any type, for a program it cannot convert
        raise ModelImportError(f"{name}: TVM's Relax PyTorch frontend could not convert the program: "
                               f"{type(exc).__name__}: {_first_line(exc)}") from exc
    return RelaxModel(mod, name, f"{source} via torch.export + tvm.relax.frontend.torch.from_exported_program")


def _load_pt2(path: str):
    torch = _require_torch()
    export_log = logging.getLogger("torch.export")  # logs a traceback of its own before it raises
    level = export_log.level
    export_log.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.export.load(path)
    except Exception as exc:  # noqa: BLE001 -- unpickling a damaged archive raises any type: a file error
        raise ModelFileError(
            f"{path}: a zip archive but not a readable torch.export .pt2 program ({type(exc).__name__}: "
            f"{_first_line(exc)}); a module saved with torch.save must be loaded in Python and passed to "
            "eto.models.extract_from_torch with example inputs") from None
    finally:
        export_log.setLevel(level)


# -- files --------------------------------------------------------------------------------------
def load_relax(path: str | os.PathLike, *, name: str | None = None,
               shapes: Mapping[str, Sequence[int]] | None = None,
               dims: Mapping[str, int] | None = None) -> RelaxModel:
    """An ONNX model or a ``torch.export.save`` archive (``.pt2``), recognised by content, as Relax.

    ``dims`` sets symbolic dimensions by name (:func:`bind_dims`); ``shapes`` whole ONNX input shapes.
    """
    model = _load_relax(path, name=name, shapes=shapes)
    return bind_dims(model, dims) if dims else model


def _load_relax(path: str | os.PathLike, *, name: str | None,
                shapes: Mapping[str, Sequence[int]] | None) -> RelaxModel:
    path = os.fspath(path)
    head = _read(path, 4)
    name = name or _stem(path)
    if head.startswith(b"PK\x03\x04"):
        if shapes:
            raise ModelImportError(f"{path}: input shapes apply to ONNX models; a .pt2 program has its own")
        ep = _load_pt2(path)
        return exported_program_to_relax(ep, name=name, source=f"torch.export archive {os.path.basename(path)}")
    if head[:1] in (b"{", b"[") and _is_json(path):
        raise ModelFileError(f"{path}: a JSON file, not a model (an operator-set file is read by "
                             "'eto ops show FILE')")
    try:
        _require_onnx()
    except MissingExtraError:
        if head[:1] == b"\x08":  # an ONNX ModelProto starts with its ir_version field
            raise
        raise ModelFileError(f"{path}: not an ONNX model or a torch.export .pt2 archive") from None
    return onnx_to_relax(path, name=name, shapes=shapes)


# -- symbolic dimensions ----------------------------------------------------------------------------
def symbolic_dims(model: RelaxModel) -> dict[str, str]:
    """The model's symbolic dimensions (ONNX ``dim_param``, ``torch.export`` ``Dim``), each with where
    it first appears (``"input x, axis 1"``), in the order of the inputs."""
    from tvm import tirx

    from eto.models.mapping import relax_type

    found: dict[str, str] = {}
    main = model.mod["main"] if "main" in [gv.name_hint for gv in model.mod.functions] else None
    for param in (main.params if main is not None else []):
        shape = getattr(relax_type(param), "shape", None)
        for axis, dim in enumerate(getattr(shape, "values", None) or ()):
            for var in tirx.analysis.undefined_vars(dim) if not isinstance(dim, tirx.Var) else [dim]:
                found.setdefault(var.name, f"input {param.name}, axis {axis}")
    return found


def bind_dims(model: RelaxModel, dims: Mapping[str, int]) -> RelaxModel:
    """``model`` with symbolic dimensions set to sizes (``{"seq": 64}``), so its operators are static.

    A name the model does not have is an error that lists the names it has (``torch.export`` names
    them ``s0``, ``s27``... after export; ONNX keeps the ``dim_param`` strings).
    """
    from tvm import relax

    known = symbolic_dims(model)
    unknown = [n for n in dims if n not in known]
    if unknown:
        have = ", ".join(f"{n} ({where})" for n, where in known.items()) or "none"
        raise ModelImportError(f"{model.name}: no symbolic dimension {', '.join(map(repr, unknown))}; "
                               f"its symbolic dimensions: {have}")
    for n, v in dims.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ModelImportError(f"{model.name}: dimension {n} must be a positive integer, got {v!r}")
    mod = relax.transform.BindSymbolicVars(dict(dims))(model.mod)
    sizes = ", ".join(f"{n}={v}" for n, v in dims.items())
    return model._replace(mod=mod, source=f"{model.source}, {sizes}")


def _read(path: str, size: int = -1) -> bytes:
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    if os.path.isdir(path):
        raise ModelFileError(f"{path}: is a directory, not a model file")
    with open(path, "rb") as f:
        data = f.read(size)
    if not data:
        raise ModelFileError(f"{path}: empty file, not a model")
    return data


def _is_json(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            json.load(f)
    except (ValueError, UnicodeDecodeError):
        return False
    return True


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0] or "model"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""
