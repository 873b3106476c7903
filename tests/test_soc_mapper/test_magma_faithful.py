"""MAGMA as its authors' code runs it (maestro-project/magma, src/scheuler_GA.py): each operator against a
transliteration of the reference's method on a hand-made population, its fitness with mesh transfers, and
seeds that spread the layers."""
import copy

import numpy as np
import pytest
from soc_mapper.baselines.magma import (
    MagmaModel,
    crossover_accel,
    crossover_one_row,
    crossover_range,
    decode,
    initial_population,
    magma,
    mutate,
    next_children,
    seed_genomes,
    select,
)
from soc_mapper.config import MagmaConfig
from soc_mapper.cost import CostTable, cost_table
from soc_mapper.simulator import simulate
from soc_mapper.soc import soc_from_system
from soc_mapper.workload import Layer, Workload

from .helpers import device, mixed_workload, problem, soc_dict


def _parents(n: int = 4, L: int = 10) -> list[np.ndarray]:
    """Parent k: accelerators k % 4, priorities k + position / 100, so every gene says where it came from."""
    return [np.vstack([np.full(L, k % 4, dtype=float), k + np.arange(L) / 100]) for k in range(n)]


def _ref_crossover(rng, parents, weights, n, alpha):
    """SchedulerGA.crossover with its random draws taken from ``rng`` in the port's order."""
    pops = [None] * n
    for idx in range(0, n, 2):
        c = rng.choice(len(parents), 2, p=weights, replace=False)
        dad, mom = copy.deepcopy(parents[c[0]]), copy.deepcopy(parents[c[1]])
        if rng.random() < alpha:
            length = min(len(dad[0]), len(mom[0]))
            pick = 0 if rng.random() < 0.5 else 1
            point = int(rng.integers(0, length))
            if point < length // 2:
                dad[pick][:point], mom[pick][:point] = mom[pick][:point], dad[pick][:point]
            else:
                dad[pick][point:], mom[pick][point:] = mom[pick][point:], dad[pick][point:]
        pops[idx], pops[idx + 1] = dad, mom
    return pops


def _ref_crossover_rg(rng, parents, weights, pops, alpha):
    """SchedulerGA.crossover_rg, same draws."""
    for idx in range(0, len(pops), 2):
        if rng.random() < alpha:
            c = rng.choice(len(parents), 2, p=weights, replace=False)
            dad, mom = copy.deepcopy(parents[c[0]]), copy.deepcopy(parents[c[1]])
            point = int(rng.integers(0, min(len(dad[0]), len(mom[0]))))
            dad[:, :point], mom[:, point:] = mom[:, :point], dad[:, point:]
            pops[idx], pops[idx + 1] = dad, mom


def test_selection_keeps_the_fittest_tenth_weighted_by_fitness():
    lat = np.array([5.0, 1.0, 3.0, 2.0, 9.0, 4.0])
    idx, w = select(lat, n_parent=3, n_elite=1, unit=0.5)
    assert list(idx[:3]) == [1, 3, 2]  # fittest first
    # reference: weight = max(lat) − lat + 1 (unit) over the parents, normalised
    raw = np.array([3.0 - 1.0 + 0.5, 3.0 - 2.0 + 0.5, 3.0 - 3.0 + 0.5])
    assert w == pytest.approx(raw / raw.sum())


def _one_segment_from(child, dad, mom) -> bool:
    """``child`` is ``dad`` except on one row, where a prefix or a suffix comes from ``mom``."""
    diff = np.argwhere(child != dad)
    if not len(diff):
        return True
    row, cols = diff[0, 0], diff[:, 1]
    L = dad.shape[1]
    seg = np.arange(cols.min(), L) if cols.max() == L - 1 else np.arange(0, cols.max() + 1)
    return (len(set(diff[:, 0])) == 1 and np.array_equal(child[row, seg], mom[row, seg])
            and np.array_equal(np.delete(child[row], seg), np.delete(dad[row], seg)))


