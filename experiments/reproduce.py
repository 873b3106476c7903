"""Run every package's reproduction and write the report: ``python -m experiments.reproduce``.

    python -m experiments.reproduce [--scale small|full] [--jobs N] [--only pkg,...] [--no-bench] [--fresh]

1. Discovers the jobs: every experiment config under ``experiments/conf/experiment/<pkg>/`` for the five packages
   (plus ``ir_summary`` and, when present, ``pipeline/``), and each package's benchmark (``<pkg>/bench.py``).
2. Runs each experiment as its own process, ``python -m experiments.run experiment=<pkg>/<name>
   hydra.run.dir=results/report/runs/<pkg>/<name>``, N at a time (joblib), with a rich progress display. A config
   that declares a top-level ``scale:`` key gets ``++scale=<scale>`` (``task.scale`` gets ``++task.scale=...``);
   a config that defines its own sweep (``hydra.sweeper.params``) runs with ``-m``. The benchmarks run afterwards,
   one at a time, so their timings do not compete with each other: ``python -m <pkg>.bench --scale <scale>``.
3. Records every job in the results store (:mod:`experiments.store`, sweep ``reproduce-<scale>``): a job that fails
   or is killed is recorded with its error and the others go on; a rerun runs only the jobs not yet ``done``
   (``--fresh`` forgets the sweep first).
4. Writes ``results/report/REPORT.md`` and ``REPORT.html`` (:mod:`experiments.report`).

Exit status: 0 when every job is done, 1 when some failed (the report is written either way), 2 on bad arguments.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from . import store as st

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "experiments" / "conf"
PACKAGES = ("fusion_perf", "chain_fuser", "soc_mapper", "dynamic_batcher", "offload_trainer")
EXTRA_GROUPS = ("ir_summary", "pipeline")
GROUPS = PACKAGES + EXTRA_GROUPS
SCALES = ("small", "full")
DEFAULT_TIMEOUT_S = 3600.0
LOG_TAIL_CHARS = 4000
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TVM_NUM_THREADS")
"""Environment variables that cap the math libraries' thread pools (torch/OpenMP, MKL, OpenBLAS, TVM)."""


class ReproduceError(ValueError):
    """A bad argument of the driver (``field`` names it)."""

    def __init__(self, field: str, problem: str, value: object = None):
        self.field, self.problem, self.value = field, problem, value
        super().__init__(f"{field} {problem}")


@dataclass(frozen=True)
class Job:
    """One unit of work of a reproduction sweep."""

    name: str
    """Experiment name as the store records it: ``<pkg>/<name>``, ``ir_summary``, or ``bench/<pkg>``."""
    group: str
    """The package (or ``ir_summary``/``pipeline``) the job belongs to."""
    kind: str = "experiment"
    """``experiment`` (``python -m experiments.run``) or ``bench`` (``python -m <pkg>.bench``)."""
    overrides: tuple[str, ...] = ()
    """Hydra overrides beyond ``experiment=`` (experiments) or extra argv (benchmarks)."""
    multirun: bool = False
    """The config defines its own sweep: run with ``-m`` into ``hydra.sweep.dir``."""
    label: Optional[str] = None
    """Sub-folder of the run directory (jobs of one experiment with different overrides need distinct ones)."""

    def __post_init__(self) -> None:
        if self.kind not in ("experiment", "bench"):
            raise ReproduceError("job.kind", f"must be 'experiment' or 'bench', got {self.kind!r}", self.kind)
        if not self.name:
            raise ReproduceError("job.name", "must be non-empty", self.name)

    @property
    def key(self) -> str:
        return st.job_key(self.name, self.overrides)

    def run_dir(self, runs_root: Path) -> Path:
        d = runs_root / self.name
        return d / self.label if self.label else d

    def argv(self, run_dir: Path, python: str = sys.executable) -> list[str]:
        if self.kind == "bench":
            return [python, "-m", f"{self.group}.bench", *self.overrides]
        args = [python, "-m", "experiments.run"]
        if self.multirun:
            args += ["-m", f"experiment={self.name}", *self.overrides, f"hydra.sweep.dir={run_dir}"]
        else:
            args += [f"experiment={self.name}", *self.overrides, f"hydra.run.dir={run_dir}"]
        return args

    def command(self, run_dir: Path) -> str:
        """The command as a person would type it (from the repository root)."""
        return shlex.join(["python", *self.argv(run_dir, python="python")[1:]])


