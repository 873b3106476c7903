"""TVM MetaSchedule without chain fusion: the benchmark's tuned-compiler baseline, for every kind of chain.

A chain becomes the operators a compiler without chain fusion runs, each tuned as a task of its own
(``ms.tune_tir``), its output written to memory and read back by the next:

* GEMM chain: ``gemm1`` (with the scale, bias1 and an element-wise glue — ReLU, GELU, scale — in its epilogue, as
  TVM's operator fusion puts them), ``softmax`` on its own for attention (a reduction over ``l``: operator fusion
  does not put it into a GEMM's epilogue), ``gemm2`` (+ bias2).
* Conv chain: ``conv1`` (zero padding, bias1 and ReLU in the same function) and ``conv2`` (+ bias2).

Every operator of every chain of a group is a task of *one* tuning run (one builder/runner start-up for all), in a
child process (its worker pools and any crash stay out of the benchmark) under a wall clock; groups run one after
the other, so that a group that fails or times out loses only its own chains.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from .codegen import relu
from .spec import ConvChain, GemmChain, input_names


@dataclass(frozen=True)
class MsOp:
    """One operator of the unfused chain: the tensors it reads (chain inputs by their names in ``spec.shapes()``,
    or an earlier operator's output) and the one it writes."""

    name: str
    inputs: tuple[str, ...]
    output: str
    shape: tuple[int, ...]


def chain_ops(spec: GemmChain | ConvChain) -> list[MsOp]:
    """The operators (in order) a compiler without chain fusion runs for ``spec``; the last writes the output."""
    sh = spec.shapes()
    if isinstance(spec, GemmChain):
        b, M, L = spec.batch, spec.M, spec.L
        out = [MsOp("gemm1", ("A", "B") + (("b1",) if spec.bias1 else ()), "C", (b, M, L))]
        mid = "C"
        if spec.glue == "softmax":
            out.append(MsOp("softmax", ("C",), "P", (b, M, L)))
            mid = "P"
        out.append(MsOp("gemm2", (mid, "D") + (("b2",) if spec.bias2 else ()), "E", sh["E"]))
        return out
    return [MsOp("conv1", ("I", "W1") + (("b1",) if spec.bias1 else ()), "T", (spec.N, spec.K1, spec.H, spec.W)),
            MsOp("conv2", ("T", "W2") + (("b2",) if spec.bias2 else ()), "O", sh["O"])]


def _ew(X, f, name):
    """An element-wise stage ``f(X[i…], i…)`` after ``X`` (TE's compute takes no default arguments to bind it)."""
    from tvm import te

    return te.compute(X.shape, lambda *i: f(X(*i), *i), name=name)


def _bmm(name: str, operands: tuple[str, str], b: int, m: int, k: int, n: int, rhs_transposed: bool):
    """``([X, Y], Z)``: the batched GEMM ``Z = X·Y`` (``X`` (b, m, k); ``Y`` (b, k, n), or (b, n, k) when
    ``rhs_transposed``), its placeholders named ``operands``."""
    from tvm import te

    X = te.placeholder((b, m, k), name=operands[0])
    Y = te.placeholder((b, n, k) if rhs_transposed else (b, k, n), name=operands[1])
    r = te.reduce_axis((0, k), "r")
    Z = te.compute((b, m, n), lambda i, p, q: te.sum(X[i, p, r] * (Y[i, q, r] if rhs_transposed else Y[i, r, q]),
                                                     axis=r), name=name)
    return [X, Y], Z


def _prim_funcs(spec: GemmChain | ConvChain) -> dict[str, object]:
    """TE → TensorIR of each operator of :func:`chain_ops` (arguments: its inputs in order, then its output)."""
    from tvm import te, tirx

    zero = tirx.const(0.0, "float32")
    funcs = {}
    if isinstance(spec, GemmChain):
        b, M, N, K, L = spec.batch, spec.M, spec.N, spec.K, spec.L
        args, C = _bmm("gemm1", ("A", "B"), b, M, K, L, spec.bt)
        scale = spec.scale
        if spec.bias1:  # as the reference: C·scale + b1, then the glue at scale 1
            b1 = te.placeholder((L,), name="b1")
            args.append(b1)
            C = _ew(C, lambda v, i, m, l: v * tirx.const(scale, "float32") + b1[l], "bias1")
            scale = 1.0
        s = tirx.const(scale, "float32")
        if spec.glue == "relu":
            C = _ew(C, lambda v, *_: relu(v * s), "relu")
        elif spec.glue == "gelu":  # torch's default (erf) GELU
            C = _ew(C, lambda v, *_: 0.5 * (v * s) * (1.0 + tirx.erf(v * s / math.sqrt(2.0))), "gelu")
        elif scale != 1.0:  # "scale", or softmax's 1/√d (softmax itself is the next operator)
            C = _ew(C, lambda v, *_: v * s, "scale")
        funcs["gemm1"] = te.create_prim_func(args + [C])
        if spec.glue == "softmax":
            X = te.placeholder((b, M, L), name="C")
            r1, r2 = te.reduce_axis((0, L), "r1"), te.reduce_axis((0, L), "r2")
            mx = te.compute((b, M), lambda i, m: te.max(X[i, m, r1], axis=r1), name="row_max")
            ex = te.compute((b, M, L), lambda i, m, l: te.exp(X[i, m, l] - mx[i, m]), name="exp")
            sm = te.compute((b, M), lambda i, m: te.sum(ex[i, m, r2], axis=r2), name="row_sum")
            P = te.compute((b, M, L), lambda i, m, l: ex[i, m, l] / sm[i, m], name="softmax")
            funcs["softmax"] = te.create_prim_func([X, P])
        args, E = _bmm("gemm2", ("C", "D"), b, M, L, N, spec.dt)
        if spec.bias2:
            b2 = te.placeholder((N,), name="b2")
            args.append(b2)
            E = _ew(E, lambda v, i, m, n: v + b2[n], "bias2")
        funcs["gemm2"] = te.create_prim_func(args + [E])
        return funcs

    def conv(name, C, K, R, S, bias, with_relu):
        N, H, W = spec.N, spec.H, spec.W
        X = te.placeholder((N, C, H, W), name="X")
        Wt = te.placeholder((K, C, R, S), name="W")
        ph, pw = R // 2, S // 2
        Xp = te.compute((N, C, H + 2 * ph, W + 2 * pw), lambda n, c, y, x: tirx.if_then_else(
            tirx.all(y >= ph, y < H + ph, x >= pw, x < W + pw), X[n, c, y - ph, x - pw], zero), name="pad")
        c, r, s = te.reduce_axis((0, C), "c"), te.reduce_axis((0, R), "r"), te.reduce_axis((0, S), "s")
        Y = te.compute((N, K, H, W), lambda n, k, y, x: te.sum(Xp[n, c, y + r, x + s] * Wt[k, c, r, s],
                                                               axis=[c, r, s]), name=name)
        args = [X, Wt]
        if bias:
            bt = te.placeholder((K,), name="bias")
            args.append(bt)
            Y = _ew(Y, lambda v, n, k, y, x: v + bt[k], name + "_bias")
        if with_relu:
            Y = _ew(Y, lambda v, *_: relu(v), name + "_relu")
        return te.create_prim_func(args + [Y])

    funcs["conv1"] = conv("conv1", spec.C, spec.K1, spec.R1, spec.S1, spec.bias1, spec.glue == "relu")
    funcs["conv2"] = conv("conv2", spec.K1, spec.K2, spec.R2, spec.S2, spec.bias2, False)
    return funcs


class MetaScheduleChain:
    """The unfused chain from MetaSchedule-tuned operators, called on the chain's inputs (torch tensors, in the
    order of ``spec.shapes()``); intermediates allocated once, outside the timed call."""

    def __init__(self, libs: dict, spec: GemmChain | ConvChain):
        import torch

        self.spec, self.ops = spec, chain_ops(spec)
        self.libs = [libs[op.name] for op in self.ops]
        self.inputs = input_names(spec)
        self.buf = {op.output: torch.empty(op.shape) for op in self.ops}

    def __call__(self, *tensors):
        env = dict(zip(self.inputs, tensors))
        env.update(self.buf)
        for op, lib in zip(self.ops, self.libs):
            lib["main"](*(env[t] for t in op.inputs), env[op.output])
        return env[self.ops[-1].output]


def _spec_to_json(spec) -> dict:
    return {"type": "gemm" if isinstance(spec, GemmChain) else "conv", "fields": dataclasses.asdict(spec)}


def _spec_from_json(d: dict):
    return (GemmChain if d["type"] == "gemm" else ConvChain)(**d["fields"])


def _child_main(argv: list[str]) -> None:
    """The tuning run (in the child): argv = [specs JSON, trials per op, output folder, candidates per round,
    search strategy, builder workers]; writes ``s<i>_<op>.so`` per chain ``i`` and operator, prints one JSON line."""
    from .codegen import compile_tir, target
    from .kernel import import_tvm

    tvm = import_tvm()
    from tvm.s_tir import meta_schedule as ms

    specs = [_spec_from_json(d) for d in json.loads(argv[0])]
    trials, outdir, per_iter, strategy, workers = int(argv[1]), argv[2], int(argv[3]), argv[4], int(argv[5])
    funcs = {f"s{i}_{name}": f for i, s in enumerate(specs) for name, f in _prim_funcs(s).items()}
    mod = tvm.IRModule({n: f.with_attr("global_symbol", n) for n, f in funcs.items()})
    if strategy == "evolutionary":  # the default search, shrunk to fit a handful of trials
        st = ms.search_strategy.EvolutionarySearch(population_size=32, init_min_unmeasured=8, genetic_num_iters=1)
        cm = "xgb"
    else:  # random schedules from the design space: no cost-model training, the cheapest search that still measures
        st, cm = "replay-trace", "random"
    t = time.perf_counter()
    # the tuning database is kept beside the tuned libraries (the group's cache entry): what was measured stays
    # inspectable and reusable
    wd = os.path.join(outdir, "database")
    os.makedirs(wd, exist_ok=True)
    db = ms.tune_tir(mod, target(), wd, max_trials_global=len(funcs) * trials, max_trials_per_task=trials,
                     num_trials_per_iter=per_iter, strategy=st, cost_model=cm,
                     builder=ms.builder.LocalBuilder(max_workers=workers, timeout_sec=120),
                     runner=ms.runner.LocalRunner(timeout_sec=60, evaluator_config=ms.runner.EvaluatorConfig(
                         number=1, repeat=1, min_repeat_ms=0)),
                     num_tuning_cores=workers, seed=0)
    tune_s = time.perf_counter() - t
    for name in funcs:
        sch = ms.tir_integration.compile_tir(db, mod[name], target())
        if sch is None:
            print(json.dumps({"error": f"{name}: no valid schedule after {trials} trials", "tune_s": tune_s}))
            sys.exit(3)
        fn = sch.mod["main"].with_attr("global_symbol", "main")
        compile_tir(tvm.IRModule({"main": fn}), target()).export_library(os.path.join(outdir, name + ".so"))
    measured = sum(1 for _ in db.get_all_tuning_records()) if hasattr(db, "get_all_tuning_records") else None
    print(json.dumps({"tune_s": tune_s, "search": strategy, "measured_candidates": measured}))


def tuning_cache_dir(specs, trials: int, per_iter: int, strategy: str) -> str:
    """The cache entry of one group's tuning: keyed by the operators' shapes, the budget, the search, the target,
    TVM's version and the CPU, so a rerun on this machine loads what was tuned instead of tuning again."""
    import hashlib

    from shared_ir.hostinfo import cpu_id, record_dir

    from .codegen import target
    from .kernel import import_tvm

    key = json.dumps({"specs": [_spec_to_json(s) for s in specs], "trials": trials, "per_iter": per_iter,
                      "strategy": strategy, "target": str(target()), "tvm": import_tvm().__version__,
                      "cpu": cpu_id(), "format": 1}, sort_keys=True)
    return os.path.join(record_dir(), "metaschedule", hashlib.sha256(key.encode()).hexdigest()[:20])


def _load_group(tvm, d: str, specs) -> dict:
    chains = {}
    for i, s in enumerate(specs):
        libs = {op.name: tvm.runtime.load_module(os.path.join(d, f"s{i}_{op.name}.so")) for op in chain_ops(s)}
        chains[s.name] = MetaScheduleChain(libs, s)
    return chains


def _cached_group(tvm, d: str, specs) -> tuple[dict, dict] | None:
    """The group's tuned chains and its record when a complete cache entry exists, else None (an entry that does
    not load is tuned again)."""
    try:
        with open(os.path.join(d, "done.json")) as f:
            rec = json.load(f)
        return _load_group(tvm, d, specs), rec
    except Exception:  # noqa: BLE001 - missing, partial or unloadable: tuned again
        return None


PROGRESS_S = 30.0
"""Seconds between two progress lines of a tuning run (candidates measured so far, read from its database)."""


def _measured_so_far(db_dir: str) -> int:
    """Tuning records MetaSchedule's JSON database holds so far (one line per measured candidate)."""
    try:
        with open(os.path.join(db_dir, "database_tuning_record.json"), "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def _wait_with_progress(p, deadline: float, db_dir: str, total: int, log):
    """(stdout, stderr) of the tuning child, logging the candidates measured every :data:`PROGRESS_S`; None (the
    child's whole session killed) past ``deadline``. Retrying ``communicate`` after its timeout loses no output."""
    import signal

    t0 = time.perf_counter()
    while True:
        left = deadline - time.perf_counter()
        try:
            return p.communicate(timeout=max(0.1, min(PROGRESS_S, left)))
        except subprocess.TimeoutExpired:
            if time.perf_counter() >= deadline:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
                return None
            if log is not None:
                log(f"  MetaSchedule tuning: {_measured_so_far(db_dir)}/{total} candidates measured, "
                    f"{time.perf_counter() - t0:.0f} s")


def _tune_group(specs, trials, timeout_s, per_iter, strategy, workers, log=None):
    from .kernel import import_tvm

    tvm = import_tvm()
    final = tuning_cache_dir(specs, trials, per_iter, strategy)
    hit = _cached_group(tvm, final, specs)
    if hit is not None:
        chains, rec = hit
        return chains, rec["tune_s"], "ok", {"cached": True, "measured_candidates": rec.get("measured_candidates")}
    os.makedirs(os.path.dirname(final), exist_ok=True)
    d = tempfile.mkdtemp(prefix=".tuning-", dir=os.path.dirname(final))
    try:
        t = time.perf_counter()
        # its own session: on timeout the whole group (MetaSchedule's builder/runner workers too) is ended
        p = subprocess.Popen([sys.executable, "-m", "chain_fuser.metaschedule",
                              json.dumps([_spec_to_json(s) for s in specs]), str(trials), d, str(per_iter),
                              strategy, str(workers)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        total = trials * sum(len(chain_ops(s)) for s in specs)
        done = _wait_with_progress(p, t + timeout_s, os.path.join(d, "database"), total, log)
        if done is None:
            return {}, time.perf_counter() - t, f"timed out after {timeout_s:.0f} s ({trials} trials per operator)", {}
        out, err = done
        lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
        if p.returncode != 0 or not lines or "search" not in lines[-1]:
            why = lines[-1].get("error") if lines and "error" in lines[-1] else err[-500:]
            return {}, time.perf_counter() - t, f"failed: {why}", {}
        chains = _load_group(tvm, d, specs)
        with open(os.path.join(d, "done.json"), "w") as f:
            json.dump({**lines[-1], "trials_per_operator": trials, "measured_at": time.time()}, f)
        try:  # publish the whole entry at once: a reader sees a complete entry or none
            os.rename(d, final)
            d = None
        except OSError:  # another process published it first
            pass
        return chains, lines[-1]["tune_s"], "ok", {"cached": False,
                                                   "measured_candidates": lines[-1].get("measured_candidates")}
    finally:
        if d is not None:
            import shutil

            shutil.rmtree(d, ignore_errors=True)


def metaschedule_unfused(specs: list, trials: int, timeout_s: float = 180, per_iter: int = 4,
                         strategy: str = "replay-trace", group_size: int | None = None, workers: int = 1,
                         log=None) -> tuple[dict[str, MetaScheduleChain], list[dict]]:
    """Tune the chains' operators separately (:func:`chain_ops`; no chain fusion: each intermediate goes to
    memory) with MetaSchedule, ``trials`` measured candidates per operator. The chains are tuned in groups of
    ``group_size`` (default: all in one run), each group in a child process under ``timeout_s`` of wall clock.

    Returns ({spec name: callable chain}, [{"names", "status", "tune_s", "cached", "measured_candidates"} per
    group]); a group that fails or times out is reported in its status (the other groups' chains are kept). A group
    tuned before on this machine with the same budget loads from the tuning cache (:func:`tuning_cache_dir`); its
    ``tune_s`` is the tuning time it took then."""
    specs = list(specs)
    size = group_size or max(1, len(specs))
    chains, runs = {}, []
    for g in range(0, len(specs), size):
        group = specs[g:g + size]
        got, secs, note, extra = _tune_group(group, trials, timeout_s, per_iter, strategy, workers, log)
        chains.update(got)
        runs.append({"names": [s.name for s in group], "status": note, "tune_s": secs, **extra})
        if log is not None:
            how = " (from the tuning cache)" if extra.get("cached") else ""
            log(f"MetaSchedule ({trials} trials per operator) {', '.join(s.name for s in group)}: {note}{how}, "
                f"{secs:.0f} s of tuning, {extra.get('measured_candidates')} candidates measured")
    return chains, runs


if __name__ == "__main__":  # one group's tuning in a process of its own (see _tune_group)
    from chain_fuser.metaschedule import _child_main as _main  # the package's module, not a second copy

    _main(sys.argv[1:])
