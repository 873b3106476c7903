"""PyTorch (torch.fx) and ONNX frontends: coverage of modules/functions, error reporting, weight identity, and the
two frontends agreeing on the same model."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from shared_ir import Graph, OpKind, TensorRole, UnsupportedOpError  # noqa: E402
from shared_ir.frontends import from_onnx, from_torch  # noqa: E402
from shared_ir.zoo import example_inputs, graph, module  # noqa: E402


def _compute_ops(g: Graph) -> int:
    return sum(1 for o in g.ops.values() if o.kind.compute_intensive)


def _kind(g: Graph, kind: OpKind) -> list:
    return [o for o in g.topological_ops() if o.kind == kind]


# --- PyTorch frontend ----------------------------------------------------------------------------------------------
class _FFTCumsum(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.gn = nn.GroupNorm(2, 8)

    def forward(self, x):
        y = self.fc(x)
        f = torch.fft.fft(y)  # unsupported 1
        c = torch.cumsum(y, dim=1)  # unsupported 2
        return self.fc(c) + f.abs(), self.gn(y.unsqueeze(-1))  # GroupNorm: unsupported 3 (a module)


def test_unsupported_ops_are_all_listed_with_locations():
    with pytest.raises(UnsupportedOpError) as ei:
        from_torch(_FFTCumsum(), torch.randn(2, 8))
    items = dict(ei.value.items)
    targets = list(items)
    assert any(t.startswith("torch.fft.fft") for t in targets), targets
    assert any(t.startswith("torch.cumsum") for t in targets), targets
    assert any("GroupNorm" in t for t in targets), targets
    msg = str(ei.value)
    # locations: this file and the line of each call, and the module path for the module
    for t, loc in ei.value.items:
        assert "test_frontends.py:" in loc, (t, loc)
    fft_loc = next(loc for t, loc in ei.value.items if t.startswith("torch.fft.fft"))
    cum_loc = next(loc for t, loc in ei.value.items if t.startswith("torch.cumsum"))
    assert fft_loc != cum_loc
    assert "module gn" in next(loc for t, loc in ei.value.items if "GroupNorm" in t)
    assert "unsupported operator(s)" in msg


class _Mixed(nn.Module):
    """Many supported functions and methods in one forward."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.w = nn.Parameter(torch.randn(16, 16))
        self.b = nn.Parameter(torch.zeros(16))
        self.conv_w = nn.Parameter(torch.randn(8, 1, 3, 3))  # depthwise, used through F.conv2d
        self.ln = nn.LayerNorm(16)
        self.drop = nn.Dropout(0.1)

    def forward(self, ids, img):
        x = self.emb(ids)                                  # [B, S, 16]
        B = x.size(0)
        h = F.linear(x, self.w, self.b).relu()
        a, b2 = h.chunk(2, dim=-1)                         # two [B, S, 8]
        s = torch.matmul(a, b2.transpose(1, 2)) * 0.5      # [B, S, S]
        p = torch.softmax(s, dim=-1)
        o = torch.cat([p @ a, torch.bmm(p, b2)], dim=-1)   # [B, S, 16]
        o = self.ln(1.0 - o + x).contiguous()
        o = F.gelu(self.drop(o))[:, 1:, :]                 # [B, S-1, 16]
        m = o.mean(dim=1)                                  # [B, 16]
        y = F.conv2d(img, self.conv_w, stride=2, padding=2, dilation=2, groups=8)  # depthwise, dilated
        y = F.interpolate(F.max_pool2d(y, 2), scale_factor=2, mode="nearest")
        y = F.adaptive_avg_pool2d(y, 1).view(B, -1)       # [B, 8]
        z = torch.stack([m[:, :8], y], dim=1).flatten(1)  # [B, 16]
        return z.permute(1, 0).sum(), m


def test_mixed_functions_translate():
    ids = torch.randint(0, 50, (2, 5))
    img = torch.randn(2, 8, 12, 12)
    g = from_torch(_Mixed(), (ids, img), name="mixed")
    kinds = g.count_kinds()
    assert kinds["linear"] == 1 and kinds["batch_matmul"] == 3 and kinds["conv2d"] == 1
    assert kinds["softmax"] == 1 and kinds["layernorm"] == 1 and kinds["embedding"] == 1
    # shape-only nodes (size) leave no op; dropout and contiguous alias
    assert not any("size" in n or "contiguous" in n or "drop" in n for n in g.ops)
    conv = _kind(g, OpKind.conv2d)[0]
    assert conv.attr("groups") == 8 and conv.attr("dilation") == (2, 2) and conv.attr("stride") == (2, 2)
    B, S = 2, 5
    expected = B * S * 16 * 16 + 3 * B * S * S * 8 + conv.points
    assert g.macs == expected
    fns = {o.attr("fn") for o in g.ops.values()}
    assert {"rsub_scalar", "mul_scalar", "relu", "gelu", "upsample_nearest", "slice", "getitem"} <= fns
    assert "ids" in g.inputs and "img" in g.inputs
    assert g.tensor("w").role == TensorRole.weight and g.tensor("conv_w").role == TensorRole.weight
    assert all(g.tensor(t).role == TensorRole.output for t in g.outputs) and len(g.outputs) == 2
    assert Graph.from_yaml(g.to_yaml()) == g


