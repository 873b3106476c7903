"""Budgets in fitness evaluations, convergence curves and flags, H2H run to convergence, the bench's fairness
figures."""
import math

import pytest
from soc_mapper.algorithms import ALGORITHMS
from soc_mapper.baselines.h2h import h2h
from soc_mapper.bench import SEARCHING, summarize
from soc_mapper.budget import Curve, converged
from soc_mapper.comb import comb_search, seed_orders
from soc_mapper.config import GAConfig, H2HConfig, MagmaConfig, RunConfig

from .helpers import problem


def _curve(values) -> Curve:
    c = Curve()
    for v in values:
        c.add(v)
    return c


def test_curve_keeps_the_improvements_and_ends_at_the_spent_evaluations():
    c = _curve([5, 7, 4, 4, 6, 3, 9, 9])
    assert c.points == [(1, 5.0), (3, 4.0), (6, 3.0)]
    assert c.as_list() == [[1, 5.0], [3, 4.0], [6, 3.0], [8, 3.0]]
    assert c.best == 3.0 and c.last_improvement == 6 and c.evaluations == 8


def test_converged_means_no_improvement_over_the_last_fifth_of_the_budget():
    assert converged(_curve([3] * 79 + [2] + [2] * 20), 100)  # last improvement at 80 of 100
    assert not converged(_curve([3] * 80 + [2] + [2] * 19), 100)  # at 81: inside the last 20%
    # a search that stopped early is judged against the same budget: no improvement after 80 of 100
    assert converged(_curve([3] * 40 + [2]), 100)
    assert not converged(_curve([3] * 84 + [2] + [2] * 5), 100, stopped_by_test=True)  # improved at 85 of 100
    assert converged(_curve([2] + [3] * 9), None)
    assert not converged(_curve([3] * 9 + [2]), None)  # no budget: the last fifth of what it spent
    assert converged(_curve([3] * 9 + [2]), None, stopped_by_test=True)  # ... or its own test stopped it
    assert not converged(Curve(), 10)


def test_every_search_gets_the_same_evaluation_budget_and_records_its_curve():
    w, soc, c = problem()
    B = 37
    rc = RunConfig(budget_evaluations=B, ga=GAConfig(population=6), magma=MagmaConfig(population=8))
    for name in SEARCHING:
        r = ALGORITHMS[name](w, soc, c, rc)
        assert r.budget_evaluations == B, name
        assert 1 <= r.evaluations <= B and r.curve[-1][0] == r.evaluations, name
        if name != "h2h":  # GAs spend all of it: the last generation is cut to what is left
            assert r.evaluations == B, name
        ev = [p[0] for p in r.curve]
        best = [p[1] for p in r.curve]
        assert ev == sorted(ev) and len(set(ev)) == len(ev), name  # evaluations increase
        assert all(b <= a for a, b in zip(best, best[1:])), name  # best never gets worse
        last_improvement = r.curve[-2][0] if len(r.curve) > 1 and best[-1] == best[-2] else r.curve[-1][0]
        assert r.converged == (last_improvement <= 0.8 * B), name  # the same rule for every search


def test_comb_cuts_its_last_generation_to_the_budget():
    w, soc, c = problem()
    r = comb_search(w, soc, c, GAConfig(population=8, generations=1000, max_evaluations=20, max_window=8))
    assert r.evaluations == 20 and r.generations == 2  # 8 initial, 7 children, then the 5 left
    small = comb_search(w, soc, c, GAConfig(population=8, generations=1000, max_evaluations=3, max_window=8))
    assert small.evaluations == 3 and small.generations == 0


def test_unseeded_comb_starts_from_random_orders():
    import random
    import time

    from soc_mapper.comb import _initial_population

    w, soc, c = problem()
    seeds = seed_orders(w, c, soc)

    def first(cfg):
        pop, _ = _initial_population(w, soc, c, cfg, random.Random(0), lambda inds: None, time.perf_counter())
        return [list(i) for i in pop]

    assert first(GAConfig(population=6))[:len(seeds)] == seeds
    rand = first(GAConfig(population=6, seeded=False))
    assert len(rand) == 6 and not any(o in seeds for o in rand)
    assert all(w.is_topological(o) for o in rand)


def test_h2h_runs_its_passes_to_convergence_without_a_deadline():
    w, soc, c = problem()
    rc = RunConfig(time_budget_s=1e-6)  # a wall-clock budget no longer cuts H2H off
    r = ALGORITHMS["h2h"](w, soc, c, rc)
    assert r.converged and r.budget_evaluations is None
    assert 1 <= r.generations < H2HConfig().max_passes  # passes; the last one improved nothing
    assert len(r.history) == r.generations + 1
    assert r.history[-1] == r.history[-2] and r.evaluations > 1
    again = h2h(w, soc, c, H2HConfig())
    assert again.plan.placement == r.plan.placement and again.curve == r.curve
    capped = h2h(w, soc, c, H2HConfig(max_evaluations=5))
    assert capped.evaluations == 5 and capped.budget_evaluations == 5
    # cut by the budget in the middle of a pass: converged only if its best stopped improving by evaluation 4
    last = min(e for e, b in capped.curve if b == capped.curve[-1][1])
    assert capped.converged == (last <= 4)
    big = h2h(w, soc, c, H2HConfig(max_evaluations=10 * r.evaluations))
    assert big.converged and big.evaluations == r.evaluations  # stopped by its own test, well within budget
    one = h2h(w, soc, c, H2HConfig(max_passes=1))
    assert one.generations == 1 and one.evaluations <= r.evaluations


def _case(mix, lat: dict, energy: dict, gens=60, conv=True) -> dict:
    algs = {a: {"latency_s": lat[a], "energy_j": energy[a], "pe_occupancy": 0.5, "generations": gens,
                "converged": conv} for a in lat}
    return {"mix": mix, "soc": "soc_small", "bandwidth": "low", "algorithms": algs}


def test_summary_compares_against_the_strongest_baseline_of_each_case():
    names = ["comb", "magma", "h2h", "magma_comb_simplified", "h2h_wave_greedy", "heft", "greedy", "fcfs",
             "round_robin"]
    base = {a: 10.0 for a in names}
    c1 = _case("a", {**base, "comb": 1.0, "heft": 1.5, "magma": 2.0}, {a: 1.0 for a in names}, gens=55)
    c2 = _case("b", {**base, "comb": 2.0, "h2h": 2.2, "magma": 4.0}, {a: 2.0 for a in names}, gens=70, conv=False)
    s = summarize([c1, c2])
    assert s["strongest_baseline"] == {"a/soc_small/low": "heft", "b/soc_small/low": "h2h"}
    assert s["geomean_latency_vs_strongest"] == pytest.approx(math.sqrt(1.5 * 1.1))
    assert s["geomean_latency_vs_magma"] == pytest.approx(2.0)
    assert s["comb_min_generations"] == 55
    assert s["converged"]["b/soc_small/low"]["magma"] is False and s["all_converged"]["comb"] is False
    side = s["faithful_vs_simplified"]["magma"]
    assert side["simplified"] == "magma_comb_simplified"
    assert side["latency"] == {"faithful": pytest.approx(2.0), "simplified": pytest.approx(math.sqrt(10 * 5))}


def test_the_former_name_of_the_simplified_magma_still_selects_it():
    assert RunConfig(algorithms=["magma_1stream_comb_ga", "comb"]).algorithms == ["magma_comb_simplified", "comb"]
