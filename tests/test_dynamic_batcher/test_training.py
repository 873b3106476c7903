"""Training through the batched execution: gradients equal per-instance eager PyTorch; inference stays on the
fast path; a user-written model batches and trains without touching the package."""
import random

import pytest
import torch
from dynamic_batcher import Batcher, Eager, Model
from dynamic_batcher.workloads import make_workload

LENGTH = {"lstm_lm": 6, "bilstm_tagger": 5, "treelstm": 5, "treegru": 5, "mvrnn": 4, "lattice_lstm": 8,
          "lattice_gru": 8}
MODES = [("block", "pq", "typewise_lb"), ("inline", "dynet", "dynet_agenda"), ("block", "dynet", "dynet_depth")]


def _trainable(model):
    for p in model.params.values():
        p.tensor.requires_grad_(True)
        p.tensor.grad = None


def _loss_and_grads(model, forward, ops, mb, targets):
    """Loss = -Σ log p(target) over every output of every instance (as ``dynet_ref.train_step``), its gradients."""
    outs = [o for inst in mb for o in forward(ops() if callable(ops) else ops, inst)]
    lp = torch.stack([o.value() for o in outs])
    loss = -lp.gather(1, torch.tensor(targets[:len(outs)], dtype=torch.long)[:, None]).sum()
    loss.backward()
    grads = {}
    for n, p in model.params.items():
        grads[n] = None if p.tensor.grad is None else p.tensor.grad.clone()
        p.tensor.grad = None
    return float(loss.detach()), grads, lp.detach()


def _assert_same_grads(want, got):
    assert want.keys() == got.keys()
    reached = 0
    for n in want:
        if want[n] is None:
            assert got[n] is None or not got[n].any(), f"{n}: batched gradient where eager has none"
            continue
        assert got[n] is not None, f"{n}: no gradient through the batcher"
        torch.testing.assert_close(got[n], want[n], atol=2e-5, rtol=1e-4, msg=lambda m: f"{n}: {m}")
        reached += 1
    assert reached >= 3


@pytest.mark.parametrize("name", ["lstm_lm", "bilstm_tagger", "treelstm", "treegru", "mvrnn", "lattice_lstm",
                                  "lattice_gru"])
@pytest.mark.parametrize("mode", MODES, ids=["block-pq", "inline-dynet", "block-dynet"])
def test_gradients_equal_eager(name, mode):
    wl = make_workload(name, hidden=8)
    _trainable(wl.model)
    rng = random.Random(3)
    mb = [wl.sample(rng, rng.randint(2, LENGTH[name])) for _ in range(3)]
    targets = [rng.randrange(5) for _ in range(400)]
    blocks, layout, pol = mode
    bt = Batcher(wl.model, policy=pol, blocks=blocks, layout=layout, check=True)
    loss_e, ge, lp_e = _loss_and_grads(wl.model, wl.forward, lambda: Eager(wl.model), mb, targets)
    loss_b, gb, lp_b = _loss_and_grads(wl.model, wl.forward, bt, mb, targets)
    torch.testing.assert_close(lp_b, lp_e, atol=1e-5, rtol=1e-5)
    assert loss_b == pytest.approx(loss_e, rel=1e-5)
    _assert_same_grads(ge, gb)
    assert bt.batching_summary()["batches"] < bt.batching_summary()["nodes"]


@pytest.mark.parametrize("name", ["treelstm", "lattice_gru"])
def test_inference_keeps_the_fast_path(name):
    """Under no_grad (parameters requiring grad or not) the outputs equal eager and carry no autograd graph."""
    wl = make_workload(name, hidden=8)
    mb = wl.minibatch(random.Random(5), 3, length=5)
    for trainable in (False, True):
        for p in wl.model.params.values():
            p.tensor.requires_grad_(trainable)
        bt = Batcher(wl.model)
        with torch.no_grad():
            outs = [wl.forward(bt, inst) for inst in mb]
            refs = [wl.forward(Eager(wl.model), inst) for inst in mb]
            for o, r in zip(outs, refs):
                for a, b in zip(o, r):
                    assert a.value().grad_fn is None
                    torch.testing.assert_close(a.value(), b.value(), atol=1e-5, rtol=1e-5)


