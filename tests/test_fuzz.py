"""Property-based fuzzing of the command line: bad input gets a named error and exit code 2, never a traceback.

Every case runs the real entry point :func:`eto.cli.main` in-process on a generated input: operator
specs (``eto tune --op``, and operator objects in set files), operator-set files (``eto ops show``,
``eto plan --opset``), plain graph files (``eto plan --graph``), database directories (``eto db
show``) and model files (``eto tune --model``, ``eto ops from-model``). No case tunes: ``--trials 0``
is rejected only after the operators are read, and the other commands never tune. With ``-s`` the
module prints how many cases ran per input kind and how many tracebacks were seen (always 0: a
traceback fails the test).
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import tempfile
import zipfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from eto.cli import main
from eto.operators import operator_types
from eto.operators.opsets import builtin_opset

CASES: Counter[str] = Counter()
TRACEBACKS: Counter[str] = Counter()
KINDS = ("operator spec", "operator-set file", "graph file", "database", "model file", "environment", "traffic file")


def fuzz(max_examples: int):
    return settings(max_examples=max_examples, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module", autouse=True)
def summary():
    """With ``-s``: the numbers for the README."""
    yield
    print("\nfuzz cases run per input kind (eto.cli.main in-process):")
    for kind in KINDS:
        print(f"  {kind:<18} {CASES[kind]:>5} cases, {TRACEBACKS[kind]} tracebacks")
    print(f"  {'total':<18} {sum(CASES.values()):>5} cases, {sum(TRACEBACKS.values())} tracebacks")


def run(capsys, kind: str, *argv) -> tuple[int, str, str]:
    """``eto ARGV`` in-process: exit code, stdout, stderr; an escaping exception counts as a traceback."""
    CASES[kind] += 1
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse
        code = 0 if exc.code is None else exc.code
    except BaseException:
        TRACEBACKS[kind] += 1
        raise
    out, err = capsys.readouterr()
    if "Traceback" in err:
        TRACEBACKS[kind] += 1
    assert "Traceback" not in err, err
    return code, out, err


def assert_named_error(code: int, err: str, *names: str) -> None:
    """Exit code 2 with ``eto: error:`` naming at least one of ``names`` (a file, a field, a value)."""
    assert code == 2, err
    assert "error:" in err, err
    assert any(n.lower() in err.lower() for n in names), f"none of {names!r} named in {err!r}"


# -- generated values ---------------------------------------------------------------------------
NASTY = st.sampled_from([0, -1, -(2**31), 2**31, 2**63, 10**30, 10**400, 1.5, 1e300, float("nan"),
                         float("inf"), "", "3", "abc", "1x2", None, True, False, [], {}, [1, 2, 3], {"a": 1}])
SCALAR = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8) | NASTY
JSON = st.recursive(SCALAR, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=10)
BAD_UTF8 = st.sampled_from([b"\xff", b"\xc3", b"\x80", b"\xed\xa0\x80", b"\xfe\xff", b"\xf4\x90\x80\x80"])


def rarely(draw) -> bool:
    """True in about one draw of eight (hypothesis favours the first of the choices, and shrinks towards it)."""
    return draw(st.sampled_from(range(8))) == 7


def mutate(draw, value):
    """``value`` with one node (found by walking down from the top) replaced, dropped or added."""
    if isinstance(value, (dict, list)) and value and not rarely(draw):
        copy = dict(value) if isinstance(value, dict) else list(value)
        key = draw(st.sampled_from(sorted(copy)) if isinstance(copy, dict) else st.integers(0, len(copy) - 1))
        action = draw(st.sampled_from(("descend",) * 6 + ("drop", "add")))
        if action == "descend":
            copy[key] = mutate(draw, copy[key])
        elif action == "drop":
            del copy[key]
        elif isinstance(copy, dict):
            copy[draw(st.text(max_size=6))] = draw(JSON)
        else:
            copy.insert(key, draw(JSON))
        return copy
    return draw(JSON)


@st.composite
def mutated(draw, seed):
    value = seed
    for _ in range(draw(st.sampled_from((1, 1, 1, 2, 3)))):
        value = mutate(draw, value)
    return value


@st.composite
def damaged(draw, text: str) -> bytes:
    """``text`` truncated, with bytes that are not UTF-8 inserted, or replaced by random bytes."""
    data = text.encode()
    how = draw(st.sampled_from(("truncate", "not utf-8", "random")))
    if how == "truncate":
        return data[:draw(st.integers(0, max(len(data) - 1, 0)))]
    if how == "not utf-8":
        at = draw(st.integers(0, len(data)))
        return data[:at] + draw(BAD_UTF8) + data[at:]
    return draw(st.binary(max_size=64))


def json_parses(data: bytes) -> bool:
    try:
        json.loads(data.decode("utf-8"))
    except ValueError:
        return False
    return True


def write(dir_: Path, name: str, data: bytes | str) -> Path:
    """A file with a fresh name under ``dir_`` (hypothesis reuses the test's fixtures across examples)."""
    path = Path(tempfile.mkdtemp(dir=dir_)) / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


# -- operator specs -----------------------------------------------------------------------------
TYPES = {t.name: t for t in operator_types()}
PARAM_TEXT = (st.integers(1, 8).map(str)
              | NASTY.map(lambda v: "x".join(map(str, v)) if isinstance(v, list) else str(v))
              | st.tuples(st.integers(-2, 8), st.integers(-2, 8)).map(lambda t: f"{t[0]}x{t[1]}")
              | st.sampled_from(["1.5", "1e3", "0x10", " 3 ", "1x", "x1", "--1", "\u0663", "9" * 5000])
              | st.text(max_size=5))
TYPE_NAME = (st.sampled_from(sorted(TYPES)) | st.sampled_from(["c2d", "Dense", "NOPE", "", "C2D C2D"])
             | st.text(max_size=6))


@st.composite
def spec_params(draw, type_name: str, value):
    """Parameters for ``type_name`` (some left out, one unknown at times) drawn from ``value``."""
    spec = TYPES.get(type_name.upper())
    names = [p.name for p in spec.params] if spec else ["N", "M", "K"]
    params = {n: draw(value) for n in names if draw(st.integers(0, 5))}
    if not draw(st.integers(0, 5)):
        params[draw(st.sampled_from(["bogus", "n", "groups", "stride", ""]) | st.text(max_size=4))] = draw(value)
    return params


@st.composite
def spec_texts(draw) -> str:
    """What a user types after ``--op``: well-formed, edited by a few keystrokes, or any text."""
    how = draw(st.sampled_from(("typed", "typed", "edited", "garbage")))
    if how == "garbage":
        return draw(st.text(max_size=40))
    name = draw(TYPE_NAME)
    params = draw(spec_params(name, PARAM_TEXT))
    text = f"{name}(" + ",".join(f"{k}={v}" for k, v in params.items()) + ")"
    if how == "edited":
        for _ in range(draw(st.integers(1, 4))):
            at = draw(st.integers(0, len(text)))
            text = text[:at] + draw(st.sampled_from(["", "(", ")", ",", "=", "x", "-", " ", "9"])) + text[at + 1:]
    return text


PARAM_JSON = st.integers(1, 8) | st.lists(st.integers(-1, 8), max_size=4) | NASTY | JSON


@st.composite
def spec_dicts(draw) -> dict:
    """An operator object of an operator-set file, its fields of any JSON type at times."""
    name = draw(TYPE_NAME)
    item = {"type": draw(st.just(name) | JSON), "params": draw(spec_params(name, PARAM_JSON) | JSON),
            "frequency": draw(st.integers(1, 3) | NASTY)}
    for key in draw(st.sets(st.sampled_from(sorted(item)), max_size=2)):
        del item[key]
    return item


@pytest.mark.slow  # hundreds of examples: seconds
@fuzz(600)
@given(spec=spec_texts())
@example(spec="--")  # argparse reads ``--op=--`` as an empty list
def test_fuzz_op_spec_text(capsys, spec):
    # ``--op=`` keeps a spec starting with "-" an argument; --trials 0 is checked after parsing, before tuning
    code, _, err = run(capsys, "operator spec", "tune", f"--op={spec}", "--trials", "0")
    if "--trials must be positive" in err:  # the spec parsed: a valid operator
        assert code == 2
        return
    first = spec.split("(")[0].strip()
    assert_named_error(code, err, repr(spec), *([first.upper()] if first else []))


@pytest.mark.slow  # hundreds of examples: seconds
@fuzz(300)
@given(items=st.lists(spec_dicts(), min_size=1, max_size=3), show=st.booleans())
def test_fuzz_op_spec_objects(capsys, tmp_path, items, show):
    path = write(tmp_path, "ops.json", json.dumps({"name": "fuzz", "operators": items}))
    argv = ("ops", "show", path) if show else ("plan", "--opset", path, "--cost", "analytic", "--time-limit", "2")
    code, _, err = run(capsys, "operator spec", *argv)
    if code != 0:
        assert_named_error(code, err, f"{path}: operator #")


# -- operator-set files -------------------------------------------------------------------------
SEED_OPSET = builtin_opset("quickstart").to_json()


@st.composite
def opset_files(draw) -> tuple[bytes, bool]:
    """File contents and whether they may be a valid set (exit code 0 allowed)."""
    how = draw(st.sampled_from(("random json", "mutated", "mutated", "damaged")))
    if how == "random json":
        value = draw(JSON)
        return json.dumps(value).encode(), isinstance(value, dict) and isinstance(value.get("operators"), list)
    if how == "mutated":
        return json.dumps(draw(mutated(SEED_OPSET)), ensure_ascii=draw(st.booleans())).encode(), True
    data = draw(damaged(json.dumps(SEED_OPSET)))
    return data, json_parses(data)


@pytest.mark.slow  # hundreds of examples: seconds
@fuzz(400)
@given(case=opset_files(), name=st.sampled_from(["set.json", "set.txt", "set"]), show=st.booleans())
def test_fuzz_opset_files(capsys, tmp_path, case, name, show):
    data, may_be_valid = case
    path = write(tmp_path, name, data)
    argv = ("ops", "show", path, "--json") if show else ("plan", "--opset", path, "--cost", "analytic",
                                                         "--time-limit", "2")
    code, _, err = run(capsys, "operator-set file", *argv)
    if code != 0 or not may_be_valid:
        assert_named_error(code, err, str(path))


# -- plain graph files --------------------------------------------------------------------------
SEED_GRAPH = {"root": "r", "terminals": ["a", "b", 3], "nodes": ["lonely"],
              "arcs": [["r", "a", 10], ["r", "b", 10.5], ["a", "b", 1], ["r", "c", 3], ["c", "a", 2], ["c", 3, 4]]}
NODE = st.sampled_from(["r", "a", "b", "c", 3]) | NASTY
COST = st.integers(0, 20) | st.floats(0, 20) | NASTY
ARC = st.tuples(NODE, NODE, COST, st.integers(0, 5)).map(lambda a: list(a[:3]) if a[3] else list(a[:2]))


@st.composite
def graph_files(draw) -> tuple[bytes, bool]:
    """File contents and whether they may be a solvable graph (exit code 0 allowed)."""
    how = draw(st.sampled_from(("generated", "generated", "mutated", "random json", "damaged")))
    if how == "generated":
        graph = {"root": draw(NODE), "terminals": draw(st.lists(NODE, max_size=4) | NASTY),
                 "arcs": draw(st.lists(ARC, max_size=6) | NASTY)}
        if draw(st.booleans()):
            graph["nodes"] = draw(st.lists(NODE, max_size=2) | NASTY | JSON)
        for key in draw(st.sets(st.sampled_from(sorted(graph)), max_size=1)):
            del graph[key]
        return json.dumps(graph).encode(), True
    if how == "mutated":
        return json.dumps(draw(mutated(SEED_GRAPH))).encode(), True
    if how == "random json":
        value = draw(JSON)
        return json.dumps(value).encode(), isinstance(value, dict)
    data = draw(damaged(json.dumps(SEED_GRAPH)))
    return data, json_parses(data)


@pytest.mark.slow  # hundreds of examples: seconds
@fuzz(400)
@given(case=graph_files(), solver=st.sampled_from(["auto", "exact", "approx"]), as_json=st.booleans())
def test_fuzz_graph_files(capsys, tmp_path, case, solver, as_json):
    data, may_be_valid = case
    path = write(tmp_path, "graph.json", data)
    code, _, err = run(capsys, "graph file", "plan", "--graph", path, "--solver", solver, "--time-limit", "2",
                       *(["--json"] if as_json else []))
    if code != 0 or not may_be_valid:
        assert_named_error(code, err, str(path))


# -- database lines -----------------------------------------------------------------------------
TARGET = json.dumps({"kind": "llvm", "mcpu": "generic", "num-cores": 2}, separators=(",", ":"), sort_keys=True)
OP = {"type": "DENSE", "params": {"M": 4, "N": 8, "K": 16}}
RECORDS = "database_tuning_record.json"
SEED_DB = {
    "database_workload.json": [["0x5eed", "a module"], ["0xbeef", "another module"]],
    RECORDS: [[0, ["trace", [2e-6], TARGET, []]], [1, ["trace", [3e-6], TARGET, []]]],
    "eto_meta.json": [
        {"v": 1, "op": OP, "op_key": "DENSE(M=4,N=8,K=16)", "target": TARGET, "method": "backend", "source": None,
         "candidates": 5, "seconds": 1.5, "records": [{"latency_s": 2e-6, "features": None, "line": 0}],
         "error": None, "time": 1.0, "pid": 1},
        {"v": 1, "op": {**OP, "params": {"M": 5, "N": 8, "K": 16}}, "op_key": "DENSE(M=5,N=8,K=16)",
         "target": TARGET, "method": "reuse", "source": "DENSE(M=4,N=8,K=16)", "candidates": 2, "seconds": 0.5,
         "records": [{"latency_s": 3e-6, "features": {"f": [1.0]}, "line": 1}], "error": None, "time": 2.0}],
    "eto_progress.json": [
        {"v": 1, "op": OP, "op_key": "DENSE(M=4,N=8,K=16)", "target": TARGET, "method": "backend", "trials": 2,
         "seconds": 1.5, "trajectory": [[1.5, 2, 3e-6]], "records": [[0, ["trace", [3e-6], TARGET, []], 3e-6]]}],
}
DAMAGED_FILES = ("eto_meta.json",) * 4 + ("eto_progress.json",) * 2 + ("database_workload.json", RECORDS)
LINE_DAMAGE = ("mutated", "mutated", "mutated", "mutated", "json", "text", "bytes", "blank", "drop")


@st.composite
def databases(draw) -> dict[str, tuple[list[bytes], bool] | None]:
    """The seed database with a few lines damaged: file -> (lines, last line cut short), None: no such file."""
    files: dict[str, list] = {name: list(seeds) for name, seeds in SEED_DB.items()}  # JSON values or raw bytes
    for _ in range(draw(st.integers(1, 4))):
        name = draw(st.sampled_from(DAMAGED_FILES))
        lines = files[name]
        at = draw(st.integers(0, len(lines)))  # len(lines): a new last line
        how = draw(st.sampled_from(LINE_DAMAGE))
        line = lines[at] if at < len(lines) and not isinstance(lines[at], bytes) else SEED_DB[name][0]
        if how == "mutated":
            new = draw(mutated(line))
        elif how == "json":
            new = draw(JSON)
        elif how == "text":
            new = draw(st.text(max_size=20)).replace("\n", " ").encode()
        elif how == "bytes":
            new = draw(st.binary(max_size=20)).replace(b"\n", b" ")
        else:
            new = b""
        lines[at:at + 1] = [] if how == "drop" else [new]
    return {name: None if rarely(draw) else
            ([line if isinstance(line, bytes) else json.dumps(line).encode() for line in lines], rarely(draw))
            for name, lines in files.items()}


def write_db(tmp_path: Path, files: dict[str, tuple[list[bytes], bool] | None]) -> Path:
    db = Path(tempfile.mkdtemp(dir=tmp_path))
    for name, content in files.items():
        if content is not None:
            lines, partial_last = content
            (db / name).write_bytes(b"\n".join(lines) + (b"" if partial_last else b"\n"))
    return db


def corrupt_line_numbers(lines: list[bytes], partial_last: bool) -> set[int]:
    """1-based numbers of the lines that are certainly corrupt: not blank and not UTF-8 JSON."""
    bad = {i + 1 for i, line in enumerate(lines) if line.strip() and not json_parses(line)}
    return bad | ({len(lines)} if partial_last and lines and lines[-1] else set())


@pytest.mark.slow  # hundreds of examples: seconds
@fuzz(400)
@given(files=databases(), flags=st.sampled_from([(), ("--json",), ("--all",), ("--all", "--json")]))
def test_fuzz_database_lines(capsys, tmp_path, files, flags):
    db = write_db(tmp_path, files)
    expected = [f"{name}:{n}:" for name, content in files.items() if content is not None
                for n in sorted(corrupt_line_numbers(*content))]
    code, _, err = run(capsys, "database", "db", "show", db, *flags)
    assert code in (0, 2), err
    if code == 2:
        assert_named_error(code, err, *(f"{name}:" for name in SEED_DB))
    for where in expected:
        assert f"{os.path.join(db, where)}" in err, (where, err)


# -- model files --------------------------------------------------------------------------------
MODEL_EXTRAS = pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in ("onnx", "torch")),
                                  reason="model import needs the onnx and torch extras")


