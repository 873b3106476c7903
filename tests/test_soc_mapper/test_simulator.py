import numpy as np
import pytest
from soc_mapper.cost import CostTable
from soc_mapper.errors import MapperError
from soc_mapper.simulator import Plan, phase_energy, simulate
from soc_mapper.workload import Layer, Workload

from .helpers import small_soc


def _wl(n, edges, nbytes=3_200_000):
    layers = [Layer(f"m#0/l{i}", "m#0", "linear", {"B": 1, "M": 1, "N": 1, "K": 1}, 1, 1, 0, 1) for i in range(n)]
    preds = [[u for u, v in edges if v == i] for i in range(n)]
    succs = [[v for u, v in edges if u == i] for i in range(n)]
    return Workload("w", layers, preds, succs, {e: nbytes for e in edges})


def _cost(n, A=4, lat=1e-3, pes=1000, power=1.0):
    return CostTable(np.full((n, A), lat), np.full((n, A), lat / 2), np.full((n, A), pes, dtype=np.int64),
                     np.full((n, A), power), np.ones((n, A), dtype=bool))


def test_transfer_time_is_bytes_over_manhattan_bandwidth():
    soc = small_soc(nn=3.2e9)
    w = _wl(2, [(0, 1)])
    c = _cost(2)
    # nvdla0 (0,0) -> tpu0 (1,1): 2 hops, 1.6 GB/s: 3.2 MB take 2 ms
    r = simulate(Plan([0, 3], [0, 1]), w, soc, c)
    assert r.start[1] == pytest.approx(1e-3 + 2e-3)
    # neighbour: 1 hop at 3.2 GB/s -> 1 ms
    assert simulate(Plan([0, 1], [0, 1]), w, soc, c).start[1] == pytest.approx(2e-3)
    # same accelerator: intra bandwidth 32 GB/s -> 0.1 ms
    assert simulate(Plan([0, 0], [0, 1]), w, soc, c).latency == pytest.approx(2.1e-3)


def test_streams_and_pes_limit_concurrency():
    soc = small_soc(streams=(2, 2, 1, 2))
    w = _wl(3, [])
    c = _cost(3, pes=6000)
    r = simulate(Plan([0, 0, 0], [0, 1, 2]), w, soc, c)  # 2 streams: two at once, the third after
    assert sorted(r.start) == pytest.approx([0, 0, 1e-3]) and r.latency == pytest.approx(2e-3)
    assert sorted(r.stream[:2]) == [0, 1]
    r = simulate(Plan([2, 2, 2], [0, 1, 2]), w, soc, c)  # ShiDianNao has 1 stream
    assert r.latency == pytest.approx(3e-3)
    big = _cost(3, pes=9000)  # two of them exceed 16384 PEs
    assert simulate(Plan([0, 0, 0], [0, 1, 2]), w, soc, big).latency == pytest.approx(3e-3)
    assert simulate(Plan([0, 0, 0], [0, 1, 2], max_streams=1), w, soc, c).latency == pytest.approx(3e-3)
    pin = simulate(Plan([0, 0, 0], [0, 1, 2], max_streams=1, pinned=[True, False, False]), w, soc, c)
    assert pin.latency == pytest.approx(2.5e-3)


def test_barriers_and_insertion():
    soc = small_soc()
    w = _wl(3, [])
    c = _cost(3)
    c.latency[0, 0] = 5e-3
    # no barrier: layer 2 on another accelerator starts at 0
    r = simulate(Plan([0, 1, 1], [0, 1, 2]), w, soc, c)
    assert r.start[2] == 0
    # a barrier after layer 0: the rest waits for it
    r = simulate(Plan([0, 1, 1], [0, 1, 2], phase=[0, 1, 1]), w, soc, c)
    assert r.start[1] == pytest.approx(5e-3) and r.latency == pytest.approx(6e-3)


def test_energy_is_phase_length_times_max_power():
    start, finish = np.array([0.0, 1.0, 5.0]), np.array([2.0, 3.0, 6.0])
    power = np.array([1.0, 3.0, 2.0])
    # [0,1): 1 W, [1,3): 3 W, [3,5): idle, [5,6): 2 W
    assert phase_energy(start, finish, power) == pytest.approx(1 + 6 + 2)
    soc = small_soc()
    w = _wl(2, [])
    c = _cost(2, power=2.0)
    r = simulate(Plan([0, 1], [0, 1]), w, soc, c)
    assert r.energy == pytest.approx(2.0 * 1e-3)  # concurrent: one phase at the max power
    r = simulate(Plan([0, 0], [0, 1], max_streams=1), w, soc, c)
    assert r.energy == pytest.approx(2 * 2.0 * 1e-3)
    assert r.occupancy == pytest.approx(2 * 1e-3 * 1000 / (4 * 16384 * 2e-3))


def test_invalid_plans_are_rejected_with_names():
    soc = small_soc()
    w = _wl(2, [(0, 1)])
    c = _cost(2)
    with pytest.raises(MapperError, match="not topological.*m#0/l1.*m#0/l0"):
        simulate(Plan([0, 0], [1, 0], algorithm="x"), w, soc, c)
    c.supported[1, 2] = False
    with pytest.raises(MapperError, match=r"placement\.m#0/l1.*shidiannao0"):
        simulate(Plan([0, 2], [0, 1]), w, soc, c)
    with pytest.raises(MapperError, match="phases must not decrease"):
        simulate(Plan([0, 0], [0, 1], phase=[1, 0]), w, soc, c)
    w.layers[0].weight_bytes = 10 << 20
    with pytest.raises(MapperError, match=r"pinned\.nvdla0"):
        simulate(Plan([0, 0], [0, 1], pinned=[True, False]), w, soc, c)


def test_energy_breakdown_splits_the_phase_energy():
    from soc_mapper.baselines.heuristics import heft
    from soc_mapper.simulator import energy_breakdown

    from .helpers import problem

    w, soc, c = problem()
    r = heft(w, soc, c)
    eb = energy_breakdown(r.plan, r.result, w, soc, c)
    parts = eb["static_j"] + eb["mac_j"] + eb["buffer_j"]
    assert parts == pytest.approx(r.result.energy, rel=1e-9)
    assert sum(eb["energy_by_accelerator_kind_j"].values()) == pytest.approx(r.result.energy, rel=1e-9)
    assert eb["static_j"] > 0 and eb["mac_j"] > 0 and eb["buffer_j"] > 0
    assert eb["active_s"] + eb["idle_s"] == pytest.approx(r.result.latency)
    cross = [(u, v) for (u, v) in w.edge_bytes if r.plan.placement[u] != r.plan.placement[v]]
    assert eb["mesh_bytes"] == sum(w.edge_bytes[e] for e in cross)
    # everything on one accelerator: nothing crosses the mesh
    from soc_mapper.simulator import Plan as P

    tpu = soc.index("tpu0")
    one = simulate(P([tpu] * len(w.layers), list(range(len(w.layers)))), w, soc, c)
    assert energy_breakdown(P([tpu] * len(w.layers), list(range(len(w.layers)))), one, w, soc, c)["mesh_bytes"] == 0
