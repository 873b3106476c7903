"""The Hydra task functions and the benchmark entry (smoke: one small shape each)."""
import csv
import json
import time

import pytest
from chain_fuser.config import ChainsExperiment
from chain_fuser.spec import ConvChain, GemmChain

from shared_ir.errors import ValidationError

pytest.importorskip("tvm")


def test_config_validation_names_the_field():
    with pytest.raises(ValidationError, match="task.top_k"):
        ChainsExperiment(top_k=0)
    with pytest.raises(ValidationError, match="task.scale"):
        ChainsExperiment(scale="huge")
    with pytest.raises(ValidationError, match="task.shapes"):
        ChainsExperiment(shapes="Bert-Small")
    for bad in (3, [3], "2", [True]):
        with pytest.raises(ValidationError, match="task.winograd"):
            ChainsExperiment(winograd=bad)
    assert ChainsExperiment(winograd=(2, 4)).winograd == [2, 4]


def test_gemm_chains_task_writes_table_and_plot(tmp_path):
    from chain_fuser.tasks import gemm_chains

    s = gemm_chains(None, None, str(tmp_path), shapes=["ViT-Base/16"], top_k=1, repeat=1, budget_s=0.05)
    assert s["shapes"] == 1 and s["geomean_vs_torch"] > 0
    rows = list(csv.DictReader(open(tmp_path / "gemm_chains.csv")))
    assert rows[0]["shape"] == "ViT-Base/16" and float(rows[0]["ours_ms"]) > 0
    assert (tmp_path / "gemm_chains.png").stat().st_size > 1000


def test_unknown_shape_is_a_clear_error(tmp_path):
    from chain_fuser.tasks import conv_chains

    with pytest.raises(ValidationError, match="unknown shapes"):
        conv_chains(None, None, str(tmp_path), shapes=["NoSuchNet"])


@pytest.mark.slow
def test_bench_smoke(tmp_path):
    from chain_fuser.bench import run

    out = tmp_path / "bench.json"
    # pin=False: the placement pins TVM's pool for the rest of this process (test_threads checks it is free)
    res = run("small", top_k=2, repeat=1, out=str(out), only=["ViT-Base/16", "YOLO-2"], metaschedule=False,
              openblas=True, log=lambda *a: None, pin=False)
    data = json.loads(out.read_text())
    assert data["fma_peak_gflops"] > 0 and len(data["shapes"]) == 2
    assert data["machine"]["threads"] > 0 and data["machine"]["cpu"]
    for key in ("reference_geomean_vs_torch", "reference_min_vs_torch", "reference_peak_fraction",
                "reference_geomean_vs_openblas", "reference_max_vs_openblas", "memory_bound_geomean_vs_torch",
                "attention_vs_sdpa", "geomean_vs_metaschedule", "fma_peak_gflops",
                "geomean_fused_vs_unfused_same_microkernel", "model_pick_vs_best_measured", "server_predictions",
                "isa", "reference_gemm_min_vs_torch", "reference_gemm_geomean_vs_openblas",
                "reference_gemm_peak_fraction", "geomean_vs_torch_compile", "metaschedule_trials_per_operator",
                "wall_s", "peak_errors"):
        assert key in data
    # torch.compile in both modes on a shape of the max-autotune subset, the default mode on the others
    vit, yolo = data["shapes"]
    assert {"torch_compile", "torch_compile_max_autotune", "torch_compile_best"} <= set(vit["speedup"])
    assert "torch_compile" in yolo["speedup"] and "torch_compile_max_autotune" not in yolo["speedup"]
    assert data["geomean_vs_torch_compile"] > 0 and data["isa"] == data["machine"]["isa"]
    assert res["shapes"][0]["ms"]["ours"] > 0
    # every row timed in the run's rounds (round robin over the rows), each round's time kept
    assert all(len(r["ms_by_round"]["ours"]) == data["repeat"] for r in data["shapes"])
    # CPU-time figures next to the wall-clock ones, and the load the run saw
    assert res["shapes"][0]["cpu_ms"]["ours"] > 0 and "openblas" in res["shapes"][0]["speedup_cpu"]
    assert len(data["load_avg_start"]) == 3 and data["reference_peak_fraction_cpu"] > 0
    # the fractions divide by the best FMA rate of this run; against the best ever recorded they can only be lower
    assert data["fma_peak_gflops"] == max(data["fma_peak_start_gflops"], data["fma_peak_end_gflops"],
                                          data["fma_peak_probe_max_gflops"] or 0)
    assert data["reference_peak_fraction_vs_cached_peak"] <= data["reference_peak_fraction"]
    # where the time went, per row and per phase (the phases add up to no more than the run)
    phases = data["seconds_by_phase"]
    assert set(phases) == {"metaschedule_tuning", "prepare", "timing", "server_prediction"}
    assert phases["timing"] > 0 and sum(phases.values()) <= data["seconds"]
    assert all(set(r["seconds"]) == {"prepare", "timing", "server_prediction"} for r in data["shapes"])
    for row in res["shapes"]:  # a pick that is the unfused kernel itself is timed once, not against itself
        # (a Winograd kernel is not fused in that sense either, and it is not the unfused direct kernel)
        assert row["tvm_unfused_is_ours"] == (row["algorithm"] == "direct" and not row["chosen_fused"])
        if row["tvm_unfused_is_ours"]:
            assert row["ms"]["tvm_unfused"] == row["ms"]["ours"]


