"""The compiled decoder and simulator (soc_mapper.fastsim) against the Python ones, their oracle: equal to the
last bit on random chromosomes of synthetic and zoo mixes, and a GA search that finds the same plan either way."""
import random

import numpy as np
import pytest
from soc_mapper import fastsim
from soc_mapper.comb import comb_search, random_topo
from soc_mapper.config import GAConfig
from soc_mapper.cost import cost_table
from soc_mapper.decoder import DecodeContext, Group, decode, windows_to_plan
from soc_mapper.simulator import Plan, _simulate, fast_tables, simulate
from soc_mapper.soc import soc_from_system
from soc_mapper.workload import load_mix

from .helpers import problem

pytestmark = pytest.mark.skipif(not fastsim.available(), reason="no working C compiler")


def _cases():
    w, soc, cost = problem(cnn=2, tf=2, br=2)
    yield "synthetic", w, soc, cost
    w = load_mix("vision1", copies=1)
    soc = soc_from_system("soc_large", 0.8e9)
    yield "vision1", w, soc, cost_table(w, soc)


@pytest.mark.parametrize("window,barriers,max_streams", [(8, False, None), (1, False, None), (8, True, None),
                                                          (8, False, 1)])
def test_decode_and_judge_equal_the_python_decoder_and_simulator(window, barriers, max_streams):
    rng = random.Random(window * 7 + barriers)
    for name, w, soc, cost in _cases():
        ctx = DecodeContext(w, soc, cost, window, max_streams)
        for _ in range(3):
            order = random_topo(w, rng)
            est, windows, _ = decode(order, ctx, barriers)
            fast = fastsim.decode(order, ctx, barriers)
            assert fast is not None, name
            assert fast.est == est and fast.windows(Group) == windows, name
            plan = windows_to_plan(windows, ctx.L, max_streams, "comb", barriers)
            res = _simulate(plan, w, soc, cost)
            judged = fastsim.judge(fast, fast_tables(w, soc, cost), w, soc, cost, max_streams, barriers)
            assert judged == (res.latency, res.energy), name


def test_full_simulation_equals_the_python_schedule_on_random_plans():
    rng = np.random.default_rng(0)
    for name, w, soc, cost in _cases():
        L = len(w.layers)
        for pinned in (None, [bool(b) for b in rng.integers(0, 2, L)]):
            sup = [np.flatnonzero(cost.supported[v]) for v in range(L)]
            placement = [int(rng.choice(s)) for s in sup]
            order = random_topo(w, random.Random(int(rng.integers(1 << 30))))
            plan = Plan(placement, order, None, None, pinned, "random")
            want = _simulate(plan, w, soc, cost)
            got = simulate(plan, w, soc, cost, validate=False)
            assert (got.latency, got.energy, got.occupancy) == (want.latency, want.energy, want.occupancy), name
            assert np.array_equal(got.start, want.start) and np.array_equal(got.finish, want.finish), name
            assert np.array_equal(got.stream, want.stream) and got.acc_busy == want.acc_busy, name


def test_a_search_finds_the_same_plan_with_the_python_fitness(monkeypatch):
    w, soc, cost = problem(cnn=2, tf=1, br=1)
    cfg = GAConfig(population=6, generations=4, seed=3, executor="serial")
    fast = comb_search(w, soc, cost, cfg)
    monkeypatch.setattr(fastsim, "enabled", False)
    monkeypatch.setattr(fastsim, "_lib", None)
    assert fastsim.decode(list(range(len(w.layers))), DecodeContext(w, soc, cost, 8, None)) is None
    slow = comb_search(w, soc, cost, cfg)
    assert fast.result.latency == slow.result.latency and fast.result.energy == slow.result.energy
    assert fast.plan.placement == slow.plan.placement and fast.plan.order == slow.plan.order


def test_contexts_with_compiled_tables_still_pickle_for_worker_processes():
    import pickle

    w, soc, cost = problem()
    ctx = DecodeContext(w, soc, cost, 8, None)
    order = random_topo(w, random.Random(0))
    d = fastsim.decode(order, ctx)
    fastsim.judge(d, fast_tables(w, soc, cost), w, soc, cost, None, False)
    ctx2, cost2 = pickle.loads(pickle.dumps((ctx, cost)))
    assert fastsim.decode(order, ctx2).est == d.est
