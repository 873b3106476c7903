"""The model's per-level, per-tensor counts equal the trace simulator's on random trees."""
import random

import pytest
from fusion_perf.model import compile_tree, tree_factors
from fusion_perf.randtree import make_arch, random_problem, random_tree
from fusion_perf.tracesim import simulate


def _check(seed: int):
    rng = random.Random(seed)
    prob = random_problem(rng)
    tree = random_tree(rng, prob)
    comp = compile_tree(prob, make_arch(), tree)
    x = tree_factors(tree)
    got = comp.evaluate(x, check=False).counts()
    want = simulate(comp, x)
    return got, want, tree


@pytest.mark.parametrize("block", range(4))
def test_random_trees_exact(block):
    bad = []
    for seed in range(block * 40, block * 40 + 40):
        got, want, tree = _check(seed)
        if got != want:
            bad.append(seed)
    assert not bad, f"model != simulator for seeds {bad}"


@pytest.mark.slow
def test_random_trees_exact_many():
    bad = [s for s in range(1000, 1600) if (lambda g: g[0] != g[1])(_check(s))]
    assert not bad, bad


def test_conv3x3_chains_exact():
    """3x3 -> 3x3 conv chains (halo on both convs, the intermediate's halo kept in its home) over random trees."""
    from fusion_perf.problem import conv_chain

    bad, n = [], 0
    for seed in range(40):
        rng = random.Random(50_000 + seed)
        prob = conv_chain(rng.choice([1, 2]), rng.choice([4, 5]), rng.choice([3, 4]), 2, rng.choice([1, 3]), 2, R2=3)
        tree = random_tree(rng, prob)
        comp = compile_tree(prob, make_arch(), tree)
        x = tree_factors(tree)
        n += 1
        if comp.evaluate(x, check=False).counts() != simulate(comp, x):
            bad.append(seed)
    assert n == 40 and not bad, f"model != simulator for 3x3->3x3 seeds {bad}"
