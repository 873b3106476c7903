"""Loop-nest IR: MACs, footprints (box and exact) against brute-force enumeration; graph validation and YAML."""
import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared_ir import AffineExpr, Graph, GraphError, ShapeError, Tensor, ValidationError
from shared_ir import ops as O


def brute(op, tile, lo=None):
    """Enumerate the tile box point by point: distinct in-bounds elements and bounding-box spans per tensor."""
    lo = lo or {}
    dims = [d.name for d in op.dims]
    ranges = [range(lo.get(d, 0), lo.get(d, 0) + tile.get(d, op.extents[d])) for d in dims]
    touched = {a.tensor.name: set() for a in op.accesses}
    spans = {a.tensor.name: [[math.inf, -math.inf] for _ in a.indices] for a in op.accesses}
    for vals in itertools.product(*ranges):
        p = dict(zip(dims, vals))
        for a in op.accesses:
            idx = tuple(e.evaluate(p) for e in a.indices)
            for i, v in enumerate(idx):
                spans[a.tensor.name][i][0] = min(spans[a.tensor.name][i][0], v)
                spans[a.tensor.name][i][1] = max(spans[a.tensor.name][i][1], v)
            if all(0 <= v < n for v, n in zip(idx, a.extents)):
                touched[a.tensor.name].add(idx)
    box = {t: math.prod(hi - lo_ + 1 for lo_, hi in s) for t, s in spans.items()}
    return {t: len(s) for t, s in touched.items()}, box


@st.composite
def conv_case(draw):
    groups = draw(st.sampled_from([1, 2, 3]))
    cg = draw(st.integers(1, 2))
    kg = draw(st.integers(1, 2))
    depthwise = draw(st.booleans())
    if depthwise:
        cg, kg = 1, draw(st.integers(1, 2))
    R, S = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    ph, pw = draw(st.integers(0, 2)), draw(st.integers(0, 1))
    H = draw(st.integers(dh * (R - 1) + 1, 9))
    W = draw(st.integers(dw * (S - 1) + 1, 7))
    x = Tensor("x", (1, groups * cg, H, W), role="input")
    w = Tensor("w", (groups * kg, cg, R, S), role="weight")
    op = O.conv2d("c", x, w, "y", stride=(sh, sw), padding=(ph, pw), dilation=(dh, dw), groups=groups)
    tile = {d.name: draw(st.integers(1, d.extent)) for d in op.dims}
    lo = {d.name: draw(st.integers(0, d.extent - tile[d.name])) for d in op.dims}
    return op, tile, lo


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv_case())
def test_conv_footprint_and_macs_match_enumeration(case):
    op, tile, lo = case
    exact, box = brute(op, tile, lo)
    assert op.footprint(tile, lo) == exact
    # the box span does not depend on the tile's position
    assert op.footprint_box(tile) == box
    assert op.macs == math.prod(d.extent for d in op.dims) == sum(
        1 for _ in itertools.product(*[range(d.extent) for d in op.dims]))


@st.composite
def misc_case(draw):
    kind = draw(st.sampled_from(["matmul", "bmm", "linear", "pool", "binary", "softmax", "reduce", "concat",
                                 "permute"]))
    n = lambda: draw(st.integers(1, 5))  # noqa: E731
    if kind == "matmul":
        op = O.matmul("o", Tensor("a", (n(), 3), role="input"), Tensor("b", (3, n()), role="weight"), "c")
    elif kind == "bmm":
        b = n()
        op = O.batch_matmul("o", Tensor("a", (b, n(), 2), role="input"),
                            Tensor("b", (draw(st.sampled_from([1, b])), 2, n())), "c")
    elif kind == "linear":
        op = O.linear("o", Tensor("x", (n(), n(), 3), role="input"), Tensor("w", (n(), 3), role="weight"), "y",
                      bias=None)
    elif kind == "pool":
        op = O.pool2d("o", Tensor("x", (1, 2, n() + 3, n() + 3), role="input"), "y", kernel=draw(st.integers(1, 3)),
                      stride=draw(st.integers(1, 3)), padding=draw(st.integers(0, 1)))
    elif kind == "binary":
        op = O.binary("o", Tensor("a", (3, n()), role="input"),
                      Tensor("b", (1, draw(st.sampled_from([1]))), role="input"), "add", "y")
    elif kind == "softmax":
        op = O.softmax("o", Tensor("x", (n(), n()), role="input"), "y")
    elif kind == "reduce":
        op = O.reduce("o", Tensor("x", (n(), n(), n()), role="input"), [draw(st.integers(0, 2))], "y",
                      keepdim=draw(st.booleans()))
    elif kind == "concat":
        op = O.concat("o", [Tensor("a", (2, n()), role="input"), Tensor("b", (2, n()), role="input")], 1, "y")
    else:
        op = O.permute("o", Tensor("x", (n(), n(), n()), role="input"), [2, 0, 1], "y")
    tile = {d.name: draw(st.integers(1, d.extent)) for d in op.dims}
    lo = {d.name: draw(st.integers(0, d.extent - tile[d.name])) for d in op.dims}
    return op, tile, lo


