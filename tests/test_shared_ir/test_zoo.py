"""The model zoo: every model traces, op counts are sensible, MAC totals match published figures within 2%."""
from __future__ import annotations

import pytest

pytest.importorskip("torch")

from shared_ir import Graph, OpKind, TensorRole, ValidationError  # noqa: E402
from shared_ir.zoo import MODELS, entry, example_inputs, graph, module  # noqa: E402

# minimum op counts by kind that each architecture must show (exact where the architecture fixes them)
EXPECTED_KINDS = {
    "resnet18": {"conv2d": 20, "linear": 1, "pool": 2},
    "resnet50": {"conv2d": 53, "linear": 1, "pool": 2},
    "mobilenet_v2": {"conv2d": 52, "linear": 1, "pool": 1},
    "googlenet": {"conv2d": 57, "linear": 1, "concat": 9, "pool": 14},
    "yolov5s": {"conv2d": 60, "concat": 13, "pool": 3},
    "bert_base": {"linear": 12 * 6 + 1, "batch_matmul": 24, "softmax": 12, "layernorm": 25, "embedding": 3},
    "vit_base": {"conv2d": 1, "linear": 12 * 4 + 1, "batch_matmul": 24, "softmax": 12, "layernorm": 25},
    "lstm_lm": {"embedding": 1, "linear": 2 * 35 * 2 + 1},
    "mlp2": {"linear": 2, "elementwise": 1},
    "transformer_block": {"linear": 6, "batch_matmul": 2, "softmax": 1, "layernorm": 2},
}


def test_every_model_listed():
    assert set(EXPECTED_KINDS) == set(MODELS)
    for name, e in MODELS.items():
        assert e.source, name
        assert e.expected_gmacs() is not None, f"{name} has neither a published nor an analytic figure"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_zoo_macs_and_kinds(name):
    g = graph(name)
    e = MODELS[name]
    exp = e.expected_gmacs()
    got = g.macs / 1e9
    assert got == pytest.approx(exp, rel=0.02), f"{name}: {got:.4f} GMACs vs expected {exp:.4f} ({e.source})"
    # the analytic form, where one exists, is exact (it restates the architecture)
    if e.analytic is not None:
        assert got == pytest.approx(e.analytic({}), rel=1e-6)
    kinds = g.count_kinds()
    for k, n in EXPECTED_KINDS[name].items():
        assert kinds.get(k, 0) == n, f"{name}: {k} count {kinds.get(k, 0)} != {n} ({kinds})"
    # only MAC ops carry MACs; every MAC op has some
    for op in g.ops.values():
        assert (op.macs > 0) == op.kind.is_mac, op.name
    assert g.inputs and g.outputs
    for t in g.inputs:
        assert g.tensor(t).role == TensorRole.input
    for t in g.outputs:
        assert g.tensor(t).role == TensorRole.output
    # every weight tensor is a parameter/buffer of the module, by qualified name (or a documented constant)
    m = module(name)
    params = dict(m.named_parameters()) | dict(m.named_buffers())
    for t in g.tensors.values():
        if t.role == TensorRole.weight and not t.name.startswith("const."):
            assert t.name in params, f"{name}: weight {t.name} is not a parameter"
            assert tuple(params[t.name].shape) == t.shape


def test_published_figures_quoted():
    # the figures the brief asks for (same convention: MACs of conv/linear/matmul)
    brief = {"resnet18": 1.82, "resnet50": 4.11, "mobilenet_v2": 0.30, "googlenet": 1.50, "yolov5s": 8.25,
             "bert_base": 11.2, "vit_base": 17.6}
    for name, v in brief.items():
        assert graph(name).macs / 1e9 == pytest.approx(v, rel=0.02), name


def test_batch_scales_macs():
    g1, g2 = graph("resnet18"), graph("resnet18", batch=2)
    assert g2.macs == 2 * g1.macs
    assert g2.tensor(g2.inputs[0]).shape[0] == 2
    assert graph("transformer_block", batch=3).macs == 3 * graph("transformer_block").macs