@pytest.mark.parametrize("spec", [
    GemmChain(2, 8, 4, 5, 12, glue="softmax", scale=0.25, bt=True, name="att"),
    GemmChain(1, 8, 4, 6, 8, glue="gelu", scale=0.5, dt=True, bias1=True, bias2=True, name="mlp"),
    GemmChain(1, 4, 3, 2, 5, glue="relu", scale=2.0, name="relu"),
    GemmChain(1, 4, 3, 2, 5, glue="scale", scale=3.0, bias2=True, name="scaled"),
    ConvChain(1, 3, 5, 4, 4, 3, 3, 2, 1, 1, glue="relu", bias1=True, bias2=True, name="conv"),
    ConvChain(2, 2, 4, 3, 3, 3, 3, 2, 3, 5, name="conv35"),
], ids=lambda s: s.name)
def test_metaschedule_baseline_operators_compute_the_chain(spec):
    # the unfused operators the MetaSchedule baseline tunes, built untuned (their TE as written) and wired as the
    # benchmark calls them: equal to eager PyTorch for every kind of chain
    import torch
    from chain_fuser.codegen import compile_tir, target
    from chain_fuser.kernel import import_tvm, random_inputs, reference
    from chain_fuser.metaschedule import MetaScheduleChain, _prim_funcs, chain_ops

    tvm = import_tvm()
    funcs = _prim_funcs(spec)
    assert list(funcs) == [op.name for op in chain_ops(spec)]
    libs = {n: compile_tir(tvm.IRModule({"main": f}), target()) for n, f in funcs.items()}
    ins = random_inputs(spec)
    torch.testing.assert_close(MetaScheduleChain(libs, spec)(*ins), reference(spec, *ins), rtol=1e-4, atol=1e-5)


def test_metaschedule_timeout_is_reported_not_raised():
    from chain_fuser.metaschedule import metaschedule_unfused

    # a wall clock far too short for MetaSchedule to start: the note says so, with the time spent; each group is
    # tuned (and fails) on its own
    specs = [GemmChain(1, 32, 16, 16, 32, name="a"), ConvChain(1, 4, 6, 6, 4, 3, 3, 4, 1, 1, name="b")]
    rts, runs = metaschedule_unfused(specs, trials=2, timeout_s=0.5, group_size=1)
    assert rts == {} and [r["names"] for r in runs] == [["a"], ["b"]]
    assert all("timed out" in r["status"] and r["tune_s"] >= 0.5 for r in runs)


def test_metaschedule_tuning_prints_progress_and_keeps_the_output(tmp_path, monkeypatch):
    """A long tuning run logs the candidates its database holds so far, and its final output is still read; past
    the deadline the child is killed and the wait says so (None)."""
    import subprocess
    import sys

    from chain_fuser import metaschedule

    monkeypatch.setattr(metaschedule, "PROGRESS_S", 0.1)
    (tmp_path / "database_tuning_record.json").write_text("{}\n{}\n{}\n")
    lines = []

    def child(code):
        return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)

    p = child("import time; time.sleep(0.6); print('{\"search\": 1}')")
    out, _ = metaschedule._wait_with_progress(p, time.perf_counter() + 30, str(tmp_path), 10, lines.append)
    assert out.strip() == '{"search": 1}' and lines and all("3/10 candidates measured" in x for x in lines)
    p = child("import time; time.sleep(30)")
    assert metaschedule._wait_with_progress(p, time.perf_counter() + 0.3, str(tmp_path), 10, None) is None
    assert p.returncode is not None


