"""A results store that survives partial failure: one SQLite row per job (standard library only).

Why SQLite: every job of a sweep, in whatever process or host launched it, appends its own row in one
transaction; a job that fails (or is killed) never touches the rows of the others, and a rerun asks the store which
jobs are already ``done`` and runs only the rest (resume). WAL mode lets readers (the report) read while workers
write. On a network file system (SLURM clusters with NFS home directories) WAL's shared memory does not work:
use ``journal_mode="delete"`` there (``hydra.callbacks.store.journal_mode=delete``).

A job is identified by ``(sweep_id, job_key)``; :func:`job_key` hashes the experiment name and its overrides
(Hydra's own ``hydra.*`` overrides excluded, so the output directory or the launcher do not change a job's identity).

Statuses: ``running`` (started, no end recorded yet: a job killed hard stays here and counts as not done),
``done`` (finished with a summary), ``failed`` (finished with an error text).

Used by :mod:`experiments.callbacks` (Hydra callback: each job records itself), :mod:`experiments.reproduce`
(the ``make reproduce`` driver) and :mod:`experiments.report`. Light on purpose: no Hydra at import time.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import socket
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

STATUSES = ("running", "done", "failed")
JOURNAL_MODES = ("wal", "delete", "truncate", "persist")
SCHEMA_VERSION = 1
DEFAULT_DB = "results/store.sqlite"
DEFAULT_SWEEP = "default"
# environment variables a driver sets so that the Hydra callback of a child process writes where it reads
ENV_DB = "EXPERIMENTS_STORE"
ENV_SWEEP = "EXPERIMENTS_SWEEP"
ENV_RUN_ID = "EXPERIMENTS_RUN_ID"
ENV_RESUME = "EXPERIMENTS_RESUME"
CALLBACK_TARGET = "experiments.callbacks.StoreCallback"
# jobs this process skipped because they ran elsewhere (claim_job): their rows belong to that other run, so
# finish() leaves them alone (the Hydra callback still reports the skipped job as completed)
_SKIPPED: set[tuple[str, str, str]] = set()
# job locks kept past the task until finish() records the job's end: released earlier, a second process could
# find the job neither locked nor done (on_job_end runs after the task returns) and run it again
_HELD: dict[tuple[str, str, str], int] = {}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    sweep_id   TEXT NOT NULL,
    job_key    TEXT NOT NULL,
    experiment TEXT NOT NULL,
    overrides  TEXT NOT NULL,          -- JSON list of the job's overrides (normalised)
    status     TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed')),
    error      TEXT,                   -- one line (plus traceback) for failed jobs
    started    REAL,                   -- unix time
    finished   REAL,
    wall_s     REAL,
    summary    TEXT,                   -- JSON: the task's summary dict (done jobs)
    out_dir    TEXT,
    command    TEXT,                   -- how to rerun it by hand
    machine    TEXT,                   -- JSON: the machine that ran it (see machine_info)
    attempts   INTEGER NOT NULL DEFAULT 0,
    run_id     TEXT,                   -- the launch that wrote the row (a driver and its child share one)
    PRIMARY KEY (sweep_id, job_key)
);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs (sweep_id, status);
"""


class StoreError(RuntimeError):
    """A bad argument or an unreadable store. ``field`` names the argument or column at fault."""

    def __init__(self, field: str, problem: str, value: object = None):
        self.field, self.problem, self.value = field, problem, value
        super().__init__(f"{field} {problem}" if field else problem)


@dataclass(frozen=True)
class JobRow:
    """One job as the store holds it."""

    sweep_id: str
    """The sweep (a named collection of jobs; resume works within one sweep)."""
    job_key: str
    """Stable hash of the experiment name and its overrides (see :func:`job_key`)."""
    experiment: str
    """Experiment name (``pkg/name``, or e.g. ``bench/<pkg>`` for a benchmark run by the driver)."""
    overrides: list[str]
    """The job's overrides, normalised."""
    status: str
    """``running`` | ``done`` | ``failed``."""
    error: Optional[str] = None
    """Error text of a failed job."""
    started: Optional[float] = None
    """Unix time the (last) attempt started."""
    finished: Optional[float] = None
    """Unix time it ended (None while running, or when it was killed before recording its end)."""
    wall_s: Optional[float] = None
    """Seconds from start to end of the last attempt."""
    summary: Optional[dict] = None
    """The task's summary dict (done jobs)."""
    out_dir: Optional[str] = None
    """Where the job wrote its files (CSV, PNG, summary.json)."""
    command: Optional[str] = None
    """The command line that (re)runs the job."""
    machine: dict = field(default_factory=dict)
    """The machine that ran it: host name, CPU model, cores, memory, GPU (see :func:`machine_info`)."""
    attempts: int = 0
    """How many launches started this job."""
    run_id: Optional[str] = None
    """Identifier of the launch that wrote the row last."""

    @property
    def done(self) -> bool:
        return self.status == "done"