@settings(max_examples=150, deadline=None)
@given(misc_case())
def test_other_ops_footprint_match_enumeration(case):
    op, tile, lo = case
    exact, box = brute(op, tile, lo)
    assert op.footprint(tile, lo) == exact
    assert op.footprint_box(tile) == box


def test_conv_stride_gap_and_padding_differ_from_span():
    x = Tensor("x", (1, 1, 10, 10), role="input")
    w = Tensor("w", (1, 1, 1, 1), role="weight")
    op = O.conv2d("c", x, w, "y", stride=2)
    # 3 output rows, 1 kernel row, stride 2: rows 0,2,4 are touched, the box spans 5
    t = {"p": 3, "q": 1}
    assert op.footprint(t)["x"] == 3
    assert op.footprint_box(t)["x"] == 5
    w3 = Tensor("w3", (1, 1, 3, 3), role="weight")
    op = O.conv2d("c", x, w3, "y", padding=1)
    # a border tile of the padded conv touches fewer rows than its span
    assert op.footprint({"p": 1, "q": 1})["x"] == 4
    assert op.footprint_box({"p": 1, "q": 1})["x"] == 9


def test_resnet_like_conv_counts():
    x = Tensor("x", (1, 64, 56, 56), role="input")
    w = Tensor("w", (64, 64, 3, 3), role="weight")
    op = O.conv2d("c", x, w, "y", padding=1)
    assert op.macs == 64 * 64 * 9 * 56 * 56
    assert op.flops == 2 * op.macs
    assert op.tensor_bytes() == {"x": 64 * 56 * 56 * 4, "w": 64 * 64 * 9 * 4, "y": 64 * 56 * 56 * 4}
    dw = O.conv2d("d", x, Tensor("wd", (64, 1, 3, 3), role="weight"), "z", padding=1, groups=64)
    assert dw.macs == 64 * 9 * 56 * 56
    # one group's tile touches only its own input channel
    assert dw.footprint({"g": 1, "k": 1, "p": 56, "q": 56})["x"] == 56 * 56


def test_affine_parse_roundtrip():
    for s in ["2*p + r - 1", "m", "-k + 3", "0", "g*4 + c", "p + 2*r"]:
        e = AffineExpr.parse(s)
        assert AffineExpr.parse(str(e)) == e
    assert AffineExpr.parse("2*p + r - 1").evaluate({"p": 3, "r": 1}) == 6
    with pytest.raises(ValidationError, match="non-affine"):
        AffineExpr.parse("p*r")
    with pytest.raises(ValidationError, match="cannot parse"):
        AffineExpr.parse("p + /r")


def _mlp_attention():
    a = Tensor("a", (8, 16), role="input")
    m1 = O.matmul("m1", a, Tensor("b", (16, 12), role="weight"), "c")
    s = O.softmax("sm", m1.outputs[0].tensor, "cs")
    m2 = O.matmul("m2", s.outputs[0].tensor, Tensor("d", (12, 4), role="weight"), "e")
    r = O.unary("relu", m2.outputs[0].tensor, "relu", "f")
    m3 = O.linear("m3", r.outputs[0].tensor, Tensor("w3", (6, 4), role="weight"), "g")
    side = O.reduce("sum", m1.outputs[0].tensor, [1], "rs")  # second consumer of c: breaks the chain at c
    return m1, s, m2, r, m3, side


def test_chains_stop_at_fanout_and_look_through_glue():
    m1, s, m2, r, m3, side = _mlp_attention()
    g = Graph([m1, s, m2, r, m3])
    assert [c.names for c in g.chains()] == [("m1", "sm", "m2", "relu", "m3")]
    g2 = Graph([m1, s, m2, r, m3, side])
    assert [c.names for c in g2.chains()] == [("m2", "relu", "m3")]
    assert g2.chains()[0].intermediates == ("e", "f")


def test_graph_validation_errors():
    m1, s, m2, r, m3, side = _mlp_attention()
    with pytest.raises(GraphError, match="neither produced"):
        Graph([m2])  # cs is not produced and not declared
    Graph([m2], inputs=["cs"])
    with pytest.raises(GraphError, match="produced twice"):
        Graph([m1, O.unary("dup", Tensor("q", (8, 12), role="input"), "relu", m1.outputs[0].tensor)])
    with pytest.raises(ShapeError, match="disagree"):
        Graph([m1, O.unary("u", Tensor("c", (8, 13)), "relu", "z")])
    x = Tensor("x", (4,), role="input")
    p = O.unary("p", Tensor("y", (4,)), "relu", "z")
    q = O.unary("q", Tensor("z", (4,)), "relu", "y")
    with pytest.raises(GraphError, match="cycle"):
        Graph([p, q, O.unary("x0", x, "relu", "w")])
    with pytest.raises(ShapeError, match="inner dims"):
        O.matmul("bad", Tensor("a", (2, 3)), Tensor("b", (4, 5)), "c")