def test_kwargs_variants_follow_analytic_forms():
    for name, kw in [("bert_base", {"seq": 64, "layers": 2}), ("lstm_lm", {"layers": 4, "seq": 6}),
                     ("transformer_block", {"d_model": 256, "heads": 4, "ffn": 1024, "seq": 32}),
                     ("vit_base", {"layers": 2}), ("mlp2", {"in_features": 100, "hidden": 50})]:
        g = graph(name, **kw)
        assert g.macs / 1e9 == pytest.approx(MODELS[name].expected_gmacs(**kw), rel=1e-6), (name, kw)
    assert graph("resnet18", img=112).macs < graph("resnet18").macs


def test_lstm_lm_four_layers_used_by_soc_mapper():
    g = graph("lstm_lm", layers=4, seq=4)
    H, E, V, T = 650, 650, 10000, 4
    assert g.macs == 4 * H * (E + H) * T + 3 * 4 * H * 2 * H * T + H * V * T
    w = [t for t in g.tensors if t.startswith("rnn.weight_")]
    assert sorted(w) == sorted(f"rnn.weight_{k}_l{i}" for k in ("ih", "hh") for i in range(4))


def test_causal_block_reads_mask():
    g = graph("transformer_block", causal=True, seq=16, d_model=64, heads=4, ffn=128)
    assert g.macs / 1e9 == pytest.approx(MODELS["transformer_block"].expected_gmacs(seq=16, d_model=64, ffn=128))
    mask = g.tensor("attn.mask")
    assert mask.role == TensorRole.weight and mask.shape == (16, 16)
    assert any("attn.mask" in op.input_names for op in g.ops.values())


def test_zoo_graph_roundtrips_yaml(tmp_path):
    g = graph("resnet18")
    g2 = Graph.from_yaml(g.to_yaml())
    assert g2 == g and g2.macs == g.macs
    assert g2.topological_order() == g.topological_order()
    p = tmp_path / "lstm.json"
    gl = graph("lstm_lm", seq=3)
    gl.save(str(p))
    assert Graph.load(str(p)) == gl


def test_example_inputs_match_specs():
    xs = example_inputs("bert_base", batch=2, seq=16)
    assert tuple(xs[0].shape) == (2, 16) and str(xs[0].dtype) == "torch.int64"
    assert tuple(example_inputs("yolov5s")[0].shape) == (1, 3, 640, 640)
    assert tuple(example_inputs("lstm_lm", batch=4)[0].shape) == (35, 4)


def test_unknown_model_and_bad_batch():
    with pytest.raises(ValidationError, match="unknown model 'resnet19'"):
        entry("resnet19")
    with pytest.raises(ValidationError, match="zoo.batch"):
        example_inputs("mlp2", batch=0)
    with pytest.raises(ValidationError, match=r"zoo.bert_base.kwargs: unknown arguments \['seq_len'\].*'seq'"):
        graph("bert_base", seq_len=64)


def test_chains_found_in_transformer_block():
    g = graph("transformer_block")
    chains = g.chains()
    # q·kᵀ → scale → softmax → ·v is a chain of two batch matmuls joined by glue ops
    assert any(sum(o.kind == OpKind.batch_matmul for o in c.compute_ops) == 2 for c in chains)


@pytest.mark.parametrize("name", ["resnet18", "googlenet", "yolov5s", "vit_base", "lstm_lm"])
def test_zoo_ops_write_whole_outputs(name):
    """Every translated op's full iteration space writes each output element (no gaps from a wrong index) and
    touches no more input elements than exist (padding/ceil windows are clipped)."""
    g = graph(name, **({"seq": 3} if name == "lstm_lm" else {}))
    for op in g.ops.values():
        fp = op.footprint()
        for a in op.outputs:
            assert fp[a.tensor.name] == a.tensor.numel, (op.name, op.attr("fn"))
        for a in op.inputs:
            assert 0 < fp[a.tensor.name] <= a.tensor.numel, op.name