def test_one_row_crossover_is_the_references():
    parents = _parents()
    weights = np.array([0.4, 0.3, 0.2, 0.1])
    mine: list = [None] * 40
    crossover_one_row(np.random.default_rng(7), parents, weights, mine, 0.9)
    ref = _ref_crossover(np.random.default_rng(7), parents, weights, 40, 0.9)
    assert all(np.array_equal(a, b) for a, b in zip(mine, ref))
    crossed = 0
    for first, second in zip(mine[0::2], mine[1::2]):
        mom = parents[int(second[1, 0])]
        assert np.array_equal(second, mom)  # the second child stays a copy (the reference's view semantics)
        assert any(_one_segment_from(first, dad, mom) for dad in parents if dad is not mom)
        crossed += not any(np.array_equal(first, p) for p in parents)
    assert crossed > 5


def test_range_crossover_is_the_references_and_gives_twins():
    parents = _parents()
    weights = np.full(4, 0.25)
    base = [p.copy() for p in parents for _ in range(5)]
    mine, ref = [g.copy() for g in base], [g.copy() for g in base]
    crossover_range(np.random.default_rng(3), parents, weights, mine, 1.0)
    _ref_crossover_rg(np.random.default_rng(3), parents, weights, ref, 1.0)
    assert all(np.array_equal(a, b) for a, b in zip(mine, ref))
    for a, b in zip(mine[0::2], mine[1::2]):
        assert np.array_equal(a, b)  # the tuple assignment on views makes both children one genome
        src = np.floor(a[1]).astype(int)
        p = int(np.argmax(src != src[0])) if np.any(src != src[0]) else a.shape[1]
        # both rows: one parent's genes before the point, the other's from it
        assert np.array_equal(a[:, :p], parents[src[0]][:, :p])
        assert np.array_equal(a[:, p:], parents[src[-1]][:, p:])


def test_accelerator_crossover_copies_every_job_of_one_accelerator():
    w, soc, c = problem()
    m = MagmaModel(w, soc, c)
    rng = np.random.default_rng(11)
    parents = [np.vstack([m.random_accels(rng, np.arange(m.L)).astype(float), k + rng.random(m.L) / 2])
               for k in range(4)]
    children: list = [None] * 30

    def explained(ch, dad, mom, a) -> bool:
        on_mom, on_dad = mom[0] == a, dad[0] == a
        only_mom, only_dad = on_mom & ~on_dad, on_dad & ~on_mom
        return (np.all(ch[0, on_mom] == a)  # every job the second parent runs on a runs there
                and np.array_equal(ch[:, only_mom], mom[:, only_mom])  # with the second parent's priority
                and np.array_equal(ch[:, on_mom & on_dad], dad[:, on_mom & on_dad])  # the reference's `pass`
                and np.array_equal(ch[:, ~on_mom & ~on_dad], dad[:, ~on_mom & ~on_dad])
                and np.array_equal(ch[1, only_dad], dad[1, only_dad]))  # moved off a: row 0 redrawn only

    crossover_accel(np.random.default_rng(5), parents, np.full(4, 0.25), children, 1.0, m)
    for ch in children:
        assert any(explained(ch, d, mo, a) for d in parents for mo in parents if mo is not d for a in range(soc.n))
        assert all(c.supported[v, int(ch[0, v])] for v in range(m.L))


def test_mutation_redraws_genes_with_its_rate_and_keeps_them_valid():
    w, soc, c = problem()
    m = MagmaModel(w, soc, c)
    rng = np.random.default_rng(0)
    g0 = np.vstack([m.random_accels(rng, np.arange(m.L)).astype(float), np.full(m.L, 2.0)])
    same = [g0.copy()]
    mutate(rng, same, 0.0, m)
    assert np.array_equal(same[0], g0)
    allg = [g0.copy() for _ in range(50)]
    mutate(rng, allg, 0.05, m)
    changed = np.mean([np.mean(g[1] != 2.0) for g in allg])
    assert 0.02 < changed < 0.09  # per-gene probability 0.05 on the priority row
    for g in allg:
        assert all(c.supported[v, int(g[0, v])] for v in range(m.L))


def test_a_generation_breeds_only_from_the_fittest_and_keeps_the_elite():
    w, soc, c = problem()
    m = MagmaModel(w, soc, c)
    cfg = MagmaConfig(population=20, crossover_rate=0.0, range_crossover_rate=0.0, accel_crossover_rate=0.0,
                      mutation_rate=0.0)
    pop = _parents(20, m.L)
    lat = np.arange(20, 0, -1, dtype=float)  # the last genomes are the fittest
    elite, elite_lat, children = next_children(np.random.default_rng(1), pop, lat, cfg, m, unit=1.0)
    assert len(elite) == 1 and np.array_equal(elite[0], pop[19]) and list(elite_lat) == [1.0]
    assert len(children) == 20
    assert {int(ch[1, 0]) for ch in children} <= {19, 18}  # parents: max(2, int(0.1 × 20)) fittest


