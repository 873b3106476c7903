"""Booth–Lueker PQ-tree: classic consecutive-ones cases checked against brute force."""
import itertools
import random

import pytest
from dynamic_batcher.errors import PQInfeasible
from dynamic_batcher.pqtree import PQTree, consecutive_ones_order


def brute(universe, subsets):
    out = set()
    for p in itertools.permutations(universe):
        pos = {x: i for i, x in enumerate(p)}
        if all(max(pos[x] for x in s) - min(pos[x] for x in s) == len(s) - 1 for s in subsets if s):
            out.add(p)
    return out


def tree_set(universe, subsets):
    t = PQTree(universe)
    for s in subsets:
        t.reduce(s)
    return set(t.frontiers()), t


def test_single_constraint():
    got, t = tree_set("abcd", [set("ab")])
    assert got == brute("abcd", [set("ab")])
    assert len(got) == 12  # ab glued (2 orders) × 3! placements


def test_chain_of_overlaps_gives_q_node():
    subs = [set("ab"), set("bc"), set("cd")]
    got, t = tree_set("abcd", subs)
    assert got == {tuple("abcd"), tuple("dcba")}
    assert t.root.kind == "Q"


def test_nested_and_overlapping():
    subs = [set("abc"), set("bcd"), set("ef"), set("cdef")]
    got, _ = tree_set("abcdef", subs)
    assert got == brute("abcdef", subs)


@pytest.mark.parametrize("subs", [
    [set("ab"), set("bc"), set("ac")],                       # triangle: infeasible on 3 items
    [set("ab"), set("ac"), set("ad")],                       # a adjacent to three items
    [set("ab"), set("bc"), set("cd"), set("da")],            # Tucker M_I(4): a 4-cycle of adjacencies
    [set("abc"), set("abd"), set("abe")],                    # three sets around one core
])
def test_infeasible(subs):
    universe = sorted(set().union(*subs))
    assert not brute(universe, subs)
    with pytest.raises(PQInfeasible):
        tree_set(universe, subs)
    assert consecutive_ones_order(universe, subs) is None


def test_try_reduce_restores_tree():
    t = PQTree("abcd")
    t.reduce("ab")
    t.reduce("bc")
    before = set(t.frontiers())
    assert not t.try_reduce("ac") or set(t.frontiers()) == brute("abcd", [set("ab"), set("bc"), set("ac")])
    assert set(t.frontiers()) == before


@pytest.mark.parametrize("seed", range(40))
def test_random_against_brute_force(seed):
    rng = random.Random(seed)
    n = rng.randint(3, 6)
    U = list(range(n))
    subs = []
    t = PQTree(U)
    for _ in range(rng.randint(1, 5)):
        s = set(rng.sample(U, rng.randint(2, n - 1)))
        want = brute(U, subs + [s])
        ok = t.try_reduce(s)
        assert ok == bool(want), (subs, s)
        if ok:
            subs.append(s)
        assert set(t.frontiers()) == brute(U, subs), (subs, t)


def test_frontier_satisfies_constraints():
    rng = random.Random(3)
    U = list(range(30))
    order = U[:]
    rng.shuffle(order)
    subs = [set(order[i:i + rng.randint(2, 6)]) for i in rng.sample(range(25), 12)]
    f = consecutive_ones_order(U, subs)
    pos = {x: i for i, x in enumerate(f)}
    for s in subs:
        assert max(pos[x] for x in s) - min(pos[x] for x in s) == len(s) - 1
