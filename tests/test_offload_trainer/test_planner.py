"""Memory planner, time model, experiment tasks and the benchmark's quick parts."""
import copy
import json

import pytest
import yaml
from offload_trainer.errors import PlannerError
from offload_trainer.planner import (
    MODEL_PRESETS,
    PlanParams,
    _Sim,
    calibration_table,
    layer_ops,
    layer_times,
    machine_from,
    model_spec,
    plan_memory,
    plan_time,
    simulate,
)


def _preset(name):
    from shared_ir.hardware import preset_dir

    return yaml.safe_load((preset_dir() / f"{name}.yaml").read_text())


def test_layer_ops_macs_match_parameter_count():
    spec = MODEL_PRESETS["llama-7b"]
    ops = layer_ops(spec, 2, 128)
    lin = sum(op.macs for op in ops if op.kind.value == "linear")
    assert lin == 2 * 128 * sum(o * i for _, o, i in spec.linear_shapes())
    assert abs(spec.params / 6.74e9 - 1) < 0.02  # LLaMA-7B has 6.74 B parameters


def test_lsp_fits_where_the_reference_says():
    big = plan_memory("llama-6.7b", "lsp", 4, 512, "rtx4090_workstation", PlanParams(d=512))
    small = plan_memory("llama-1.3b", "lsp", 1, 512, "laptop_4gb", PlanParams(d=512))
    assert big["fits"] and small["fits"]
    assert 13.4 < big["accelerator_gb"] < 24  # bf16 weights alone are 13.4 GB
    assert not plan_memory("llama-6.7b", "native", 4, 512, "rtx4090_workstation")["fits"]
    zero = plan_memory("llama-1.3b", "zero_offload", 1, 512, "laptop_4gb")
    assert not zero["fits"] and zero["host_gb"] > 16  # 16 B/param of host state on a 16 GB laptop
    # more tokens need more activation memory; d larger than a projection is refused
    assert plan_memory("llama-1.3b", "lsp", 4, 512, "laptop_4gb")["accelerator_gb"] > small["accelerator_gb"]
    with pytest.raises(PlannerError, match=r"plan\.d"):
        plan_memory("smollm2-135m", "lsp", 1, 128, "laptop_4gb", PlanParams(d=512))


def test_time_model_orders_methods_and_reacts_to_bandwidth():
    t = plan_time("llama-6.7b", 4, 512, "rtx4090_workstation")
    assert t["lsp"] < t["zero_offload_delayed"] <= t["zero_offload"]
    assert t["lsp_vs_zero"] < 1
    sysm = machine_from("rtx4090_workstation").system
    d = _preset("rtx4090_workstation")
    slow = copy.deepcopy(d)
    slow["links"][0]["pinned_bandwidth_bytes_per_s"] = 1e9
    t2 = plan_time("llama-6.7b", 4, 512, slow)
    assert t2["zero_offload"] > t["zero_offload"] * 1.5  # ZeRO is link-bound at 1 GB/s
    assert sysm.name == "rtx4090_workstation"


def test_zero_sync_step_and_fused_update_modelling_choices():
    base = PlanParams(d=512, r=4)
    t = plan_time("llama-1.3b", 1, 512, "laptop_4gb", base)
    # a synchronous ZeRO step (next forward after every upload) can only be slower than per-block overlap
    loose = plan_time("llama-1.3b", 1, 512, "laptop_4gb", PlanParams(d=512, r=4, zero_sync_step=False))
    assert t["zero_offload"] >= loose["zero_offload"] and t["lsp"] == loose["lsp"]
    # the chunked fp32 update moves 3× the bytes of the fused in-place one
    chunked = PlanParams(d=512, r=4, update_bytes_per_elem=12)
    mach, spec = machine_from("laptop_4gb"), model_spec("llama-1.3b")
    assert layer_times(spec, 1, 512, mach, chunked)["lsp_update"] > 2 * layer_times(spec, 1, 512, mach,
                                                                                      base)["lsp_update"]
    with pytest.raises(PlannerError, match=r"plan\.update_bytes_per_elem"):
        PlanParams(update_bytes_per_elem=0)


def test_simulator_respects_dependencies_and_resources():
    s = _Sim()
    assert s.task("a", "gpu", 1.0) == 1.0
    assert s.task("b", "cpu", 2.0, ("a",)) == 3.0
    assert s.task("c", "gpu", 1.0) == 2.0  # gpu is free after a; does not wait for b
    assert s.task("d", "gpu", 1.0, ("b",)) == 4.0
    # half duplex serialises both directions on one link: never faster than full duplex
    d = _preset("laptop_4gb")
    half = copy.deepcopy(d)
    half["links"][0]["duplex"] = "half"
    from offload_trainer.planner import model_spec

    p = PlanParams()
    full_t = simulate("zero_offload", model_spec("llama-1.3b"), 1, 512, machine_from(d), p)["iteration_s"]
    half_t = simulate("zero_offload", model_spec("llama-1.3b"), 1, 512, machine_from(half), p)["iteration_s"]
    assert half_t >= full_t


