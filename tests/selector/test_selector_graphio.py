"""JSON Steiner instances: round trip and malformed input."""

import json

import pytest

from selector import GraphFormatError, dump_graph, load_graph, solve

GOOD = {"root": "r", "terminals": ["a", 2], "arcs": [["r", "a", 10], ["r", 2, 10], ["a", 2, 1.5]]}


def test_load_dict_and_file(tmp_path):
    inst = load_graph(GOOD)
    assert inst.root == "r" and inst.terminals == ("a", 2)
    assert inst.graph.edges["a", 2]["weight"] == 1.5
    assert solve(inst.graph, inst.root, inst.terminals).cost == 11.5
    assert solve(inst.graph).cost == 11.5               # root/terminals stored on the graph
    path = tmp_path / "g.json"
    path.write_text(json.dumps(dump_graph(inst.graph, inst.root, inst.terminals)))
    again = load_graph(path)
    assert sorted(map(str, again.graph.edges)) == sorted(map(str, inst.graph.edges))
    assert load_graph(str(path)).terminals == ("a", 2)


def test_int_and_string_ids_are_distinct():
    inst = load_graph({"root": 0, "terminals": ["0"], "arcs": [[0, "0", 1]]})
    assert set(inst.graph.nodes) == {0, "0"}


@pytest.mark.parametrize("data, message", [
    ({"terminals": [], "arcs": []}, "missing key 'root'"),
    ({"root": "r", "arcs": []}, "missing key 'terminals'"),
    ({"root": "r"}, "missing keys 'terminals', 'arcs'"),
    ({"root": "r", "terminals": [], "arcs": "nope"}, "'arcs' must be a list"),
    ({"root": "r", "terminals": ["a"], "arcs": [["r", "a"]]}, r"arcs\[0\]: expected \[u, v, cost\]"),
    ({"root": "r", "terminals": ["a"], "arcs": [["r", "a", 1, 2]]}, r"arcs\[0\]: expected"),
    ({"root": "r", "terminals": ["a"], "arcs": [["r", "a", "1"]]}, "cost must be a number"),
    ({"root": "r", "terminals": ["a"], "arcs": [["r", "a", True]]}, "cost must be a number"),
    ({"root": "r", "terminals": ["a"], "arcs": [["r", "a", -1]]}, "negative"),
    ({"root": "r", "terminals": ["a"], "arcs": [["r", "a", float("nan")]]}, "NaN"),
    ({"root": "r", "terminals": ["a"], "arcs": [["r", "a", float("inf")]]}, "infinite"),
    ({"root": "r", "terminals": ["a"], "arcs": [["r", "a", 1], ["r", "a", 2]]}, "repeated arc"),
    ({"root": "r", "terminals": ["a"], "arcs": [["a", "a", 1], ["r", "a", 1]]}, "self-loop"),
    ({"root": "r", "terminals": ["b"], "arcs": [["r", "a", 1]]}, "terminal 'b' is not a node"),
    ({"root": "x", "terminals": ["a"], "arcs": [["r", "a", 1]]}, "root 'x' is not a node"),
    ({"root": "r", "terminals": ["a", "a"], "arcs": [["r", "a", 1]]}, "listed twice"),
    ({"root": "r", "terminals": ["r"], "arcs": [["r", "a", 1]]}, "root 'r' cannot be a terminal"),
    ({"root": [1], "terminals": [], "arcs": []}, "node ids must be strings or integers"),
    ({"root": "r", "terminals": [1.5], "arcs": [["r", "a", 1]]}, "node ids"),
    ([1, 2], "expected a JSON object"),
])
def test_malformed_graphs(data, message):
    with pytest.raises(GraphFormatError, match=message):
        load_graph(data) if isinstance(data, dict) else _load_text(data)


def _load_text(data):
    import os
    import tempfile
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh)
    try:
        return load_graph(path)
    finally:
        os.unlink(path)


def test_bad_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(GraphFormatError, match="bad.json: not valid JSON"):
        load_graph(bad)
    with pytest.raises(GraphFormatError, match="cannot read"):
        load_graph(tmp_path / "missing.json")


def test_graph_format_error_is_a_value_error():
    assert issubclass(GraphFormatError, ValueError)


def test_unreachable_terminal_in_file_reported_by_solve():
    inst = load_graph({"root": "r", "terminals": ["a", "b"], "arcs": [["r", "a", 1], ["b", "a", 1]]})
    with pytest.raises(ValueError, match="'b'"):
        solve(inst.graph, inst.root, inst.terminals)
