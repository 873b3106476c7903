import os

import pytest
from soc_mapper.comb import comb_search, crossover, mutate, prefer, random_topo
from soc_mapper.config import GAConfig
from soc_mapper.decoder import DecodeContext, decode, windows_to_plan
from soc_mapper.errors import CheckpointError, MapperError
from soc_mapper.simulator import simulate

from .helpers import problem

FAST = dict(population=4, generations=3, max_window=8)


def test_decoder_windows_are_valid_groups():
    w, soc, c = problem(cnn=2, tf=1, br=1)
    ctx = DecodeContext(w, soc, c, max_window=20)
    est, windows, placement = decode(list(range(len(w))), ctx, barriers=True)
    seen = [v for win in windows for g in win for v in g.layers]
    assert sorted(seen) == list(range(len(w)))
    import networkx as nx

    g = w.nx()
    for win in windows:
        for grp in win:
            assert nx.is_weakly_connected(g.subgraph(grp.layers))  # a group is a connected component
            assert all(c.supported[v, grp.acc] for v in grp.layers)
            assert 0 < grp.occupancy <= 1 + 1e-9
            assert placement[grp.layers[0]] == grp.acc
        # groups of one window are independent: no edge between two of them
        owner = {v: k for k, grp in enumerate(win) for v in grp.layers}
        assert not any(u in owner and v in owner and owner[u] != owner[v] for u, v in w.edge_bytes)
        assert sum(len(grp.layers) for grp in win) <= 20
    # with barriers the simulator reproduces (or beats) the decoder's estimate
    r = simulate(windows_to_plan(windows, len(w), None), w, soc, c)
    assert r.latency <= est * (1 + 1e-9)
    # single-layer windows cannot share accelerators across a barrier: never better than the full DP
    est1, _, _ = decode(list(range(len(w))), DecodeContext(w, soc, c, max_window=1), barriers=True)
    assert est <= est1 + 1e-12
    # the carried-state decoder (default): every layer placed once, a valid barrier-free plan
    est2, win2, pl2 = decode(list(range(len(w))), ctx)
    assert sorted(v for win in win2 for g in win for v in g.layers) == list(range(len(w)))
    plan = windows_to_plan(win2, len(w), None, barriers=False)
    assert plan.phase is None and plan.placement == pl2
    r2 = simulate(plan, w, soc, c)
    assert r2.latency <= est2 * 1.5


def test_operators_keep_topological_orders():
    import random

    w, soc, c = problem()
    rng = random.Random(1)
    ctx = DecodeContext(w, soc, c)
    _, w1, _ = decode(random_topo(w, rng), ctx)
    _, w2, _ = decode(random_topo(w, rng), ctx)
    g1 = [(g.layers, g.occupancy) for win in w1 for g in win]
    g2 = [(g.layers, g.occupancy) for win in w2 for g in win]
    for _ in range(20):
        child = crossover(w, rng, g1, g2, 0.5)
        assert w.is_topological(child)
        m = mutate(w, rng, g1, 0.2)
        assert w.is_topological(m)
    # frozen groups stay contiguous after mutation
    top = max((g for g in g1 if len(g[0]) > 1), key=lambda g: g[1])
    m = mutate(w, rng, g1, 1.0)
    pos = sorted(m.index(v) for v in top[0])
    assert pos[-1] - pos[0] == len(pos) - 1


def test_ga_is_deterministic_and_keeps_the_best():
    w, soc, c = problem()
    a = comb_search(w, soc, c, GAConfig(seed=3, **FAST))
    b = comb_search(w, soc, c, GAConfig(seed=3, **FAST))
    assert a.plan.order == b.plan.order and a.result.latency == b.result.latency
    assert all(y <= x + 1e-15 for x, y in zip(a.history, a.history[1:]))  # elitism
    # the kept plan is within the energy-tie tolerance of the best latency found (exactly it with no tolerance)
    assert a.result.latency <= a.history[-1] * (1 + GAConfig().energy_tie) + 1e-15
    z = comb_search(w, soc, c, GAConfig(seed=3, energy_tie=0.0, **FAST))
    assert z.result.latency == pytest.approx(z.history[-1]) and z.result.latency <= z.history[0] + 1e-15
    one = comb_search(w, soc, c, GAConfig(seed=3, max_streams=1, **FAST), "magma_comb_simplified")
    assert one.plan.max_streams == 1


