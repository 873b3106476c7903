"""Instance isolation: a failing instance raises for itself (naming the instance and the node), the others of
its minibatch compute, and the batcher stays usable; typed errors for cycles, block shape clashes, policies."""
import random

import pytest
import torch
from dynamic_batcher import Batcher, Eager, Model
from dynamic_batcher.errors import BatcherError, ConfigError, CycleError, InstanceError, ShapeMismatchError
from dynamic_batcher.graph import DynGraph
from dynamic_batcher.policies import TypewiseLB
from dynamic_batcher.workloads import make_workload


def _chain_model():
    m = Model("iso", seed=0)
    W, U = m.param("W", (4, 4)), m.param("U", (4, 4))
    cell = m.block("cell", lambda ops, x, h: ops.tanh(ops.add(ops.linear(W, x), ops.linear(U, h))), [(4,), (4,)])

    def forward(ops, xs, fail_at=None, fn=None):
        h = ops.constant(torch.zeros(4))
        outs = []
        for t, x in enumerate(xs):
            x = ops.constant(x)
            if t == fail_at:
                x = ops.custom(fn, x, shape=(4,), name="user_fn")
            h = ops.call(cell, x, h)[0]
            outs.append(h)
        return outs

    return m, forward


def _boom(t):
    raise ValueError("bad token")


def test_a_failing_instance_raises_for_itself_and_the_others_compute():
    m, forward = _chain_model()
    rng = torch.Generator().manual_seed(0)
    seqs = [torch.randn(L, 4, generator=rng) for L in (5, 4, 6)]
    bt = Batcher(m)
    outs = [forward(bt, s, fail_at=2 if i == 1 else None, fn=_boom) for i, s in enumerate(seqs)]
    for i in (0, 2):  # healthy instances, one recorded after the failing one
        for got, want in zip(outs[i], forward(Eager(m), seqs[i])):
            torch.testing.assert_close(got.value(), want.value())
    # the failing instance's values before the failing op are fine
    for got, want in zip(outs[1][:2], forward(Eager(m), seqs[1])[:2]):
        torch.testing.assert_close(got.value(), want.value())
    for v in outs[1][2:]:
        with pytest.raises(InstanceError) as e:
            v.value()
        assert e.value.instance == 1 and "custom#" in e.value.node and "user_fn" in str(e.value)
        assert "instance 1" in str(e.value) and "bad token" in str(e.value)
        assert isinstance(e.value.__cause__, ValueError)
    assert [f.instance for f in bt.failures] == [1]
    # pending state is cleared: the batcher is usable afterwards
    assert bt.g.n == 0
    more = forward(bt, seqs[0])
    for got, want in zip(more, forward(Eager(m), seqs[0])):
        torch.testing.assert_close(got.value(), want.value())
    assert bt.failures == []


def test_a_custom_op_of_the_wrong_shape_fails_only_its_instance():
    m, forward = _chain_model()
    seqs = [torch.ones(3, 4), torch.ones(3, 4) * 0.5]
    bt = Batcher(m)
    outs = [forward(bt, seqs[0], fail_at=1, fn=lambda t: torch.cat([t, t])), forward(bt, seqs[1])]
    torch.testing.assert_close(outs[1][-1].value(), forward(Eager(m), seqs[1])[-1].value())
    with pytest.raises(ShapeMismatchError, match=r"custom#\d+.*instance 0.*returned shape \[8\]"):
        outs[0][1].value()


def test_a_failing_tree_instance_keeps_the_treelstm_minibatch():
    wl = make_workload("treelstm", hidden=8)
    mb = wl.minibatch(random.Random(2), 4, length=5)
    bt = Batcher(wl.model)
    outs = []
    for i, tree in enumerate(mb):
        o = wl.forward(bt, tree)
        if i == 2:
            o.append(bt.custom(_boom, o[-1], shape=(5,), name="readout"))
        outs.append(o)
    for i, tree in enumerate(mb):
        want = wl.forward(Eager(wl.model), tree)
        for got, w in zip(outs[i], want):
            torch.testing.assert_close(got.value(), w.value(), atol=1e-5, rtol=1e-5)
    with pytest.raises(InstanceError, match="instance 2.*readout"):
        outs[2][-1].value()


class _FailsOnce(TypewiseLB):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def schedule(self, g):
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("scheduler crashed")
        return super().schedule(g)


def test_a_failed_flush_clears_the_pending_graph():
    m, forward = _chain_model()
    bt = Batcher(m, policy=_FailsOnce())
    lost = forward(bt, torch.ones(3, 4))
    with pytest.raises(RuntimeError, match="scheduler crashed"):
        bt.flush()
    assert bt.g.n == 0
    with pytest.raises(BatcherError, match="flush .*failed.*scheduler crashed"):
        lost[0].value()
    s = torch.randn(4, 4)
    for got, want in zip(forward(bt, s), forward(Eager(m), s)):
        torch.testing.assert_close(got.value(), want.value())


def test_a_self_loop_is_a_cycle_error_naming_the_node():
    g = DynGraph()
    g.add("constant", (), (), (), ((4,),))
    with pytest.raises(CycleError) as e:
        g.add("tanh", ((1, 0),), (), (), ((4,),))
    assert e.value.node == "tanh#1" and "cycle" in str(e.value)
    with pytest.raises(BatcherError, match=r"node add#1: argument 1 refers to node 5"):
        g.add("add", ((0, 0), (5, 0)), (), (), ((4,),))
    with pytest.raises(BatcherError, match=r"node tanh#1: argument 0 refers to output 2 of node constant#0"):
        g.add("tanh", ((0, 2),), (), (), ((4,),))
    assert g.n == 1  # nothing half-added
    g.add("tanh", ((0, 0),), (), (), ((4,),))
    assert g.n == 2 and g.succ[0] == [1]


@pytest.mark.parametrize("hidden", [6, 8])
def test_two_blocks_of_one_name_in_one_batcher_name_the_node(hidden):
    a = make_workload("treegru", hidden=8, seed=0)
    b = make_workload("treegru", hidden=hidden, seed=1)  # another model whose blocks have the same names
    bt = Batcher(a.model)
    ta, tb = a.sample(random.Random(0), 4), b.sample(random.Random(1), 4)
    oa = a.forward(bt, ta)
    err = ShapeMismatchError if hidden != 8 else BatcherError
    with pytest.raises(err, match=r"node block#\d+<leaf>.*block leaf of model treegru"):
        b.forward(bt, tb)
    for got, want in zip(oa, a.forward(Eager(a.model), ta)):
        torch.testing.assert_close(got.value(), want.value(), atol=1e-5, rtol=1e-5)


def test_unknown_policy_is_a_config_error():
    m, _ = _chain_model()
    with pytest.raises(ConfigError) as e:
        Batcher(m, policy="typewise")
    assert e.value.path == "batcher.policy" and "'typewise'" in str(e.value) and "typewise_lb" in str(e.value)
    with pytest.raises(ConfigError, match="batcher.policy.*int"):
        Batcher(m, policy=3)
    with pytest.raises(ConfigError, match="batcher.blocks"):
        Batcher(m, blocks="blocks")
