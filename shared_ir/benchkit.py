"""One benchmark toolkit for the five benches: timer, interleaved variants, geomean, machine record, JSON, CLI.

Modelled on ``triton.testing.do_bench``: untimed warm-up calls, then timed repeats, reported as medians. Every
timed call records both wall time (``time.perf_counter``) and this process's CPU time (``time.process_time``):
on a shared machine the CPU time of a single-threaded variant is a steadier estimate of its idle wall time, while
the wall time is what a user sees; a bench states which one its figures use.

Interleaving: variants compared against each other are timed one slot each per round, in a fresh (seeded) order
every round after the first, so that drifting machine load (other tenants, clock changes) hits all of them and no
variant holds the slot right after a disturbance in most rounds of its median.

Every bench writes :func:`machine` into its JSON and prints :func:`machine_line` first: a figure means little
without the CPU model, ISA and core count it was measured on.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

Clock = Callable[[], float]
WALL: Clock = time.perf_counter
CPU: Clock = time.process_time


class BenchError(ValueError):
    """A benchmark argument is out of range; the message names the argument."""


@dataclass
class Timing:
    """Seconds per call of one callable over its timed repeats (wall and CPU), and what each call returned."""

    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)

    def add(self, wall: float, cpu: float, value: Any = None) -> None:
        self.wall_s.append(wall)
        self.cpu_s.append(cpu)
        self.values.append(value)

    @property
    def n(self) -> int:
        return len(self.wall_s)

    @property
    def wall(self) -> float:
        """Median wall seconds per call."""
        return median(self.wall_s)

    @property
    def cpu(self) -> float:
        """Median CPU seconds per call."""
        return median(self.cpu_s)

    def seconds(self, clock: str = "wall") -> list[float]:
        """The per-repeat seconds on ``clock`` (``"wall"`` or ``"cpu"``)."""
        if clock not in ("wall", "cpu"):
            raise BenchError(f"clock={clock!r}: one of 'wall', 'cpu'")
        return self.wall_s if clock == "wall" else self.cpu_s

    def as_dict(self) -> dict[str, Any]:
        return {"wall_s": self.wall, "cpu_s": self.cpu, "repeats": self.n,
                "all_wall_s": list(self.wall_s), "all_cpu_s": list(self.cpu_s)}


def median(xs: Iterable[float]) -> float:
    """Median of ``xs``; NaN when empty (a variant that was never timed has no figure, not a crash)."""
    xs = list(xs)
    return statistics.median(xs) if xs else float("nan")


def geomean(xs: Iterable[float | None], empty: Any = float("nan")) -> Any:
    """Geometric mean of the positive finite values of ``xs`` (None, ≤ 0, NaN and ∞ are skipped: a ratio that was
    not measured or failed must not turn the mean into 0 or ∞); ``empty`` when none is left."""
    vals = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else empty


def _check_counts(warmup: int, repeats: int, inner: int = 1) -> None:
    for name, v, lo in (("warmup", warmup, 0), ("repeats", repeats, 1), ("inner", inner, 1)):
        if not isinstance(v, int) or v < lo:
            raise BenchError(f"{name}={v!r}: an integer >= {lo}")


def time_call(fn: Callable[..., Any], *args: Any, inner: int = 1, wall: Clock = WALL,
              cpu: Clock = CPU) -> tuple[float, float, Any]:
    """``(wall s, CPU s, last value)`` per call of ``fn(*args)``, averaged over ``inner`` back-to-back calls."""
    t, c = wall(), cpu()
    value = None
    for _ in range(inner):
        value = fn(*args)
    return (wall() - t) / inner, (cpu() - c) / inner, value


def do_bench(fn: Callable[[], Any], warmup: int = 1, repeats: int = 5, inner: int = 1,
             before: Callable[[], Any] | None = None, wall: Clock = WALL, cpu: Clock = CPU) -> Timing:
    """``warmup`` untimed calls of ``fn``, then ``repeats`` timed samples of ``inner`` calls each.

    ``before`` runs untimed before every sample (e.g. ``gc.collect``, so that the garbage of what ran before is
    not collected inside this sample). ``wall``/``cpu`` are the clocks (injectable, so a test can drive them)."""
    _check_counts(warmup, repeats, inner)
    for _ in range(warmup):
        fn()
    out = Timing()
    for _ in range(repeats):
        if before is not None:
            before()
        out.add(*time_call(fn, inner=inner, wall=wall, cpu=cpu))
    return out


class Interleaved:
    """Timed slots of several variants, one slot per variant per :meth:`round`, in a fresh order each round.

    The first round runs in the given order, every later one in an order shuffled by a ``seed``-ed generator
    (``shuffle=False`` keeps the given order). Arguments given to :meth:`warm` / :meth:`round` are passed to every
    variant (e.g. the round's input), and ``only`` restricts a round to some variants (slow variants timed in fewer
    rounds). ``before(name)`` runs untimed before each slot."""

    def __init__(self, variants: Mapping[str, Callable[..., Any]], seed: int = 0, shuffle: bool = True,
                 inner: int = 1, before: Callable[[str], Any] | None = None, wall: Clock = WALL, cpu: Clock = CPU):
        if not variants:
            raise BenchError("variants: at least one callable to time")
        _check_counts(0, 1, inner)
        self.variants = dict(variants)
        self.timings: dict[str, Timing] = {k: Timing() for k in self.variants}
        self.rounds = 0
        self._rng = random.Random(seed)
        self._shuffle, self._inner, self._before = shuffle, inner, before
        self._wall, self._cpu = wall, cpu

    def _names(self, only: Iterable[str] | None) -> list[str]:
        if only is None:
            return list(self.variants)
        names = list(only)
        unknown = [k for k in names if k not in self.variants]
        if unknown:
            raise BenchError(f"only={unknown}: not among the variants {list(self.variants)}")
        return names

    def warm(self, *args: Any, only: Iterable[str] | None = None) -> None:
        """One untimed call of each variant (in the given order)."""
        for k in self._names(only):
            if self._before is not None:
                self._before(k)
            self.variants[k](*args)

    def round(self, *args: Any, only: Iterable[str] | None = None) -> None:
        """One timed slot per variant (all, or those in ``only``)."""
        order = self._names(only)
        if self.rounds and self._shuffle:
            self._rng.shuffle(order)
        for k in order:
            if self._before is not None:
                self._before(k)
            self.timings[k].add(*time_call(self.variants[k], *args, inner=self._inner, wall=self._wall,
                                           cpu=self._cpu))
        self.rounds += 1

    def medians(self, clock: str = "wall") -> dict[str, float]:
        """Median seconds per call of each variant on ``clock`` (``"wall"`` or ``"cpu"``)."""
        return {k: median(t.seconds(clock)) for k, t in self.timings.items()}


def interleave(variants: Mapping[str, Callable[[], Any]], repeats: int = 5, warmup: int = 1, seed: int = 0,
               shuffle: bool = True, inner: int = 1, before: Callable[[str], Any] | None = None,
               wall: Clock = WALL, cpu: Clock = CPU) -> dict[str, Timing]:
    """``warmup`` untimed rounds, then ``repeats`` timed rounds of :class:`Interleaved`; the timings per variant."""
    _check_counts(warmup, repeats, inner)
    timer = Interleaved(variants, seed=seed, shuffle=shuffle, inner=inner, before=before, wall=wall, cpu=cpu)
    for _ in range(warmup):
        timer.warm()
    for _ in range(repeats):
        timer.round()
    return timer.timings


# --- the machine ----------------------------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    """What every bench records about the machine it ran on (:func:`shared_ir.hostinfo.machine_record`), with the
    load average at the time (another tenant's load explains a slow figure)."""
    from .hostinfo import machine_record

    rec = dict(machine_record())
    try:
        rec["load_average_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):  # pragma: no cover - not on Linux
        pass
    return rec


def machine_line(rec: Mapping[str, Any] | None = None) -> str:
    """One line naming the machine (CPU model, ISA, vector width and registers, cores): a bench's first output."""
    r = machine() if rec is None else rec
    isa = r.get("isa", "?")
    if r.get("isa_detected") not in (None, isa):
        isa = f"{isa} (capped from {r['isa_detected']})"
    parts = [f"machine: {r.get('cpu_model', 'unknown CPU')}", f"ISA {isa}"]
    if "vector_width_bits" in r:
        parts.append(f"{r['vector_width_bits']}-bit vectors, {r.get('vector_registers', '?')} registers")
    parts.append(f"{r.get('cores', '?')} cores")
    return ", ".join(parts)


# --- results ----------------------------------------------------------------------------------------------------------
def _json_default(o: Any) -> Any:
    """numpy/torch scalars and the like as floats (as ``default=float`` did in every bench); sets as sorted lists."""
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    if isinstance(o, os.PathLike):
        return os.fspath(o)
    try:
        return float(o)
    except (TypeError, ValueError):
        raise TypeError(f"{type(o).__name__} object is not JSON serializable: {o!r:.80}") from None


def write_json(path: "str | os.PathLike[str]", doc: Any, indent: int | None = 1) -> str:
    """``doc`` as JSON at ``path``, atomically (temporary file, fsync, rename): a reader never sees half a file,
    and an error while encoding leaves the previous file as it was. Returns the path."""
    from .atomic import atomic_write_text

    text = json.dumps(doc, indent=indent, default=_json_default)  # encode first: a failure writes nothing
    atomic_write_text(path, text)
    return os.fspath(path)


# --- command line -----------------------------------------------------------------------------------------------------
def add_bench_args(ap: argparse.ArgumentParser, scales: Sequence[str] | Mapping[str, Any], out: str,
                   default_scale: str = "small", scale_help: str | None = None) -> argparse.ArgumentParser:
    """Add the arguments every bench shares: ``--scale`` (one of ``scales``) and ``--out`` (the JSON path)."""
    names = list(scales)
    if default_scale not in names:
        raise BenchError(f"default_scale={default_scale!r}: not one of the scales {names}")
    ap.add_argument("--scale", choices=names, default=default_scale,
                    help=scale_help or f"problem sizes and repeats (default {default_scale})")
    ap.add_argument("--out", default=out, help=f"result JSON, written atomically (default {out})")
    return ap


def bench_parser(prog: str, description: str, scales: Sequence[str] | Mapping[str, Any], out: str,
                 default_scale: str = "small", scale_help: str | None = None) -> argparse.ArgumentParser:
    """An ``ArgumentParser`` with :func:`add_bench_args` already applied."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    return add_bench_args(ap, scales, out, default_scale, scale_help)


__all__ = ["BenchError", "Timing", "median", "geomean", "time_call", "do_bench", "Interleaved", "interleave",
           "machine", "machine_line", "write_json", "add_bench_args", "bench_parser", "WALL", "CPU"]