def test_preset_without_host_link_or_host_names_the_field():
    d = _preset("rtx4090_workstation")
    nolink = dict(d, links=[])
    with pytest.raises(PlannerError, match=r"hardware\.links"):
        plan_memory("llama-1.3b", "lsp", 1, 512, nolink)
    nohost = {k: v for k, v in d.items() if k not in ("host", "links")}
    with pytest.raises(PlannerError, match=r"hardware\.host"):
        plan_time("llama-1.3b", 1, 512, nohost)
    with pytest.raises(PlannerError, match=r"hardware\.devices"):
        plan_time("llama-1.3b", 1, 512, "host")
    with pytest.raises(PlannerError, match=r"model\.heads"):
        plan_time({"hidden": 100, "intermediate": 200, "layers": 2, "heads": 3, "vocab": 10}, 1, 8,
                  "laptop_4gb")
    with pytest.raises(PlannerError, match="unknown model preset"):
        plan_time("gpt5", 1, 8, "laptop_4gb")


def test_calibration_table_lists_published_figures():
    rows = calibration_table()
    assert {r["quantity"] for r in rows} == {"gpu_fwd", "gpu_bwd", "gpu_update", "cpu_update"}
    for r in rows:
        assert 0.2 < r["ratio"] < 5  # same order of magnitude as the published per-layer timings


def test_plan_task_writes_csv_and_png(tmp_path):
    from offload_trainer.tasks import plan

    hw = _preset("laptop_4gb")
    s = plan(hardware=hw, out_dir=str(tmp_path), models=["llama-1.3b"], batches=[1, 2])
    assert len(s["rows"]) == 6
    assert (tmp_path / "plan.csv").is_file() and (tmp_path / "plan.png").is_file()
    assert (tmp_path / "calibration.csv").is_file()
    with pytest.raises(PlannerError, match=r"hardware\.links"):
        plan(hardware=dict(hw, links=[]), out_dir=str(tmp_path))


def test_finetune_task_writes_csv_and_png(tmp_path):
    pytest.importorskip("transformers")
    from offload_trainer.tasks import finetune

    s = finetune(out_dir=str(tmp_path), methods=["lsp", "full_ft"], d=8, r=2, alpha=0.5, device="cpu",
                 model={"source": "llama", "hidden": 32, "intermediate": 64, "layers": 1, "heads": 2},
                 data={"source": "synthetic", "seq_len": 16, "max_examples": 40, "eval_examples": 4,
                       "calib_examples": 4},
                 train={"steps": 2, "batch": 2, "progress": False}, lsp={"fit_steps": 3})
    assert [r["method"] for r in s["runs"]] == ["lsp", "full_ft"]
    for f in ("summary.csv", "loss.png", "lsp/metrics.csv", "full_ft/loss.png"):
        assert (tmp_path / f).is_file(), f
    json.dumps(s)


def test_bench_quick_parts():
    pytest.importorskip("torch")
    from offload_trainer.bench import cpu_adam_speedup, grad_equivalence

    assert grad_equivalence() < 1e-5
    r = cpu_adam_speedup(4, 128, 3, 1)
    assert r["speedup"] > 0 and r["elements"] == 4 * 128 * 128


def test_bench_main_states_the_machine_first(tmp_path, capsys):
    pytest.importorskip("torch")
    from offload_trainer.bench import main

    out = tmp_path / "b.json"
    main(["--skip-convergence", "--out", str(out), "--threads", "1"])
    d = json.loads(out.read_text())
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith("machine: ") and f"ISA {d['machine']['isa']}" in first
    assert d["cpu_adam"]["kernel"] == bool(d["cpu_adam"]["kernel_build"])
    assert d["targets"]["grad_err_lt_1e-5"]


def test_h200_preset_drives_the_gpu_check_model():
    """gpu_check models its machine from the h200 hardware preset: one GPU with 139 GiB HBM3e at 4.8 TB/s behind
    PCIe 5 (50 GB/s pinned); LSP beats ZeRO-Offload there as on the other machines."""
    from offload_trainer.gpu_check import HARDWARE_PRESET
    from offload_trainer.planner import ModelSpec, plan_time

    from shared_ir.hardware import load_preset

    s = load_preset(HARDWARE_PRESET)
    gpu = s.device("gpu")
    assert s.name == "h200" and gpu.kind == "gpu"
    assert gpu.memory[0].capacity_bytes == 149250113536 and gpu.dram_bandwidth_bytes_per_s == 4.8e12
    assert s.links[0].pinned_bandwidth_bytes_per_s == 5.0e10
    r = plan_time(ModelSpec("llama-1b-check", 2048, 5504, 20, 16, 32000), 4, 512, s, PlanParams(d=512, r=4))
    assert 0 < r["lsp_vs_zero"] < 1