def handmade_onnx() -> tuple[bytes, int]:
    """A small ONNX model and where its graph ends (any shorter prefix is not a complete model)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
         helper.make_node("MatMul", ["t", "m"], ["h"])],
        "fuzz", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 9, 9]),
                 helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 5, 16])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("y", "h")],
        [numpy_helper.from_array(np.zeros((8, 4, 3, 3), np.float32), "w"),
         numpy_helper.from_array(np.zeros((16, 24), np.float32), "m")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    data = model.SerializeToString()
    del model.opset_import[:]  # serialised after the graph (field 8 after 7)
    return data, len(model.SerializeToString())


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def truncated_onnx():
    data, graph_end = handmade_onnx()
    return st.integers(1, graph_end - 1).map(lambda n: data[:n])


MODEL_BYTES = st.one_of(
    st.binary(max_size=200),
    st.deferred(truncated_onnx),
    st.binary(max_size=100).map(lambda b: b"PK\x03\x04" + b),
    st.dictionaries(st.sampled_from(["version", "archive/version", "archive/models/model.json", "data.pkl", "x"]),
                    st.sampled_from([b"8.20", b"1.0", b"{}"]) | st.binary(max_size=40), max_size=3).map(zip_bytes),
    st.sampled_from([b"", b"{}", b'{"operators": []}', b"\x08\x07", b"not a model\n", b"[1, 2"]),
)


@pytest.mark.slow  # hundreds of examples: seconds
@MODEL_EXTRAS
@fuzz(200)
@given(data=MODEL_BYTES, name=st.sampled_from(["m.onnx", "m.pt2", "m.pt", "m.bin", "m"]),
       shape=st.none() | st.sampled_from(["x=1,4,9,9", "x=1x4", "x=", "=1", "x=-1", "x=a"]),
       tune=st.booleans())
def test_fuzz_model_files(capsys, tmp_path, data, name, shape, tune):
    path = write(tmp_path, name, data)
    if tune:  # --trials 0 is checked after the model is read: nothing is tuned
        argv = ("tune", "--model", path, "--trials", "0", "--db", tmp_path / "db")
    else:
        argv = ("ops", "from-model", path, *(["--input-shape", shape] if shape else []))
    code, _, err = run(capsys, "model file", *argv)
    if shape and not tune and shape not in ("x=1,4,9,9", "x=1x4"):
        assert_named_error(code, err, f"--input-shape {shape!r}")
    else:
        assert_named_error(code, err, str(path))
    assert not (tmp_path / "db").exists()


# -- what the fuzzer found, kept as plain cases -------------------------------------------------
@pytest.mark.parametrize("kind, argv", [("operator-set file", ("plan", "--cost", "analytic", "--opset")),
                                        ("graph file", ("plan", "--graph")), ("model file", ("ops", "from-model"))])
def test_paths_that_are_no_files(capsys, tmp_path, kind, argv):
    for path in (tmp_path, tmp_path / "missing.json"):
        code, _, err = run(capsys, kind, *argv, path)
        assert_named_error(code, err, str(path))


@pytest.mark.parametrize("spec, words", [
    ("BMM(B=" + "9" * 5000 + ",M=1,N=1,K=1)", "parameter B is too large"),
    ("DENSE(M=1,M=2,N=1,K=1)", "parameter M given twice"),
    ("DENSE(M=4294967296,N=1,K=1)", "parameter M must be at most 2147483647"),
])
def test_found_op_specs(capsys, spec, words):
    code, _, err = run(capsys, "operator spec", "tune", f"--op={spec}", "--trials", "0")
    assert_named_error(code, err, words)


DENSE = b'{"type": "DENSE", "params": {"M": 1, "N": 1, "K": 1}'


@pytest.mark.parametrize("kind, data, argv, words", [  # words None: a valid input, exit code 0
    ("operator-set file", b'{"operators": [{"type": 5}]}', ("ops", "show"), "no 'type' string"),
    ("operator-set file", b'{"operators": [{"type": "DENSE", "params": [1]}]}', ("ops", "show"),
     "'params' must be an object"),
    ("operator-set file", b'{"operators": [' + DENSE.replace(b'"M": 1', b'"M": 1' + b"0" * 200) + b"}]}",
     ("ops", "show"), "parameter M must be at most"),
    ("operator-set file", b'{"operators": [' + DENSE + b', "frequency": 1' + b"0" * 30 + b"}]}", ("ops", "show"),
     "frequency must be a positive integer up to"),
    ("operator-set file", b'\xff{"operators": []}', ("ops", "show"), "not valid JSON"),
    ("operator-set file", b'{"operators": []}', ("plan", "--cost", "analytic", "--opset"), None),
    ("graph file", b'{"root": "r", "terminals": ["a"], "arcs": [["r", "a", 1]], "nodes": 5}', ("plan", "--graph"),
     "'nodes' must be a list"),
    ("graph file", b'{"root": "r", "terminals": ["a"], "arcs": [["r", "a", 1' + b"0" * 400 + b"]]}",
     ("plan", "--graph"), "cost of 'r' -> 'a' is infinite"),
    ("graph file", b"\xff{}", ("plan", "--graph"), "not UTF-8"),
    ("graph file", b'{"root": "r", "terminals": ["a"], "arcs": [["r", "b", 1]], "nodes": ["a"]}', ("plan", "--graph"),
     "not reachable from root"),
])
def test_found_files(capsys, tmp_path, kind, data, argv, words):
    path = write(tmp_path, "input.json", data)
    code, _, err = run(capsys, kind, *argv, path)
    if words is None:
        assert code == 0, err
    else:
        assert_named_error(code, err, words)
        assert str(path) in err


@pytest.mark.parametrize("data, words", [
    (b'{"12": 1e400}', "size 12 with count inf"),
    (b'{"12": -1}', "size 12 with count -1"),
    (b'{"0": 5}', "size 0 with count 5"),
    (b'{"12": 0}', "no requests at any size"),
])
def test_found_traffic_files(capsys, tmp_path, data, words):
    """``eto dispatch --traffic``: a count that reads as infinite (1e400) passed the command's check and was
    "a bug in eto" (exit 3); every bad entry is named."""
    path = write(tmp_path, "traffic.json", data)
    code, _, err = run(capsys, "traffic file", "dispatch", "--op", "BMM(B=1,M=16,N=16,K=16)", "--symbolic", "M=seq",
                       "--sizes", "1,8,16", "--db", tmp_path, "--traffic", path)
    assert_named_error(code, err, f"--traffic {path}: {words}; sizes must be positive")


@MODEL_EXTRAS
def test_found_model_files(capsys, tmp_path):
    path = write(tmp_path, "m.onnx", b"PK\x03\x04")  # torch.export logged a traceback of its own
    code, _, err = run(capsys, "model file", "ops", "from-model", path)
    assert_named_error(code, err, f"{path}: a zip archive but not a readable torch.export .pt2 program")


@pytest.mark.parametrize("name, field, value", [
    ("eto_meta.json", "target", [1]),
    ("eto_meta.json", "target", None),
    ("eto_meta.json", "target", "cpu"),
    ("eto_meta.json", "source", 5),
    ("eto_meta.json", "candidates", float("inf")),
    ("eto_progress.json", "records", None),
])
def test_found_database_lines(capsys, tmp_path, name, field, value):
    """A field of the wrong type in one line: that line is reported with file:line, exit code 0."""
    files = {n: ([json.dumps(line).encode() for line in lines], False) for n, lines in SEED_DB.items()}
    files[name][0][0] = json.dumps({**SEED_DB[name][0], field: value}).encode()
    db = write_db(tmp_path, files)
    for flags in ((), ("--json",)):
        code, _, err = run(capsys, "database", "db", "show", db, *flags)
        assert code == 0 and f"{os.path.join(db, name)}:1: " in err, err


def seed_db(tmp_path: Path, extra: dict[str, list[bytes]] | None = None) -> Path:
    """The seed database, with ``extra`` lines appended to its files."""
    files = {n: ([json.dumps(line).encode() for line in lines] + (extra or {}).get(n, []), False)
             for n, lines in SEED_DB.items()}
    return write_db(tmp_path, files)


def test_found_skipped_lines_are_counted(capsys, tmp_path):
    """A command that reads a damaged database (here eto plan) says how many lines it skipped, per file, and
    why; it used to skip them without a word."""
    db = seed_db(tmp_path, {RECORDS: [b"oops"], "eto_meta.json": [b"{"]})
    code, _, err = run(capsys, "database", "plan", "--opset", "quickstart", "--db", db)
    assert code == 0, err
    assert (f"eto: warning: {db}: 2 lines it cannot read skipped: 1 in {RECORDS} (line 3: not a [workload, record] "
            "tuning record); 1 in eto_meta.json (line 3: unreadable metadata (not a JSON object))") in err, err


def test_found_unreadable_programs(capsys, tmp_path):
    """Records of the right JSON shape that TVM cannot read (another TVM version's, or damaged): eto db export
    names each and is bad input where none is left (exit 2), not "a bug in eto" (exit 3)."""
    db = seed_db(tmp_path)
    code, _, err = run(capsys, "database", "db", "export", db, tmp_path / "out")
    assert_named_error(code, err, f"{db}: TVM cannot read any of its 2 best programs")
    for line in (1, 2):
        assert f"{os.path.join(db, RECORDS)}:{line}: TVM " in err and "cannot read this program (" in err, err
    assert "internal error" not in err


@pytest.mark.parametrize("name, value, words", [
    ("TVM_NUM_THREADS", "abc", "TVM_NUM_THREADS='abc': expected a positive number of threads"),
    ("TVM_NUM_THREADS", "0", "TVM_NUM_THREADS='0': expected a positive number of threads"),
    ("ETO_CPU_CACHE_BYTES", "x", "ETO_CPU_CACHE_BYTES='x': expected a size in bytes"),
    ("ETO_CPU_CACHE_BYTES", "-5", "ETO_CPU_CACHE_BYTES='-5': expected a size in bytes"),
])
def test_found_environment_values(capsys, monkeypatch, name, value, words):
    """A bad environment value is bad input (exit 2, the variable, its value and what it takes named),
    not "a bug in eto" (exit 3)."""
    monkeypatch.setenv(name, value)
    code, _, err = run(capsys, "environment", "plan", "--opset", "quickstart")
    assert_named_error(code, err, words)
    assert "internal error" not in err

