"""Regression tests of user-facing faults: bad model and hardware files fail with typed errors naming the file,
field or op at fault; a fuzz test holds every input format to that."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared_ir import Graph, IRError, ShapeError, ValidationError
from shared_ir.affine import AffineExpr
from shared_ir.hardware import HardwareError, dump_hardware, load_hardware, load_preset
from shared_ir.op import Access, Dim, Op, OpKind, Tensor

A = AffineExpr.dim


# --- 1. empty / corrupt ONNX, graphs without ops ----------------------------------------------------------------
def test_empty_onnx_file_is_an_error_naming_it(tmp_path):
    from shared_ir.frontends import from_onnx

    p = tmp_path / "empty.onnx"
    p.write_bytes(b"")
    with pytest.raises(ValidationError, match=r"empty\.onnx.*empty"):
        from_onnx(str(p))


def test_corrupt_onnx_file_is_an_error_naming_it(tmp_path):
    from shared_ir.frontends import from_onnx

    p = tmp_path / "garbage.onnx"
    p.write_bytes(b"\xff\xfe not a protobuf \x00\x01\x02" * 8)
    with pytest.raises(ValidationError, match=r"garbage\.onnx.*not a valid ONNX model"):
        from_onnx(str(p))


def test_onnx_model_without_nodes_is_an_error(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    from shared_ir.frontends import from_onnx

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    model = helper.make_model(helper.make_graph([], "hollow", [x], []))
    p = tmp_path / "hollow.onnx"
    onnx.save(model, str(p))
    with pytest.raises(ValidationError, match=r"hollow\.onnx.*no ops"):
        from_onnx(str(p))
    with pytest.raises(ValidationError, match=r"hollow.*no ops"):
        from_onnx(model)
    # nodes that all fold to constants, and no graph output: no op either
    c = helper.make_node("Constant", [], ["c"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0]))
    folded = helper.make_model(helper.make_graph([c], "folded", [x], []))
    with pytest.raises(ValidationError, match=r"folded.*no ops"):
        from_onnx(folded)


def test_onnx_output_no_node_produces_is_a_graph_error():
    from onnx import TensorProto, helper

    from shared_ir import GraphError
    from shared_ir.frontends import from_onnx

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "dangling", [x], [z])
    with pytest.raises(GraphError, match=r"^outputs\[0\]: value 'z' is unknown"):
        from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))


def test_graph_file_without_ops_is_an_error(tmp_path):
    p = tmp_path / "g.yaml"
    p.write_text("name: g\ntensors: []\nops: []\n")
    with pytest.raises(ValidationError, match=r"g\.yaml.*no ops"):
        Graph.load(str(p))


def test_binary_graph_file_is_an_error_naming_it(tmp_path):
    p = tmp_path / "g.yaml"
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ValidationError, match=r"g\.yaml.*UTF-8"):
        Graph.load(str(p))


# --- 2. an access whose loop cannot cover its tensor ------------------------------------------------------------
def _matmul(k_extent: int) -> Op:
    a, b, c = Tensor("a", (4, 8)), Tensor("b", (8, 4)), Tensor("c", (4, 4))
    return Op("mm", OpKind.matmul, (Dim("m", 4), Dim("n", 4), Dim("k", k_extent, True)),
              (Access(a, (A("m"), A("k"))), Access(b, (A("k"), A("n")))), (Access(c, (A("m"), A("n"))),))


def test_loop_shorter_than_tensor_dim_is_rejected():
    assert _matmul(8).macs == 4 * 4 * 8
    with pytest.raises(ShapeError, match=r"ops\.mm\.accesses\.a\[1\].*dim 'k'.*extent 4.*8") as ei:
        _matmul(4)
    assert ei.value.path == "ops.mm.accesses.a[1]"


def test_output_not_covered_is_rejected():
    x, y = Tensor("x", (8,)), Tensor("y", (8,))
    with pytest.raises(ShapeError, match=r"ops\.half\.accesses\.y\[0\].*dim 'd0'"):
        Op("half", OpKind.view, (Dim("d0", 4),), (Access(x, (A("d0"),)),), (Access(y, (A("d0"),)),))


def test_partial_reads_of_data_movement_ops_stay_legal():
    from shared_ir import ops

    x = Tensor("x", (8, 3))
    assert ops.slice_op("s", x, Tensor("s", (4, 3)), axis=0, start=0).points == 12
    # a strided conv may leave the last input row unread
    w = Tensor("w", (2, 3, 1, 1), role="weight")
    assert ops.conv2d("c", Tensor("i", (1, 3, 8, 8)), w, "o", stride=2).macs == 2 * 4 * 4 * 3


# --- 3. hardware files ------------------------------------------------------------------------------------------
def _host() -> dict:
    return dump_hardware(load_preset("host"))


def test_format_version(tmp_path):
    d = _host()
    assert load_hardware({**d, "format_version": 1}) == load_hardware(d)
    with pytest.raises(HardwareError, match=r"^format_version: 99 is not supported; supported versions: \[1\]") as ei:
        load_hardware({**d, "format_version": 99})
    assert ei.value.path == "format_version"


def test_duplicate_yaml_key_names_key_and_file(tmp_path):
    p = tmp_path / "dup.yaml"
    p.write_text("name: a\nname: b\nhost: null\ndevices: []\n")
    with pytest.raises(HardwareError, match=r"dup\.yaml: .* at line 2.*duplicate key 'name' \(first at line 1\)"):
        load_hardware(p)
    # a key given by a merge (<<) and again explicitly is an override, as YAML intends
    h = _host()["host"]
    q = tmp_path / "merge.yaml"
    q.write_text(f"name: merged\nhost:\n  <<: {{name: cpu, kind: cpu}}\n  name: cpu2\n"
                 f"  memory: {json.dumps(h['memory'])}\n  compute: {json.dumps(h['compute'])}\n")
    assert load_hardware(q).host.name == "cpu2"


def test_duplicate_json_key(tmp_path):
    p = tmp_path / "dup.json"
    p.write_text('{"name": "a", "name": "b"}')
    with pytest.raises(HardwareError, match=r"dup\.json.*duplicate key 'name'"):
        load_hardware(p)


@pytest.mark.parametrize("where, value", [
    (("host", "memory", 0, "read_bandwidth_bytes_per_s"), 1e-300),
    (("host", "compute", "frequency_hz"), 1e308),
    (("host", "memory", 0, "capacity_bytes"), 10**30),
    (("host", "compute", "peak_flops"), 1e300),
    (("host", "compute", "cores"), 10**15),
])
def test_implausible_values_are_rejected_by_field_path(where, value):
    d = _host()
    node = d
    for k in where[:-1]:
        node = node[k]
    node[where[-1]] = value
    path = ".".join(f"[{k}]" if isinstance(k, int) else k for k in where).replace(".[", "[")
    with pytest.raises(HardwareError, match="plausible range") as ei:
        load_hardware(d)
    assert ei.value.path == path


def test_huge_integer_is_a_typed_error():
    d = _host()
    d["host"]["memory"][0]["read_bandwidth_bytes_per_s"] = 10**400
    with pytest.raises(HardwareError, match=r"host\.memory\[0\]\.read_bandwidth_bytes_per_s must be finite"):
        load_hardware(d)


def test_oversized_file_is_refused_before_parsing(tmp_path):
    p = tmp_path / "big.yaml"
    p.write_text("name: big\n# " + "x" * (2 << 20) + "\n")
    with pytest.raises(HardwareError, match=r"big\.yaml: file is \d+ bytes, over the 1048576 byte limit"):
        load_hardware(p)


@pytest.mark.parametrize("content, message", [
    (b"", "file is empty"),
    (b"  \n# only a comment\n", "file is empty"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", "not a UTF-8 text file"),
    (b"- 1\n- 2\n", "must be a mapping"),
    (b"name: x\nwhen: 2020-99-99\n", "YAML does not parse"),
])
def test_unreadable_hardware_file_names_it(tmp_path, content, message):
    p = tmp_path / "hw.yaml"
    p.write_bytes(content)
    with pytest.raises(HardwareError, match=message) as ei:
        load_hardware(p)
    assert str(p) in str(ei.value)


# --- 5. fuzz: every input loads or raises the project's typed error ---------------------------------------------
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=8),
                     st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(),
                                                                          max_size=2))


def _leaves(d, path=()):
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield from _leaves(v, path + (i,))
    else:
        yield path


_BASE = dump_hardware(load_preset("soc_small"))
_PATHS = [p for p in _leaves(_BASE) if p]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(_PATHS), _SCALARS), min_size=1, max_size=4))
def test_fuzz_hardware_dict_fields(changes):
    d = json.loads(json.dumps(_BASE))
    for path, value in changes:
        node = d
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
    try:
        load_hardware(d)
    except HardwareError:
        pass


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_random_bytes_as_hardware_yaml(tmp_path_factory, data):
    p = tmp_path_factory.mktemp("hw") / "fuzz.yaml"
    p.write_bytes(data)
    try:
        load_hardware(p)
    except HardwareError as e:
        assert str(p) in str(e) or e.path  # names the file, or the field at fault in a parsed mapping


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab:-[]{}, \n!&*#'\"?|>%@`0.5e")), max_size=120))
def test_fuzz_yaml_like_text_as_hardware(tmp_path_factory, text):
    p = tmp_path_factory.mktemp("hw") / "fuzz.yaml"
    p.write_text(text)
    try:
        load_hardware(p)
    except HardwareError:
        pass


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_random_bytes_as_graph_yaml(tmp_path_factory, data):
    p = tmp_path_factory.mktemp("g") / "fuzz.yaml"
    p.write_bytes(data)
    try:
        Graph.load(str(p))
    except ValidationError:
        pass


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.binary(max_size=300),
                 st.builds(lambda head, tail: head + tail, st.sampled_from([b"\x08\x07\x12", b"\x08\x08:", b":\x02\n"]),
                           st.binary(max_size=60))))
def test_fuzz_random_bytes_as_onnx(tmp_path_factory, data):
    from shared_ir.frontends import from_onnx

    p = tmp_path_factory.mktemp("o") / "fuzz.onnx"
    p.write_bytes(data)
    try:
        from_onnx(str(p))
    except IRError:
        pass


def _small_onnx() -> bytes:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Relu", ["h"], ["y"])]
    g = helper.make_graph(nodes, "small", [x], [y], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


_ONNX = _small_onnx()


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(_ONNX) - 1), st.integers(0, 255)), min_size=1, max_size=4),
       st.integers(0, len(_ONNX)))
def test_fuzz_mutated_onnx_model(tmp_path_factory, flips, cut):
    from shared_ir.frontends import from_onnx

    data = bytearray(_ONNX)
    for i, b in flips:
        data[i] = b
    p = tmp_path_factory.mktemp("o") / "mut.onnx"
    p.write_bytes(bytes(data[:cut] if cut < len(data) // 2 else data))
    try:
        g = from_onnx(str(p))
    except IRError:
        return
    assert len(g) > 0
