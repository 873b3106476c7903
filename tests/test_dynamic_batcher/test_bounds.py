"""Lower bounds: every bound we report must be valid (≤ the exact optimum) wherever the exact search runs."""
import random

import pytest
from dynamic_batcher import Batcher
from dynamic_batcher.graph import GraphView
from dynamic_batcher.policies import exact_optimum
from dynamic_batcher.workloads import make_workload


def multi_dag(seed, comps=3, n=8, ntypes=3, p=0.3, unb=0.1):
    """Several random DAG instances sharing the type vocabulary (with some unbatchable nodes)."""
    rng = random.Random(seed)
    types, preds = [], []
    for _ in range(comps):
        base = len(types)
        for i in range(n):
            types.append(0 if rng.random() < unb else rng.randint(1, ntypes))
            preds.append(tuple(base + j for j in range(i) if rng.random() < p))
    return GraphView(types, preds, ["unbatchable"] + [f"t{i}" for i in range(1, ntypes + 1)])


@pytest.mark.parametrize("seed", range(10))
def test_bounds_valid_on_random_multi_instance_dags(seed):
    g = multi_dag(seed)
    ex = exact_optimum(g, 100_000)
    assert ex is not None
    lbs = g.lower_bounds()
    for k in ("typewise", "scs", "instance_exact", "best"):
        if k in lbs:
            assert lbs[k] <= len(ex), (k, lbs, len(ex))
    # the product search over all instances and all types is the exact optimum itself
    unb = sum(1 for t in g.types if t == 0)
    assert g.subset_exact(g.components()) + unb == len(ex)


@pytest.mark.parametrize("name,k,L", [("lattice_lstm", 2, 3), ("lattice_lstm", 3, 3), ("lattice_gru", 2, 4),
                                      ("lattice_gru", 3, 3), ("treelstm", 2, 4), ("treegru", 3, 3),
                                      ("mvrnn", 2, 4), ("lstm_lm", 3, 4), ("bilstm_tagger", 2, 3)])
def test_bounds_valid_on_small_workload_graphs(name, k, L):
    wl = make_workload(name, hidden=8)
    for seed in range(3):
        bt = Batcher(wl.model, blocks="block")
        for inst in wl.minibatch(random.Random(seed), k, L):
            wl.forward(bt, inst)
        g = bt.g.view()
        ex = exact_optimum(g, 60_000)
        if ex is None:
            continue
        lbs = g.lower_bounds()
        assert lbs["typewise"] <= lbs["best"] <= len(ex), (seed, lbs, len(ex))


def test_instance_bound_tighter_than_typewise_on_lattices():
    """Two sentences whose cell sequences differ: the pairwise search sees it, the type-wise bound does not."""
    wl = make_workload("lattice_gru", hidden=8)
    bt = Batcher(wl.model, blocks="block")
    for inst in wl.minibatch(random.Random(0), 4, 16):
        wl.forward(bt, inst)
    lbs = bt.g.view().lower_bounds()
    assert lbs["instance_exact"] > lbs["typewise"]
    assert lbs["best"] == max(lbs["typewise"], lbs["scs"], lbs["instance_exact"])