@pytest.mark.slow
def test_metaschedule_unfused_matches_torch():
    import torch
    from chain_fuser.kernel import random_inputs, reference
    from chain_fuser.metaschedule import metaschedule_unfused

    # three chains of three kinds in one tuning run: each gets its own tuned operators
    specs = [GemmChain(2, 64, 32, 32, 64, name="c1"), GemmChain(1, 32, 16, 16, 48, glue="softmax", bt=True,
                                                                   scale=0.25, name="att"),
             ConvChain(1, 8, 10, 10, 8, 3, 3, 8, 1, 1, glue="relu", name="conv")]
    # generous wall clock: on a loaded 2-core machine the start-up alone took 3 min (4 tasks, load 11)
    rts, runs = metaschedule_unfused(specs, trials=1, timeout_s=1500, per_iter=1)
    assert [r["status"] for r in runs] == ["ok"] and set(rts) == {"c1", "att", "conv"} and runs[0]["tune_s"] > 0
    for s in specs:
        ins = random_inputs(s)
        torch.testing.assert_close(rts[s.name](*ins), reference(s, *ins), rtol=1e-4, atol=1e-4)


def test_pickcheck_reports_the_first_pick_against_the_best(tmp_path):
    from chain_fuser.pickcheck import run

    out = tmp_path / "pick.json"
    res = run("small", top_k=2, repeat=1, only=["Mixer-Small/32-S"], out=str(out), log=lambda *a: None)
    row = res["per_shape"]["Mixer-Small/32-S"]
    assert len(row["cpu_ms"]) == len(row["predicted_ms"]) == 2 and min(row["cpu_ms"]) > 0
    assert row["pick_vs_best"] == row["cpu_ms"][0] / min(row["cpu_ms"]) >= 1.0
    assert json.loads(out.read_text())["shapes"] == 1


def test_fma_probe_reports_the_machine_state():
    from chain_fuser.peak import FmaProbe

    p = FmaProbe(iters=2000)
    assert p.gflops() > 0
    assert p.wait_fast(0.0) and p.samples == 1 and p.slow == 0
    assert not p.wait_fast(1e9, max_wait_s=0.05, step_s=0.01) and p.slow == p.samples - 1 >= 2


def test_the_cache_probe_gates_the_machine_probe_when_the_shared_cache_is_slow():
    """A probe with the cache copy: fast only when the FMA rate and the copy are both fast; a slow copy counts as
    a slow probe of its own kind (``cache_slow``). The copy's best rate only rises."""
    from chain_fuser.peak import CacheProbe, FmaProbe

    c = CacheProbe(mbytes=1)
    assert c.best > 0 and c.gbps() > 0 and c.best >= c.last
    p = FmaProbe(iters=2000, cache=True)
    p.cache.floor = 0.0
    assert p.fast(0.0) and p.cache_slow == 0
    p.cache.floor = 1e9  # no copy reaches it: the cache reads as contended
    assert not p.fast(0.0) and p.cache_slow == 1 and p.slow == 1
    assert not p.fast(1e9) and p.cache_slow == 1 and p.slow == 2  # FMA slow first: not counted as the cache's
    assert FmaProbe(iters=2000).cache is None


def test_fma_probe_stops_gating_when_its_waiting_budget_is_spent():
    from chain_fuser.peak import FmaProbe
    from chain_fuser.timing import time_interleaved

    p = FmaProbe(iters=2000, wait_budget_s=0.05)
    assert not p.exhausted
    t = time.perf_counter()
    assert not p.wait_fast(1e9, max_wait_s=10.0, step_s=0.01)  # an unreachable floor: the budget, not 10 s
    assert time.perf_counter() - t < 1.0 and p.exhausted and p.waited_s >= 0.05
    n = p.samples
    assert not p.wait_fast(1e9) and p.samples == n + 1  # spent: one probe, no waiting
    stats: dict = {}
    time_interleaved({"a": lambda: None}, repeat=2, budget_s=1e-9, probe=p, floor_gflops=1e9, stats=stats)
    assert stats["slots"] == 2 and "retried_slots" not in stats  # slow, but no longer timed again