@pytest.mark.parametrize("batch_first,with_state", [(False, False), (True, False), (False, True)])
def test_lstm_unrolled_with_shared_weights(batch_first, with_state):
    I, H, L, T, B = 6, 5, 2, 4, 3
    lstm = nn.LSTM(I, H, L, batch_first=batch_first)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = lstm

        def forward(self, x):
            out, (h, c) = self.rnn(x)
            return out, h

    class MState(M):
        def forward(self, x, h0, c0):
            out, (h, c) = self.rnn(x, (h0, c0))
            return out, h

    x = torch.randn(B, T, I) if batch_first else torch.randn(T, B, I)
    args = (x,) + ((torch.randn(L, B, H), torch.randn(L, B, H)) if with_state else ())
    g = from_torch(MState() if with_state else M(), args)
    # MACs = 4·H·(I+H)·T for layer 0, 4·H·(H+H)·T for layer 1, per batch element
    assert g.macs == B * (4 * H * (I + H) * T + 4 * H * (2 * H) * T)
    lin = _kind(g, OpKind.linear)
    assert len(lin) == 2 * L * T
    weights = [t for t in g.tensors.values() if t.role == TensorRole.weight and t.name.startswith("rnn.")]
    assert sorted(t.name for t in weights) == sorted(f"rnn.{k}_{d}_l{i}" for k in ("weight", "bias")
                                                     for d in ("ih", "hh") for i in range(L))
    # one tensor per weight, read by every time step
    users = [o for o in lin if "rnn.weight_hh_l1" in o.input_names]
    assert len(users) == T
    shapes = {g.tensor(o).shape for o in g.outputs}
    assert (L, B, H) in shapes and ((B, T, H) if batch_first else (T, B, H)) in shapes


def test_tied_weights_are_one_tensor():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Embedding(20, 8)
            self.dec = nn.Linear(8, 20, bias=False)
            self.dec.weight = self.enc.weight

        def forward(self, ids):
            return self.dec(self.enc(ids))

    g = from_torch(Tied(), torch.randint(0, 20, (2, 3)))
    w = [t for t in g.tensors.values() if t.role == TensorRole.weight]
    assert [t.name for t in w] == ["enc.weight"]
    assert {o.kind for o in g.ops.values() if "enc.weight" in o.input_names} == {OpKind.embedding, OpKind.linear}


def test_input_returned_as_output_gets_a_copy():
    class Two(nn.Module):
        def forward(self, x):
            return x, torch.relu(x)

    g = from_torch(Two(), torch.randn(3, 4))
    assert len(g.outputs) == 2
    assert all(g.producer(t) is not None for t in g.outputs)


def test_batchnorm_pool_ceil_mode_and_modules():
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding="same"), nn.BatchNorm2d(8), nn.ReLU6(), nn.Hardswish(),
                      nn.MaxPool2d(3, 2, ceil_mode=True), nn.AvgPool2d(2), nn.AdaptiveAvgPool2d((2, 3)),
                      nn.Flatten(), nn.BatchNorm1d(48), nn.LeakyReLU(0.2), nn.Linear(48, 4), nn.Softmax(dim=1))
    x = torch.randn(2, 3, 14, 14)
    g = from_torch(m, x)
    assert g.tensor(g.outputs[0]).shape == tuple(m.eval()(x).shape)
    bn = [o for o in g.ops.values() if o.attr("fn") == "batchnorm"]
    assert len(bn) == 2 and all(o.weights[0].name.endswith(".weight") for o in bn)
    pool = _kind(g, OpKind.pool)
    assert pool[0].attr("ceil_mode") is True and pool[0].outputs[0].tensor.shape[2:] == (7, 7)
    # the ceil window reads past the input: footprint is clipped to what exists
    assert pool[0].footprint()[pool[0].input_names[0]] == 2 * 8 * 14 * 14


# --- ONNX frontend ------------------------------------------------------------------------------------------------
def _export(m, xs, path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, xs, str(path), dynamo=False, opset_version=17,
                          input_names=[f"in{i}" for i in range(len(xs))])
    return str(path)


