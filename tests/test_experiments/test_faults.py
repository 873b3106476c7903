"""Regression tests of user-facing runner faults: bad workload files, hardware given as a file path, the error
line of a failing sweep job, and identical sweeps started together."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from .common import REPO


def slow_count(hardware=None, workload=None, out_dir=None, counter: str = "", delay: float = 1.0, **params):
    """Appends the hardware name to ``counter`` (one line per run), then sleeps ``delay`` seconds."""
    with open(counter, "a") as f:
        f.write(f"{(hardware or {}).get('name')}\n")
    time.sleep(delay)
    return {"hardware": (hardware or {}).get("name")}


def _err_lines(r) -> list[str]:
    return [ln for ln in r.stderr.splitlines() if ln.strip()]


def _hw_file(tmp_path, name="my_hw") -> str:
    text = (REPO / "shared_ir" / "presets" / "hardware" / "edge_accel.yaml").read_text()
    p = tmp_path / "hw" / f"{name}.yaml"
    p.parent.mkdir(exist_ok=True)
    p.write_text(text.replace("name: edge_accel", f"name: {name}", 1))
    return str(p)


def test_empty_onnx_workload_fails_naming_the_file(run_cli, tmp_path):
    p = tmp_path / "empty.onnx"
    p.write_bytes(b"")
    r = run_cli("experiment=ir_summary", "workload=file", f"workload.path={p}", "task.plot=false",
                f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 1, r.stdout
    assert len(_err_lines(r)) == 1, r.stderr
    assert "ValidationError" in r.stderr and f"{p}: is empty (0 bytes)" in r.stderr


def test_hardware_given_as_a_file_path(run_cli, tmp_path):
    hw = _hw_file(tmp_path)
    out = tmp_path / "run"
    r = run_cli("task._target_=tests.test_experiments.tasks.echo", f"hardware={hw}", "workload=mlp2",
                f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "summary.json").read_text())["hardware"] == "my_hw"
    # a relative path that exists (from the working directory, the repo root here)
    rel = os.path.relpath(_hw_file(tmp_path, "rel_hw"), REPO)
    out2 = tmp_path / "run2"
    r = run_cli("task._target_=tests.test_experiments.tasks.echo", f"hardware={rel}", "workload=mlp2",
                f"hydra.run.dir={out2}")
    assert r.returncode == 0, r.stderr
    assert json.loads((out2 / "summary.json").read_text())["hardware"] == "rel_hw"


def test_hardware_file_in_a_sweep_next_to_a_preset(run_cli, tmp_path):
    sweep = tmp_path / "sweep"
    r = run_cli("-m", "task._target_=tests.test_experiments.tasks.echo", f"hardware=host,{_hw_file(tmp_path)}",
                "workload=mlp2", f"hydra.sweep.dir={sweep}")
    assert r.returncode == 0, r.stderr
    names = sorted(json.loads((sweep / j / "summary.json").read_text())["hardware"] for j in ("0", "1"))
    assert names == ["host", "my_hw"]


def test_unreadable_hardware_file_is_one_line(run_cli, tmp_path):
    p = tmp_path / "dup.yaml"
    p.write_text("name: a\nname: b\n")
    r = run_cli("task._target_=tests.test_experiments.tasks.echo", f"hardware={p}", f"hydra.run.dir={tmp_path}/r")
    assert r.returncode == 1
    assert _err_lines(r) == [f"error: {p}: YAML does not parse at line 2, column 1: duplicate key 'name' "
                             "(first at line 1)"], r.stderr


def test_failing_sweep_job_ends_with_the_one_line_message(run_cli, tmp_path):
    sweep = tmp_path / "sweep"
    r = run_cli("-m", "task._target_=tests.test_experiments.tasks.fail_on", "hardware=host,edge_accel,soc_small",
                "workload=mlp2", f"hydra.sweep.dir={sweep}")
    assert r.returncode == 1
    assert "Traceback" not in r.stderr, r.stderr
    errors = [ln for ln in _err_lines(r) if ln.startswith("error: ")]
    assert len(errors) == 1, r.stderr
    assert errors[0].startswith("error: experiment 'ir_summary' failed in tests.test_experiments.tasks.fail_on: "
                                "ValueError: hardware.name: refusing to run on 'edge_accel'")
    assert f"[details: {sweep / '1' / 'error.json'}]" in errors[0]
    # the jobs before and after the failing one ran and kept their results
    assert json.loads((sweep / "0" / "summary.json").read_text())["hardware"] == "host"
    assert json.loads((sweep / "2" / "summary.json").read_text())["hardware"] == "soc_small"


def _popen(args, store):
    env = dict(os.environ, EXPERIMENTS_STORE=str(store))
    env.pop("HYDRA_FULL_ERROR", None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "packages"), env.get("PYTHONPATH", "")])
    return subprocess.Popen([sys.executable, "-m", "experiments.run", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_identical_sweeps_started_together_run_each_job_once(tmp_path):
    from experiments.store import ResultsStore

    counter, store = tmp_path / "runs.txt", tmp_path / "store.sqlite"
    args = ["-m", "task._target_=tests.test_experiments.test_faults.slow_count", f"+task.counter={counter}",
            "+task.delay=3", "hardware=host,edge_accel", "workload=mlp2"]
    procs = [_popen([*args, f"hydra.sweep.dir={tmp_path / f'sweep{i}'}"], store) for i in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert sorted(counter.read_text().split()) == ["edge_accel", "host"], outs
    skipped = [ln for _, err in outs for ln in err.splitlines() if ln.startswith("skipped: ")]
    assert len(skipped) == 2, outs
    rows = ResultsStore(store).rows()
    assert len(rows) == 2 and all(r.status == "done" and r.summary.get("hardware") for r in rows), rows
