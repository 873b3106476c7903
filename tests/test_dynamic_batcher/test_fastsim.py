"""The compiled frontier simulator and resolver give exactly the Python simulator's schedules and plans."""
import random

import pytest
from dynamic_batcher import Batcher, fastsim, policies
from dynamic_batcher.executor import ExecPlan
from dynamic_batcher.policies import DYNET_BASELINES, check_schedule, make_policy
from dynamic_batcher.rl import FSMPolicy, QConfig
from dynamic_batcher.workloads import FAMILIES, make_workload

from .test_fast_paths import _graph

pytestmark = pytest.mark.skipif(not fastsim.available(), reason="no C compiler: the Python simulator runs")


def _both(fn):
    try:
        policies.FAST[0] = False
        a = fn()
        policies.FAST[0] = True
        b = fn()
    finally:
        policies.FAST[0] = True
    return a, b


def _norm(steps):
    return [[(s[0],) + tuple(tuple(r) if isinstance(r, list) else r for r in s[1:]) for s in b] for b in steps]


@pytest.mark.parametrize("name", sorted(FAMILIES))
@pytest.mark.parametrize("blocks", ["block", "inline"])
def test_compiled_simulator_gives_identical_schedules(name, blocks):
    g = _graph(name, blocks=blocks, seed=2)
    v = g.view()
    fsm = FSMPolicy("set")
    fsm.train(v, QConfig(max_episodes=20))
    for pol in ["critical_path", *DYNET_BASELINES[1:]]:
        p = make_policy(pol)
        a, b = _both(lambda: p.schedule(v))
        assert isinstance(b, fastsim.FlatSchedule)
        assert [list(x) for x in a] == [list(x) for x in b], pol
        check_schedule(v, b)
    a, b = _both(lambda: fsm.schedule(v))
    assert [list(x) for x in a] == [list(x) for x in b]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_compiled_resolution_matches_numpy_planner(name):
    g = _graph(name, seed=1)
    s = make_policy("critical_path").schedule(g.view())  # a FlatSchedule: resolved inside the simulator
    a, b = _both(lambda: ExecPlan(g, s))
    assert _norm(a.steps) == _norm(b.steps)
    assert list(a.loc_b) == list(b.loc_b) and list(a.loc_r) == list(b.loc_r)
    # a plain list schedule goes through the array resolver
    c = ExecPlan(g, [list(x) for x in s])
    assert _norm(c.steps) == _norm(a.steps)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_results_equal_eager_on_compiled_paths(name):
    import torch
    from dynamic_batcher import Eager

    wl = make_workload(name, hidden=8)
    mb = wl.minibatch(random.Random(4), 4)
    fsm = FSMPolicy("set")
    fsm.train(_graph(name, n=4, seed=4).view(), QConfig(max_episodes=10))
    for pol in (fsm, "critical_path"):
        bt = Batcher(wl.model, policy=pol, cache=False, check=True)
        outs = [wl.forward(bt, t) for t in mb]
        bt.flush()
        assert isinstance(bt.last_schedule, fastsim.FlatSchedule)
        for inst, o in zip(mb, outs):
            ref = wl.forward(Eager(wl.model), inst)
            for x, y in zip(o, ref):
                torch.testing.assert_close(x.value(), y.value(), atol=1e-5, rtol=1e-5)


def test_disabled_compiled_simulator_falls_back_to_python(tmp_path):
    """DYNAMIC_BATCHER_FASTSIM=0 (or no C compiler): the same schedule from the Python simulator."""
    import os
    import subprocess
    import sys

    code = ("import random; from dynamic_batcher import Batcher, fastsim; "
            "from dynamic_batcher.workloads import make_workload; wl = make_workload('treegru', hidden=8); "
            "bt = Batcher(wl.model, policy='critical_path'); "
            "[wl.forward(bt, t) for t in wl.minibatch(random.Random(0), 3)]; "
            "s = bt.policy.schedule(bt.g.view()); "
            "print(fastsim.available(), type(s).__name__, [list(b) for b in s])")
    env = dict(os.environ, DYNAMIC_BATCHER_FASTSIM="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    avail, kind, sched = out.stdout.strip().split(" ", 2)
    assert avail == "False" and kind == "list"
    wl = make_workload("treegru", hidden=8)
    bt = Batcher(wl.model, policy="critical_path")
    for t in wl.minibatch(random.Random(0), 3):
        wl.forward(bt, t)
    assert sched == str([list(b) for b in bt.policy.schedule(bt.g.view())])


def test_lattice_states_recur_across_minibatches():
    """Why the FSM table "misses" on lattices: not because states never recur (they do), but because no trained
    table beat the fallback, so the kept table is empty (``table_rows`` 0) and every lookup falls back."""
    wl = make_workload("lattice_lstm", hidden=8)
    rng = random.Random(0)
    gs = []
    for _ in range(2):
        bt = Batcher(wl.model)
        for t in wl.minibatch(rng, 16):
            wl.forward(bt, t)
        gs.append(bt.g.view())
    p = FSMPolicy("set")
    st = p.train(gs[0], QConfig(max_episodes=60))
    assert st.visited and st.table_rows <= st.states_seen
    vs = p.visited_states(gs[1], p.schedule(gs[1]))
    assert vs and sum(s in st.visited for s in vs) / len(vs) > 0.8


def test_cached_schedule_does_not_keep_the_graph_alive():
    import gc
    import weakref

    wl = make_workload("treegru", hidden=8)
    bt = Batcher(wl.model, policy="critical_path", cache=True)
    refs = []
    for seed in range(3):
        for t in wl.minibatch(random.Random(seed), 3):
            wl.forward(bt, t)
        refs.append(weakref.ref(bt.g))
        bt.flush()
    gc.collect()
    assert len(bt._cache) == 3
    assert refs[0]() is None and refs[1]() is None  # only the last graph is held (bt.last_graph)


def test_compiled_simulator_rejects_inconsistent_arrays():
    """Ids must be a topological order (as recorded graphs are); anything else is refused, not mis-simulated."""
    from dynamic_batcher.errors import BatcherError
    from dynamic_batcher.graph import GraphView

    g = GraphView([1, 1, 1], [(1,), (), (0,)], ["unbatchable", "t"])  # node 0 depends on the later node 1
    with pytest.raises(BatcherError, match="earlier node"):
        fastsim.FastSim(g)
    ok = GraphView([1, 1, 1], [(), (0,), (1,)], ["unbatchable", "t"])
    fs = fastsim.FastSim(ok, heights=True)
    assert fs.next(-1) == [1] and fs.cp() == 1
    assert fs.next(1) == [1] and fs.last_batch() == [0]