def test_slots_in_a_slow_state_are_timed_again():
    from chain_fuser.timing import PROBE_RETRIES, time_interleaved

    class Flaky:  # slow after every second slot
        samples = slow = 0
        last = 200.0
        exhausted = False

        def __init__(self):
            self.after = 0

        def wait_fast(self, floor):
            return True

        def fast(self, floor):
            self.after += 1
            return self.after % 2 == 0

    calls = []
    stats: dict = {}
    ms = time_interleaved({"a": lambda: calls.append(1)}, repeat=3, budget_s=0.001, probe=Flaky(), stats=stats)
    assert set(ms) == {"a"} and stats["slots"] == 3 and stats["retried_slots"] == 3 <= 3 * PROBE_RETRIES


def test_round_robin_timing_keeps_a_contended_stretch_out_of_every_rows_median(monkeypatch):
    from chain_fuser import timing

    class Clock:  # a simulated clock: a real sleep of 1 ms overruns to 2+ ms on a loaded CI machine
        now = 0.0

        def perf_counter(self):
            return self.now

        process_time = perf_counter

        def sleep(self, s):
            self.now += s

    clock = Clock()
    monkeypatch.setattr(timing, "time", clock)
    monkeypatch.setattr(timing, "WARM_S", 0.0)
    monkeypatch.setattr(timing, "POOL_SETTLE_S", 0.0)

    def machine(slow_slots: range):
        """Variants that take 1 ms a call, 3 ms during a stretch of timed slots (counted across all rows)."""
        state = {"slot": -1, "timing": False}

        def call():
            slow = state["timing"] and state["slot"] in slow_slots
            clock.sleep(0.003 if slow else 0.001)

        class Slot:  # a probe that only counts the timed slots (each is preceded by wait_fast)
            exhausted, last = False, 1.0

            def wait_fast(self, floor):
                state["slot"] += 1
                state["timing"] = True
                return True

            def fast(self, floor):
                return True

        return call, Slot()

    rows, rounds = 4, 5
    # row after row: the stretch covers all of row 1's slots
    call, probe = machine(range(rounds, 2 * rounds))
    timers = [timing.InterleavedTimer({"ours": call}, rounds, 1e-9, probe=probe) for _ in range(rows)]
    for t in timers:
        for _ in range(rounds):
            t.round()
    assert [t.medians()["ours"] > 2 for t in timers] == [False, True, False, False]
    # round robin: the same stretch (as many slots) covers about one round of each row, and no row's median
    call, probe = machine(range(rounds, 2 * rounds))
    timers = [timing.InterleavedTimer({"ours": call}, rounds, 1e-9, probe=probe) for _ in range(rows)]
    lines: list = []
    timing.time_round_robin(timers, rounds, log=lines.append)
    assert all(t.rounds == rounds and len(t.runs["ours"]) == rounds for t in timers)
    assert all(t.medians()["ours"] < 2 for t in timers) and len(lines) == rounds


def test_every_slot_is_warmed_up_for_a_while_before_it_is_timed(monkeypatch):
    from chain_fuser import timing

    calls = []
    timing.warm_up(lambda: calls.append(1), 0.0)
    assert calls == [1]  # at least one call, even with no time
    t = time.perf_counter()
    timing.warm_up(lambda: calls.append(1), 0.02)
    assert time.perf_counter() - t >= 0.02 and len(calls) > 2

    monkeypatch.setattr(timing, "WARM_S", 0.0)
    cold: list = []
    timing.time_interleaved({"a": lambda: cold.append(1)}, repeat=2, budget_s=1e-9)
    monkeypatch.setattr(timing, "WARM_S", 0.01)
    warm: list = []
    timing.time_interleaved({"a": lambda: (warm.append(1), time.sleep(1e-4))}, repeat=2, budget_s=1e-9)
    # cold: 2 calibration slots + 2 timed slots, one warm-up call and one timed call each; warm: 10 ms of calls each
    assert len(cold) == 8 and len(warm) > 4 * len(cold)


