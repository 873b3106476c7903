"""Hydra callback that records every job of a run or sweep in the results store (:mod:`experiments.store`).

Enable it in ``experiments/conf/config.yaml`` (or per command line with ``+hydra.callbacks.store._target_=...``)::

    hydra:
      callbacks:
        store:
          _target_: experiments.callbacks.StoreCallback
          db: results/store.sqlite       # EXPERIMENTS_STORE overrides it
          sweep_id: default              # EXPERIMENTS_SWEEP overrides it; resume works within one sweep id
          resume: auto                   # with the runner's should_skip hook, skip jobs already done:
                                         # auto = in multirun sweeps only; true; false (EXPERIMENTS_RESUME=0|1)
          journal_mode: wal              # 'delete' on NFS (SLURM clusters)

Each job writes its own row in one transaction: ``running`` when it starts, ``done`` with its summary or
``failed`` with its error when it ends. Works the same under every launcher (basic, joblib, submitit, ray): the
callback runs inside the process that runs the job. A job killed hard (``os._exit``, SIGKILL, OOM) stays
``running``, which counts as not done, so a rerun redoes it. In single-run mode the runner exits with
``sys.exit(1)`` on failure, which Hydra does not report to ``on_job_end``: an ``atexit`` hook records that case.
A store problem is logged and never fails the experiment.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import shlex
import sys
import uuid
from pathlib import Path
from typing import Any, Optional

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from . import store as st

log = logging.getLogger(__name__)


def _job_command(config: DictConfig) -> str:
    """A command line that reruns this one job by hand."""
    from omegaconf import OmegaConf

    exp, _ = st.job_identity(config)
    task_ov = OmegaConf.select(config, "hydra.overrides.task", default=None) or []
    args = [o for o in OmegaConf.to_container(task_ov) if not o.startswith("experiment=")]
    return shlex.join(["python", "-m", "experiments.run", f"experiment={exp}", *args])


def _read_error(out_dir: Optional[str]) -> Optional[str]:
    """The one-line error (plus traceback) the runner left in ``error.json``, if any."""
    if not out_dir:
        return None
    p = Path(out_dir) / "error.json"
    try:
        e = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    msg = str(e.get("error") or e.get("type") or "failed")
    tb = e.get("traceback")
    return f"{msg}\n{tb}" if tb else msg


class StoreCallback(Callback):
    """Records each Hydra job (start, then done/failed with summary or error) in a :class:`ResultsStore`."""

    def __init__(self, db: str = st.DEFAULT_DB, sweep_id: str = st.DEFAULT_SWEEP, resume: bool | str = "auto",
                 journal_mode: str = "wal") -> None:
        # validated now (a bad journal_mode should fail at start-up, not silently per job)
        self.settings = st.resolve_settings(db=db, sweep_id=sweep_id, resume=resume, journal_mode=journal_mode)
        if self.settings["journal_mode"] not in st.JOURNAL_MODES:
            raise st.StoreError("hydra.callbacks.store.journal_mode",
                                f"must be one of {list(st.JOURNAL_MODES)}, got {journal_mode!r}", journal_mode)
        self._store: Optional[st.ResultsStore] = None
        self._jobs: dict[str, dict] = {}  # key -> what on_job_end needs; per process (launchers fork/spawn)

    # -- helpers
    def _get_store(self) -> st.ResultsStore:
        if self._store is None:
            self._store = st.ResultsStore(self.settings["db"], journal_mode=self.settings["journal_mode"])
        return self._store

    @staticmethod
    def _out_dir(config: DictConfig) -> Optional[str]:
        return OmegaConf.select(config, "hydra.runtime.output_dir", default=None)

    @staticmethod
    def _is_multirun(config: DictConfig) -> bool:
        return str(OmegaConf.select(config, "hydra.mode", default="")).upper().endswith("MULTIRUN")

    # -- Hydra hooks
    def on_job_start(self, config: DictConfig, *, task_function: Any = None, **kwargs: Any) -> None:
        try:
            exp, overrides = st.job_identity(config)
            key = st.job_key(exp, overrides)
            store, sweep = self._get_store(), self.settings["sweep_id"]
            if st.resume_active(self.settings, config) and store.is_done(sweep, key):
                # the runner's should_skip hook will return without running it; leave the done row untouched
                self._jobs[key] = {"skip": True}
                return
            run_id = os.environ.get(st.ENV_RUN_ID) or uuid.uuid4().hex
            job = {"skip": False, "experiment": exp, "overrides": overrides, "out_dir": self._out_dir(config),
                   "command": _job_command(config), "run_id": run_id}
            store.start(sweep, key, experiment=exp, overrides=overrides, out_dir=job["out_dir"],
                        command=job["command"], machine=st.machine_info(), run_id=run_id)
            if not self._is_multirun(config):
                # single run: a failure ends in sys.exit(1), which skips on_job_end; record it at exit instead
                job["atexit"] = lambda: self._record_unfinished(key, job)
                atexit.register(job["atexit"])
            self._jobs[key] = job
        except Exception as e:  # noqa: BLE001 - the store must never fail the experiment
            log.warning("results store: could not record the job start (%s: %s)", type(e).__name__, e)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus

        try:
            exp, overrides = st.job_identity(config)
            key = st.job_key(exp, overrides)
            job = self._jobs.pop(key, None)
            if job is None or job.get("skip"):
                return
            if job.get("atexit"):
                atexit.unregister(job["atexit"])
            common = dict(experiment=exp, overrides=overrides, out_dir=job["out_dir"], command=job["command"],
                          run_id=job["run_id"])
            if job_return.status == JobStatus.COMPLETED:
                value = job_return._return_value  # the summary dict main() returns
                summary = value if isinstance(value, dict) else ({} if value is None else {"value": str(value)})
                self._get_store().finish(self.settings["sweep_id"], key, status="done", summary=summary, **common)
            else:
                exc = job_return._return_value
                err = _read_error(job["out_dir"]) or (f"{type(exc).__name__}: {exc}" if exc is not None
                                                      else "failed")
                self._get_store().finish(self.settings["sweep_id"], key, status="failed", error=err, **common)
        except Exception as e:  # noqa: BLE001
            log.warning("results store: could not record the job end (%s: %s)", type(e).__name__, e)

    def _record_unfinished(self, key: str, job: dict) -> None:
        """atexit (single-run mode): the process is exiting and on_job_end never came, so the job failed."""
        try:
            row = self._get_store().get(self.settings["sweep_id"], key)
            if row is None or row.status != "running" or row.run_id != job["run_id"]:
                return
            err = _read_error(job["out_dir"]) or "the process exited before the job finished"
            self._get_store().finish(self.settings["sweep_id"], key, status="failed", error=err,
                                     experiment=job["experiment"], overrides=job["overrides"],
                                     out_dir=job["out_dir"], command=job["command"], run_id=job["run_id"])
        except Exception as e:  # noqa: BLE001
            print(f"warning: results store: could not record the failed job ({e})", file=sys.stderr)


__all__ = ["StoreCallback"]
