"""The model's per-level, per-tensor counts equal the trace simulator's on random trees."""
import random

import pytest
from fusion_perf.model import compile_tree, tree_factors

from .randtree import make_arch, random_problem, random_tree
from .simulator import simulate


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
