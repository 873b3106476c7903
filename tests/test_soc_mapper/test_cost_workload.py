import math

import pytest
from soc_mapper.cost import compute_cycles, cost_table, layer_cost
from soc_mapper.errors import MapperError, UnsupportedLayerError
from soc_mapper.soc import soc_from_system
from soc_mapper.synthetic import tiny_branchy, tiny_cnn, tiny_transformer
from soc_mapper.workload import build_workload, layers_of_graph, mix_models

from shared_ir import Tensor, ops
from shared_ir.op import TensorRole

from .helpers import device, problem, small_soc, soc_dict

W = TensorRole.weight


def _conv_layer(cin=64, cout=128, hw=14, k=3, groups=1):
    x = Tensor("x", (1, cin, hw, hw), role=TensorRole.input)
    op = ops.conv2d("c", x, Tensor("w", (cout, cin // groups, k, k), role=W), "y", padding=k // 2, groups=groups)
    from shared_ir import Graph

    (l,), _ = layers_of_graph(Graph([op], name="g"))
    return l, op


def test_layer_sizes_come_from_the_ir():
    l, op = _conv_layer()
    assert l.macs == op.macs == 128 * 64 * 14 * 14 * 9
    assert l.weight_bytes == 128 * 64 * 9  # int8: one byte per element
    assert l.out_bytes == 128 * 14 * 14 and l.in_bytes == 64 * 14 * 14
    assert l.dims == {"B": 1, "G": 1, "K": 128, "C": 64, "P": 14, "Q": 14, "R": 3, "S": 3}


def test_dataflow_models_follow_their_spatial_mappings():
    soc = small_soc()
    nv, sd, tpu = soc.accs[0], soc.accs[2], soc.accs[3]
    l, _ = _conv_layer()
    cyc, pes = compute_cycles(l, nv)  # K over 256 clusters, C over 64
    assert pes == 128 * 64 and cyc >= 14 * 14 * 9
    cyc_s, pes_s = compute_cycles(l, sd)  # P, Q over the 128x128 grid
    assert pes_s == 14 * 14 and cyc_s >= 128 * 64 * 9
    dw, _ = _conv_layer(cin=64, cout=64, groups=64)
    assert dw.is_depthwise
    # depthwise: ShiDianNao (pixels in parallel) beats NVDLA (one channel per cluster)
    assert layer_cost(dw, sd)[0] < layer_cost(dw, nv)[0]
    # a dense conv is faster on NVDLA than on ShiDianNao once its weights are resident; streamed, MAESTRO's
    # off-chip bound (the weight tile refilled at every top-level step) dominates NVDLA's weight-stationary steps
    assert layer_cost(l, nv, pinned=True)[0] < layer_cost(l, sd)[0]
    assert layer_cost(l, nv)[0] > 10 * layer_cost(l, nv, pinned=True)[0]
    eye = soc_from_system(soc_dict([device("e", "eyeriss", (0, 0))])).accs[0]
    cyc_e, pes_e = compute_cycles(l, eye)
    assert 0 < pes_e <= eye.num_pes and cyc_e * pes_e >= l.macs
    for a in (nv, sd, tpu, eye):
        c, p = compute_cycles(l, a)
        assert c * p >= l.macs  # no dataflow does more than its PEs allow


def test_tpu_runs_convs_as_im2col_gemms_on_a_weight_stationary_array():
    from soc_mapper.maestro_model import problem_of
    from soc_mapper.workload import Layer

    soc = small_soc()
    nv, tpu = soc.accs[0], soc.accs[3]
    l, _ = _conv_layer()
    p = problem_of(l, "tpu")
    assert (p.kind, dict(p.dims), p.repeat) == ("CONV", {"K": 128, "C": 64 * 9, "R": 1, "S": 1, "Y": 14 * 14,
                                                         "X": 1}, 1)
    assert compute_cycles(l, tpu)[1] == 128 * 128  # the reduction (576) fills the rows, K = 128 the columns
    # the same MAESTRO model as NVDLA's weight-stationary convs: streamed weights are bound by the tile refill
    assert layer_cost(l, tpu)[0] > 10 * layer_cost(l, tpu, pinned=True)[0]
    assert 0.2 < layer_cost(l, tpu, pinned=True)[0] / layer_cost(l, nv, pinned=True)[0] < 5
    dw, _ = _conv_layer(cin=64, cout=64, groups=64)
    assert problem_of(dw, "tpu").repeat == 64  # one GEMM per channel
    # a batched matmul's second operand is an activation: nothing to pin
    bmm = Layer("a", "m#0", "batch_matmul", {"B": 12, "M": 128, "N": 128, "K": 64}, 12 * 128 * 128 * 64,
                2 * 12 * 128 * 64, 0, 12 * 128 * 128)
    assert problem_of(bmm, "tpu").repeat == 12
    assert layer_cost(bmm, tpu, pinned=True) == layer_cost(bmm, tpu)


def test_pinned_weights_are_never_slower_and_costs_are_marked_unsupported():
    w, soc, c = problem()
    assert (c.latency_pinned <= c.latency + 1e-15).all()
    kinds = [l.op_kind for l in w.layers]
    for v, k in enumerate(kinds):
        for a, acc in enumerate(soc.accs):
            assert c.supported[v, a] == (k in acc.op_kinds)
            assert math.isinf(c.latency[v, a]) != c.supported[v, a]
    assert (c.power[c.supported] > 0).all() and (c.energy >= 0).all()


def test_copies_get_distinct_names_and_contracted_edges():
    w = build_workload([("br", tiny_branchy(), 2), ("cnn", tiny_cnn(), 1)])
    names = w.names
    assert len(set(names)) == len(names)
    assert "br#0/ca" in names and "br#1/ca" in names and "cnn#0/stem" in names
    ca, cb, cc = (names.index(f"br#0/{n}") for n in ("ca", "cb", "cc"))
    assert set(w.preds[cc]) == {ca, cb}  # through the elementwise add
    assert (ca, cc) in w.edge_bytes and w.edge_bytes[(ca, cc)] == w.layers[ca].out_bytes
    fc = names.index("cnn#0/fc")
    assert w.preds[fc] == [names.index("cnn#0/pw1")]  # through pool and view
    assert not any(w.layers[u].model != w.layers[v].model for u, v in w.edge_bytes)
    assert w.is_topological(list(range(len(w))))


def test_unknown_mix_and_bad_copies_are_named():
    with pytest.raises(MapperError, match="workload.mix"):
        mix_models("vision9")
    with pytest.raises(MapperError, match=r"models\[0\].copies"):
        build_workload([("tf", tiny_transformer(), 0)])
    assert [m for m, _, _ in mix_models("mixed1")] == ["googlenet", "yolov5s", "bert_base", "lstm_lm", "mobilenet_v2"]
    assert mix_models("mixed3")[0][2] == 8 and mix_models("vision2")[0][2] == 8


def test_layer_no_accelerator_supports_is_named():
    soc = soc_from_system(soc_dict([device("nv", "nvdla", (0, 0)), device("sd", "shidiannao", (1, 0))]))
    w = build_workload([("tf", tiny_transformer(), 1)])
    with pytest.raises(UnsupportedLayerError, match=r"layers\.tf#0/qk.*batch_matmul.*\['nv', 'sd'\]"):
        cost_table(w, soc)
