"""experiments.run: the calling convention, summary.json, the error path, sweeps, and staying light to import."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .common import REPO

ECHO = "task._target_=tests.test_experiments.tasks.echo"


def test_convention_and_summary(run_cli, tmp_path):
    out = tmp_path / "run"
    r = run_cli(ECHO, "hardware=edge_accel", "workload=mlp2", "task.top=3", f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["hardware"] == "edge_accel" and s["workload"] == "mlp2"
    assert s["out_dir"] == str(out)
    # the task's own parameters arrive as keyword arguments, with overrides applied
    assert s["params"]["top"] == 3 and s["params"]["plot"] is True
    assert s["task"] == "tests.test_experiments.tasks.echo" and s["wall_s"] >= 0
    assert (out / "echo.txt").read_text() == "ok\n"
    assert (out / ".hydra" / "config.yaml").is_file()
    assert not (out / "error.json").exists()
    assert "summary" in r.stdout and "edge_accel" in r.stdout


def test_no_workload(run_cli, tmp_path):
    out = tmp_path / "run"
    r = run_cli(ECHO, "~workload", f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "summary.json").read_text())["has_workload"] is False


def test_failing_task_exits_nonzero_with_one_line(run_cli, tmp_path):
    out = tmp_path / "run"
    r = run_cli("task._target_=tests.test_experiments.tasks.fail_on", "hardware=edge_accel", "workload=mlp2",
                f"hydra.run.dir={out}")
    assert r.returncode == 1
    err_lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(err_lines) == 1, r.stderr
    line = err_lines[0]
    assert line.startswith("error: experiment 'ir_summary' failed in tests.test_experiments.tasks.fail_on:")
    assert "ValueError: hardware.name: refusing to run on 'edge_accel'" in line
    assert "Traceback" not in r.stderr
    assert not (out / "summary.json").exists()
    e = json.loads((out / "error.json").read_text())
    assert e["type"] == "ValueError" and "Traceback" in e["traceback"]


def test_full_error_shows_traceback(run_cli, tmp_path):
    r = run_cli("task._target_=tests.test_experiments.tasks.fail_on", "hardware=edge_accel",
                f"hydra.run.dir={tmp_path / 'run'}", env={"HYDRA_FULL_ERROR": "1"})
    assert r.returncode != 0
    assert "Traceback" in r.stderr and "refusing to run" in r.stderr


@pytest.mark.parametrize("overrides, pattern", [
    (["workload=file"], "workload.path is required"),
    (["task._target_=tests.test_experiments.tasks.not_a_dict"], "must return a dict summary, returned list"),
    (["task._target_=no_such_module.fn"], "no_such_module"),
    (["task._target_=tests.test_experiments.tasks.echo", "+task.out_dir=x"], "task.out_dir is passed by the runner"),
])
def test_config_errors(run_cli, tmp_path, overrides, pattern):
    r = run_cli(*overrides, f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 1
    assert pattern in r.stderr, r.stderr
    assert len([ln for ln in r.stderr.splitlines() if ln.strip()]) == 1, r.stderr


def test_unknown_experiment_is_reported_by_hydra(run_cli):
    r = run_cli("experiment=no_such_experiment")
    assert r.returncode != 0
    assert "experiment/no_such_experiment" in r.stderr


def test_joblib_sweep_keeps_results_of_jobs_that_succeed(run_cli, tmp_path):
    sweep = tmp_path / "sweep"
    r = run_cli("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
                "task._target_=tests.test_experiments.tasks.fail_on", "hardware=host,edge_accel", "workload=mlp2",
                f"hydra.sweep.dir={sweep}")
    assert r.returncode != 0  # one job failed
    assert "refusing to run on 'edge_accel'" in r.stderr
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit())
    assert [p.name for p in jobs] == ["0", "1"]
    assert json.loads((jobs[0] / "summary.json").read_text())["hardware"] == "host"
    assert json.loads((jobs[1] / "error.json").read_text())["type"] == "ValueError"


def test_help_and_composition_do_not_import_heavy_libraries():
    code = (
        "import runpy, sys\n"
        "sys.argv = ['experiments.run', '--cfg', 'job', 'experiment=ir_summary', 'workload=bert_base']\n"
        "try:\n"
        "    runpy.run_module('experiments.run', run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "import experiments.config, experiments.workloads, experiments.ir_summary\n"
        "heavy = sorted(m for m in ('torch', 'tvm', 'transformers', 'onnx', 'matplotlib') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "HEAVY []" in r.stdout
    assert "bert_base" in r.stdout


def test_package_main_is_the_runner():
    r = subprocess.run([sys.executable, "-m", "experiments", "--cfg", "job", "workload=vit_base"], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "name: vit_base" in r.stdout and "_target_: experiments.ir_summary.run" in r.stdout


def test_help_lists_groups(run_cli):
    r = run_cli("--help")
    assert r.returncode == 0
    for word in ("experiment: ", "hardware: ", "workload: ", "ir_summary", "rtx4090_workstation", "mlp2"):
        assert word in r.stdout


def test_run_experiment_in_process(tmp_path):
    """run_experiment works without a Hydra run (tests, notebooks): out_dir given explicitly."""
    from hydra import compose, initialize_config_dir

    from experiments.run import run_experiment

    from .common import CONF

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[ECHO, "hardware=soc_small", "workload=lstm_lm"])
    s = run_experiment(cfg, out_dir=tmp_path, quiet=True)
    assert (s["hardware"], s["workload"]) == ("soc_small", "lstm_lm")
    assert json.loads((tmp_path / "summary.json").read_text()) == s


def test_jsonable():
    import enum
    import math
    from dataclasses import dataclass
    from pathlib import Path

    import numpy as np

    from experiments.run import _jsonable

    class K(enum.Enum):
        a = "a"

    @dataclass
    class D:
        x: int

    got = _jsonable({"n": np.int64(3), "f": np.float32(0.5), "arr": np.arange(3), "nan": math.nan, "k": K.a,
                     "p": Path("/x"), "d": D(1), "t": (1, 2), 4: None})
    assert got == {"n": 3, "f": 0.5, "arr": [0, 1, 2], "nan": None, "k": "a", "p": "/x", "d": {"x": 1},
                   "t": [1, 2], "4": None}
    json.dumps(got)