def test_bench_compile_writes_rows_and_csv(tmp_path, monkeypatch):
    """The compile benchmark on its smallest block: eager (in the torch child) and compiled timed, the chain's
    decision reported, JSON + CSV."""
    from chain_fuser import bench_compile

    monkeypatch.setenv("CHAIN_FUSER_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "bc.json"
    res = bench_compile.run(str(out), only=["Mixer-S token MLP"], repeat=1, budget_s=0.01, log=lambda *a: None)
    row = res["rows"][0]
    assert row["name"].startswith("Mixer-S token MLP") and len(res["rows"]) == 1
    assert row["ms"]["eager"] > 0 and row["ms"]["compiled"] > 0 and row["max_rel_error"] < 1e-4
    assert len(row["chains"]) == 1 and row["chains"][0]["reason"]  # fused, or kept eager with both times
    assert json.loads(out.read_text())["rows"][0]["name"] == row["name"]
    assert (tmp_path / "bc.csv").read_text().splitlines()[1].startswith('"Mixer-S token MLP')


def test_unseen_chains_are_generated_off_the_benchmark_lists_and_sized_to_the_cache():
    """The compile bench's unseen chains: reproducible from the seed, another seed other shapes, none of them a
    benchmark shape, cache-resident ones inside half the cache, memory-bound intermediates at least twice it; each
    name builds its block (as the torch child does from the name alone)."""
    from chain_fuser.bench import MEMORY_BOUND, REFERENCE_GEMM
    from chain_fuser.bench_compile import find_block, unseen_name, unseen_shapes

    llc = 8 << 20
    a, b = unseen_shapes(3, llc_bytes=llc), unseen_shapes(4, llc_bytes=llc)
    assert a == unseen_shapes(3, llc_bytes=llc) and a != b
    listed = {(bt, M, K, L, N) for _, bt, M, N, K, L in REFERENCE_GEMM + sum(MEMORY_BOUND.values(), [])}
    for kind, bt, M, K, L, N, glue in a:
        assert (bt, M, K, L, N) not in listed
        if kind == "cache-resident":
            assert 4 * bt * (M * K + K * L + M * L + L * N + M * N) <= llc // 2
        else:
            assert 4 * bt * M * L >= 2 * llc and K <= 64 and N <= 64
    kind, bt, M, K, L, N, glue = a[0]
    blk = find_block(unseen_name(kind, 1, 5, 3, 4, 2, "relu"))
    module, ins = blk["build"]()
    want = (ins[0] @ ins[1]).relu() @ ins[2]
    assert blk["flops"] == 2 * 5 * 4 * (3 + 2) and (module(*ins) - want).abs().max() < 1e-5


def test_torch_server_times_torch_in_its_own_process(monkeypatch):
    """PyTorch's baseline runs in a child with torch's own wait policy, whatever this process set for its torch."""
    from chain_fuser.spec import ConvChain, GemmChain
    from chain_fuser.timing import SelfTimed, TorchServer

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    srv = TorchServer(1)
    try:
        assert srv.info["threads"] == 1 and srv.info["omp_wait_policy"] is None
        # the bench compiles one function for every shape: dynamo's default of 8 would leave the rest eager
        assert srv.info["recompile_limit"] >= 64
        for name, spec, which in [("g", GemmChain(2, 16, 8, 8, 24, glue="relu"), "torch"),
                                  ("a", GemmChain(2, 16, 8, 8, 24, glue="softmax", scale=0.5, bt=True), "sdpa"),
                                  ("c", ConvChain(1, 4, 8, 8, 8, 3, 3, 4, 1, 1, glue="relu"), "torch")]:
            v = srv.variant(name, spec, which)
            assert isinstance(v, SelfTimed)
            ms, cpu_ms = v.timed(3)
            assert ms > 0 and cpu_ms > 0
            v.done()
    finally:
        srv.close()
    assert srv.p.returncode == 0


def test_a_users_own_chains_are_shapes_of_the_experiment():
    from chain_fuser.config import ChainsExperiment
    from chain_fuser.spec import ConvChain, GemmChain

    from shared_ir.errors import ValidationError

    c = ChainsExperiment(shapes=["ViT-Base/16", {"batch": 4, "M": 384, "N": 96, "K": 96, "L": 384},
                                 {"N": 1, "C": 8, "H": 8, "W": 8, "K1": 8, "R1": 3, "S1": 3, "K2": 8, "R2": 1,
                                  "S2": 1, "glue": "relu"}])
    assert c.shapes[0] == "ViT-Base/16"
    assert isinstance(c.shapes[1], GemmChain) and c.shapes[1].name == "user_4x384x96x96x384"
    assert isinstance(c.shapes[2], ConvChain) and c.shapes[2].glue == "relu"
    for bad, where in [([{"batch": 2, "M": 0, "N": 1, "K": 1, "L": 1}], "task.shapes[0].M"),
                       ([{"batch": 1, "M": 1, "N": 1, "K": 1, "L": 1, "colour": 1}], "task.shapes[0].colour"),
                       (["ViT-Base/16", 3], "task.shapes[1]")]:
        with pytest.raises(ValidationError) as e:
            ChainsExperiment(shapes=bad)
        assert e.value.path == where