def test_process_pool_gives_the_serial_result():
    w, soc, c = problem()
    a = comb_search(w, soc, c, GAConfig(seed=5, **FAST))
    b = comb_search(w, soc, c, GAConfig(seed=5, executor="process", workers=2, **FAST))
    assert a.plan.order == b.plan.order and a.history == b.history


def test_ray_missing_is_a_clear_error():
    pytest.importorskip("deap")
    try:
        import ray  # noqa: F401
        pytest.skip("ray is installed")
    except ImportError:
        pass
    w, soc, c = problem()
    with pytest.raises(MapperError, match="ray"):
        comb_search(w, soc, c, GAConfig(executor="ray", **FAST))


def test_checkpoint_resume_equals_uninterrupted_run(tmp_path):
    w, soc, c = problem()
    full = comb_search(w, soc, c, GAConfig(seed=7, population=4, generations=4, max_window=8))
    ck = str(tmp_path / "ga.pkl")
    part = comb_search(w, soc, c, GAConfig(seed=7, population=4, generations=2, max_window=8, checkpoint=ck))
    assert os.path.exists(ck) and not [f for f in os.listdir(tmp_path) if ".tmp" in f]
    resumed = comb_search(w, soc, c, GAConfig(seed=7, population=4, generations=4, max_window=8, checkpoint=ck))
    assert resumed.history[:len(part.history)] == part.history  # the best found before the interruption is kept
    assert resumed.history == full.history and resumed.plan.order == full.plan.order
    assert resumed.result.latency <= part.result.latency + 1e-15
    # interrupted right after the initial population: the resume skips its evaluation and ends the same
    ck0 = str(tmp_path / "ga0.pkl")
    comb_search(w, soc, c, GAConfig(seed=7, population=4, generations=0, max_window=8, checkpoint=ck0))
    again = comb_search(w, soc, c, GAConfig(seed=7, population=4, generations=4, max_window=8, checkpoint=ck0))
    assert again.history == full.history and again.evaluations == full.evaluations
    # a checkpoint of another problem is refused
    w2, soc2, c2 = problem(cnn=1, tf=1, br=0)
    with pytest.raises(CheckpointError, match="another"):
        comb_search(w2, soc2, c2, GAConfig(seed=7, population=4, generations=4, max_window=8, checkpoint=ck))


def test_time_budget_stops_between_generations():
    w, soc, c = problem()
    r = comb_search(w, soc, c, GAConfig(population=4, generations=1000, time_budget_s=0.5, max_window=8))
    assert r.generations < 1000 and r.search_seconds < 5


def test_energy_weight_adds_energy_to_the_fitness():
    w, soc, c = problem()
    with pytest.raises(MapperError, match="ga.energy_weight"):
        GAConfig(energy_weight=-1.0)
    lat = comb_search(w, soc, c, GAConfig(seed=3, energy_tie=0.0, **FAST))
    en = comb_search(w, soc, c, GAConfig(seed=3, energy_weight=1.0, energy_tie=0.0, **FAST))
    p = max(a.power_w for a in soc.accs)
    # the fitness of the returned plan is latency + energy / highest accelerator power
    assert en.history[-1] == pytest.approx(en.result.latency + en.result.energy / p)
    assert lat.history[-1] == pytest.approx(lat.result.latency)
    assert all(y <= x + 1e-15 for x, y in zip(en.history, en.history[1:]))  # elitism on the weighted fitness


def test_prefer_breaks_latency_ties_by_energy():
    cands = [(10.0, 5.0, "a"), (10.2, 3.0, "b"), (11.0, 1.0, "c")]
    assert prefer(cands, 0.0)[2] == "a"
    assert prefer(cands, 0.03)[2] == "b"  # within 3% of the best latency, less energy
    assert prefer(cands, 0.5)[2] == "c"
    assert prefer([(1.0, 2.0, "x"), (1.0, 1.0, "y")], 0.0)[2] == "y"  # exact ties: energy
    with pytest.raises(MapperError, match="ga.energy_tie"):
        GAConfig(energy_tie=0.9)