@dataclass
class JobResult:
    job: Job
    status: str
    """``done``, ``failed`` or ``skipped`` (already done in the store)."""
    wall_s: float = 0.0
    error: Optional[str] = None
    summary: Optional[dict] = None
    run_dir: Optional[Path] = None


# ------------------------------------------------------------------------------------------------ discovery
def _yaml(path: Path) -> dict:
    import yaml

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ReproduceError(str(path), f"cannot be read as YAML: {e}", str(path)) from e
    return data if isinstance(data, dict) else {}


def scale_override(cfg: dict, scale: str) -> Optional[str]:
    """The override that sets the scale in an experiment config, or None when it has no scale knob."""
    if "scale" in cfg:
        return f"++scale={scale}"
    task = cfg.get("task")
    if isinstance(task, dict) and "scale" in task:
        return f"++task.scale={scale}"
    return None


def _is_sweep(cfg: dict) -> bool:
    h = cfg.get("hydra")
    if not isinstance(h, dict):
        return False
    sweeper = h.get("sweeper")
    return bool(isinstance(sweeper, dict) and sweeper.get("params")) or str(h.get("mode", "")).upper() == "MULTIRUN"


def parse_only(only: str | Sequence[str] | None) -> tuple[str, ...]:
    """``"soc_mapper,chain_fuser"`` -> the groups, validated."""
    if only is None or only == "":
        return GROUPS
    items = only.split(",") if isinstance(only, str) else list(only)
    items = [s.strip() for s in items if s.strip()]
    bad = [s for s in items if s not in GROUPS]
    if bad:
        raise ReproduceError("--only", f"has unknown package(s) {bad}; choose from {list(GROUPS)}", bad)
    return tuple(items)


def discover(scale: str = "small", only: str | Sequence[str] | None = None, bench: bool = True,
             conf_dir: Path = CONF, packages_dir: Path = REPO / "packages") -> list[Job]:
    """Every job of a reproduction at ``scale`` for the groups in ``only`` (default: all)."""
    if scale not in SCALES:
        raise ReproduceError("--scale", f"must be one of {list(SCALES)}, got {scale!r}", scale)
    groups = parse_only(only)
    exp_dir = conf_dir / "experiment"
    jobs: list[Job] = []
    for g in groups:
        files: list[tuple[str, Path]] = []
        if (exp_dir / f"{g}.yaml").is_file():  # a top-level experiment (ir_summary)
            files.append((g, exp_dir / f"{g}.yaml"))
        if (exp_dir / g).is_dir():
            files += [(f"{g}/{p.stem}", p) for p in sorted((exp_dir / g).glob("*.yaml"))]
        for name, path in files:
            cfg = _yaml(path)
            ov = scale_override(cfg, scale)
            jobs.append(Job(name=name, group=g, overrides=(ov,) if ov else (), multirun=_is_sweep(cfg)))
    if bench:
        for g in groups:
            if g in PACKAGES and (packages_dir / g / "bench.py").is_file():
                jobs.append(Job(name=f"bench/{g}", group=g, kind="bench", overrides=("--scale", scale)))
    return jobs


# ------------------------------------------------------------------------------------------------ running
def _tail(path: Path, n: int = LOG_TAIL_CHARS) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode(errors="replace").strip()
    except OSError:
        return ""


def _load_json(path: Path) -> Optional[dict]:
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def _multirun_summary(run_dir: Path) -> dict:
    """Summaries of the sub-jobs of a config's own sweep (``<run_dir>/<n>/summary.json``)."""
    import yaml

    subs = []
    for d in sorted((p for p in run_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name)):
        try:
            ov = yaml.safe_load((d / ".hydra" / "overrides.yaml").read_text()) or []
        except (OSError, yaml.YAMLError):
            ov = []
        err = _load_json(d / "error.json")
        subs.append({"dir": d.name, "overrides": ov, "summary": _load_json(d / "summary.json"),
                     "error": err.get("error") if err else None})
    return {"sweep": subs, "n_jobs": len(subs), "n_done": sum(s["summary"] is not None for s in subs),
            "n_failed": sum(s["summary"] is None for s in subs)}