def test_merge_subgraph_and_topology():
    m1, s, m2, r, m3, side = _mlp_attention()
    g = Graph([m1, s, m2, r, m3, side], name="att")
    merged = Graph.merge([g, g, g])
    assert len(merged) == 3 * len(g)
    assert merged.macs == 3 * g.macs
    assert "att#2/m1" in merged.ops and merged.tensor("att#1/b").role.value == "weight"
    order = g.topological_order()
    assert order.index("m1") < order.index("sm") < order.index("m2")
    sub = g.subgraph(["m2", "relu"])
    assert sub.inputs == ("cs",) and set(sub.ops) == {"m2", "relu"}


def test_roundtrip_yaml_json_exact(tmp_path):
    m1, s, m2, r, m3, side = _mlp_attention()
    x = Tensor("x", (1, 3, 9, 9), role="input")
    c = O.conv2d("conv", x, Tensor("wc", (6, 1, 3, 3), role="weight"), "yc", stride=2, padding=1, groups=3)
    e = O.embedding("emb", Tensor("ids", (2, 5), "int64", "input"), Tensor("E", (100, 8), role="weight"), "h")
    v = O.view("flat", c.outputs[0].tensor, (1, -1), "yf")
    g = Graph([m1, s, m2, r, m3, side, c, e, v], name="mix")
    for ext in ("yaml", "json"):
        p = tmp_path / f"g.{ext}"
        g.save(str(p))
        back = Graph.load(str(p))
        assert back == g
        assert back.to_dict() == g.to_dict()
        assert back.macs == g.macs
        assert back.op("conv").footprint({"p": 2}) == g.op("conv").footprint({"p": 2})


def test_bad_yaml_names_field():
    with pytest.raises(ValidationError, match="does not parse"):
        Graph.from_yaml("ops: [", "bad.yaml")
    with pytest.raises(ValidationError, match=r"bad.yaml.ops\[0\].kind"):
        Graph.from_yaml("tensors: []\nops: [{name: a, kind: frob, dims: []}]", "bad.yaml")
    with pytest.raises(ValidationError, match=r"ops\[0\].inputs\[0\].tensor"):
        Graph.from_yaml("tensors: []\nops: [{name: a, kind: matmul, dims: [], "
                        "inputs: [{tensor: q, index: []}], outputs: []}]",
                        "bad.yaml")


# --- random graphs round-trip exactly ------------------------------------------------------------------------------
@st.composite
def random_graph(draw):
    n_ops = draw(st.integers(1, 7))
    live = [Tensor("in0", (draw(st.integers(1, 6)), draw(st.integers(1, 6))), role="input")]
    ops = []
    for i in range(n_ops):
        x = draw(st.sampled_from(live))
        kind = draw(st.sampled_from(["linear", "unary", "softmax", "binary", "reduce", "view"]))
        name = f"op{i}"
        if kind == "linear":
            op = O.linear(name, x, Tensor(f"w{i}", (draw(st.integers(1, 6)), x.shape[-1]), role="weight"), f"t{i}")
        elif kind == "unary":
            op = O.unary(name, x, draw(st.sampled_from(["relu", "gelu", "tanh"])), f"t{i}")
        elif kind == "softmax":
            op = O.softmax(name, x, f"t{i}")
        elif kind == "binary":
            y = draw(st.sampled_from([t for t in live if t.shape == x.shape] or [x]))
            op = O.binary(name, x, y, "add", f"t{i}")
        elif kind == "reduce":
            op = O.reduce(name, x, [1], f"t{i}", keepdim=True)
        else:
            op = O.view(name, x, (x.shape[1], x.shape[0]), f"t{i}")
        ops.append(op)
        live.append(op.outputs[0].tensor)
    return Graph(ops, name=draw(st.sampled_from(["g", "model-x"])))


@settings(max_examples=60, deadline=None)
@given(random_graph())
def test_random_graphs_roundtrip_yaml(g):
    back = Graph.from_yaml(g.to_yaml())
    assert back.to_dict() == g.to_dict()
    assert back.topological_order() == g.topological_order()
    assert Graph.from_json(g.to_json()) == g


def test_touched_bytes_of_gather_and_strided_conv():
    e = O.embedding("e", Tensor("ids", (2, 64), "int64", "input"), Tensor("W", (30000, 16), role="weight"), "h")
    # only the looked-up rows move, not the 30000-row table
    assert e.touched_bytes["W"] == 2 * 64 * 16 * 4
    assert e.total_bytes == 2 * 64 * 8 + 2 * 64 * 16 * 4 * 2
    c = O.conv2d("c", Tensor("x", (1, 8, 16, 16), role="input"), Tensor("w", (8, 8, 1, 1), role="weight"), "y",
                 stride=2)
    assert c.touched_bytes["x"] == 8 * 8 * 8 * 4  # every other row and column


def test_atomic_path_replaces_only_on_success(tmp_path):
    from shared_ir import atomic_path, atomic_write_text

    p = tmp_path / "r.csv"
    atomic_write_text(p, "a,b\n")
    with pytest.raises(RuntimeError):
        with atomic_path(p) as tmp:
            open(tmp, "w").write("half")
            raise RuntimeError("writer died")
    assert p.read_text() == "a,b\n"  # the old content survives a failed write
    assert [f.name for f in tmp_path.iterdir()] == ["r.csv"]  # and no temporary file is left behind
