import itertools

import numpy as np
import pytest
from soc_mapper.algorithms import ALGORITHMS
from soc_mapper.baselines.h2h import computation_first, h2h, h2h_wave_greedy, pin_weights
from soc_mapper.baselines.magma import MagmaModel, magma
from soc_mapper.config import GAConfig, H2HConfig, MagmaConfig, RunConfig
from soc_mapper.cost import CostTable
from soc_mapper.simulator import validate_plan
from soc_mapper.workload import Layer, Workload

from .helpers import problem, small_soc


def _no_overlap_per_acc(plan, res, n_acc):
    for a in range(n_acc):
        iv = sorted((res.start[v], res.finish[v]) for v, p in enumerate(plan.placement) if p == a)
        assert all(f <= s2 + 1e-15 for (_, f), (s2, _) in zip(iv, iv[1:]))


def test_every_algorithm_gives_a_valid_plan():
    w, soc, c = problem()
    rc = RunConfig(time_budget_s=2, ga=GAConfig(population=4, generations=2, max_window=8),
                   magma=MagmaConfig(population=8, generations=5))
    lat = {}
    for name in [a for a in ALGORITHMS if a != "exact"]:
        r = ALGORITHMS[name](w, soc, c, rc)
        validate_plan(r.plan, w, soc, c)
        assert r.algorithm == r.plan.algorithm == name
        assert r.result.latency > 0 and r.result.energy > 0 and 0 < r.result.occupancy <= 1
        lat[name] = r.result.latency
    # every plan respects its own stream cap
    for name in ("magma", "h2h_wave_greedy", "magma_comb_simplified"):
        r = ALGORITHMS[name](w, soc, c, rc)
        assert r.plan.max_streams == 1
        _no_overlap_per_acc(r.plan, r.result, soc.n)


def test_magma_bandwidth_sharing_slows_jobs_in_proportion():
    soc = small_soc()
    layers = [Layer(f"m#0/l{i}", "m#0", "linear", {"B": 1, "M": 1, "N": 1, "K": 1}, 1, 1_000_000, 0, 0)
              for i in range(2)]
    w = Workload("w", layers, [[], []], [[], []], {})
    lat = 1e-3
    c = CostTable(np.full((2, 4), lat), np.full((2, 4), lat), np.ones((2, 4), dtype=np.int64), np.ones((2, 4)),
                  np.ones((2, 4), dtype=bool))
    need = 1_000_000 / lat  # 1 GB/s each
    m = MagmaModel(w, soc, c, system_bandwidth=need)  # room for one at full speed
    assert m.makespan(np.array([0, 1]), [0, 1]) == pytest.approx(2e-3)  # both at half speed
    m2 = MagmaModel(w, soc, c, system_bandwidth=4 * need)
    assert m2.makespan(np.array([0, 1]), [0, 1]) == pytest.approx(1e-3)
    assert m2.makespan(np.array([0, 0]), [0, 1]) == pytest.approx(2e-3)  # one core runs one job at a time


def test_magma_is_deterministic_and_elitist():
    w, soc, c = problem()
    a = magma(w, soc, c, MagmaConfig(population=10, generations=6, seed=1))
    b = magma(w, soc, c, MagmaConfig(population=10, generations=6, seed=1))
    assert a.plan.placement == b.plan.placement and a.history == b.history
    assert all(y <= x + 1e-15 for x, y in zip(a.history, a.history[1:]))


def test_knapsack_pinning_is_optimal_and_fits():
    w, soc, c = problem(cnn=3, tf=1, br=1)
    placement, _ = computation_first(w, soc, c)
    # NVDLA (MAESTRO's model) is where resident weights pay: put every layer it runs there, so the knapsack has
    # items with a gain to choose from
    placement = [0 if c.supported[v, 0] else p for v, p in enumerate(placement)]
    # shrink the buffers so the knapsack must choose
    small = type(soc)(soc.name, [type(a)(**{**a.__dict__, "buffer_bytes": 40 * 1024}) for a in soc.accs],
                      soc.bandwidth, soc.nn_bandwidth)
    pinned = pin_weights(w, small, c, placement)
    for a in range(soc.n):
        items = [v for v in range(len(w)) if placement[v] == a and w.layers[v].weight_bytes > 0]
        used = sum(w.layers[v].weight_bytes for v in items if pinned[v])
        assert used <= 40 * 1024
        gain = {v: c.latency[v, a] - c.latency_pinned[v, a] for v in items}
        got = sum(gain[v] for v in items if pinned[v])
        if len(items) <= 14:  # brute force the optimum
            best = 0.0
            for k in range(len(items) + 1):
                for sub in itertools.combinations(items, k):
                    if sum(-(-w.layers[v].weight_bytes // 1024) * 1024 for v in sub) <= 40 * 1024:
                        best = max(best, sum(gain[v] for v in sub))
            assert got == pytest.approx(best)


def test_h2h_passes_only_improve_its_greedy_start():
    w, soc, c = problem()
    start = h2h(w, soc, c, H2HConfig(weight_pinning=False, transfer_removal=False, local_search=False))
    full = h2h(w, soc, c, H2HConfig())
    assert full.result.latency <= start.result.latency + 1e-15
    # the plan's weights are pinned for its own placement (none pay where it put the weighted layers today)
    assert full.plan.pinned == pin_weights(w, soc, c, full.plan.placement)
    on_nvdla = [0 if c.supported[v, 0] else 3 for v in range(len(w))]
    assert any(pin_weights(w, soc, c, on_nvdla))  # resident weights shorten NVDLA's layers
    wave = h2h_wave_greedy(w, soc, c)
    assert wave.plan.phase is not None and wave.plan.max_streams == 1
