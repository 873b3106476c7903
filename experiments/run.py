"""Run any experiment: ``python -m experiments.run experiment=<name> [overrides]``.

Convention (every experiment follows it): the experiment config (``experiments/conf/experiment/<pkg>/<name>.yaml``,
``# @package _global_``) has a ``task`` node whose ``_target_`` names a function. The runner calls it as

    fn(hardware=<cfg.hardware as a dict, or None>, workload=<cfg.workload as a dict, or None>,
       out_dir=<Hydra's output dir>, **<the task node's other keys>)

prints the returned JSON-able summary dict and saves it atomically as ``<out_dir>/summary.json``. A failing task
exits non-zero with a one-line message (``HYDRA_FULL_ERROR=1`` shows the traceback) and leaves
``<out_dir>/error.json``. Local sweeps: ``-m hydra/launcher=joblib``; see README.md for SLURM and Ray.

Kept light on purpose: no torch/tvm here, so ``--help`` and config composition stay fast.
"""
from __future__ import annotations

import contextlib
import dataclasses
import enum
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Mapping

import hydra
from hydra.errors import CompactHydraException
from omegaconf import DictConfig, OmegaConf

SUMMARY_FILE = "summary.json"
ERROR_FILE = "error.json"


class ExperimentFailed(CompactHydraException, RuntimeError):
    """Raised (in multirun) when a task fails; the message is the one-line description, which Hydra prints as
    is (a CompactHydraException) instead of a traceback."""


