"""experiment=ir_summary on two zoo models x two hardware presets (in process), a graph file, and the CLI."""
from __future__ import annotations

import csv
import json

import pytest
from hydra import compose, initialize_config_dir

from experiments.config import ExperimentConfigError
from experiments.ir_summary import COLUMNS
from experiments.run import run_experiment

from .common import CONF

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run(tmp_path, *overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=ir_summary", *overrides])
    return run_experiment(cfg, out_dir=tmp_path, quiet=True)


def _rows(path):
    with open(path, newline="") as f:
        r = csv.DictReader(f)
        return r.fieldnames, list(r)


@pytest.mark.parametrize("hardware", ["host", "rtx4090_workstation"])
@pytest.mark.parametrize("workload", ["resnet18", "mlp2"])
def test_ir_summary_zoo_models_on_presets(tmp_path, workload, hardware):
    from shared_ir import zoo
    from shared_ir.hardware import load_preset
    from shared_ir.roofline import roofline

    s = _run(tmp_path, f"workload={workload}", f"hardware={hardware}")
    g = zoo.graph(workload)
    dev = load_preset(hardware).primary
    assert s["device"] == dev.name and s["system"] == hardware
    fields, rows = _rows(tmp_path / "ir_summary.csv")
    assert fields == COLUMNS
    for col in ("op", "kind", "macs", "bytes", "intensity_flop_per_byte", "time_s", "bound"):
        assert col in fields
    # one row per op, topological order, numbers from the IR and the roofline
    assert [r["op"] for r in rows] == g.topological_order()
    assert sum(int(r["macs"]) for r in rows) == g.macs == s["total_macs"]
    assert s["ops"] == len(g) and s["compute_bound_ops"] + s["memory_bound_ops"] == len(g)
    for r in rows[:25]:
        op = g.op(r["op"])
        rf = roofline(op, dev)
        assert r["kind"] == op.kind.value
        assert int(r["bytes"]) == op.total_bytes
        assert float(r["time_s"]) == pytest.approx(rf.time_s, rel=1e-4)
        assert r["bound"] == rf.bound
        assert float(r["time_s"]) == pytest.approx(max(float(r["compute_s"]), float(r["memory_s"])), rel=1e-4)
    assert s["roofline_time_s"] == pytest.approx(sum(roofline(o, dev).time_s for o in g.topological_ops()),
                                                 rel=1e-6)
    png = (tmp_path / "roofline.png").read_bytes()
    assert png[:8] == PNG_MAGIC and len(png) > 10_000
    assert s["plotted_ops"] == sum(1 for r in rows if int(r["flops"]) > 0)
    assert json.loads((tmp_path / "summary.json").read_text())["csv"] == str(tmp_path / "ir_summary.csv")


def test_resnet18_convs_are_compute_bound_on_host(tmp_path):
    # sanity of the physics, not a fixed number: 3x3 convs have high intensity, ReLUs/adds are memory-bound
    _run(tmp_path, "workload=resnet18", "hardware=host", "task.plot=false")
    _, rows = _rows(tmp_path / "ir_summary.csv")
    conv = [r for r in rows if r["kind"] == "conv2d"]
    elem = [r for r in rows if r["kind"] == "elementwise"]
    assert conv and elem
    assert max(float(r["intensity_flop_per_byte"]) for r in elem) < min(
        float(r["intensity_flop_per_byte"]) for r in conv)
    assert all(r["bound"] == "memory" for r in elem)
    assert not (tmp_path / "roofline.png").exists()


def test_file_workload_and_device_choice(tmp_path):
    from shared_ir import zoo

    path = tmp_path / "g.json"
    zoo.graph("mlp2").save(str(path))
    out = tmp_path / "out"
    s = _run(out, "workload=file", f"workload.path={path}", "hardware=rtx4090_workstation", "task.device=0",
             "task.top=0")
    assert s["workload"] == "g" and s["device_kind"] == "cpu"  # index 0 = the host CPU
    assert s["total_macs"] == zoo.graph("mlp2").macs


def test_bad_device(tmp_path):
    with pytest.raises(ExperimentConfigError, match="no device 'tpu9'") as e:
        _run(tmp_path, "workload=mlp2", "hardware=edge_accel", "task.device=tpu9")
    assert e.value.path == "task.device"
    with pytest.raises(ExperimentConfigError, match="task.top must be an integer >= 0"):
        _run(tmp_path, "workload=mlp2", "task.top=-1")


def test_cli_ir_summary(run_cli, tmp_path):
    out = tmp_path / "cli"
    r = run_cli("experiment=ir_summary", "workload=mlp2", "hardware=edge_accel", f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr
    assert "ir_summary: mlp2 on edge_accel" in r.stdout
    for f in ("ir_summary.csv", "roofline.png", "summary.json"):
        assert (out / f).is_file()