def test_sgd_steps_through_the_batcher_match_eager():
    """Weights updated in place between steps: the next batched forward uses the new weights, also on the
    inference path (block weights are stacked at plan time)."""
    wls = [make_workload("treelstm", hidden=8, seed=1) for _ in range(2)]
    rng = random.Random(7)
    mbs = [wls[0].minibatch(rng, 3, length=4) for _ in range(3)]
    targets = [rng.randrange(5) for _ in range(100)]
    bt = Batcher(wls[1].model)
    with torch.no_grad():  # an evaluation before training stacks the inference path's block weights
        [o.value() for o in wls[1].forward(bt, mbs[0][0])]
    for wl, ops in ((wls[0], None), (wls[1], bt)):
        _trainable(wl.model)
        for mb in mbs:
            ops_ = (lambda w=wl: Eager(w.model)) if ops is None else ops
            _, grads, _ = _loss_and_grads(wl.model, wl.forward, ops_, mb, targets)
            with torch.no_grad():
                for n, p in wl.model.params.items():
                    if grads[n] is not None:
                        p.tensor.sub_(0.5 * grads[n])
    for n in wls[0].model.params:
        torch.testing.assert_close(wls[1].model.params[n].tensor, wls[0].model.params[n].tensor, atol=1e-5,
                                   rtol=1e-4, msg=lambda m: f"{n}: {m}")
    with torch.no_grad():
        got = [o.value() for o in wls[1].forward(bt, mbs[0][0])]
        want = [o.value() for o in wls[0].forward(Eager(wls[0].model), mbs[0][0])]
    torch.testing.assert_close(torch.stack(got), torch.stack(want), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["treelstm", "bilstm_tagger", "lattice_lstm"])
def test_stack_equals_stacking_each_value_with_the_same_gradients(name):
    """``Batcher.stack`` (a few index_selects) gives the tensor and the gradients of ``torch.stack`` over each
    value read alone, for outputs of two flushes in a shuffled order; bad input is a clear error."""
    from dynamic_batcher.errors import ShapeMismatchError

    wl = make_workload(name, hidden=8)
    _trainable(wl.model)
    rng = random.Random(5)
    mbs = [[wl.sample(rng, rng.randint(2, LENGTH[name])) for _ in range(3)] for _ in range(2)]
    res = []
    for fast in (False, True):
        bt = Batcher(wl.model)
        outs = [o for inst in mbs[0] for o in wl.forward(bt, inst)]
        bt.flush()
        outs += [o for inst in mbs[1] for o in wl.forward(bt, inst)]  # pending: stack flushes them
        order = list(range(len(outs)))
        random.Random(1).shuffle(order)
        outs = [outs[i] for i in order]
        lp = bt.stack(outs) if fast else torch.stack([o.value() for o in outs])
        (lp * torch.arange(1.0, lp.numel() + 1).reshape(lp.shape)).sum().backward()
        res.append((lp.detach(), {n: p.tensor.grad.clone() for n, p in wl.model.params.items()
                                  if p.tensor.grad is not None}))
        _trainable(wl.model)
    torch.testing.assert_close(res[1][0], res[0][0])
    _assert_same_grads(res[0][1], res[1][1])
    bt = Batcher(wl.model)
    with pytest.raises(ShapeMismatchError, match="stack"):
        bt.stack([])
    with pytest.raises(ShapeMismatchError, match="value 1"):
        bt.stack([bt.constant(torch.ones(3)), bt.constant(torch.ones(4))])


def test_gradient_flows_across_a_flush():
    """A value read mid-build enters the next graph as a constant that keeps its autograd history."""
    m = Model("xflush", seed=0)
    W = m.param("W", (4, 4))
    W.tensor.requires_grad_(True)
    bt = Batcher(m)
    x = bt.constant(torch.ones(4))
    y = bt.tanh(bt.linear(W, x))
    y.value()
    z = bt.tanh(bt.linear(W, y))
    z.value().sum().backward()
    got = W.tensor.grad.clone()
    W.tensor.grad = None
    torch.tanh(W.tensor @ torch.tanh(W.tensor @ torch.ones(4))).sum().backward()
    torch.testing.assert_close(got, W.tensor.grad)


