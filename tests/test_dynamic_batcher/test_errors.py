"""Bad input gives clear errors naming the node or file."""
import random

import pytest
import torch
from dynamic_batcher import Batcher, Model
from dynamic_batcher.errors import CycleError, PolicyFileError, ShapeMismatchError
from dynamic_batcher.graph import graph_from_spec
from dynamic_batcher.rl import FSMPolicy
from dynamic_batcher.workloads import make_workload


def test_cycle_names_a_node():
    spec = {"x": {"type": "in"}, "a": {"type": "tanh", "args": ["x", "c"]}, "b": {"type": "tanh", "args": ["a"]},
            "c": {"type": "add", "args": ["b"]}}
    with pytest.raises(CycleError) as e:
        graph_from_spec(spec)
    assert e.value.node in {"a", "b", "c"}
    assert "cycle" in str(e.value) and e.value.node in str(e.value)


def test_self_loop():
    with pytest.raises(CycleError, match="'s'"):
        graph_from_spec({"s": {"type": "t", "args": ["s"]}})


def test_shape_mismatch_names_node_and_argument():
    m = Model("shapes", seed=0)
    W = m.param("W", (4, 5))
    bt = Batcher(m)
    x = bt.constant(torch.ones(4))
    with pytest.raises(ShapeMismatchError) as e:
        bt.linear(W, x)
    assert "linear#1[shapes.W]" in str(e.value) and "[4]" in str(e.value)
    with pytest.raises(ShapeMismatchError, match=r"add#\d+.*\[4\] vs \[3\]"):
        bt.add(x, bt.constant(torch.ones(3)))


def test_custom_op_wrong_shape_names_node():
    m = Model("cust", seed=0)
    bt = Batcher(m)
    y = bt.custom(lambda t: torch.cat([t, t]), bt.constant(torch.ones(2)), shape=(2,), name="dup")
    with pytest.raises(ShapeMismatchError, match="custom#1"):
        y.value()


def test_block_input_shape_mismatch():
    wl = make_workload("treegru", hidden=8)
    bt = Batcher(wl.model)
    blk = wl.model.blocks["node"]
    with pytest.raises(ShapeMismatchError, match="block.*node.*input 1"):
        bt.call(blk, bt.constant(torch.ones(8)), bt.constant(torch.ones(7)))


def test_policy_file_for_other_model(tmp_path):
    a = make_workload("treelstm", hidden=8)
    b = make_workload("treegru", hidden=8)
    bt = Batcher(a.model, policy="typewise_lb")
    for t in a.minibatch(random.Random(0), 3):
        a.forward(bt, t)
    g = bt.g.view()
    p = FSMPolicy("set", model_fingerprint=a.model.fingerprint(), model_name=a.model.name)
    from dynamic_batcher.rl import QConfig
    p.train(g, QConfig(max_episodes=60))
    path = tmp_path / "pol.json"
    p.save(str(path))
    FSMPolicy.load(str(path), a.model)  # fine
    with pytest.raises(PolicyFileError) as e:
        FSMPolicy.load(str(path), b.model)
    assert str(path) in str(e.value) and "treelstm" in str(e.value) and "treegru" in str(e.value)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(PolicyFileError, match="bad.json"):
        FSMPolicy.load(str(bad), a.model)
    with pytest.raises(PolicyFileError, match="missing.json"):
        FSMPolicy.load(str(tmp_path / "missing.json"))
