"""torch.export frontend and the loop-nest kinds it added.

- MACs of the compute-intensive ops equal ``torch.utils.flop_counter.FlopCounterMode`` (FLOPs / 2) within 1% on small
  Hugging Face models built from configs, a CNN with every conv kind, an audio front end. The reference runs with
  grad enabled (nn.TransformerEncoderLayer's fused no-grad fast path is not counted) and SDPA's math backend (the
  CPU flash kernel is not counted either).
- Footprints of conv1d/3d, transposed convs, interpolation and attention (grouped-query) against brute-force
  enumeration of the accesses and against the elements PyTorch itself reads or writes (autograd's non-zero set).
- Unsupported operators named with the user's source line; ``strict=False`` imports the rest; symbolic dims.
"""
from __future__ import annotations

import itertools
import math
import time
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional

from shared_ir import Graph, OpKind, ShapeError, Tensor, TensorRole, UnsupportedOpError, ValidationError  # noqa: E402
from shared_ir import ops as O  # noqa: E402
from shared_ir.frontends import from_torch_export  # noqa: E402
from shared_ir.frontends.torch_export import ATEN_OPS  # noqa: E402


def ref_macs(m, inputs) -> int:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    with sdpa_kernel([SDPBackend.MATH]), FlopCounterMode(display=False) as fc:
        m(**inputs) if isinstance(inputs, dict) else m(*inputs)
    return fc.get_total_flops() // 2


def check_macs(m, inputs, **kw) -> Graph:
    m.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = from_torch_export(m, inputs, **kw)
        ref = ref_macs(m, inputs)
    assert ref > 0 and abs(g.macs - ref) <= 0.01 * ref, (g.macs, ref)
    assert Graph.from_yaml(g.to_yaml()) == g
    return g


# --- Hugging Face models from small configs (no downloads; builders in conftest.py) ----------------------------------
@pytest.mark.parametrize("name", ["gpt2", "llama", "qwen2", "bert", "vit", "t5", "whisper"])
def test_hf_models_import_with_flop_counter_macs(name, hf_model):
    m, inputs = hf_model(name)
    g = check_macs(m, inputs, name=name)
    # attention is the GEMM-softmax-GEMM chain chain finders look for
    attn = [c for c in g.chains() if [o.kind for o in c.compute_ops] == [OpKind.batch_matmul] * 2]
    assert attn and all(any(o.kind == OpKind.softmax for o in c.ops) for c in attn)
    assert all(t.role == TensorRole.weight for n, t in g.tensors.items() if n.endswith(".weight"))
    assert all(g.tensor(t).role == TensorRole.output for t in g.outputs)


