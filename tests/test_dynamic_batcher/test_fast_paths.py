"""The fast scheduling / planning paths agree with their reference implementations."""
import random

import pytest
from dynamic_batcher import Batcher
from dynamic_batcher.executor import ExecPlan, _resolve_python
from dynamic_batcher.policies import check_schedule, make_policy
from dynamic_batcher.workloads import FAMILIES, make_workload


def _graph(name, n=6, seed=0, blocks="block"):
    wl = make_workload(name, hidden=8)
    bt = Batcher(wl.model, blocks=blocks)
    for t in wl.minibatch(random.Random(seed), n):
        wl.forward(bt, t)
    return bt.g


def _norm(steps):
    return [[(s[0],) + tuple(tuple(r) if isinstance(r, list) else r for r in s[1:]) for s in b] for b in steps]


@pytest.mark.parametrize("name", sorted(FAMILIES))
@pytest.mark.parametrize("policy", ["critical_path", "dynet_agenda", "no_batching"])
def test_vectorized_argument_resolution_matches_reference(name, policy):
    g = _graph(name, blocks="block" if policy != "no_batching" else "inline")
    s = make_policy(policy).schedule(g.view())
    plan = ExecPlan(g, s)
    W = g.n << 16
    base = [b * W + r for b, r in zip(plan.loc_b, plan.loc_r)]
    assert _norm(plan.steps) == _norm(_resolve_python(g, s, plan.loc_b, plan.loc_r, base))
    kinds = {sp[0] for b in plan.steps for sp in b}
    assert "view" in kinds


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_critical_path_policy_valid_and_not_above_typewise_on_lattices(name):
    g = _graph(name, n=12, seed=3).view()
    s = make_policy("critical_path").schedule(g)
    check_schedule(g, s)
    assert len(s) >= g.lower_bound()
    if FAMILIES[name] == "lattice":
        assert len(s) <= len(make_policy("typewise_lb").schedule(g))


def test_scs_lower_bound_is_valid_and_tighter_on_lattices():
    """The chain-aware bound never exceeds the exact optimum, and beats the type-wise bound on lattices."""
    from dynamic_batcher.policies import exact_optimum

    for seed in range(3):
        g = _graph("lattice_lstm", n=2, seed=seed).view()
        wl = make_workload("lattice_lstm", hidden=8)
        bt = Batcher(wl.model)
        for t in wl.minibatch(random.Random(seed), 2, 4):
            wl.forward(bt, t)
        gs = bt.g.view()
        ex = exact_optimum(gs, 200_000)
        if ex is not None:
            assert gs.lower_bound() <= gs.scs_lower_bound()[0] <= len(ex)
        assert g.scs_lower_bound()[0] >= g.lower_bound()
    g = _graph("lattice_lstm", n=16, seed=0).view()
    b, types = g.scs_lower_bound()
    assert b > g.lower_bound() and len(types) == 2  # char + merge cells form each sentence's chain
    assert b <= len(make_policy("rollout").schedule(g)) <= len(make_policy("critical_path").schedule(g))


def test_scs_len():
    from dynamic_batcher.graph import _scs_len

    assert _scs_len([1, 2], [2, 1]) == 3
    assert _scs_len([1, 2, 1], [1, 2, 1]) == 3
    assert _scs_len([], [1, 1]) == 2
    assert _scs_len([1, 2, 3], [2, 3, 4]) == 4


def test_exact_cpsat_matches_astar():
    pytest.importorskip("ortools")
    from dynamic_batcher.exact_cp import exact_cpsat
    from dynamic_batcher.policies import exact_optimum

    from tests.test_dynamic_batcher.test_policies import random_dag

    for seed in (10, 24, 25):
        g = random_dag(seed, n=14, ntypes=3, p=0.2)
        r = exact_cpsat(g, time_limit=10)
        assert r["status"] == "OPTIMAL"
        check_schedule(g, r["schedule"])
        assert r["batches"] == len(exact_optimum(g))
    g = _graph("lattice_gru", n=2, seed=1).view()  # beyond the A* search's 62-node limit
    r = exact_cpsat(g, time_limit=8)
    assert r["status"] in ("OPTIMAL", "FEASIBLE")
    check_schedule(g, r["schedule"])
    assert r["bound"] <= r["batches"] <= len(make_policy("critical_path").schedule(g))
    # a proven bound below the type-wise one only means CP-SAT was stopped early (a loaded machine)
    assert g.lower_bound() <= r["batches"] and (r["status"] != "OPTIMAL" or g.lower_bound() <= r["bound"])
    lbs = g.lower_bounds()  # every bound we report stays below the optimum (or a feasible schedule)
    assert lbs["typewise"] <= lbs["best"] <= r["batches"]


def test_pq_splits_batches_that_repeat_an_argument():
    """LatticeGRU's merge cell batches the U-linears of [h, h, hw]: the PQ plan runs [h, h] (broadcast) and [hw]
    (view) as two kernels with no copy, the DyNet layout gathers; both compute the same values."""
    import torch
    from dynamic_batcher.executor import BlockPlan, ExecStats

    wl = make_workload("lattice_gru", hidden=8)
    blk = next(b for b in wl.model.blocks.values() if b.name == "merge")
    pq, dy = BlockPlan(blk, "pq"), BlockPlan(blk, "dynet")
    def kinds(bp):
        return [a[0] for st in bp.steps for a in st[2]] + [st[3][0] for st in bp.steps]

    assert "gather" not in kinds(pq) and "scatter" not in kinds(pq)
    assert "gather" in kinds(dy)
    assert len(pq.batches) == len(dy.batches) + 1
    torch.manual_seed(0)
    xs = [torch.randn(5, *s) for s in blk.input_shapes]
    s1, s2 = ExecStats(), ExecStats()
    for a, b in zip(pq.run(xs, s1), dy.run(xs, s2)):
        torch.testing.assert_close(a, b)
    assert s1.block_gather_bytes == 0 < s2.block_gather_bytes


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_compiled_gathers_equal_torch_gathers(name, monkeypatch):
    import torch
    from dynamic_batcher import executor, fastsim

    if fastsim.load() is None or not fastsim.load().pylist:
        pytest.skip("compiled library without the Python.h build")
    wl = make_workload(name, hidden=8)
    mb = wl.minibatch(random.Random(5), 6)
    seen, into_arena = [], []
    orig = executor._RowTable.gather

    def spy(self, st, sp, dst=None):
        seen.append(orig(self, st, sp, dst))
        into_arena.append(dst is not None and seen[-1] is dst)
        return seen[-1]

    monkeypatch.setattr(executor._RowTable, "gather", spy)

    def run():
        bt = Batcher(wl.model)
        with torch.no_grad():
            outs = [o for t in mb for o in wl.forward(bt, t)]
            return torch.stack([o.value() for o in outs])

    fast = run()
    assert seen and all(x is not None for x in seen)
    # block inputs the block stages are gathered straight into its arena (every workload here has some but GRU
    # lattices, whose cells stage nothing)
    assert any(into_arena) == (name != "lattice_gru")
    monkeypatch.setattr(executor._RowTable, "of", classmethod(lambda cls, g, f: None))
    assert torch.equal(fast, run())  # bit for bit: both copy the same rows
