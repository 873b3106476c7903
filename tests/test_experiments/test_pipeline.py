"""experiment=pipeline/bert_base at a small size: every stage yields its figures or a recorded error; a failing
(or unimportable) package does not lose the other stages' results. The five packages are imported only inside the
stages (lazily), so this module imports none of them. ``PIPELINE_STRICT=1`` also fails on any stage error."""
from __future__ import annotations

import csv
import json
import math
import os
import sys

import pytest
from hydra import compose, initialize_config_dir

from experiments.config import ExperimentConfigError
from experiments.pipeline import STAGES, PipelineConfig
from experiments.run import run_experiment

from .common import CONF

# a BERT with bert_base's structure at a tiny size: the whole pipeline runs in well under a minute
SMALL_MODEL = ["+workload.kwargs.seq=32", "+workload.kwargs.layers=1", "+workload.kwargs.d_model=128",
               "+workload.kwargs.heads=2", "+workload.kwargs.ffn=256", "+workload.kwargs.vocab=1000"]
SMALL_BUDGETS = ["task.fusion_perf.iterations=4", "task.fusion_perf.rollouts=16",
                 "task.chain_fuser.top_k=1", "task.chain_fuser.repeat=3", "task.chain_fuser.budget_s=0.2",
                 "task.soc_mapper.companions=[mlp2]", "task.soc_mapper.algorithms=[comb,greedy]",
                 "task.soc_mapper.time_budget_s=1", "task.soc_mapper.generations=2",
                 "task.offload_trainer.batch=2", "task.dynamic_batcher.batch=4", "task.dynamic_batcher.scale=tiny"]

# figures each stage must report when it runs
REQUIRED = {
    "fusion_perf": ["best_template", "best_cycles", "cycles.layerwise", "speedup_vs_layerwise", "macs_per_chain"],
    "chain_fuser": ["allclose_vs_torch", "max_abs_err_vs_torch", "fused_ms", "eager_ms", "speedup_vs_eager"],
    "soc_mapper": ["layers", "layers.bert_base", "comb.latency_ms", "greedy.latency_ms", "latency_greedy_over_comb"],
    "offload_trainer": ["hidden", "layers", "rtx4090_workstation.iteration_ms.lsp",
                        "laptop_4gb.iteration_ms.zero_offload", "laptop_4gb.accelerator_gb.native"],
    "dynamic_batcher": ["hidden", "batches.fsm", "batches.lower_bound", "speedup_vs_best_baseline"],
}