def _agree(name, tmp_path, **kw):
    g_t = graph(name, **kw)
    g_o = from_onnx(_export(module(name, **kw), example_inputs(name, **kw), tmp_path / f"{name}.onnx"))
    assert g_o.macs == g_t.macs, name
    assert _compute_ops(g_o) == _compute_ops(g_t), (name, g_o.count_kinds(), g_t.count_kinds())
    conv_t, conv_o = len(_kind(g_t, OpKind.conv2d)), len(_kind(g_o, OpKind.conv2d))
    assert conv_t == conv_o
    return g_t, g_o


@pytest.mark.parametrize("name,kw", [("resnet18", {}), ("mlp2", {}), ("mobilenet_v2", {}),
                                     ("transformer_block", {}),
                                     ("transformer_block", {"causal": True, "seq": 32, "d_model": 128, "heads": 4,
                                                            "ffn": 256})])
def test_onnx_agrees_with_torch(name, kw, tmp_path):
    g_t, g_o = _agree(name, tmp_path, **kw)
    assert g_o.inputs == ("in0",)
    assert all(g_o.tensor(t).role == TensorRole.output for t in g_o.outputs)
    assert Graph.from_yaml(g_o.to_yaml()) == g_o


@pytest.mark.slow
@pytest.mark.parametrize("name", ["googlenet", "yolov5s", "vit_base", "bert_base", "resnet50"])
def test_onnx_agrees_with_torch_big(name, tmp_path):
    _agree(name, tmp_path)


def _onnx_model(nodes, inputs, outputs, inits=(), opset=17):
    from onnx import helper

    g = helper.make_graph(nodes, "hand", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_onnx_unsupported_are_all_listed():
    import onnx
    from onnx import TensorProto, helper

    f = TensorProto.FLOAT
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu0"),
             helper.make_node("CumSum", ["r", "ax"], ["c"], name="cumsum0"),
             helper.make_node("Hardmax", ["c"], ["h"], name="hardmax0"),
             helper.make_node("Relu", ["h"], ["y"], name="relu1")]
    ax = helper.make_tensor("ax", TensorProto.INT64, [], [1])
    m = _onnx_model(nodes, [helper.make_tensor_value_info("x", f, [2, 3])],
                    [helper.make_tensor_value_info("y", f, [2, 3])], [ax])
    onnx.checker.check_model(m)
    with pytest.raises(UnsupportedOpError) as ei:
        from_onnx(m)
    items = ei.value.items
    assert [t.split(" ")[0] for t, _ in items] == ["CumSum", "Hardmax"]
    assert "cumsum0" in items[0][1] and "#1" in items[0][1] and "hardmax0" in items[1][1]