# --- a user's own dynamic model, written as in the README's quick start (not a workload of the package) ---------
def _dag_gru(hidden: int = 8, vocab: int = 20, seed: int = 0):
    """A GRU over a random DAG: each node's state from its token and the sum of its parents' states."""
    m = Model("dag_gru", seed=seed)
    E = m.param("emb", (vocab, hidden), "normal")
    Z = m.param("zero", (1, hidden), "zeros")
    P = {g: (m.param(f"W{g}", (hidden, hidden)), m.param(f"U{g}", (hidden, hidden)), m.param(f"b{g}", (hidden,)))
         for g in "zrn"}

    def cell(ops, x, h):
        gate = {g: ops.add(ops.linear(W, x, b), ops.linear(U, h)) for g, (W, U, b) in P.items() if g != "n"}
        z, r = ops.sigmoid(gate["z"]), ops.sigmoid(gate["r"])
        Wn, Un, bn = P["n"]
        n = ops.tanh(ops.add(ops.linear(Wn, x, bn), ops.linear(Un, ops.mul(r, h))))
        return ops.add(n, ops.mul(z, ops.sub(h, n)))

    gru = m.block("dag_cell", cell, [(hidden,), (hidden,)])
    Wo, bo = m.param("out.W", (3, hidden)), m.param("out.b", (3,))

    def forward(ops, dag):
        hs, outs = [], []
        for tok, parents in dag:
            h = ops.lookup(Z, 0)
            for p in parents:
                h = ops.add(h, hs[p])
            hs.append(ops.call(gru, ops.lookup(E, tok), h)[0])
            outs.append(ops.log_softmax(ops.linear(Wo, hs[-1], bo)))
        return outs

    def sample(rng, n):
        return [(rng.randrange(vocab), sorted(rng.sample(range(i), min(i, rng.randint(0, 2))))) for i in range(n)]

    return m, forward, sample


def test_a_user_model_batches_and_trains_without_touching_the_package():
    m, forward, sample = _dag_gru()
    rng = random.Random(11)
    mb = [sample(rng, rng.randint(3, 9)) for _ in range(4)]
    bt = Batcher(m)
    outs = [forward(bt, dag) for dag in mb]
    first = outs[0][-1].value()  # reading a value flushes
    s = bt.batching_summary()
    assert s["batches"] < s["nodes"] and s["lower_bound"] <= s["batches"]
    for dag, o in zip(mb, outs):
        want = forward(Eager(m), dag)
        for a, b in zip(o, want):
            torch.testing.assert_close(a.value(), b.value(), atol=1e-5, rtol=1e-5)
    assert first.shape == (3,)
    _trainable(m)
    targets = [rng.randrange(3) for _ in range(100)]
    _, ge, _ = _loss_and_grads(m, forward, lambda: Eager(m), mb, targets)
    for bt in (Batcher(m), Batcher(m, policy="dynet_agenda", blocks="inline")):
        _, gb, _ = _loss_and_grads(m, forward, bt, mb, targets)
        _assert_same_grads(ge, gb)


@pytest.mark.parametrize("name", ["treelstm", "lattice_lstm", "bilstm_tagger"])
def test_compiled_gather_backward_equals_eager(name, monkeypatch):
    from dynamic_batcher import executor, fastsim

    if fastsim.load() is None or not fastsim.load().pylist:
        pytest.skip("compiled library without the Python.h build")
    wl = make_workload(name, hidden=8)
    _trainable(wl.model)
    rng = random.Random(11)
    mb = [wl.sample(rng, rng.randint(3, LENGTH[name] + 2)) for _ in range(5)]
    targets = [rng.randrange(5) for _ in range(600)]
    used = []
    fn = executor._gather_rows()
    apply = fn.apply
    monkeypatch.setattr(fn, "apply", lambda *a: used.append(1) or apply(*a))
    _, ge, _ = _loss_and_grads(wl.model, wl.forward, lambda: Eager(wl.model), mb, targets)
    _, gb, _ = _loss_and_grads(wl.model, wl.forward, Batcher(wl.model, check=True), mb, targets)
    assert used, "no argument set went through the differentiable compiled gather"
    _assert_same_grads(ge, gb)