def _jsonable(obj: Any) -> Any:
    """A JSON-safe copy: numpy scalars/arrays, dataclasses, enums and paths become plain values; NaN/inf -> None."""
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, enum.Enum):
        return _jsonable(obj.value)
    if isinstance(obj, Path):
        return str(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _jsonable(dataclasses.asdict(obj))
    if hasattr(obj, "tolist"):  # numpy arrays/scalars, torch tensors
        return _jsonable(obj.tolist())
    if isinstance(obj, DictConfig) or OmegaConf.is_config(obj):
        return _jsonable(OmegaConf.to_container(obj, resolve=True))
    return str(obj)


def _atomic_write_json(path: Path, data: Any) -> None:
    from shared_ir import atomic_write_text

    atomic_write_text(str(path), json.dumps(data, indent=2, sort_keys=False) + "\n")


def _group(cfg: DictConfig, key: str) -> dict | None:
    node = cfg.get(key)
    if node is None:
        return None
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def _output_dir() -> str:
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get().runtime.output_dir


def _experiment_name() -> str:
    try:
        from hydra.core.hydra_config import HydraConfig

        return str(HydraConfig.get().runtime.choices.get("experiment", "?"))
    except Exception:  # not under Hydra (tests call run_experiment directly)
        return "?"


def run_experiment(cfg: DictConfig, out_dir: str | os.PathLike | None = None, quiet: bool = False) -> dict:
    """Call the experiment's task with the runner convention, print and save its summary; return the summary."""
    from hydra.errors import InstantiationException
    from hydra.utils import call

    from .config import RunConfig

    task = _group(cfg, "task")
    rc = RunConfig(task=task, hardware=_group(cfg, "hardware"), workload=_group(cfg, "workload"))
    out = Path(out_dir if out_dir is not None else _output_dir())
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    # call the node itself (not the dict) so interpolations inside task resolve; _convert_="all" hands the
    # function plain dicts/lists, never DictConfig
    try:
        result = call(cfg.task, hardware=rc.hardware, workload=rc.workload, out_dir=str(out), _convert_="all")
    except InstantiationException as e:
        # the task itself raised: hand callers its own exception (typed, naming the field), not Hydra's wrapper;
        # errors locating the target keep Hydra's message, which names the target
        if str(e).startswith("Error in call to target") and isinstance(e.__cause__, Exception):
            raise e.__cause__ from None
        raise
    elapsed = time.perf_counter() - t0
    if result is None:
        result = {}
    if not isinstance(result, Mapping):
        raise TypeError(f"task {rc.target} must return a dict summary, returned {type(result).__name__}")
    summary = _jsonable(result)
    summary.setdefault("task", rc.target)
    summary.setdefault("wall_s", round(elapsed, 3))
    _atomic_write_json(out / SUMMARY_FILE, summary)
    if not quiet:
        print_summary(summary, title=f"summary · {rc.target}", caption=str(out / SUMMARY_FILE))
    return summary


def console():
    """A rich console; 120 columns when not writing to a terminal (logs, make output) instead of rich's 80."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() or os.environ.get("COLUMNS") else Console(width=120)


def print_summary(summary: Mapping[str, Any], title: str, caption: str = "") -> None:
    """The summary as a two-column rich table (nested values as compact JSON)."""
    from rich.table import Table

    t = Table(title=title, caption=caption, show_header=False, title_justify="left", caption_justify="left")
    t.add_column("key", style="bold cyan", no_wrap=True)
    t.add_column("value", overflow="fold")
    for k, v in summary.items():
        if isinstance(v, float):
            text = f"{v:.6g}"
        elif isinstance(v, (dict, list)):
            text = json.dumps(v, separators=(", ", ": "))
        else:
            text = str(v)
        t.add_row(str(k), text)
    console().print(t)


def root_cause(exc: BaseException) -> BaseException:
    """The task's own exception: Hydra wraps errors raised inside ``_target_`` in an InstantiationException."""
    from hydra.errors import InstantiationException

    while isinstance(exc, InstantiationException) and exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


def one_line(exc: BaseException) -> str:
    """``ExcType: message`` on one line (multi-line messages joined with `` | ``)."""
    exc = root_cause(exc)
    msg = " | ".join(s.strip() for s in str(exc).splitlines() if s.strip())
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def _record_error(exc: BaseException, name: str) -> str | None:
    """Write error.json beside where summary.json would be (so sweeps can tell failures apart); its path."""
    try:
        out = Path(_output_dir())
        _atomic_write_json(out / ERROR_FILE, {"experiment": name, "error": one_line(exc),
                                              "type": type(root_cause(exc)).__name__,
                                              "traceback": traceback.format_exc()})
        return str(out / ERROR_FILE)
    except Exception:  # never mask the task's error with our own
        return None


def _is_multirun() -> bool:
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        return HydraConfig.get().mode == RunMode.MULTIRUN
    except Exception:
        return False


@contextlib.contextmanager
def _claimed(cfg: DictConfig):
    """Resume hook: yields False when a results store (``experiments.store``, configured as a Hydra callback)
    holds this job as done or another process is running it (then it is skipped), else True while the job is
    locked. No store module or no store callback configured: True, the job runs."""
    try:
        from .store import claim_job
    except ImportError:
        yield True
        return
    with claim_job(cfg) as mine:
        yield mine


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> dict | None:
    try:
        with _claimed(cfg) as mine:
            return run_experiment(cfg) if mine else None
    except Exception as e:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        name = _experiment_name()
        target = OmegaConf.select(cfg, "task._target_", default=None, throw_on_missing=False)
        msg = f"experiment {name!r} failed" + (f" in {target}" if isinstance(target, str) else "") + f": {one_line(e)}"
        where = _record_error(e, name)
        if _is_multirun():
            # a job of a sweep: let the launcher record it as failed (the other jobs still run) instead of
            # killing the worker process; Hydra prints the line, then its own HYDRA_FULL_ERROR hint
            raise ExperimentFailed(f"error: {msg}" + (f"  [details: {where}]" if where else "")) from None
        print(f"error: {msg}" + (f"  [details: {where}; HYDRA_FULL_ERROR=1 for the traceback]" if where else ""),
              file=sys.stderr)
        sys.exit(1)


OPEN_DICTS = ("workload.config.", "workload.kwargs.")
"""Config dicts whose keys the user chooses (a Hugging Face config's fields, a builder's arguments)."""


def open_dict_overrides(argv: list[str]) -> list[str]:
    """``workload.config.n_layer=2`` as ``++workload.config.n_layer=2``: Hydra's struct mode would refuse a key
    the YAML does not list, and these dicts are empty by design."""
    return [f"++{a}" if a.startswith(OPEN_DICTS) and "=" in a else a for a in argv]


if __name__ == "__main__":
    from .searchpath import register

    sys.argv = open_dict_overrides(sys.argv)

    try:
        register()
    except ValueError as e:  # a hardware=<file> that cannot be read (a HardwareError naming the file)
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    main()
