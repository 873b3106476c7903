"""Experiment task functions and the benchmark entry point (tiny settings)."""
import csv
import json
import os

import pytest
from dynamic_batcher.config import BenchConfig, SweepConfig
from dynamic_batcher.errors import ConfigError


def test_config_validation_names_field():
    with pytest.raises(ConfigError, match=r"task.workloads\[1\]"):
        BenchConfig(workloads=["treelstm", "nope"])
    with pytest.raises(ConfigError, match="task.batch"):
        BenchConfig(batch=0)
    with pytest.raises(ConfigError, match=r"task.hiddens\[0\]"):
        SweepConfig(hiddens=[-1])
    with pytest.raises(ConfigError, match="task.grid"):
        SweepConfig(grid="diagonal")
    with pytest.raises(ConfigError, match="task.scale"):
        BenchConfig(scale="huge")


def test_run_workloads_writes_tables_and_plots(tmp_path):
    from dynamic_batcher.tasks import run_workloads

    out = run_workloads(out_dir=str(tmp_path), workloads=["treegru"], batch=4, hidden=16, scale="tiny")
    for f in ("throughput.csv", "batches.csv", "throughput.png", "batches_vs_lb.png", "bench.json",
              "fsm-treegru.json"):
        assert os.path.exists(tmp_path / f), f
    rows = list(csv.DictReader(open(tmp_path / "batches.csv")))
    lb = {int(r["lower_bound"]) for r in rows}
    assert len(lb) == 1 and all(int(r["batches"]) >= lb.pop() for r in rows[:1])
    assert {r["variant"] for r in csv.DictReader(open(tmp_path / "throughput.csv"))} >= {"fsm_pq", "dynet_depth"}
    assert "tree" in out["speedup_vs_best_baseline"]


def test_bench_main_writes_json(tmp_path, capsys):
    from dynamic_batcher.bench import main

    from shared_ir.hostinfo import isa

    path = tmp_path / "bench.json"
    doc = main(["--scale", "tiny", "--batch", "3", "--hidden", "8", "--workloads", "lstm_lm", "--out", str(path)])
    d = json.loads(path.read_text())
    first = capsys.readouterr().out.splitlines()[0]  # the machine comes first, in the output and the JSON
    assert first.startswith("machine: ") and f"ISA {isa()}" in first and f"{d['machine']['cores']} cores" in first
    assert d["machine"]["isa"] == isa() and d["machine"]["cpu_model"]
    w = d["workloads"][0]
    assert w["family"] == "chain" and w["batches"]["lower_bound"] <= w["batches"]["fsm"]
    for k in ("fsm_pq", "dynet_depth", "dynet_agenda", "dynet_agenda_depth"):
        assert w["throughput"][k] > 0
    assert set(w["copied_bytes"]) >= {"cells_pq", "cells_dynet"}
    assert "chain" in d["speedup_vs_best_baseline"] and doc["scale"] == "tiny"
    lbc = w["batches"]["lower_bound_components"]
    assert lbc["best"] == w["batches"]["lower_bound"] >= lbc["typewise"]
    for k in ("sched_ms", "sched_policy_ms", "plan_ms", "sched_ms_cached", "exec_ms",
              "sched_exec_speedup_vs_best_baseline"):
        assert w[k] >= 0, k
    assert "chain" in d["exec_speedup_vs_best_baseline"] and d["reduced"]
    # the headline is the smallest ratio over the baselines timed, and names the one it is against
    assert w["speedup_vs_best_baseline"] == min(w["speedup_by_baseline"].values())
    assert w["best_baseline"] in w["speedup_by_baseline"] and "lstm_lm" in d["table_only_batches_vs_lb"]
    rd = w["real_dynet"]
    if rd["available"]:  # the dynet extra installed: real DyNet timed on the same minibatches
        assert d["dynet_version"] and w["speedup_vs_real_dynet"] > 0
        assert f"real_dynet_{rd['inference_best_strategy']}" in w["speedup_by_baseline"]
        assert rd["ours_ms"]["fsm_pq"]["inference"]["cpu"] > 0 and rd["ours_ms"]["eager_pytorch"]["train"]["cpu"] > 0
        assert w["train_speedup_vs_real_dynet"] > 0 and not rd["errors"], rd["errors"]  # training through ours


def test_sweep_cross_grid(tmp_path):
    from dynamic_batcher.tasks import sweep

    out = sweep(out_dir=str(tmp_path), workloads=["treegru"], batches=[2, 3, 4], hiddens=[8, 16, 24],
                scale="sweep")
    assert out["points"] == 5 and out["grid"] == "cross"  # every value of each axis, not the 3 × 3 grid
    rows = list(csv.DictReader(open(tmp_path / "sweep_speedup.csv")))
    assert {(int(r["batch"]), int(r["hidden"])) for r in rows} == {(2, 16), (3, 16), (4, 16), (3, 8), (3, 24)}
    assert os.path.exists(tmp_path / "sweep_speedup.png")