def _run(tmp_path, *overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=pipeline/bert_base", *SMALL_MODEL, *overrides])
    return run_experiment(cfg, out_dir=tmp_path, quiet=True)


def _csv(path):
    with open(path, newline="") as f:
        r = csv.DictReader(f)
        assert r.fieldnames == ["stage", "metric", "value"]
        return list(r)


def _small_graph():
    from shared_ir.zoo import graph

    return graph("bert_base", seq=32, layers=1, d_model=128, heads=2, ffn=256, vocab=1000)


def test_pipeline_small_every_stage_reports(tmp_path):
    s = _run(tmp_path, *SMALL_BUDGETS)
    full = json.loads((tmp_path / "pipeline.json").read_text())
    rows = _csv(tmp_path / "pipeline.csv")
    assert s["model"] == "bert_base" and s["attention_chains"] == 1
    assert set(s["stages_ok"]) | set(s["stages_failed"]) == set(STAGES)
    # the demo's pictures: one panel per package, the SoC mapping's Gantt chart
    assert s["png"] and (tmp_path / "pipeline.png").read_bytes()[:4] == b"\x89PNG"
    if "soc_mapper" in s["stages_ok"]:
        assert list(tmp_path.glob("soc_gantt_*.png"))
    g = _small_graph()
    for name in STAGES:
        st = full["stages"][name]
        stage_rows = {r["metric"]: r["value"] for r in rows if r["stage"] == name}
        assert stage_rows["status"] == st["status"] in ("ok", "error")
        if st["status"] == "error":  # recorded with its message, in the summary and the CSV
            assert st["error"] and stage_rows["error"] == st["error"]
            assert (tmp_path / "pipeline_errors.log").read_text().count(f"=== {name}") == 1
            continue
        figs = st["figures"]
        for k in REQUIRED[name]:
            assert k in figs and k in stage_rows, f"{name} lacks {k}"
            if isinstance(figs[k], float):
                assert math.isfinite(figs[k]), f"{name}.{k} = {figs[k]}"
    if os.environ.get("PIPELINE_STRICT") == "1":  # once every package has landed: no stage may fail
        assert not s["stages_failed"], {n: full["stages"][n]["error"] for n in s["stages_failed"]}
    figs = {n: full["stages"][n]["figures"] for n in s["stages_ok"]}
    # the figures come from the traced graph, not from defaults
    chain = [c for c in g.chains() if any(o.kind.value == "softmax" for o in c.ops)][0]
    if "fusion_perf" in figs:
        f = figs["fusion_perf"]
        assert f["macs_per_chain"] == sum(o.macs for o in chain.compute_ops) == 2 * 32 * 32 * (64 + 64)
        assert f["best_cycles"] <= f["cycles.layerwise"] and f["speedup_vs_layerwise"] >= 1.0
    if "chain_fuser" in figs:
        f = figs["chain_fuser"]
        assert f["allclose_vs_torch"] is True and f["max_abs_err_vs_torch"] < 1e-3
        assert f["compiled_heads"] == 1 and f["model_heads"] == 2 and f["shape"] == "M=32 K=64 L=32 N=64"
    if "soc_mapper" in figs:
        f = figs["soc_mapper"]
        compute = sum(o.kind.value in ("conv2d", "linear", "matmul", "batch_matmul") for o in g.topological_ops())
        assert f["layers.bert_base"] == compute and f["layers"] > compute  # plus mlp2's layers
        assert f["comb.latency_ms"] > 0 and f["greedy.latency_ms"] > 0
    if "offload_trainer" in figs:
        f = figs["offload_trainer"]
        assert (f["hidden"], f["intermediate"], f["layers"], f["heads"], f["vocab"], f["seq"]) == \
            (128, 256, 1, 2, 1000, 32)
        # the planner counts the projections and the vocabulary matrix, not biases, norms, position embeddings
        assert 0.5 < f["params_planner_over_graph"] <= 1.0
        assert f["laptop_4gb.iteration_ms.lsp"] > f["rtx4090_workstation.iteration_ms.lsp"] > 0
    if "dynamic_batcher" in figs:
        f = figs["dynamic_batcher"]
        assert f["hidden"] == 128 and f["batches.lower_bound"] <= f["batches.fsm"] <= f["nodes"]


def test_pipeline_failing_stage_keeps_the_others(tmp_path, monkeypatch):
    """fusion_perf cannot be imported (a package mid-rewrite) and offload_trainer is asked for a preset without an
    accelerator: both are recorded, and the other stage's figures survive."""
    monkeypatch.setitem(sys.modules, "fusion_perf", None)  # `import fusion_perf` now raises ImportError
    s = _run(tmp_path, "task.stages=[fusion_perf,offload_trainer,soc_mapper]", "task.offload_trainer.batch=2",
             "task.offload_trainer.hardware=[soc_small]", "task.soc_mapper.companions=[]",
             "task.soc_mapper.algorithms=[greedy]")
    st = s["stages"]
    assert st["fusion_perf"]["status"] == "error" and "fusion_perf" in st["fusion_perf"]["error"]
    assert st["offload_trainer"]["status"] == "error" and st["offload_trainer"]["error"]
    assert st["chain_fuser"]["status"] == st["dynamic_batcher"]["status"] == "skipped"
    assert s["stages_failed"] == ["fusion_perf", "offload_trainer"] or "soc_mapper" in s["stages_failed"]
    log = (tmp_path / "pipeline_errors.log").read_text()
    assert "=== fusion_perf" in log and "=== offload_trainer" in log
    rows = _csv(tmp_path / "pipeline.csv")
    assert {"stage": "fusion_perf", "metric": "status", "value": "error"} in rows
    if st["soc_mapper"]["status"] == "ok":  # the package is there: its figures were kept despite the failures
        assert any(r["stage"] == "soc_mapper" and r["metric"] == "greedy.latency_ms" for r in rows)


@pytest.mark.parametrize("params, path", [
    ({"stages": ["fusion_perf", "nope"]}, "task.stages[1]"),
    ({"scale": "huge"}, "task.scale"),
    ({"chain_fuser": {"heads": 0}}, "task.chain_fuser.heads"),
    ({"soc_mapper": {"budget": 3}}, "task.soc_mapper"),
    ({"offload_trainer": {"hardware": []}}, "task.offload_trainer.hardware"),
    ({"dynamic_batcher": {"scale": "big"}}, "task.dynamic_batcher.scale"),
])
def test_pipeline_config_errors_name_the_field(params, path):
    with pytest.raises(ExperimentConfigError) as e:
        PipelineConfig(**params)
    assert e.value.path == path


def test_pipeline_scale_fills_only_unset_knobs():
    small, full = PipelineConfig(), PipelineConfig(scale="full", fusion_perf={"iterations": 7})
    assert small.fusion_perf.iterations < full.soc_mapper.generations * 100
    assert full.fusion_perf.iterations == 7 and full.fusion_perf.rollouts > small.fusion_perf.rollouts
    assert small.dynamic_batcher.scale == "tiny" and full.dynamic_batcher.scale == "small"
