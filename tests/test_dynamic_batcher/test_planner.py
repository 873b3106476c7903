"""PQ-tree memory planning inside static blocks vs the DyNet layout."""
import random

import pytest
from dynamic_batcher import Batcher
from dynamic_batcher.executor import BlockPlan, ExecStats
from dynamic_batcher.planner import BatchSpec, check_layout, dynet_layout, pq_layout
from dynamic_batcher.workloads import make_workload


def test_order_preserving_simple():
    # batch 1 outputs x,y,z ; batch 2 outputs p,q,r with args (z, x, y): PQ puts them so that a view works
    cls = {k: "v" for k in "xyzpqr"}
    b1 = BatchSpec(list("xyz"), [])
    b2 = BatchSpec(list("pqr"), [list("zxy")], [4])
    lay = pq_layout(cls, [b1, b2])
    order = lay.order[1]
    args = [dict(zip("pqr", "zxy"))[o] for o in order]
    assert check_layout(lay, order, args) == "view"
    dy = dynet_layout(cls, [], [b1, b2])
    assert check_layout(dy, dy.order[1], list("zxy")) == "gather"


def test_conflicting_constraints_fall_back_to_gather():
    # three batches each reading pairs of {a,b,c}: at most two of the three adjacencies can hold
    cls = {k: "v" for k in "abcxyzuvw"}
    bs = [BatchSpec(list("abc"), []), BatchSpec(list("xy"), [list("ab")], [4]),
          BatchSpec(list("zu"), [list("bc")], [4]), BatchSpec(list("vw"), [list("ca")], [4])]
    lay = pq_layout(cls, bs)
    views = 0
    for b, order in zip(bs[1:], lay.order[1:]):
        idx = {o: i for i, o in enumerate(b.outs)}
        views += check_layout(lay, order, [b.args[0][idx[o]] for o in order]) == "view"
    assert views == lay.ordered == 2 and lay.constraints == 3


@pytest.mark.parametrize("name", ["treelstm", "lattice_lstm", "bilstm_tagger"])
def test_pq_copies_at_most_half_of_dynet_in_cells(name):
    import torch
    wl = make_workload(name, hidden=16)
    res = {}
    for layout in ("dynet", "pq"):
        tot = 0
        for blk in wl.model.blocks.values():
            bp = BlockPlan(blk, layout)
            st = ExecStats()
            outs = bp.run([torch.randn(4, *s) for s in blk.input_shapes], st)
            assert all(o.shape[0] == 4 for o in outs)
            tot += st.block_gather_bytes
        res[layout] = tot
    assert res["pq"] <= 0.5 * res["dynet"] or res["dynet"] == 0, res


def test_block_plan_is_cached_once_per_block():
    wl = make_workload("treegru", hidden=8)
    bt = Batcher(wl.model)
    for t in wl.minibatch(random.Random(0), 2):
        wl.forward(bt, t)
    bt.flush()
    plans = dict(bt.block_plans)
    for t in wl.minibatch(random.Random(1), 2):
        wl.forward(bt, t)
    bt.flush()
    assert all(bt.block_plans[k] is v for k, v in plans.items())