# ------------------------------------------------------------------------------------------------ job identity
def normalize_overrides(overrides: Iterable[str]) -> list[str]:
    """Overrides that define a job: ``hydra.*``/``hydra/*`` (output dirs, launcher) and ``experiment=`` dropped,
    leading ``+``/``++`` removed (``++scale=full`` and ``scale=full`` give the same config), sorted."""
    out = []
    for o in overrides:
        if not isinstance(o, str):
            raise StoreError("overrides", f"must be strings, got {o!r}", o)
        s = o.strip().lstrip("+")
        if not s or s.startswith(("hydra.", "hydra/")) or s.split("=", 1)[0] == "experiment":
            continue
        out.append(s)
    return sorted(out)


def job_key(experiment: str, overrides: Iterable[str] = ()) -> str:
    """A stable 16-hex-digit key for an experiment name plus its overrides (order-insensitive)."""
    if not isinstance(experiment, str) or not experiment:
        raise StoreError("experiment", f"must be a non-empty string, got {experiment!r}", experiment)
    blob = json.dumps([experiment, normalize_overrides(overrides)], separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------------------------- machine info
def _first_match(path: str, prefix: str) -> Optional[str]:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(prefix):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _gpus() -> list[str]:
    # the driver's /proc entries name NVIDIA GPUs without importing torch or running nvidia-smi
    base = Path("/proc/driver/nvidia/gpus")
    names = []
    try:
        for d in sorted(base.iterdir()):
            model = _first_match(str(d / "information"), "Model")
            if model:
                names.append(model)
    except OSError:
        pass
    return names


def machine_info() -> dict:
    """The machine this process runs on (cheap: /proc and the standard library only)."""
    mem_kb = _first_match("/proc/meminfo", "MemTotal")
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    info = {
        "hostname": socket.gethostname(),
        "cpu": _first_match("/proc/cpuinfo", "model name") or platform.processor() or platform.machine(),
        "cpus_logical": os.cpu_count(),
        "cpus_usable": usable,
        "memory_gb": round(int(mem_kb.split()[0]) / 2**20, 1) if mem_kb else None,
        "gpus": _gpus(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }
    return info


def describe_machine(m: Mapping[str, Any] | None) -> str:
    """One line: ``AMD EPYC 9654 · 2 cores · 15.6 GB · no GPU (host)``."""
    if not m:
        return "not recorded"
    parts = [str(m.get("cpu") or "unknown CPU")]
    cores = m.get("cpus_usable") or m.get("cpus_logical")
    if cores:
        parts.append(f"{cores} cores")
    if m.get("memory_gb"):
        parts.append(f"{m['memory_gb']} GB RAM")
    gpus = m.get("gpus") or []
    parts.append(", ".join(gpus) if gpus else "no GPU")
    s = " · ".join(parts)
    return f"{s} ({m['hostname']})" if m.get("hostname") else s


# ------------------------------------------------------------------------------------------------------ store
def _dumps(obj: Any) -> str:
    # allow_nan=False: NaN is not JSON; the runner already maps non-finite floats to None
    return json.dumps(obj, default=str, allow_nan=False, separators=(",", ":"))


class ResultsStore:
    """The SQLite store. Each method opens its own short-lived connection, so one instance may be shared by
    threads, and many processes (or hosts on a shared disk) may write at once; writers wait up to ``timeout_s``
    for the lock instead of failing."""

    def __init__(self, path: str | os.PathLike = DEFAULT_DB, journal_mode: str = "wal", timeout_s: float = 60.0):
        if journal_mode not in JOURNAL_MODES:
            raise StoreError("journal_mode", f"must be one of {list(JOURNAL_MODES)}, got {journal_mode!r}",
                             journal_mode)
        if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
            raise StoreError("timeout_s", f"must be > 0, got {timeout_s!r}", timeout_s)
        self.path = Path(path)
        self.journal_mode = journal_mode
        self.timeout_s = float(timeout_s)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as conn:
            conn.execute(f"PRAGMA journal_mode={journal_mode}")
            conn.executescript(_SCHEMA)  # idempotent (IF NOT EXISTS), its own implicit transaction
            row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                self._write(conn, lambda c: c.execute(
                    "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)))
            elif int(row[0]) != SCHEMA_VERSION:
                raise StoreError("schema_version", f"of {self.path} is {row[0]}, this code reads "
                                 f"{SCHEMA_VERSION}; move the old store aside", row[0])

    # -- plumbing
    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(str(self.path), timeout=self.timeout_s, isolation_level=None)
        except sqlite3.Error as e:
            raise StoreError("path", f"{self.path} cannot be opened: {e}", str(self.path)) from e
        conn.execute("PRAGMA synchronous=FULL")  # a row reported written survives a crash of the machine too
        return _Closing(conn)

    @staticmethod
    def _write(conn: sqlite3.Connection, fn) -> Any:
        """Run ``fn(conn)`` in one IMMEDIATE transaction (the write lock taken up front: no upgrade deadlock)."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            out = fn(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return out

    @staticmethod
    def _check_ids(sweep_id: str, key: str) -> None:
        for name, v in (("sweep_id", sweep_id), ("job_key", key)):
            if not isinstance(v, str) or not v:
                raise StoreError(name, f"must be a non-empty string, got {v!r}", v)

    # -- writes
    def start(self, sweep_id: str, key: str, *, experiment: str, overrides: Sequence[str] = (),
              out_dir: str | None = None, command: str | None = None, machine: Mapping | None = None,
              run_id: str | None = None) -> None:
        """Record that a job started (status ``running``; ``attempts`` + 1 unless this ``run_id`` already started
        it, so a driver and the Hydra callback of its child count one attempt). Keeps a previous summary."""
        self._check_ids(sweep_id, key)
        now = time.time()
        ov = _dumps(normalize_overrides(overrides))
        mach = _dumps(dict(machine) if machine is not None else machine_info())

        def fn(c):
            c.execute(
                """INSERT INTO jobs (sweep_id, job_key, experiment, overrides, status, started, out_dir, command,
                                     machine, attempts, run_id)
                   VALUES (?, ?, ?, ?, 'running', ?, ?, ?, ?, 1, ?)
                   ON CONFLICT (sweep_id, job_key) DO UPDATE SET
                     status='running', error=NULL, started=excluded.started, finished=NULL, wall_s=NULL,
                     experiment=excluded.experiment, overrides=excluded.overrides,
                     out_dir=COALESCE(excluded.out_dir, out_dir), command=COALESCE(excluded.command, command),
                     machine=excluded.machine,
                     attempts=attempts + (CASE WHEN run_id IS NOT NULL AND run_id = excluded.run_id
                                               AND status = 'running' THEN 0 ELSE 1 END),
                     run_id=excluded.run_id""",
                (sweep_id, key, experiment, ov, now, out_dir, command, mach, run_id))

        with self._connect() as conn:
            self._write(conn, fn)

    def finish(self, sweep_id: str, key: str, *, status: str, experiment: str, overrides: Sequence[str] = (),
               summary: Mapping | None = None, error: str | None = None, out_dir: str | None = None,
               command: str | None = None, machine: Mapping | None = None, run_id: str | None = None,
               started: float | None = None) -> None:
        """Record a job's end (``done`` with its summary, or ``failed`` with its error) in one transaction.
        Creates the row if :meth:`start` was never called (e.g. a store attached after the job began)."""
        self._check_ids(sweep_id, key)
        if status not in ("done", "failed"):
            raise StoreError("status", f"must be 'done' or 'failed', got {status!r}", status)
        if status == "failed" and not error:
            raise StoreError("error", "is required for a failed job", error)
        if summary is not None and not isinstance(summary, Mapping):
            raise StoreError("summary", f"must be a mapping, got {type(summary).__name__}", summary)
        sid = _skip_id(self.path, sweep_id, key)
        if sid in _SKIPPED:
            _SKIPPED.discard(sid)
            return
        now = time.time()
        summ = _dumps(dict(summary)) if summary is not None else None
        ov = _dumps(normalize_overrides(overrides))
        mach = _dumps(dict(machine)) if machine is not None else None

        def fn(c):
            c.execute(
                """INSERT INTO jobs (sweep_id, job_key, experiment, overrides, status, error, started, finished,
                                     wall_s, summary, out_dir, command, machine, attempts, run_id)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?)
                   ON CONFLICT (sweep_id, job_key) DO UPDATE SET
                     status=excluded.status, error=excluded.error, finished=excluded.finished,
                     started=COALESCE(excluded.started, started),
                     wall_s=excluded.finished - COALESCE(excluded.started, started),
                     summary=CASE WHEN excluded.status='done' THEN excluded.summary ELSE summary END,
                     experiment=excluded.experiment, overrides=excluded.overrides,
                     out_dir=COALESCE(excluded.out_dir, out_dir), command=COALESCE(excluded.command, command),
                     machine=COALESCE(excluded.machine, machine), run_id=COALESCE(excluded.run_id, run_id)""",
                (sweep_id, key, experiment, ov, status, error, started, now,
                 (now - started) if started is not None else None, summ, out_dir, command, mach, run_id))

        try:
            with self._connect() as conn:
                self._write(conn, fn)
        finally:
            _release(sid)

    def delete(self, sweep_id: str, key: str | None = None) -> int:
        """Forget one job (or a whole sweep when ``key`` is None); the number of rows removed."""
        with self._connect() as conn:
            if key is None:
                return self._write(conn, lambda c: c.execute("DELETE FROM jobs WHERE sweep_id=?",
                                                             (sweep_id,)).rowcount)
            return self._write(conn, lambda c: c.execute("DELETE FROM jobs WHERE sweep_id=? AND job_key=?",
                                                         (sweep_id, key)).rowcount)

    # -- reads
    _COLS = ("sweep_id, job_key, experiment, overrides, status, error, started, finished, wall_s, summary, "
             "out_dir, command, machine, attempts, run_id")

    @staticmethod
    def _row(r: tuple) -> JobRow:
        (sweep_id, key, exp, ov, status, error, started, finished, wall_s, summ, out_dir, command, mach,
         attempts, run_id) = r
        return JobRow(sweep_id=sweep_id, job_key=key, experiment=exp, overrides=json.loads(ov), status=status,
                      error=error, started=started, finished=finished, wall_s=wall_s,
                      summary=json.loads(summ) if summ else None, out_dir=out_dir, command=command,
                      machine=json.loads(mach) if mach else {}, attempts=attempts, run_id=run_id)

    def get(self, sweep_id: str, key: str) -> Optional[JobRow]:
        """The job's row, or None."""
        with self._connect() as conn:
            r = conn.execute(f"SELECT {self._COLS} FROM jobs WHERE sweep_id=? AND job_key=?",
                             (sweep_id, key)).fetchone()
        return self._row(r) if r else None

    def is_done(self, sweep_id: str, key: str) -> bool:
        with self._connect() as conn:
            r = conn.execute("SELECT status FROM jobs WHERE sweep_id=? AND job_key=?", (sweep_id, key)).fetchone()
        return bool(r) and r[0] == "done"

    def rows(self, sweep_id: str | None = None, status: str | None = None,
             experiment: str | None = None) -> list[JobRow]:
        """Rows, optionally filtered; ordered by experiment, then start time."""
        if status is not None and status not in STATUSES:
            raise StoreError("status", f"must be one of {list(STATUSES)}, got {status!r}", status)
        where, args = [], []
        for col, v in (("sweep_id", sweep_id), ("status", status), ("experiment", experiment)):
            if v is not None:
                where.append(f"{col}=?")
                args.append(v)
        sql = f"SELECT {self._COLS} FROM jobs" + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY experiment, started"
        with self._connect() as conn:
            return [self._row(r) for r in conn.execute(sql, args).fetchall()]

    def sweeps(self) -> list[str]:
        with self._connect() as conn:
            return [r[0] for r in conn.execute("SELECT DISTINCT sweep_id FROM jobs ORDER BY sweep_id")]

    def counts(self, sweep_id: str) -> dict[str, int]:
        """``{status: number of jobs}`` of a sweep."""
        with self._connect() as conn:
            got = dict(conn.execute("SELECT status, COUNT(*) FROM jobs WHERE sweep_id=? GROUP BY status",
                                    (sweep_id,)).fetchall())
        return {s: got.get(s, 0) for s in STATUSES}


class _Closing:
    """A connection that closes on ``with`` exit (sqlite3's own context manager only commits)."""

    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn

    def __getattr__(self, name):
        return getattr(self._conn, name)

    def __enter__(self) -> sqlite3.Connection:
        return self._conn

    def __exit__(self, *exc) -> None:
        self._conn.close()


# ------------------------------------------------------------------------------------- Hydra job helpers
def _hydra_node(hydra_cfg: Any) -> Any:
    """Accept the full config (with a ``hydra`` key) or the ``hydra`` node itself."""
    if hydra_cfg is None:
        from hydra.core.hydra_config import HydraConfig

        return HydraConfig.get()
    if "hydra" in hydra_cfg and "runtime" not in hydra_cfg:
        return hydra_cfg["hydra"]
    return hydra_cfg


def job_identity(hydra_cfg: Any = None) -> tuple[str, list[str]]:
    """``(experiment name, normalised task overrides)`` of the current Hydra job (or of the given config)."""
    from omegaconf import OmegaConf

    h = _hydra_node(hydra_cfg)
    choices = OmegaConf.select(h, "runtime.choices", default=None)
    exp = None
    if choices is not None:
        exp = choices.get("experiment")
    overrides = OmegaConf.select(h, "overrides.task", default=None)
    overrides = list(OmegaConf.to_container(overrides)) if overrides is not None else []
    return str(exp or "unknown"), normalize_overrides(overrides)


def store_settings(hydra_cfg: Any = None) -> Optional[dict]:
    """Parameters of the store callback configured under ``hydra.callbacks`` (interpolations resolved, env
    overrides applied), or None when no store callback is configured."""
    from omegaconf import OmegaConf

    h = _hydra_node(hydra_cfg)
    cbs = OmegaConf.select(h, "callbacks", default=None)
    if not cbs:
        return None
    for name in cbs:
        node = cbs[name]
        if node is not None and OmegaConf.select(node, "_target_", default=None) == CALLBACK_TARGET:
            params = OmegaConf.to_container(node, resolve=True)
            params.pop("_target_", None)
            return resolve_settings(**params)
    return None


def resolve_settings(db: str | None = None, sweep_id: str | None = None, resume: bool | str = "auto",
                     journal_mode: str = "wal", **unknown: Any) -> dict:
    """The store callback's settings, with the driver's environment variables taking precedence (so
    ``python -m experiments.reproduce`` routes its children's rows into its own store and sweep).

    ``resume``: ``auto`` (default) skips done jobs in multirun sweeps only, so repeating a single
    ``python -m experiments.run ...`` by hand still runs it; ``true`` always; ``false`` never.
    ``EXPERIMENTS_RESUME=0|1`` overrides it."""
    if unknown:
        raise StoreError(f"hydra.callbacks.store.{sorted(unknown)[0]}",
                         "is not a parameter of experiments.callbacks.StoreCallback "
                         "(expected db, sweep_id, resume, journal_mode)", unknown)
    env_resume = os.environ.get(ENV_RESUME)
    if env_resume is not None and env_resume.strip():
        resume = env_resume.strip().lower() not in ("0", "false", "no", "off")
    if isinstance(resume, str):
        low = resume.strip().lower()
        if low not in ("auto", "true", "false"):
            raise StoreError("hydra.callbacks.store.resume", f"must be true, false or auto, got {resume!r}", resume)
        resume = "auto" if low == "auto" else low == "true"
    elif not isinstance(resume, bool):
        raise StoreError("hydra.callbacks.store.resume", f"must be true, false or auto, got {resume!r}", resume)
    return {"db": os.environ.get(ENV_DB) or db or DEFAULT_DB,
            "sweep_id": os.environ.get(ENV_SWEEP) or sweep_id or DEFAULT_SWEEP,
            "resume": resume, "journal_mode": journal_mode}


def resume_active(settings: Mapping[str, Any], hydra_cfg: Any = None) -> bool:
    """Whether done jobs are skipped for this job: ``resume`` true, or ``auto`` in a multirun sweep."""
    r = settings.get("resume")
    if r == "auto":
        from omegaconf import OmegaConf

        mode = OmegaConf.select(_hydra_node(hydra_cfg), "mode", default=None)
        return str(mode).upper().endswith("MULTIRUN")
    return bool(r)


def should_skip(cfg: Any = None, hydra_cfg: Any = None) -> bool:
    """True when the current Hydra job is already ``done`` in the results store configured under
    ``hydra.callbacks`` (resume): the runner then returns without calling the task. False when no store callback
    is configured, resume is off (``EXPERIMENTS_RESUME=0``, ``hydra.callbacks.store.resume=false``, or ``auto``
    outside a multirun), or the store
    cannot be read (a store problem must never stop an experiment). ``cfg`` (the task config) is accepted for the
    runner's convenience; the job's identity comes from the Hydra config."""
    try:
        settings = store_settings(hydra_cfg)
        if settings is None or not resume_active(settings, hydra_cfg):
            return False
        exp, overrides = job_identity(hydra_cfg)
        db = Path(settings["db"])
        if not db.exists():
            return False
        store = ResultsStore(db, journal_mode=settings["journal_mode"])
        key = job_key(exp, overrides)
        if store.is_done(settings["sweep_id"], key):
            print(f"skipped: experiment {exp!r} {overrides} is already done in {db} (sweep "
                  f"{settings['sweep_id']!r}, key {key}); EXPERIMENTS_RESUME=0 reruns it", file=sys.stderr)
            return True
    except Exception as e:  # noqa: BLE001 - resume is an optimisation; run the job rather than fail
        print(f"warning: results store not consulted ({type(e).__name__}: {e})", file=sys.stderr)
    return False


def _skip_id(db: str | os.PathLike, sweep_id: str, key: str) -> tuple[str, str, str]:
    return os.path.abspath(db), sweep_id, key


def _job_ref(hydra_cfg: Any) -> Optional[tuple[dict, str, list[str], str]]:
    """``(store settings, experiment, overrides, job key)`` of the current Hydra job when resume applies to it."""
    try:
        settings = store_settings(hydra_cfg)
        if settings is None or not resume_active(settings, hydra_cfg):
            return None
        exp, overrides = job_identity(hydra_cfg)
        return settings, exp, overrides, job_key(exp, overrides)
    except Exception as e:  # noqa: BLE001 - as in should_skip: a store problem must never stop an experiment
        print(f"warning: results store not consulted ({type(e).__name__}: {e})", file=sys.stderr)
        return None


def job_lock_path(db: str | os.PathLike, sweep_id: str, key: str) -> Path:
    """The lock file of one job: ``<db>.locks/<hash of sweep id and job key>.lock``."""
    h = hashlib.sha256(json.dumps([sweep_id, key]).encode()).hexdigest()[:16]
    return Path(f"{db}.locks") / f"{h}.lock"


def _try_lock(path: Path) -> tuple[Optional[int], str]:
    """``(fd, "")`` holding an exclusive flock on ``path``; ``(None, holder)`` when another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
        os.close(fd)
        return None, holder or "holder unknown"
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.ctime()}".encode(), 0)
    return fd, ""


def _release(sid: tuple[str, str, str]) -> None:
    fd = _HELD.pop(sid, None)
    if fd is not None:
        os.close(fd)


@contextlib.contextmanager
def claim_job(cfg: Any = None, hydra_cfg: Any = None) -> Iterator[bool]:
    """The runner's resume hook around one Hydra job: yields False (skip it; a message says why) when the job is
    already done in the results store or another process is running it — two identical sweeps started together
    run each job once — else True, holding the job's lock until :meth:`ResultsStore.finish` records its end.

    The lock is an ``flock`` on :func:`job_lock_path` beside the store: the kernel drops it when its process
    dies, so a killed job never blocks a rerun (a stale file is simply locked again). Where resume is off (see
    :func:`should_skip`) it yields True and locks nothing: a job repeated by hand runs."""
    ref = _job_ref(hydra_cfg)
    if ref is None:
        yield True
        return
    settings, exp, overrides, key = ref
    sid = _skip_id(settings["db"], settings["sweep_id"], key)
    path = job_lock_path(settings["db"], settings["sweep_id"], key)
    try:
        fd, holder = _try_lock(path)
    except OSError as e:
        print(f"warning: job lock {path} not taken ({e}); the job runs unlocked", file=sys.stderr)
        fd, holder = -1, ""
    if fd is None:
        print(f"skipped: experiment {exp!r} {overrides} is running in another process ({holder}; lock {path})",
              file=sys.stderr)
    if fd is None or should_skip(cfg, hydra_cfg):  # checked again under the lock: it may have finished meanwhile
        _SKIPPED.add(sid)
        if fd is not None and fd >= 0:
            os.close(fd)
        yield False
        return
    _SKIPPED.discard(sid)
    _release(sid)
    if fd >= 0:
        _HELD[sid] = fd  # released by finish(), or by the kernel when the process ends
    yield True


__all__ = ["ResultsStore", "JobRow", "StoreError", "job_key", "normalize_overrides", "machine_info",
           "describe_machine", "should_skip", "claim_job", "job_lock_path",
           "resume_active", "job_identity", "store_settings", "resolve_settings",
           "STATUSES",
           "DEFAULT_DB", "DEFAULT_SWEEP", "ENV_DB", "ENV_SWEEP", "ENV_RUN_ID", "ENV_RESUME", "CALLBACK_TARGET"]