def test_hf_names_and_tied_weights(hf_model):
    m, inputs = hf_model("gpt2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = from_torch_export(m.eval(), inputs)
    # lm_head.weight is tied to the token embedding: one tensor, read by the embedding and the head
    assert "transformer.wte.weight" in g.tensors and "lm_head.weight" not in g.tensors
    users = {o.kind for o in g.ops.values() if "transformer.wte.weight" in o.input_names}
    assert users == {OpKind.embedding, OpKind.linear}
    assert g.tensor("transformer.h.0.attn.c_attn.weight").shape == (64, 192)
    assert g.inputs == ("input_ids",)


# --- CNN with every conv kind, audio front end (builders in conftest.py) ---------------------------------------------
def test_cnn_every_conv_kind(conv_zoo):
    m, xs = conv_zoo
    g = check_macs(m, xs)
    kinds = g.count_kinds()
    assert kinds["conv2d"] == 4 and kinds["conv_transpose"] == 4 and kinds["conv1d"] == 1 and kinds["conv3d"] == 1
    assert kinds["interpolate"] == 2
    dw, up_g = g.op("convolution_1"), g.op("convolution_4")
    assert dw.attr("groups") == 16 and dw.attr("dilation") == (2, 2)
    assert up_g.attr("output_padding") == (1, 1) and up_g.attr("groups") == 2
    assert [g.tensor(t).shape for t in g.outputs] == [tuple(y.shape) for y in m(*xs)]


def test_audio_front_end(audio_front_end):
    g = check_macs(*audio_front_end)
    assert g.count_kinds()["conv1d"] == 2
    assert [o.kind for o in g.chains()[0].compute_ops] == [OpKind.conv1d, OpKind.conv1d]


def test_gqa_sdpa_reads_shared_heads_in_place():
    class Attn(nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    q, k, v = torch.randn(2, 8, 6, 16), torch.randn(2, 2, 6, 16), torch.randn(2, 2, 6, 8)
    g = check_macs(Attn(), (q, k, v))
    qk = g.op("scaled_dot_product_attention.scores")
    assert qk.extents == {"b0": 2, "b1": 2, "b2": 4, "m": 6, "n": 6, "k": 16}
    # one key head per group of 4 query heads: a tile of 1 kv head reads 1/2 of k, 4 query heads
    assert qk.footprint({"b1": 1})["k"] == k.numel() // 2 and qk.footprint({"b1": 1})["q"] == q.numel() // 2
    assert [o.name.split(".")[-1] for o in g.chains()[0].ops] == ["scores", "scaled", "causal", "probs",
                                                                   "scaled_dot_product_attention"]


def _zoo_agrees(name, **kw):
    from shared_ir.zoo import example_inputs, graph, module

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = from_torch_export(module(name, **kw), example_inputs(name, **kw))
    assert g.macs == graph(name, **kw).macs


@pytest.mark.parametrize("name", ["mlp2", "transformer_block"])
def test_zoo_macs_unchanged_through_export(name):
    _zoo_agrees(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "resnet50", "mobilenet_v2", "googlenet", "yolov5s", "bert_base",
                                  "vit_base", "lstm_lm"])
def test_zoo_macs_unchanged_through_export_big(name):
    _zoo_agrees(name, **({"layers": 2} if name == "lstm_lm" else {}))


# --- errors, strict=False, symbolic dims ---------------------------------------------------------------------------
class _Unsup(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.fc2 = nn.Linear(8, 8), nn.Linear(4, 8)

    def forward(self, x):
        y = self.fc(x)
        v, _ = torch.topk(y, 4, dim=-1)  # unsupported 1
        z = torch.cumprod(y, dim=1)  # unsupported 2
        return self.fc2(v) + z


def test_unsupported_ops_named_with_source_line():
    with pytest.raises(UnsupportedOpError) as ei:
        from_torch_export(_Unsup(), torch.randn(2, 8))
    items = dict(ei.value.items)
    assert list(items) == ["aten.topk.default (no translator)", "aten.cumprod.default (no translator)"]
    import inspect

    src, first = inspect.getsourcelines(_Unsup.forward)
    line = {n: first + i for i, s in enumerate(src) for n in ("topk", "cumprod") if f"torch.{n}(" in s}
    assert f"test_torch_export.py:{line['topk']} in forward" in items["aten.topk.default (no translator)"]
    assert f"test_torch_export.py:{line['cumprod']} in forward" in items["aten.cumprod.default (no translator)"]


def test_strict_false_imports_the_rest_as_opaque_ops():
    with pytest.warns(UserWarning, match="2 operator"):
        g = from_torch_export(_Unsup(), torch.randn(2, 8), strict=False)
    op = g.op("topk")
    assert op.kind == OpKind.opaque and op.attr("target") == "aten.topk.default"
    assert "test_torch_export.py:" in op.attr("location")
    assert op.macs == op.flops == 0
    # whole tensors: the [2, 8] input, two [2, 4] results (values and int64 indices)
    assert op.touched_bytes == {"linear": 64, "topk.0": 32, "topk.1": 64}
    assert g.macs == 2 * 8 * 8 + 2 * 4 * 8 and g.count_kinds()["linear"] == 2
    assert Graph.from_yaml(g.to_yaml()) == g


def test_export_failure_falls_back_to_fx_and_names_both():
    class DataDependent(nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x

    with pytest.raises(UnsupportedOpError) as ei:
        from_torch_export(DataDependent(), torch.randn(2, 3))
    (t0, loc0), (t1, _) = ei.value.items
    assert t0.startswith("torch.export (") and "test_torch_export.py:" in loc0
    assert t1.startswith("torch.fx symbolic tracing")


def test_symbolic_dims_instantiated_for_sizes(hf_model):
    from torch.export import Dim

    m, (ids,) = hf_model("bert")
    ds = ({0: Dim("batch", max=64), 1: Dim("seq", max=64)},)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = from_torch_export(m, (ids,), dynamic_shapes=ds, sizes={"batch": 3, "seq": 40})
        direct = from_torch_export(m, (torch.randint(0, 128, (3, 40)),))
        with pytest.raises(ValidationError, match="sizes.seq"):
            from_torch_export(m, (ids,), dynamic_shapes=ds, sizes={"seq": 65})
        with pytest.raises(ValidationError, match="sizes.heads"):
            from_torch_export(m, (ids,), dynamic_shapes=ds, sizes={"heads": 2})
    assert g.macs == direct.macs and g.tensor("input_ids").shape == (3, 40)
    assert g.macs == ref_macs(m, (torch.randint(0, 128, (3, 40)),))


def test_coverage_list_is_documented():
    import shared_ir.frontends.torch_export as te

    for key in ("aten.convolution.default", "aten.scaled_dot_product_attention.default", "aten.index.Tensor",
                "aten.upsample_bilinear2d.vec", "aten.rms_norm.default", "aten.constant_pad_nd.default"):
        assert key in ATEN_OPS
        assert key.split(".")[1] in te.__doc__


def test_rmsnorm_group_norm_pad_repeat_flip_and_gathers():
    class Misc(nn.Module):
        def __init__(self):
            super().__init__()
            self.rms, self.gn = nn.RMSNorm(8), nn.GroupNorm(2, 4)
            self.table = nn.Parameter(torch.randn(10, 8))

        def forward(self, x, img, idx):
            y = self.rms(x) + self.table[idx]                       # index.Tensor
            y = y + torch.index_select(self.table, 0, idx[0])      # index_select
            g = torch.gather(y, 2, idx[..., None].expand(-1, -1, 3) % 8)
            p = F.pad(self.gn(img), (1, 2, 0, 1))
            return y.repeat(1, 2, 1).flip(-1), g, p

    x, img, idx = torch.randn(2, 5, 8), torch.randn(2, 4, 6, 6), torch.randint(0, 10, (2, 5))
    m = Misc()
    g = from_torch_export(m, (x, img, idx))
    fns = {o.attr("fn") for o in g.ops.values()}
    assert {"rms_norm", "group_norm", "index", "index_select", "gather", "pad", "repeat", "flip"} <= fns
    outs = m(x, img, idx)
    assert [g.tensor(t).shape for t in g.outputs] == [tuple(o.shape) for o in outs]
    assert Graph.from_yaml(g.to_yaml()) == g


# --- footprints of the new kinds: brute force and PyTorch's own reads ------------------------------------------------
def brute(op, tile, lo):
    """Distinct in-bounds elements of each tensor the tile box touches, point by point."""
    dims = [d.name for d in op.dims]
    touched = {a.tensor.name: set() for a in op.accesses}
    for vals in itertools.product(*[range(lo.get(d, 0), lo.get(d, 0) + tile[d]) for d in dims]):
        p = dict(zip(dims, vals))
        for a in op.accesses:
            idx = tuple(e.evaluate(p) for e in a.indices)
            if all(0 <= v < n for v, n in zip(idx, a.extents)):
                touched[a.tensor.name].add(idx)
    return touched


def _tile(draw, op, full=()):
    """A random tile box (and origin) of ``op``; dims in ``full`` span their whole extent."""
    tile = {d.name: d.extent if d.name in full else draw(st.integers(1, d.extent)) for d in op.dims}
    lo = {d.name: draw(st.integers(0, d.extent - tile[d.name])) for d in op.dims}
    return tile, lo


def _nonzero_grad(fn, inputs, out_elems) -> list[int]:
    """How many elements of each input the listed output elements depend on (positive data: no cancellation)."""
    xs = [(torch.rand(s, dtype=torch.float64) + 0.5).requires_grad_() for s in inputs]
    y = fn(*xs)
    mask = torch.zeros_like(y)
    for e in out_elems:
        mask[e] = 1
    (y * mask).sum().backward()
    return [int((x.grad != 0).sum()) for x in xs]


@st.composite
def conv_nd_case(draw):
    n, groups = draw(st.sampled_from([1, 3])), draw(st.sampled_from([1, 2]))
    cg, kg = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    ks = [draw(st.integers(1, 3)) for _ in range(n)]
    st_, dl = [draw(st.integers(1, 2)) for _ in range(n)], [draw(st.integers(1, 2)) for _ in range(n)]
    pd = [draw(st.integers(0, 1)) for _ in range(n)]
    sp = [draw(st.integers(dl[i] * (ks[i] - 1) + 1, dl[i] * (ks[i] - 1) + (4 if n == 1 else 2))) for i in range(n)]
    x, w = Tensor("x", (1, groups * cg, *sp)), Tensor("w", (groups * kg, cg, *ks), role="weight")
    op = O.conv("c", x, w, "y", stride=st_, padding=pd, dilation=dl, groups=groups)
    red = {d.name for d in op.dims if d.reduction}
    return (op, *_tile(draw, op, red), (st_, pd, dl, groups))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv_nd_case())
def test_conv1d_conv3d_footprint_is_what_torch_reads(case):
    op, tile, lo, (s, p, d, g) = case
    x, w = (a.tensor for a in op.inputs)
    seen = brute(op, tile, lo)
    assert op.footprint(tile, lo) == {t: len(v) for t, v in seen.items()}
    fn = F.conv1d if len(x.shape) == 3 else F.conv3d
    got = _nonzero_grad(lambda a, b: fn(a, b, stride=s, padding=p, dilation=d, groups=g), [x.shape, w.shape],
                        seen["y"])
    # inputs: exactly; weights: a point over zero padding still loads its weight, which gets no gradient
    assert got[0] == op.footprint(tile, lo)["x"] and got[1] <= op.footprint(tile, lo)["w"]
    ref = fn(torch.zeros(x.shape), torch.zeros(w.shape), stride=s, padding=p, dilation=d, groups=g)
    assert op.outputs[0].tensor.shape == tuple(ref.shape) and op.macs == _conv_flops(fn, x.shape, w.shape, s, p, d, g)


def _conv_flops(fn, xs, ws, s, p, d, g, **kw):
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        fn(torch.zeros(xs), torch.zeros(ws), stride=s, padding=p, dilation=d, groups=g, **kw)
    return fc.get_total_flops() // 2


@st.composite
def conv_t_case(draw):
    n, groups = draw(st.sampled_from([1, 2, 3])), draw(st.sampled_from([1, 2]))
    cg, kg = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    ks = [draw(st.integers(1, 3)) for _ in range(n)]
    st_, dl = [draw(st.integers(1, 3)) for _ in range(n)], [draw(st.integers(1, 2)) for _ in range(n)]
    pd = [draw(st.integers(0, dl[i] * (ks[i] - 1) // 2)) for i in range(n)]
    opad = [draw(st.integers(0, max(st_[i], dl[i]) - 1)) for i in range(n)]
    sp = [draw(st.integers(1, 4 if n < 3 else 2)) for _ in range(n)]
    x, w = Tensor("x", (draw(st.integers(1, 2)), groups * cg, *sp)), Tensor("w", (groups * cg, kg, *ks), role="weight")
    op = O.conv_transpose("ct", x, w, "y", stride=st_, padding=pd, dilation=dl, groups=groups, output_padding=opad)
    kernel_and_c = {d.name for d in op.dims if d.name in ("c", "t", "r", "s")}
    return (op, *_tile(draw, op, kernel_and_c), (st_, pd, dl, groups, opad))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv_t_case())
def test_conv_transpose_footprint_is_what_torch_writes(case):
    op, tile, lo, (s, p, d, g, opad) = case
    x, w = (a.tensor for a in op.inputs)
    seen = brute(op, tile, lo)
    fp = op.footprint(tile, lo)
    assert fp == {t: len(v) for t, v in seen.items()}
    fn = {3: F.conv_transpose1d, 4: F.conv_transpose2d, 5: F.conv_transpose3d}[len(x.shape)]
    # torch's output where only the tile's inputs and kernel slices are non-zero: exactly what the tile writes
    xm, wm = torch.zeros(x.shape), torch.zeros(w.shape)
    for e in seen["x"]:
        xm[e] = 1.0
    for e in seen["w"]:
        wm[e] = 1.0
    y = fn(xm, wm, stride=s, padding=p, dilation=d, groups=g, output_padding=opad)
    assert tuple(y.shape) == op.outputs[0].tensor.shape
    assert int((y != 0).sum()) == fp["y"]
    assert op.macs == _conv_flops(fn, x.shape, w.shape, s, p, d, g, output_padding=opad)


@st.composite
def interp_case(draw):
    mode = draw(st.sampled_from(["linear", "bilinear", "trilinear"]))
    n = {"linear": 1, "bilinear": 2, "trilinear": 3}[mode]
    ins, outs = [], []
    for _ in range(n):
        f, i = draw(st.sampled_from([("up", 2), ("up", 4), ("down", 2), ("down", 3), ("same", 1)])), \
            draw(st.integers(1, 3 if n == 3 else 5))
        ins.append(i * f[1] if f[0] == "down" else i)
        outs.append(i * f[1] if f[0] == "up" else i)
    x = Tensor("x", (1, 2, *ins))
    op = O.interpolate("i", x, "y", outs, mode)
    taps = {d.name for d in op.dims if d.reduction}
    return (op, *_tile(draw, op, taps), mode)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(interp_case())
def test_interpolate_footprint_is_the_inputs_of_nonzero_weight(case):
    op, tile, lo, mode = case
    x, y = op.inputs[0].tensor, op.outputs[0].tensor
    seen = brute(op, tile, lo)
    assert op.footprint(tile, lo) == {t: len(v) for t, v in seen.items()}
    size = y.shape[2:]
    got = _nonzero_grad(lambda a: F.interpolate(a, size=size, mode=mode, align_corners=False), [x.shape], seen["y"])
    assert got == [op.footprint(tile, lo)["x"]]
    # every output element is written by exactly 2 taps per axis
    full = {d.name: d.extent for d in op.dims}
    assert op.footprint(full)["y"] == y.numel and op.points == y.numel * 2 ** sum(d.reduction for d in op.dims)


def test_interpolate_ratios_without_exact_nest_raise():
    x = Tensor("x", (1, 1, 4, 4))
    for size, ac in (((12, 12), False), ((6, 8), False), ((8, 8), True)):
        with pytest.raises(ShapeError, match="ops.i"):
            O.interpolate("i", x, "y", size, "bilinear", align_corners=ac)


@st.composite
def attn_case(draw):
    hk, G = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    L, S, E, Ev = (draw(st.integers(1, 3)) for _ in range(4))
    q, k, v = Tensor("q", (2, hk * G, L, E)), Tensor("k", (2, hk, S, E)), Tensor("v", (2, hk, S, Ev))
    ops = O.attention("a", q, k, v, "o")
    which = draw(st.sampled_from([0, len(ops) - 1]))
    return (ops[which], *_tile(draw, ops[which], {"k"}), which, G)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(attn_case())
def test_attention_gemm_footprints_are_what_torch_reads(case):
    op, tile, lo, which, G = case
    seen = brute(op, tile, lo)
    assert op.footprint(tile, lo) == {t: len(v) for t, v in seen.items()}
    a, b = (x.tensor for x in op.inputs)

    def f(p, kv):  # the math backend's GEMM with key/value heads repeated per query group
        kv = kv.repeat_interleave(G, dim=1)
        return p @ kv.transpose(-1, -2) if which == 0 else p @ kv
    got = _nonzero_grad(f, [a.shape, b.shape], seen[op.output_names[0]])
    assert got == [op.footprint(tile, lo)[a.name], op.footprint(tile, lo)[b.name]]


def test_rmsnorm_groupnorm_opaque_footprints():
    x = Tensor("x", (2, 4, 3))
    for op in (O.rmsnorm("r", x, "y", Tensor("w", (3,), role="weight")),
               O.groupnorm("g", x, "y", 2, Tensor("w", (4,), role="weight"), Tensor("b", (4,), role="weight"))):
        for tile in ({"d0": 1, "d1": 2, "d2": 3}, {"d0": 2, "d1": 1, "d2": 2}):
            assert op.footprint(tile, {"d1": 1}) == {t: len(v) for t, v in brute(op, tile, {"d1": 1}).items()}
    op = O.opaque("o", [x, x, Tensor("z", (5,))], [Tensor("y", (7, 2))], "aten.fft_r2c.default")
    assert op.touched_bytes == {"x": 96, "z": 20, "y": 56} and op.flops == 0


def test_conv_transpose_macs_and_crop():
    x, w = Tensor("x", (1, 2, 5, 5)), Tensor("w", (2, 3, 4, 4), role="weight")
    op = O.conv_transpose("ct", x, w, "y", stride=2, padding=1)
    assert op.outputs[0].tensor.shape == (1, 3, 10, 10) and op.macs == 2 * 3 * 25 * 16
    # the first input row scatters to output rows -1..2: the cropped row -1 is outside the footprint
    assert op.footprint({"p": 1, "r": 4})["y"] == 3 * 3 * 10


@pytest.mark.slow
def test_bert_base_imports_under_5s():
    T = pytest.importorskip("transformers")
    m = T.BertModel(T.BertConfig()).eval()
    ids = torch.randint(0, 1000, (1, 128))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from_torch_export(m, ids)  # the first export of a process also loads torch's decomposition tables
        t = time.perf_counter()
        g = from_torch_export(m, ids)
        dt = time.perf_counter() - t
    assert dt < 5.0, dt
    assert sum(o.kind == OpKind.linear for o in g.ops.values()) == 12 * 6 + 1
    assert math.isclose(g.macs, ref_macs(m, (ids,)), rel_tol=0.01)
