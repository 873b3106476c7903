"""Define-by-run API: batched results equal per-instance eager PyTorch; flush on read; report; flushed graphs freed."""
import random

import pytest
import torch
from dynamic_batcher import Batcher, Eager, Model
from dynamic_batcher.workloads import FAMILIES, make_workload


def _check(wl, mb, bt, tol=1e-5):
    outs = [wl.forward(bt, inst) for inst in mb]
    bt.flush()
    for inst, o in zip(mb, outs):
        ref = wl.forward(Eager(wl.model), inst)
        assert len(o) == len(ref)
        for a, b in zip(o, ref):
            torch.testing.assert_close(a.value(), b.value(), atol=tol, rtol=tol)


@pytest.mark.parametrize("name", sorted(FAMILIES))
@pytest.mark.parametrize("mode", [("block", "pq", "typewise_lb"), ("inline", "dynet", "dynet_agenda"),
                                  ("block", "dynet", "dynet_depth")])
def test_workloads_match_eager(name, mode):
    wl = make_workload(name, hidden=16)
    mb = wl.minibatch(random.Random(1), 3)
    blocks, layout, pol = mode
    _check(wl, mb, Batcher(wl.model, policy=pol, blocks=blocks, layout=layout, check=True))


def test_lstm_cell_matches_torch_lstmcell():
    """Independent reference: our LSTM block vs torch.nn.LSTMCell with the same weights."""
    from dynamic_batcher.workloads import lstm_block

    H, D = 8, 6
    m = Model("lstm_ref", seed=3)
    blk, P = lstm_block(m, "cell", D, H)
    ref = torch.nn.LSTMCell(D, H)
    with torch.no_grad():
        ref.weight_ih.copy_(torch.cat([P[g][0].tensor for g in "ifuo"]))
        ref.weight_hh.copy_(torch.cat([P[g][1].tensor for g in "ifuo"]))
        for g in "ifuo":
            P[g][2].tensor.normal_()
        ref.bias_ih.copy_(torch.cat([P[g][2].tensor for g in "ifuo"]))
        ref.bias_hh.zero_()
    seqs = [torch.randn(L, D) for L in (5, 2, 7)]
    bt = Batcher(m, policy="typewise_lb")
    outs = []
    for s in seqs:
        h = c = bt.constant(torch.zeros(H))
        hs = []
        for x in s:
            h, c = bt.call(blk, bt.constant(x), h, c)
            hs.append(h)
        outs.append(hs)
    bt.flush()
    for s, hs in zip(seqs, outs):
        h = c = torch.zeros(1, H)
        for x, got in zip(s, hs):
            with torch.no_grad():
                h, c = ref(x[None], (h, c))
            torch.testing.assert_close(got.value(), h[0], atol=1e-5, rtol=1e-5)


def test_read_mid_build_flushes_and_stays_correct():
    m = Model("ctl", seed=0)
    W = m.param("W", (4, 4))
    bt = Batcher(m)
    x = bt.constant(torch.ones(4))
    y = bt.tanh(bt.linear(W, x))
    # data-dependent control flow: the branch depends on a value not yet computed
    n_before = bt.g.n
    assert n_before == 3
    v = y.value()
    assert bt.times.flushes == 1 and bt.g.n == 0
    z = bt.relu(y) if v.sum() > 0 else bt.sigmoid(y)  # y enters the new graph as a constant
    z2 = bt.add(z, x)  # x is from the earlier graph, too
    want_y = torch.tanh(W.tensor @ torch.ones(4))
    want_z = (torch.relu(want_y) if want_y.sum() > 0 else torch.sigmoid(want_y)) + 1
    torch.testing.assert_close(z2.value(), want_z)
    torch.testing.assert_close(v, want_y)


def test_schedule_cache_hit_on_same_structure():
    wl = make_workload("treelstm", hidden=8)
    mb = wl.minibatch(random.Random(0), 4)
    bt = Batcher(wl.model, policy="typewise_lb")
    for _ in range(3):
        outs = [wl.forward(bt, t) for t in mb]
        bt.flush()
    assert bt.times.cache_hits == 2
    ref = wl.forward(Eager(wl.model), mb[0])
    torch.testing.assert_close(outs[0][-1].value(), ref[-1].value(), atol=1e-5, rtol=1e-5)


def test_report_names_unbatched_custom_ops():
    m = Model("rep", seed=0)
    W = m.param("W", (3, 3))
    bt = Batcher(m)
    outs = []
    for i in range(4):
        x = bt.constant(torch.full((3,), float(i)))
        y = bt.custom(lambda t: t.flip(0), bt.linear(W, x), shape=(3,), name="flip")
        outs.append(bt.tanh(y))
    bt.flush()
    rep = {r.kind: r for r in bt.report()}
    assert rep["custom"].unbatched == 4 and rep["custom"].batches == 4
    assert any("flip" in why for why in rep["custom"].reasons)
    assert rep["linear"].batches == 1 and rep["linear"].nodes == 4
    summ = bt.batching_summary()
    assert summ["lower_bound"] == 4 + 3 and summ["batches"] >= summ["lower_bound"]  # 4 custom + const/linear/tanh
    torch.testing.assert_close(outs[2].value(), torch.tanh((W.tensor @ torch.full((3,), 2.0)).flip(0)))


def test_shared_weight_identity_in_signature():
    m = Model("sig", seed=0)
    W1, W2 = m.param("W1", (4, 4)), m.param("W2", (4, 4))
    bt = Batcher(m)
    x = bt.constant(torch.ones(4))
    a, b, c = bt.linear(W1, x), bt.linear(W1, x), bt.linear(W2, x)
    g = bt.g
    assert g.type[a.node] == g.type[b.node] != g.type[c.node]


@pytest.mark.parametrize("name", ["treelstm", "lattice_gru"])
def test_finished_graphs_are_freed_by_refcounting(name):
    """No reference cycle keeps a flushed graph alive (the recursive tree builders' closures, the graph and its
    cached view): otherwise each minibatch's graph waits for a full collection, a 100+ ms pause in a later one."""
    import gc
    import weakref

    wl = make_workload(name, hidden=8)
    bt = Batcher(wl.model, cache=False)
    gc.disable()
    try:
        outs = [wl.forward(bt, t) for t in wl.minibatch(random.Random(0), 4)]
        outs[0][0].value()  # flush
        ref = weakref.ref(bt.last_graph)
        del outs
        for t in wl.minibatch(random.Random(1), 4):
            wl.forward(bt, t)
        bt.flush()
        assert ref() is None
    finally:
        gc.enable()
