"""experiments.store and experiments.callbacks: atomic rows, failures kept, resume, the Hydra callback."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import sqlite3
import subprocess
import sys

import pytest

from experiments import store as st

from .common import CONF, REPO

TASKS = "tests.test_experiments.test_reproduce"


# ------------------------------------------------------------------------------------------------ job keys
def test_job_key_is_stable_and_ignores_hydra_and_order():
    k = st.job_key("soc_mapper/vision1", ["++scale=full", "hardware=soc_large", "hydra.run.dir=x"])
    assert k == "96c998ec5c55e57d"  # pinned: changing the key scheme would orphan every existing store
    assert k == st.job_key("soc_mapper/vision1", ["hardware=soc_large", "scale=full", "hydra/launcher=joblib",
                                                  "experiment=soc_mapper/vision1"])
    assert k != st.job_key("soc_mapper/vision1", ["hardware=soc_small", "scale=full"])
    assert k != st.job_key("soc_mapper/vision2", ["hardware=soc_large", "scale=full"])
    with pytest.raises(st.StoreError, match="experiment must be a non-empty string"):
        st.job_key("", [])


# ------------------------------------------------------------------------------------------------ the store
def test_start_finish_roundtrip_and_failed_job_kept(tmp_path):
    s = st.ResultsStore(tmp_path / "s.db")
    a, b = st.job_key("e", ["x=1"]), st.job_key("e", ["x=2"])
    s.start("sw", a, experiment="e", overrides=["x=1"], out_dir="/o/a", command="cmd a", run_id="r")
    s.start("sw", b, experiment="e", overrides=["x=2"], run_id="r")
    s.finish("sw", a, status="done", experiment="e", overrides=["x=1"], summary={"v": 1.5, "n": [1, 2]})
    s.finish("sw", b, status="failed", experiment="e", overrides=["x=2"], error="ValueError: x.y bad\ntb")
    ra, rb = s.get("sw", a), s.get("sw", b)
    assert ra.status == "done" and ra.summary == {"v": 1.5, "n": [1, 2]} and ra.out_dir == "/o/a"
    assert ra.command == "cmd a" and ra.wall_s is not None and ra.wall_s >= 0 and ra.attempts == 1
    assert ra.machine.get("cpus_logical") == os.cpu_count()
    assert rb.status == "failed" and rb.error.startswith("ValueError: x.y bad") and rb.summary is None
    assert s.is_done("sw", a) and not s.is_done("sw", b) and not s.is_done("other", a)
    assert s.counts("sw") == {"running": 0, "done": 1, "failed": 1}
    assert [r.job_key for r in s.rows("sw", status="failed")] == [b]
    # a new attempt of the failed job counts; the same run_id starting twice (driver + callback) counts once
    s.start("sw", b, experiment="e", overrides=["x=2"], run_id="r2")
    s.start("sw", b, experiment="e", overrides=["x=2"], run_id="r2")
    assert s.get("sw", b).attempts == 2 and s.get("sw", b).status == "running"
    assert s.sweeps() == ["sw"] and s.delete("sw", b) == 1 and s.get("sw", b) is None


def test_validation_errors_name_the_field(tmp_path):
    s = st.ResultsStore(tmp_path / "s.db")
    with pytest.raises(st.StoreError, match="^status must be 'done' or 'failed'"):
        s.finish("sw", "k", status="ok", experiment="e")
    with pytest.raises(st.StoreError, match="^error is required for a failed job"):
        s.finish("sw", "k", status="failed", experiment="e")
    with pytest.raises(st.StoreError, match="^sweep_id must be a non-empty string"):
        s.start("", "k", experiment="e")
    with pytest.raises(st.StoreError, match="^journal_mode must be one of"):
        st.ResultsStore(tmp_path / "t.db", journal_mode="fast")
    with pytest.raises(st.StoreError, match=r"^hydra.callbacks.store.dbx is not a parameter"):
        st.resolve_settings(dbx="a")
    assert s.get("sw", "k") is None  # nothing half-written by the rejected calls


def _writer(path: str, worker: int, n: int) -> None:
    s = st.ResultsStore(path)
    for i in range(n):
        key = st.job_key("w", [f"worker={worker}", f"i={i}"])
        s.start("sw", key, experiment="w", overrides=[f"worker={worker}", f"i={i}"], machine={})
        s.finish("sw", key, status="done", experiment="w", summary={"worker": worker, "i": i})


def test_concurrent_writers_lose_nothing(tmp_path):
    path = str(tmp_path / "s.db")
    st.ResultsStore(path)
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, w, 15)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    rows = st.ResultsStore(path).rows("sw")
    assert len(rows) == 60 and all(r.done for r in rows)
    assert sorted((r.summary["worker"], r.summary["i"]) for r in rows) == [(w, i) for w in range(4)
                                                                          for i in range(15)]
    with sqlite3.connect(path) as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_writer_killed_mid_transaction_leaves_no_partial_row(tmp_path):
    path = tmp_path / "s.db"
    s = st.ResultsStore(path)
    s.finish("sw", "kept", status="done", experiment="e", summary={"ok": True})
    code = (
        "import os, sqlite3, sys\n"
        f"c = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
        "c.execute('BEGIN IMMEDIATE')\n"
        "c.execute(\"INSERT INTO jobs (sweep_id, job_key, experiment, overrides, status) "
        "VALUES ('sw', 'torn', 'e', '[]', 'running')\")\n"
        "c.execute(\"UPDATE jobs SET summary='{}' WHERE job_key='kept'\")\n"
        "os._exit(9)\n"  # dies holding the write lock, before COMMIT
    )
    r = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert r.returncode == 9
    assert s.get("sw", "torn") is None
    assert s.get("sw", "kept").summary == {"ok": True}
    s.finish("sw", "after", status="done", experiment="e", summary={})  # the lock was released
    assert s.counts("sw")["done"] == 2


# ------------------------------------------------------------------------------------------------ resume hook
def _hydra_cfg(overrides, callback_params):
    from hydra import compose, initialize_config_dir

    cb = [f"++hydra.callbacks.store._target_={st.CALLBACK_TARGET}"]
    cb += [f"++hydra.callbacks.store.{k}={v}" for k, v in callback_params.items()]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides) + cb, return_hydra_config=True)
    return cfg


def test_should_skip_reads_the_configured_store(tmp_path, monkeypatch):
    for v in (st.ENV_DB, st.ENV_SWEEP, st.ENV_RESUME):
        monkeypatch.delenv(v, raising=False)
    db = tmp_path / "s.db"
    cfg = _hydra_cfg(["hardware=edge_accel", "workload=mlp2"], {"db": db, "sweep_id": "t", "resume": "true"})
    # compose() does not fill hydra.overrides/runtime.choices the way a run does; set what a run would
    from omegaconf import open_dict

    with open_dict(cfg):
        cfg.hydra.overrides.task = ["hardware=edge_accel", "workload=mlp2"]
        cfg.hydra.runtime.choices.experiment = "ir_summary"
    assert st.job_identity(cfg) == ("ir_summary", ["hardware=edge_accel", "workload=mlp2"])
    assert st.store_settings(cfg)["db"] == str(db)
    assert not st.should_skip(None, cfg)  # no store yet
    key = st.job_key("ir_summary", ["workload=mlp2", "hardware=edge_accel"])
    s = st.ResultsStore(db)
    s.finish("t", key, status="failed", experiment="ir_summary", error="E: x")
    assert not st.should_skip(None, cfg)  # failed jobs run again
    s.finish("t", key, status="done", experiment="ir_summary", summary={})
    assert st.should_skip(None, cfg)
    monkeypatch.setenv(st.ENV_RESUME, "0")
    assert not st.should_skip(None, cfg)
    monkeypatch.delenv(st.ENV_RESUME)
    with open_dict(cfg):  # resume=auto: a single run (repeated by hand) runs again; a multirun job is skipped
        cfg.hydra.callbacks.store.resume = "auto"
        cfg.hydra.mode = "RUN"
        assert not st.should_skip(None, cfg)
        cfg.hydra.mode = "MULTIRUN"
        assert st.should_skip(None, cfg)
    with pytest.raises(st.StoreError, match="^hydra.callbacks.store.resume must be true, false or auto"):
        st.resolve_settings(resume="sometimes")
    monkeypatch.setenv(st.ENV_SWEEP, "another")  # the driver's env wins over the config
    assert not st.should_skip(None, cfg)
    cfg_none = _hydra_cfg([], {})
    with open_dict(cfg_none):
        del cfg_none.hydra.callbacks["store"]
    assert st.store_settings(cfg_none) is None and not st.should_skip(None, cfg_none)


def test_a_claimed_job_stays_locked_until_its_end_is_recorded(tmp_path, monkeypatch):
    for v in (st.ENV_DB, st.ENV_SWEEP, st.ENV_RESUME):
        monkeypatch.delenv(v, raising=False)
    db = tmp_path / "s.db"
    cfg = _hydra_cfg(["workload=mlp2"], {"db": db, "sweep_id": "t", "resume": "true"})
    from omegaconf import open_dict

    with open_dict(cfg):
        cfg.hydra.overrides.task = ["workload=mlp2"]
        cfg.hydra.runtime.choices.experiment = "ir_summary"
    key = st.job_key("ir_summary", ["workload=mlp2"])
    lock = st.job_lock_path(db, "t", key)
    with st.claim_job(None, cfg) as mine:
        assert mine
    # the task has returned but the Hydra callback has not yet written the row: a second claim must not run it
    fd, holder = st._try_lock(lock)
    assert fd is None and f"pid {os.getpid()}" in holder
    st.ResultsStore(db).finish("t", key, status="done", experiment="ir_summary", summary={})
    fd, _ = st._try_lock(lock)
    assert fd is not None
    os.close(fd)
    with st.claim_job(None, cfg) as mine:  # now done: skipped
        assert not mine


# ------------------------------------------------------------------------------------------------ callback
# The runner with the resume hook the lead adds to experiments/run.py (applied here by patching, so the test holds
# before and after that change).
_RUN_WITH_SKIP = (
    "import sys\n"
    "import experiments.run as r\n"
    "from experiments.store import should_skip\n"
    "_orig = r.run_experiment\n"
    "def _run(cfg, *a, **k):\n"
    "    return {} if should_skip(cfg) else _orig(cfg, *a, **k)\n"
    "r.run_experiment = _run\n"
    "sys.argv = ['experiments.run'] + sys.argv[1:]\n"
    "r.main()\n"
)


def _cli(args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", st.ENV_DB, st.ENV_SWEEP,
                                                               st.ENV_RUN_ID, st.ENV_RESUME)}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "packages"), env.get("PYTHONPATH", "")])
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", _RUN_WITH_SKIP, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)


def test_callback_records_a_sweep_and_rerun_runs_only_the_failed_job(tmp_path):
    db, sweep_dir = tmp_path / "store.sqlite", tmp_path / "sweep"
    args = ["-m", f"task._target_={TASKS}.flaky", "hardware=host,edge_accel,soc_small", "workload=mlp2",
            f"hydra.sweep.dir={sweep_dir}",
            f"++hydra.callbacks.store._target_={st.CALLBACK_TARGET}", f"++hydra.callbacks.store.db={db}",
            "++hydra.callbacks.store.sweep_id=cb"]
    r1 = _cli(args, {"H7_FAIL_ON": "edge_accel"})
    assert r1.returncode != 0 and "refusing edge_accel" in r1.stderr
    s = st.ResultsStore(db)
    rows = {r.overrides[0]: r for r in s.rows("cb")}
    assert set(rows) == {"hardware=host", "hardware=edge_accel", "hardware=soc_small"}
    assert rows["hardware=host"].done and rows["hardware=soc_small"].done
    assert rows["hardware=host"].summary["hardware"] == "host"
    assert rows["hardware=host"].out_dir == str(sweep_dir / "0")
    assert rows["hardware=host"].command.startswith("python -m experiments.run experiment=ir_summary ")
    bad = rows["hardware=edge_accel"]
    assert bad.status == "failed" and "ValueError: hardware.name: refusing edge_accel" in bad.error
    assert "Traceback" in bad.error  # the runner's error.json traceback is kept
    marker = {h: (sweep_dir / str(i) / "flaky.txt").stat().st_mtime_ns
              for i, h in enumerate(("host", "edge_accel", "soc_small")) if h != "edge_accel"}

    r2 = _cli(args)  # rerun, nothing fails now: only the missing job runs
    assert r2.returncode == 0, r2.stderr
    assert r2.stderr.count("skipped: experiment 'ir_summary'") == 2
    rows = {r.overrides[0]: r for r in s.rows("cb")}
    assert all(r.done for r in rows.values())
    assert {k: r.attempts for k, r in rows.items()} == {"hardware=host": 1, "hardware=soc_small": 1,
                                                        "hardware=edge_accel": 2}
    assert rows["hardware=host"].summary["hardware"] == "host"  # the skipped job's row is untouched
    for i, h in enumerate(("host", "edge_accel", "soc_small")):
        if h in marker:  # the done jobs did not run again
            assert (sweep_dir / str(i) / "flaky.txt").stat().st_mtime_ns == marker[h]


def test_callback_records_a_failed_single_run(tmp_path):
    db, out = tmp_path / "store.sqlite", tmp_path / "run"
    r = _cli([f"task._target_={TASKS}.flaky", "hardware=edge_accel", f"hydra.run.dir={out}",
              f"++hydra.callbacks.store._target_={st.CALLBACK_TARGET}", f"++hydra.callbacks.store.db={db}"],
             {"H7_FAIL_ON": "edge_accel"})
    assert r.returncode == 1
    (row,) = st.ResultsStore(db).rows(st.DEFAULT_SWEEP)
    assert row.status == "failed" and "refusing edge_accel" in row.error and row.out_dir == str(out)
    assert json.loads((out / "error.json").read_text())["type"] == "ValueError"


@pytest.mark.slow
def test_callback_under_the_submitit_launcher(tmp_path):
    """The cluster path (hydra/launcher=submitit_slurm) run locally: each job records itself from its worker."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    db, sweep_dir = tmp_path / "store.sqlite", tmp_path / "sweep"
    r = _cli(["-m", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=3",
              f"task._target_={TASKS}.flaky", "hardware=host,edge_accel", "workload=mlp2",
              f"hydra.sweep.dir={sweep_dir}", f"++hydra.callbacks.store._target_={st.CALLBACK_TARGET}",
              f"++hydra.callbacks.store.db={db}"], {"H7_FAIL_ON": "edge_accel"})
    assert r.returncode != 0
    rows = {r.overrides[0]: r for r in st.ResultsStore(db).rows(st.DEFAULT_SWEEP)}
    assert rows["hardware=host"].done and rows["hardware=host"].summary["hardware"] == "host"
    assert rows["hardware=edge_accel"].status == "failed"
    assert "refusing edge_accel" in rows["hardware=edge_accel"].error