def test_energy_tie_trades_at_most_its_tolerance_for_less_energy():
    # the same initial population (no generations): the tie-breaking run keeps a plan of no more energy, and of
    # at most (1 + tol)^2 times the latency-only run's latency
    w, soc, c = problem()
    tol = 0.05
    zero = comb_search(w, soc, c, GAConfig(seed=5, population=6, generations=0, max_window=8, energy_tie=0.0))
    tie = comb_search(w, soc, c, GAConfig(seed=5, population=6, generations=0, max_window=8, energy_tie=tol))
    assert tie.result.energy <= zero.result.energy * (1 + 1e-12)
    assert tie.result.latency <= zero.result.latency * (1 + tol) ** 2


def test_run_interrupted_mid_generation_resumes_without_losing_the_best(tmp_path, monkeypatch):
    import pickle

    import soc_mapper.comb as cm

    w, soc, c = problem()
    cfg = dict(seed=11, population=4, generations=4, max_window=8)
    full = comb_search(w, soc, c, GAConfig(**cfg))
    ck = str(tmp_path / "ga.pkl")
    real, calls = cm.comb_evaluate, [0]

    def interrupted(ctx, order):
        calls[0] += 1
        if calls[0] == 12:  # 4 initial evaluations, then 3 children per generation: inside generation 2
            raise KeyboardInterrupt
        return real(ctx, order)

    monkeypatch.setattr(cm, "comb_evaluate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        comb_search(w, soc, c, GAConfig(checkpoint=ck, **cfg))
    monkeypatch.setattr(cm, "comb_evaluate", real)
    with open(ck, "rb") as f:
        saved = pickle.load(f)
    assert saved["generation"] == 1 and not [p for p in os.listdir(tmp_path) if ".tmp" in p]
    resumed = comb_search(w, soc, c, GAConfig(checkpoint=ck, **cfg))
    assert resumed.history[:len(saved["history"])] == saved["history"]  # the best found before is kept
    assert resumed.history == full.history and resumed.plan.order == full.plan.order
    assert resumed.evaluations == full.evaluations
    assert resumed.history[-1] <= saved["best"][1] + 1e-15


def test_corrupt_checkpoint_is_a_named_error(tmp_path):
    w, soc, c = problem()
    ck = tmp_path / "ga.pkl"
    ck.write_bytes(b"not a pickle")
    with pytest.raises(CheckpointError, match=r"checkpoint\(.*ga\.pkl\).*cannot be read"):
        comb_search(w, soc, c, GAConfig(checkpoint=str(ck), **FAST))


def test_seed_orders_are_distinct_topological_and_start_the_population():
    from soc_mapper.comb import seed_orders, upward_rank_order

    w, soc, c = problem()
    seeds = seed_orders(w, soc=soc, cost=c)
    assert seeds and all(w.is_topological(o) and sorted(o) == list(range(len(w))) for o in seeds)
    assert len({tuple(o) for o in seeds}) == len(seeds)
    assert seeds[0] == upward_rank_order(w, c, soc, "min")
    # a population of just the seeds: each evaluated once, no random orders
    r = comb_search(w, soc, c, GAConfig(seed=1, population=len(seeds), generations=0, max_window=8, energy_tie=0))
    assert r.evaluations == len(seeds) and r.generations == 0 and len(r.history) == 1


def test_a_long_search_logs_its_progress(monkeypatch, caplog):
    import logging

    from soc_mapper import comb

    w, soc, c = problem()
    monkeypatch.setattr(comb, "PROGRESS_EVERY_S", 0.0)  # every generation counts as long here
    with caplog.at_level(logging.INFO, logger="soc_mapper.comb"):
        r = comb_search(w, soc, c, GAConfig(executor="serial", generations=3, time_budget_s=None))
    lines = [m for m in caplog.messages if "generation" in m]
    assert len(lines) == r.generations == 3 and lines[-1].startswith("comb: generation 3/3")
    caplog.clear()
    monkeypatch.setattr(comb, "PROGRESS_EVERY_S", 3600.0)
    with caplog.at_level(logging.INFO, logger="soc_mapper.comb"):
        comb_search(w, soc, c, GAConfig(executor="serial", generations=3, time_budget_s=None))
    assert not caplog.messages  # a short search stays quiet
