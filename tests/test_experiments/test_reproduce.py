"""experiments.reproduce: discovery, a sweep that survives a job killed on purpose, resume, timeouts, the CLI.

The task functions below follow the runner convention and are cheap stand-ins for package experiments (the
subprocesses import them as ``tests.test_experiments.test_reproduce.<fn>``).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from experiments import reproduce as rp
from experiments import store as st

from .common import REPO

T = "tests.test_experiments.test_reproduce"


# ------------------------------------------------------------------------------------------------ test tasks
def flaky(hardware=None, workload=None, out_dir=None, **params):
    """Raises when the hardware is $H7_FAIL_ON, dies hard (os._exit) when it is $H7_DIE_ON; else writes a marker,
    a CSV and returns a summary."""
    name = (hardware or {}).get("name")
    if name and name == os.environ.get("H7_FAIL_ON"):
        raise ValueError(f"hardware.name: refusing {name} (test failure)")
    if name and name == os.environ.get("H7_DIE_ON"):
        os._exit(9)  # like a segfault or the OOM killer: no exception, no error.json, no on_job_end
    with open(os.path.join(out_dir, "flaky.txt"), "w") as f:
        f.write(f"{name}\n")
    with open(os.path.join(out_dir, "table.csv"), "w") as f:
        f.write("hardware,value\n" + f"{name},{len(name or '')}\n")
    return {"hardware": name, "workload": (workload or {}).get("name"), "n": len(name or ""), "params": params}


def sleepy(hardware=None, workload=None, out_dir=None, seconds: float = 30.0, **params):
    time.sleep(seconds)
    return {"slept": seconds}


# ------------------------------------------------------------------------------------------------ discovery
def _write(p: Path, text: str) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def test_discover_scale_sweeps_and_benches(tmp_path):
    conf, pk = tmp_path / "conf", tmp_path / "packages"
    _write(conf / "experiment" / "ir_summary.yaml", "# @package _global_\ntask:\n  _target_: a.b\n")
    _write(conf / "experiment" / "soc_mapper" / "vision1.yaml", "# @package _global_\nscale: small\ntask:\n"
           "  _target_: soc_mapper.x.run\n")
    _write(conf / "experiment" / "soc_mapper" / "mixed1.yaml", "# @package _global_\ntask:\n  _target_: a.b\n"
           "  scale: small\n")
    _write(conf / "experiment" / "dynamic_batcher" / "sweep.yaml", "# @package _global_\ntask:\n  _target_: a.b\n"
           "hydra:\n  sweeper:\n    params:\n      task.batch: 8,32\n")
    _write(pk / "soc_mapper" / "bench.py", "")
    jobs = rp.discover("full", conf_dir=conf, packages_dir=pk)
    by = {j.name: j for j in jobs}
    assert list(by) == ["soc_mapper/mixed1", "soc_mapper/vision1", "dynamic_batcher/sweep", "ir_summary",
                        "bench/soc_mapper"]
    assert by["soc_mapper/vision1"].overrides == ("++scale=full",)
    assert by["soc_mapper/mixed1"].overrides == ("++task.scale=full",)
    assert by["dynamic_batcher/sweep"].multirun and by["dynamic_batcher/sweep"].overrides == ()
    assert by["bench/soc_mapper"].kind == "bench" and by["bench/soc_mapper"].overrides == ("--scale", "full")
    runs = tmp_path / "runs"
    v1 = by["soc_mapper/vision1"]
    assert v1.run_dir(runs) == runs / "soc_mapper" / "vision1"
    assert v1.argv(v1.run_dir(runs), "py") == [
        "py", "-m", "experiments.run", "experiment=soc_mapper/vision1", "++scale=full",
        f"hydra.run.dir={runs / 'soc_mapper' / 'vision1'}"]
    assert by["dynamic_batcher/sweep"].argv(runs, "py")[3:5] == ["-m", "experiment=dynamic_batcher/sweep"]
    assert by["bench/soc_mapper"].command(runs) == "python -m soc_mapper.bench --scale full"
    assert [j.name for j in rp.discover("small", only="soc_mapper", bench=False, conf_dir=conf,
                                        packages_dir=pk)] == ["soc_mapper/mixed1", "soc_mapper/vision1"]
    with pytest.raises(rp.ReproduceError, match=r"^--only has unknown package\(s\) \['nope'\]"):
        rp.discover("small", only="soc_mapper,nope", conf_dir=conf)
    with pytest.raises(rp.ReproduceError, match="^--scale must be one of"):
        rp.discover("huge", conf_dir=conf)


def test_discover_the_real_configs():
    jobs = rp.discover("small", bench=False)
    names = [j.name for j in jobs]
    assert "ir_summary" in names
    assert all(j.group in rp.GROUPS for j in jobs)
    assert len(set(j.key for j in jobs)) == len(jobs)


# ------------------------------------------------------------------------------------------------ a sweep
def _job(hw: str) -> rp.Job:
    return rp.Job(name="ir_summary", group="ir_summary", label=hw,
                  overrides=(f"task._target_={T}.flaky", f"hardware={hw}", "workload=mlp2"))


def test_sweep_survives_a_killed_job_and_rerun_completes_only_it(tmp_path):
    store = st.ResultsStore(tmp_path / "store.sqlite")
    runs = tmp_path / "report" / "runs"
    jobs = [_job("host"), _job("edge_accel"), _job("soc_small")]
    res = rp.run_jobs(jobs, store, "t", runs, results_dir=tmp_path, n_jobs=2, progress=False,
                      env={"H7_DIE_ON": "edge_accel"})
    status = {r.job.label: r.status for r in res}
    assert status == {"host": "done", "edge_accel": "failed", "soc_small": "done"}
    killed = next(r for r in res if r.job.label == "edge_accel")
    assert "exit code 9" in killed.error
    rows = {r.job_key: r for r in store.rows("t")}
    assert rows[jobs[0].key].done and rows[jobs[2].key].done
    assert rows[jobs[0].key].summary["hardware"] == "host" and rows[jobs[2].key].summary["n"] == len("soc_small")
    assert rows[jobs[1].key].status == "failed" and "exit code 9" in rows[jobs[1].key].error
    assert (runs / "ir_summary" / "host" / "summary.json").is_file()
    assert not (runs / "ir_summary" / "edge_accel" / "summary.json").exists()
    before = {j.label: (runs / "ir_summary" / j.label / "flaky.txt").stat().st_mtime_ns
              for j in (jobs[0], jobs[2])}

    res2 = rp.run_jobs(jobs, store, "t", runs, results_dir=tmp_path, n_jobs=2, progress=False)
    assert {r.job.label: r.status for r in res2} == {"host": "skipped", "edge_accel": "done",
                                                      "soc_small": "skipped"}
    rows = {r.job_key: r for r in store.rows("t")}
    assert all(r.done for r in rows.values())
    assert [rows[j.key].attempts for j in jobs] == [1, 2, 1]
    assert rows[jobs[1].key].summary["hardware"] == "edge_accel"
    for label, mtime in before.items():  # the jobs done before were not run again
        assert (runs / "ir_summary" / label / "flaky.txt").stat().st_mtime_ns == mtime

    # the report of this sweep: ir_summary jobs with their CSVs, packages "not measured", nothing raises
    from experiments.report import write_report

    paths = write_report(store.path, "t", tmp_path / "report", results_dir=tmp_path / "no_results")
    md = paths["md"].read_text()
    assert "| ir_summary (hardware=edge_accel task._target_=" in md
    assert "(runs/ir_summary/edge_accel/table.csv)" in md
    assert "Jobs: 3 done, 0 failed, 0 unfinished." in md
    assert "not measured (" in md


def test_timeout_kills_the_job_and_records_it(tmp_path):
    store = st.ResultsStore(tmp_path / "store.sqlite")
    job = rp.Job(name="ir_summary", group="ir_summary", overrides=(f"task._target_={T}.sleepy", "~workload"))
    t0 = time.time()
    (res,) = rp.run_jobs([job], store, "t", tmp_path / "runs", results_dir=tmp_path, timeout_s=3.0,
                         progress=False)
    assert time.time() - t0 < 25
    assert res.status == "failed" and "timed out after 3 s" in res.error
    assert store.get("t", job.key).status == "failed"


def test_failing_task_error_comes_from_error_json(tmp_path):
    store = st.ResultsStore(tmp_path / "store.sqlite")
    (res,) = rp.run_jobs([_job("edge_accel")], store, "t", tmp_path / "runs", results_dir=tmp_path,
                         progress=False, env={"H7_FAIL_ON": "edge_accel"})
    assert res.status == "failed"
    assert res.error.startswith("ValueError: hardware.name: refusing edge_accel")
    assert "Traceback" in res.error


def test_bench_job_reads_the_json_it_wrote(tmp_path, monkeypatch):
    """A bench job counts as done only when it rewrote results/bench-<pkg>.json (stand-in bench: python -c)."""
    import sys

    store = st.ResultsStore(tmp_path / "store.sqlite")
    out = tmp_path / "results" / "bench-soc_mapper.json"
    out.parent.mkdir()
    out.write_text('{"old": true}')
    os.utime(out, (1, 1))
    write = f"import json; json.dump({{'geomean_latency_vs_magma': 1.5}}, open({str(out)!r}, 'w'))"
    job = rp.Job(name="bench/soc_mapper", group="soc_mapper", kind="bench")
    runner = rp.Runner(store, "t", tmp_path / "runs", tmp_path / "results")
    monkeypatch.setattr(rp.Job, "argv", lambda self, run_dir, python="python": [sys.executable, "-c", write])
    res = runner.run(job)
    assert res.status == "done" and res.summary == {"geomean_latency_vs_magma": 1.5}
    assert store.get("t", job.key).summary == {"geomean_latency_vs_magma": 1.5}
    monkeypatch.setattr(rp.Job, "argv", lambda self, run_dir, python="python": [sys.executable, "-c", "pass"])
    res = runner.run(job)
    assert res.status == "failed" and "was not (re)written" in res.error
    monkeypatch.setattr(rp.Job, "argv", lambda self, run_dir, python="python":
                        [sys.executable, "-c", "import sys; sys.exit('bench broke')"])
    res = runner.run(job)
    assert res.status == "failed" and "exit code 1" in res.error and "bench broke" in res.error


# ------------------------------------------------------------------------------------------------ CLI
def test_cli_list_and_bad_arguments(capsys):
    assert rp.main(["--list", "--only", "ir_summary", "--no-bench"]) == 0
    out = capsys.readouterr().out
    assert "python -m experiments.run experiment=ir_summary hydra.run.dir=results/report/runs/ir_summary" in out
    assert rp.main(["--only", "nope", "--list"]) == 2
    assert "--only has unknown package(s) ['nope']" in capsys.readouterr().err
    assert rp.main(["--jobs", "0", "--list"]) == 2


def test_cli_end_to_end_with_report(tmp_path, monkeypatch, capsys):
    """`python -m experiments.reproduce --only ir_summary` against a tmp store/report (the real ir_summary config
    swapped for the cheap task through a one-job discovery)."""
    monkeypatch.setattr(rp, "discover", lambda scale, only, bench=True: [_job("host")])
    rc = rp.main(["--store", str(tmp_path / "s.db"), "--report-dir", str(tmp_path / "report"), "--quiet",
                  "--results-dir", str(tmp_path / "results")])
    assert rc == 0
    md = (tmp_path / "report" / "REPORT.md").read_text()
    assert "sweep `reproduce-small`" in md and "| ir_summary (hardware=host" in md
    html = (tmp_path / "report" / "REPORT.html").read_text()
    assert "<table>" in html and "</html>" in html
    assert json.loads((tmp_path / "report" / "runs" / "ir_summary" / "host" / "summary.json").read_text())[
        "hardware"] == "host"
    assert "1 done, 0 already done, 0 failed" in capsys.readouterr().err
    assert REPO.is_dir()
