"""Operator sets of real models: ONNX files and PyTorch modules through TVM's Relax frontends.

A model is first read into a Relax ``IRModule`` with TVM's own frontend (:mod:`eto.models.load`),
so eto sees exactly the operators TVM would compile; the Relax graph is then walked and every
tunable call mapped to a catalogue operator (:mod:`eto.models.extract`, :mod:`eto.models.mapping`).
Nothing here imports TVM or the optional ``onnx``/``torch`` packages until a model is read, and
nothing here knows about the command line (``eto ops from-model`` lives in :mod:`eto.cli.ops`).
"""

from eto.models.extract import (ModelOperators, UnsupportedCall, extract_from_exported_program, extract_from_file,
    extract_from_onnx, extract_from_relax, extract_from_torch, load_model_opset, operator_item)
from eto.models.load import (MissingExtraError, ModelFileError, ModelImportError, RelaxModel, bind_dims,
    load_relax, symbolic_dims)

__all__ = [
    "MissingExtraError",
    "ModelFileError",
    "ModelImportError",
    "ModelOperators",
    "RelaxModel",
    "UnsupportedCall",
    "bind_dims",
    "extract_from_exported_program",
    "extract_from_file",
    "extract_from_onnx",
    "extract_from_relax",
    "extract_from_torch",
    "load_model_opset",
    "load_relax",
    "operator_item",
    "symbolic_dims",
]