def test_onnx_handmade_ops():
    """Gemm (transB=0, alpha), embedding Gather, Split, Slice, Resize, Clip→relu6, folded Shape/Reshape chain."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    f = TensorProto.FLOAT
    inits = [numpy_helper.from_array(np.random.rand(10, 4).astype(np.float32), "table"),
             numpy_helper.from_array(np.random.rand(4, 6).astype(np.float32), "wk"),
             numpy_helper.from_array(np.random.rand(6).astype(np.float32), "bias"),
             numpy_helper.from_array(np.array([0], dtype=np.int64), "zero"),
             numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus1"),
             numpy_helper.from_array(np.array([1, 1, 2, 2], dtype=np.float32), "scales"),
             numpy_helper.from_array(np.array([1], dtype=np.int64), "s_start"),
             numpy_helper.from_array(np.array([3], dtype=np.int64), "s_end"),
             numpy_helper.from_array(np.array([1], dtype=np.int64), "s_axis"),
             numpy_helper.from_array(np.array(0.0, dtype=np.float32), "lo"),
             numpy_helper.from_array(np.array(6.0, dtype=np.float32), "hi")]
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["e"], name="emb"),              # [3, 4]
        helper.make_node("Gemm", ["e", "wk", "bias"], ["g"], name="gemm", alpha=0.5),  # [3, 6]
        helper.make_node("Split", ["g"], ["g0", "g1"], name="split", axis=1, num_outputs=2),
        helper.make_node("Mul", ["g0", "g1"], ["m"], name="mul"),                    # [3, 3]
        helper.make_node("Shape", ["m"], ["shp"], name="shape"),
        helper.make_node("Gather", ["shp", "zero"], ["d0"], name="gshape", axis=0),
        helper.make_node("Concat", ["d0", "minus1"], ["newshape"], name="cat_shape", axis=0),
        helper.make_node("Reshape", ["m", "newshape"], ["rs"], name="reshape"),      # [3, 3]
        helper.make_node("Slice", ["rs", "s_start", "s_end", "s_axis"], ["sl"], name="slice"),  # [3, 2]
        helper.make_node("Clip", ["sl", "lo", "hi"], ["cl"], name="clip"),
        helper.make_node("Unsqueeze", ["cl", "zero"], ["u"], name="unsq"),           # [1, 3, 2]
        helper.make_node("Unsqueeze", ["u", "zero"], ["u2"], name="unsq2"),          # [1, 1, 3, 2]
        helper.make_node("Resize", ["u2", "", "scales"], ["y"], name="resize", mode="nearest"),  # [1, 1, 6, 4]
    ]
    m = _onnx_model(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
                    [helper.make_tensor_value_info("y", f, [1, 1, 6, 4])], inits, opset=18)
    onnx.checker.check_model(m)
    g = from_onnx(m, name="hand")
    assert g.name == "hand" and g.tensor("y").shape == (1, 1, 6, 4) and g.tensor("y").role == TensorRole.output
    assert g.macs == 3 * 6 * 4
    assert g.op("emb").kind == OpKind.embedding and g.tensor("table").role == TensorRole.weight
    assert {o.attr("fn") for o in g.ops.values()} >= {"mul_scalar", "add", "slice", "relu6", "upsample_nearest"}
    assert "shape" not in g.ops and "gshape" not in g.ops  # folded
    # the ONNX reference runtime agrees on the output shape
    from onnx.reference import ReferenceEvaluator

    out = ReferenceEvaluator(m).run(None, {"ids": np.array([1, 2, 3], dtype=np.int64)})[0]
    assert tuple(out.shape) == g.tensor("y").shape


def test_onnx_from_path_and_model_agree(tmp_path):
    p = _export(module("mlp2"), example_inputs("mlp2"), tmp_path / "mlp2.onnx")
    import onnx

    g1, g2 = from_onnx(p), from_onnx(onnx.load(p), name="mlp2")
    assert g1.name == "mlp2" and g1 == g2


def test_untraceable_control_flow_is_a_typed_error():
    class Branchy(nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # data-dependent control flow: fx cannot trace it
                return x * 2
            return x

    with pytest.raises(UnsupportedOpError) as ei:
        from_torch(Branchy(), torch.randn(3))
    assert "symbolic tracing" in ei.value.items[0][0] and "test_frontends.py" in ei.value.items[0][1]


def test_onnx_lstm_agrees_with_torch(tmp_path):
    """The exporter's ONNX LSTM nodes unroll like nn.LSTM: same MACs, same number of gate GEMMs."""
    kw = {"seq": 6, "vocab": 300, "emb": 16, "hidden": 12, "layers": 2}
    g_t, g_o = _agree("lstm_lm", tmp_path, **kw)
    assert len(_kind(g_o, OpKind.linear)) == 2 * 2 * 6
    # the recurrent weight of a layer stays one tensor across the unrolled steps
    r = [o for o in g_o.ops.values() if o.kind == OpKind.linear and o.name.endswith(".gh")]
    assert len({o.input_names[1] for o in r}) == 2


def test_sdpa_decomposes_like_explicit_attention():
    class Fused(nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    q = torch.randn(2, 4, 10, 8)
    g = from_torch(Fused(), (q, q.clone(), q.clone()))
    assert g.macs == 2 * (2 * 4 * 10 * 10 * 8)
    assert g.count_kinds()["batch_matmul"] == 2 and g.count_kinds()["softmax"] == 1
    assert g.tensor(g.outputs[0]).shape == (2, 4, 10, 8)
    assert any(t.role == TensorRole.weight and "causal_mask" in t.name for t in g.tensors.values())


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention_module(batch_first):
    E, h, L, N = 16, 4, 6, 2

    class Enc(nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = nn.MultiheadAttention(E, h, batch_first=batch_first)

        def forward(self, x, mask):
            y, _ = self.mha(x, x, x, attn_mask=mask, need_weights=False)
            z, w = self.mha(y, x, x)  # cross-attention-like: q differs from k, v
            return z, w

    x = torch.randn(N, L, E) if batch_first else torch.randn(L, N, E)
    mask = torch.zeros(L, L)
    enc = Enc().eval()
    g = from_torch(enc, (x, mask))
    proj = N * L * E * E * 4  # q, k, v and out projections
    attn = 2 * N * h * L * L * (E // h)
    assert g.macs == 2 * (proj + attn)
    ref = enc(x, mask)
    assert tuple(g.tensor(g.outputs[0]).shape) == tuple(ref[0].shape)
    assert tuple(g.tensor(g.outputs[1]).shape) == tuple(ref[1].shape)
    # the packed in-projection weight is one tensor for both calls
    assert sum(1 for t in g.tensors if t == "mha.in_proj_weight") == 1