class Runner:
    """Runs jobs as subprocesses and records each in the store; shared by the worker threads."""

    def __init__(self, store: st.ResultsStore, sweep_id: str, runs_root: Path, results_dir: Path,
                 timeout_s: float = DEFAULT_TIMEOUT_S, cwd: Optional[Path] = None, env: Optional[dict] = None,
                 python: str = sys.executable):
        self.store, self.sweep_id = store, sweep_id
        self.runs_root, self.results_dir = Path(runs_root), Path(results_dir)
        # the children run where the driver runs, so every relative path (run dirs, results/) means the same
        # to both; PYTHONPATH (see _env) makes the project importable from anywhere
        self.timeout_s, self.cwd, self.python = timeout_s, Path(cwd) if cwd else Path.cwd(), python
        self.extra_env = dict(env or {})
        self.machine = st.machine_info()
        self._live: dict[int, subprocess.Popen] = {}
        self._lock = threading.Lock()
        self.interrupted = False

    def _env(self, run_id: str, threads: Optional[int] = None) -> dict:
        e = dict(os.environ)
        e.pop("HYDRA_FULL_ERROR", None)
        e.update({st.ENV_DB: str(self.store.path.resolve()), st.ENV_SWEEP: self.sweep_id, st.ENV_RUN_ID: run_id})
        # importable without installation (the root conftest does the same for tests)
        e["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), str(REPO / "packages"), e.get("PYTHONPATH", ""))
                                          if p)
        if threads is not None:
            # jobs that run side by side share the cores: without a cap each would start one thread per core
            # and they would thrash each other (benchmarks run alone and keep every core)
            for var in THREAD_VARS:
                e.setdefault(var, str(threads))
        e.update(self.extra_env)
        return e

    def kill_all(self) -> None:
        """Stop every running job (their whole process groups): Ctrl-C of the driver."""
        self.interrupted = True
        with self._lock:
            live = list(self._live.values())
        for p, _, _, _ in live:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        # record them here: the worker threads may not get to it before the interpreter exits
        for p, job, common, t0 in live:
            p.wait()
            try:
                self.store.finish(self.sweep_id, job.key, status="failed", started=t0,
                                  error="interrupted (Ctrl-C): killed before it finished", **common)
            except Exception:  # noqa: BLE001 - best effort while shutting down; the row stays 'running'
                pass

    def run(self, job: Job, threads: Optional[int] = None) -> JobResult:
        """Run one job; ``threads`` caps its math-library threads (jobs running side by side)."""
        run_dir = job.run_dir(self.runs_root)
        run_dir.mkdir(parents=True, exist_ok=True)
        for stale in ("summary.json", "error.json"):  # from an earlier attempt: must not pass for this one's
            (run_dir / stale).unlink(missing_ok=True)
        run_id = uuid.uuid4().hex
        cmd = job.command(run_dir)
        common = dict(experiment=job.name, overrides=job.overrides, out_dir=str(run_dir), command=cmd,
                      run_id=run_id)
        t0 = time.time()
        self.store.start(self.sweep_id, job.key, machine=self.machine, **common)
        bench_file = self.results_dir / f"bench-{job.group}.json"
        bench_mtime = bench_file.stat().st_mtime if bench_file.exists() else None
        error: Optional[str] = None
        summary: Optional[dict] = None
        if self.interrupted:
            error = "interrupted before it started"
        else:
            with open(run_dir / "stdout.log", "wb") as out, open(run_dir / "stderr.log", "wb") as err:
                try:
                    # own session: a timeout or Ctrl-C kills the job's whole process tree (joblib workers too)
                    p = subprocess.Popen(job.argv(run_dir, self.python), cwd=self.cwd, env=self._env(run_id, threads),
                                         stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
                except OSError as e:
                    p, error = None, f"could not start: {e}"
                if p is not None:
                    with self._lock:
                        self._live[p.pid] = (p, job, common, t0)
                    try:
                        rc = p.wait(timeout=self.timeout_s)
                    except subprocess.TimeoutExpired:
                        os.killpg(p.pid, signal.SIGKILL)
                        p.wait()
                        rc = None
                        error = f"timed out after {self.timeout_s:g} s (killed)"
                    finally:
                        with self._lock:
                            self._live.pop(p.pid, None)
                    if rc is not None:
                        summary, error = self._outcome(job, run_dir, rc, bench_file, bench_mtime)
        wall = time.time() - t0
        if error is None and summary is not None:
            self.store.finish(self.sweep_id, job.key, status="done", summary=summary, started=t0, **common)
            return JobResult(job, "done", wall, summary=summary, run_dir=run_dir)
        error = error or "finished without a summary"
        self.store.finish(self.sweep_id, job.key, status="failed", error=error, started=t0, **common)
        return JobResult(job, "failed", wall, error=error, run_dir=run_dir)

    def _outcome(self, job: Job, run_dir: Path, rc: int, bench_file: Path,
                 bench_mtime: Optional[float]) -> tuple[Optional[dict], Optional[str]]:
        """(summary, None) for a job that succeeded, else (None, error text)."""
        if rc < 0:
            how = f"killed by signal {signal.Signals(-rc).name}" if -rc in signal.valid_signals() else f"rc {rc}"
        else:
            how = f"exit code {rc}"
        if job.kind == "bench":
            if rc != 0:
                return None, f"{how}\n{_tail(run_dir / 'stderr.log')}"
            data = _load_json(bench_file)
            if data is None or (bench_mtime is not None and bench_file.stat().st_mtime <= bench_mtime):
                return None, f"exit code 0 but {bench_file} was not (re)written as a JSON object"
            return data, None
        if job.multirun:
            if not run_dir.exists():
                return None, f"{how}; no sweep folder"
            s = _multirun_summary(run_dir)
            if rc != 0 or s["n_failed"]:
                bad = [f"{x['dir']} {x['overrides']}: {x['error'] or 'no summary'}" for x in s["sweep"]
                       if x["summary"] is None]
                return None, f"{how}; {s['n_failed']} of {s['n_jobs']} sweep jobs failed: " + "; ".join(bad)
            return s, None
        summary = _load_json(run_dir / "summary.json")
        if rc == 0 and summary is not None:
            return summary, None
        err = _load_json(run_dir / "error.json")
        if err and err.get("error"):
            return None, f"{err['error']}\n{err.get('traceback', '')}".strip()
        tail = _tail(run_dir / "stderr.log")
        if rc == 0:
            return None, f"exit code 0 but no summary.json in {run_dir}\n{tail}".strip()
        return None, f"{how}" + (f"\n{tail}" if tail else "")


def run_jobs(jobs: Sequence[Job], store: st.ResultsStore, sweep_id: str, runs_root: Path,
             results_dir: Path = REPO / "results", n_jobs: int = 2, timeout_s: float = DEFAULT_TIMEOUT_S,
             progress: bool = True, resume: bool = True, env: Optional[dict] = None,
             cwd: Optional[Path] = None) -> list[JobResult]:
    """Run ``jobs`` (experiments ``n_jobs`` at a time, then benchmarks one at a time), recording each in the
    store. Jobs already done in the sweep are skipped when ``resume``. Never raises for a failing job."""
    from joblib import Parallel, delayed
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    if not isinstance(n_jobs, int) or n_jobs < 1:
        raise ReproduceError("--jobs", f"must be an integer >= 1, got {n_jobs!r}", n_jobs)
    runner = Runner(store, sweep_id, runs_root, results_dir, timeout_s=timeout_s, env=env, cwd=cwd)
    results: list[JobResult] = []
    todo = []
    for j in jobs:
        if resume and store.is_done(sweep_id, j.key):
            results.append(JobResult(j, "skipped", run_dir=j.run_dir(Path(runs_root))))
        else:
            todo.append(j)
    console = Console(stderr=True, quiet=not progress)
    for r in results:
        console.print(f"[dim]↷ {r.job.name:<40} already done (sweep {sweep_id})[/dim]")
    phases = [[j for j in todo if j.kind == "experiment"], [j for j in todo if j.kind == "bench"]]
    cols = [SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("{task.fields[current]}")]
    with Progress(*cols, console=console, disable=not progress, transient=False) as prog:
        bar = prog.add_task(f"reproduce ({sweep_id})", total=len(todo), current="")
        running: set[str] = set()
        lock = threading.Lock()

        def one(job: Job, width: int) -> JobResult:
            with lock:
                running.add(job.name)
                prog.update(bar, current=", ".join(sorted(running))[:60])
            try:
                return runner.run(job, threads=max(1, (os.cpu_count() or 1) // width) if width > 1 else None)
            finally:
                with lock:
                    running.discard(job.name)
                    prog.update(bar, current=", ".join(sorted(running))[:60])

        try:
            for phase, width in ((phases[0], n_jobs), (phases[1], 1)):
                if not phase:
                    continue
                width = min(width, len(phase))
                par = Parallel(n_jobs=width, backend="threading", return_as="generator_unordered")
                for r in par(delayed(one)(j, width) for j in phase):
                    results.append(r)
                    prog.advance(bar)
                    if r.status == "done":
                        prog.console.print(f"[green]✓[/green] {r.job.name:<40} {r.wall_s:7.1f} s")
                    else:
                        first = (r.error or "").splitlines()[0] if r.error else ""
                        prog.console.print(f"[red]✗[/red] {r.job.name:<40} {r.wall_s:7.1f} s  {first[:150]}"
                                           f"  [dim]({r.run_dir}/stderr.log)[/dim]")
        except KeyboardInterrupt:
            runner.kill_all()
            raise
    return results


# ------------------------------------------------------------------------------------------------ CLI
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m experiments.reproduce", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", default=os.environ.get("SCALE") or "small", choices=SCALES,
                   help="small (default; minutes) or full (the complete sweeps)")
    p.add_argument("--jobs", type=int, default=2, help="experiments run at once (default 2); benchmarks run alone")
    p.add_argument("--only", default=None, help=f"comma-separated subset of {','.join(GROUPS)}")
    p.add_argument("--no-bench", action="store_true", help="skip the packages' benchmarks")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per job before it is killed")
    p.add_argument("--store", default=st.DEFAULT_DB, help=f"results store (default {st.DEFAULT_DB})")
    p.add_argument("--sweep", default=None, help="sweep id in the store (default reproduce-<scale>)")
    p.add_argument("--report-dir", default="results/report", help="where REPORT.md/html and runs/ go")
    p.add_argument("--results-dir", default="results", help="where the benchmarks write bench-<pkg>.json")
    p.add_argument("--fresh", action="store_true", help="forget the sweep's rows first (rerun everything)")
    p.add_argument("--list", action="store_true", help="print the jobs and exit")
    p.add_argument("--no-report", action="store_true", help="do not write the report")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        jobs = discover(args.scale, args.only, bench=not args.no_bench)
        if args.jobs < 1:
            raise ReproduceError("--jobs", f"must be >= 1, got {args.jobs}", args.jobs)
    except ReproduceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    sweep = args.sweep or f"reproduce-{args.scale}"
    report_dir = Path(args.report_dir)
    runs_root = report_dir / ("runs" if args.scale == "small" else f"runs-{args.scale}")
    if args.list:
        for j in jobs:
            print(f"{j.key}  {j.command(j.run_dir(runs_root))}")
        return 0
    if not jobs:
        print("warning: no experiment configs found (experiments/conf/experiment/<pkg>/*.yaml)", file=sys.stderr)
    store = st.ResultsStore(args.store)
    if args.fresh:
        store.delete(sweep)
    try:
        results = run_jobs(jobs, store, sweep, runs_root, results_dir=Path(args.results_dir), n_jobs=args.jobs,
                           timeout_s=args.timeout, progress=not args.quiet)
    except KeyboardInterrupt:
        print("interrupted: finished jobs are kept in the store; rerun to complete the rest", file=sys.stderr)
        return 130
    failed = [r for r in results if r.status == "failed"]
    n_done = sum(r.status == "done" for r in results)
    n_skip = sum(r.status == "skipped" for r in results)
    print(f"{n_done} done, {n_skip} already done, {len(failed)} failed  (store {store.path}, sweep {sweep})",
          file=sys.stderr)
    if not args.no_report:
        from .faults import run as fault_sweep
        from .report import write_report

        try:  # the report's fault table; a sweep that cannot run must not lose the report
            fault_sweep(str(Path(args.results_dir) / "faults.json"), log=lambda *a: None)
        except Exception as e:  # noqa: BLE001
            print(f"fault sweep did not run: {type(e).__name__}: {e}", file=sys.stderr)
        paths = write_report(store_path=store.path, sweep_id=sweep, report_dir=report_dir,
                             results_dir=Path(args.results_dir), scale=args.scale)
        print(f"report: {paths['md']}  {paths['html']}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