def _chain(nbytes: int):
    """Two layers u → v, ``nbytes`` between them, on a 2×1 mesh of identical accelerators."""
    soc = soc_from_system(soc_dict([device("a0", "nvdla", (0, 0)), device("a1", "nvdla", (1, 0))], nn=1e9))
    layers = [Layer(f"m#0/l{i}", "m#0", "linear", {"B": 1, "M": 1, "N": 1, "K": 1}, 1, 0, 0, nbytes)
              for i in range(2)]
    w = Workload("w", layers, [[], [0]], [[1], []], {(0, 1): nbytes})
    c = CostTable(np.full((2, 2), 1e-3), np.full((2, 2), 1e-3), np.ones((2, 2), dtype=np.int64), np.ones((2, 2)),
                  np.ones((2, 2), dtype=bool))
    return w, soc, c


def test_fitness_charges_the_mesh_transfer_like_the_simulator():
    w, soc, c = _chain(1_000_000)
    m = MagmaModel(w, soc, c)
    split = np.array([[0.0, 1.0], [0.1, 0.2]])
    assert m.makespan(split[0], [0, 1]) == pytest.approx(2e-3 + 1e6 / 1e9)
    assert m.makespan(np.array([0, 0]), [0, 1]) == pytest.approx(2e-3 + 1e6 / 32e9)
    assert m.makespan(split[0], [0, 1]) == pytest.approx(simulate(decode(m, split), w, soc, c).latency)


def test_seed_placement_follows_the_model_rules():
    w, soc, c = _chain(10_000_000)  # 10 ms over the mesh: the consumer stays with its producer
    m = MagmaModel(w, soc, c)
    assert m.earliest_finish_placement([0, 1]) == [0, 0]
    free = Workload("w", w.layers, [[], []], [[], []], {})  # independent: one per core
    assert MagmaModel(free, soc, c).earliest_finish_placement([0, 1]) == [0, 1]


def test_seeds_spread_the_layers_over_identical_accelerators():
    soc = soc_from_system(soc_dict([device("a0", "nvdla", (0, 0)), device("a1", "nvdla", (1, 0))]))
    w = mixed_workload(cnn=3, tf=0, br=2)
    c = cost_table(w, soc)
    seeds = seed_genomes(w, soc, c)
    pop = initial_population(np.random.default_rng(0), w, soc, c, MagmaConfig(population=8), MagmaModel(w, soc, c))
    assert all(np.array_equal(a, b) for a, b in zip(pop, seeds))  # the seeds come first
    assert all(len(set(g[0].astype(int))) == 2 for g in pop)  # none puts every layer on one accelerator
    rand = initial_population(np.random.default_rng(0), w, soc, c, MagmaConfig(seeded=False, population=8),
                              MagmaModel(w, soc, c))
    assert all(len(set(g[0].astype(int))) == 2 for g in rand)
    r = magma(w, soc, c, MagmaConfig(population=10, generations=4))
    assert len(set(r.plan.placement)) == 2 and r.plan.max_streams == 1


def test_both_fitnesses_search_and_are_deterministic():
    w, soc, c = problem()
    for fit in ("model", "simulator"):
        a = magma(w, soc, c, MagmaConfig(population=10, max_evaluations=45, generations=100, fitness=fit, seed=2))
        b = magma(w, soc, c, MagmaConfig(population=10, max_evaluations=45, generations=100, fitness=fit, seed=2))
        assert a.plan.placement == b.plan.placement and a.curve == b.curve
        assert a.evaluations == 45 and a.generations == 4  # 10 initial, then 10 children a generation, 5 in the last
        if fit == "simulator":
            assert a.curve[-1][1] == pytest.approx(a.result.latency)


def test_population_must_be_even():
    from soc_mapper.errors import MapperError

    with pytest.raises(MapperError, match=r"magma\.population"):
        MagmaConfig(population=11)
