"""Real DyNet as the reference framework: the workloads' DyNet twins (:mod:`dynamic_batcher.dynet_models`) timed
in DyNet itself, inference and a training step, per autobatch strategy.

DyNet reads its autobatch setting once, when ``dynet`` is first imported (``dynet_config.set(autobatch=N)``
before ``import dynet``), so every strategy runs in its own child process::

    python -m dynamic_batcher.dynet_ref time  --workload treelstm --strategy 1 --minibatches 5 --out t.json
    python -m dynamic_batcher.dynet_ref count --workload treelstm --strategy 2 --out c.json
    python -m dynamic_batcher.dynet_ref check --workloads treelstm lattice_lstm --hidden 8 --out c.npz

The strategy numbers are DyNet's own (``BatchedExecutionEngine::incremental_forward_no_update`` in
``dynet/exec.cc``, unchanged since DyNet 2.0.3): 1 = agenda-based (lowest mean depth of a signature first,
unbatchable nodes first), 2 = depth-based (one batch per (depth, signature)), 3 = agenda-based with the depth
constraint (a signature waits while any of its nodes remains at a lower depth); 0 turns autobatching off (one
node at a time). DyNet's flag >99 only times 1..3 on the first forward and keeps the fastest, so timing 1..3
separately and taking the fastest covers it.

The parent side (:func:`measure`) regenerates nothing itself: parent and child both call
:func:`timing_minibatches` (the workload's own instance generator, one seeded stream) and the child returns a
digest of what it ran, which the parent checks against its own; the weights are the workload model's, copied in.
Each timed minibatch is a fresh one (no repeats across rounds); one untimed warm-up minibatch comes first.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
from typing import Any, Sequence

from .errors import BatcherError, ConfigError

STRATEGIES = {1: "agenda", 2: "depth", 3: "agenda_depth"}
"""DyNet's shipped autobatch strategies (``--dynet-autobatch N``), by number."""
NO_AUTOBATCH = 0
TIMING_SEED_OFFSET = 7919
"""The timing minibatches' stream: ``random.Random(seed + TIMING_SEED_OFFSET)``, apart from the training stream."""
TARGET_SEED_OFFSET = 104729
LEARNING_RATE = 0.01  # on the summed loss of ~1000 outputs per minibatch: 0.1 diverges within a few steps
UNAVAILABLE_RC = 3  # the child's exit status when ``import dynet`` fails


# --- what both sides run ---------------------------------------------------------------------------------------------
def timing_minibatches(wl, seed: int, batch: int, n: int) -> list[list]:
    """``n`` distinct minibatches of ``batch`` instances from the workload's generator (index 0: the warm-up)."""
    rng = random.Random(seed + TIMING_SEED_OFFSET)
    return [wl.minibatch(rng, batch) for _ in range(n)]


def minibatch_digest(mbs: Sequence[list]) -> str:
    """A hash of the instances (trees as nested lists/tuples alike), to check two processes ran the same ones."""
    return hashlib.sha1(json.dumps(mbs, separators=(",", ":")).encode()).hexdigest()[:16]


def n_outputs(wl) -> int:
    """Classes of the workload's per-position classifier (the ``out`` layer)."""
    return wl.model.params[f"{wl.model.name}.out.b"].shape[0]


def targets(n: int, n_out: int, seed: int, index: int) -> list[int]:
    """Labels of minibatch ``index``'s ``n`` outputs (in output order) for the training loss."""
    rng = random.Random((seed + TARGET_SEED_OFFSET) * 1_000_003 + index)
    return [rng.randrange(n_out) for _ in range(n)]


def train_step(wl, ops, mb: list, tg, lr: float = LEARNING_RATE) -> float:
    """One SGD step in PyTorch through ``ops`` (a :class:`~dynamic_batcher.Batcher`, or ``None`` for per-instance
    eager PyTorch): forward of every output, loss = -Σ log p(target), backward, ``p -= lr * grad``. ``tg``: the
    labels, or a function of the number of outputs giving them. Parameters that do not require grad are made to.
    Returns the loss."""
    import torch

    from .ir import Eager

    for p in wl.model.params.values():
        p.tensor.requires_grad_(True)
    outs = [o for inst in mb for o in wl.forward(Eager(wl.model) if ops is None else ops, inst)]
    if callable(tg):
        tg = tg(len(outs))
    if len(outs) != len(tg):
        raise BatcherError(f"{wl.name}: training step: {len(outs)} outputs but {len(tg)} targets")
    lp = torch.stack([o.value() for o in outs]) if ops is None else ops.stack(outs)
    loss = -lp.gather(1, torch.tensor(tg, dtype=torch.long)[:, None]).sum()
    loss.backward()
    got = 0
    with torch.no_grad():
        for p in wl.model.params.values():
            if p.tensor.grad is not None:
                p.tensor.sub_(lr * p.tensor.grad)
                p.tensor.grad = None
                got += 1
    if not got:
        raise BatcherError(f"{wl.name}: training step: no gradient reached any parameter")
    return float(loss.detach())


# --- the child process (imports dynet) -----------------------------------------------------------------------------
def _import_dynet(strategy: int, profiling: int = 0):
    """``dynet`` configured for ``strategy`` (must be the process's first import of it); None + reason if absent."""
    try:
        import dynet_config

        dynet_config.set(autobatch=int(strategy), profiling=int(profiling), random_seed=1)
        import dynet as dy
    except Exception as e:  # noqa: BLE001 - an unusable build shows up as any error at import time
        return None, f"import dynet failed: {type(e).__name__}: {e}"
    return dy, None


def dynet_version(dy) -> str:
    """DyNet's version and build, and the wheel that carries it."""
    from importlib import metadata

    wheel = ""
    for dist in ("dyNET38", "dyNET", "dynet"):
        try:
            wheel = f", wheel {dist} {metadata.version(dist)}"
            break
        except metadata.PackageNotFoundError:
            continue
    return f"{getattr(dy, '__version__', '?')} ({getattr(dy, '__gitversion__', '?')}{wheel})"


class _Runner:
    """One workload's DyNet twin in this (child) process: inference and SGD training steps on minibatches."""

    def __init__(self, dy, name: str, hidden: int, seed: int, lr: float):
        from .dynet_models import DynetModel
        from .workloads import make_workload

        self.dy = dy
        self.wl = make_workload(name, hidden=hidden, seed=seed)
        self.m = DynetModel(dy, self.wl)
        self.trainer = dy.SimpleSGDTrainer(self.m.pc, learning_rate=lr)
        self.trainer.set_clip_threshold(0.0)  # DyNet clips gradients at 5 by default: off, as in PyTorch
        self.n_out, self.seed = n_outputs(self.wl), seed

    def build(self, mb: list) -> list:
        self.dy.renew_cg()
        self.m.begin()
        return [o for inst in mb for o in self.m.forward(inst)]

    def infer(self, mb: list) -> int:
        """Forward of every output: DyNet computes every node up to the last one in one (autobatched) pass."""
        outs = self.build(mb)
        self.dy.forward(outs)
        return len(outs)

    def train(self, mb: list, index: int) -> float:
        outs = self.build(mb)
        tg = targets(len(outs), self.n_out, self.seed, index)
        loss = -self.dy.esum([self.dy.pick(o, y) for o, y in zip(outs, tg)])
        v = loss.value()
        loss.backward()
        self.trainer.update()
        return v


def _child_time(dy, a) -> dict[str, Any]:
    """Warm-up on minibatch 0, then each later minibatch timed once (wall and CPU), inference then training."""
    import gc

    from shared_ir.benchkit import Timing, time_call

    r = _Runner(dy, a.workload, a.hidden, a.seed, a.lr)
    mbs = timing_minibatches(r.wl, a.seed, a.batch, a.minibatches + 1)
    out: dict[str, Any] = {"digest": minibatch_digest(mbs)}
    for phase, fn in (("inference", lambda mb, k: r.infer(mb)), ("train", r.train)):
        if phase == "train" and not a.train:
            continue
        fn(mbs[0], 0)
        t = Timing()
        for k, mb in enumerate(mbs[1:], start=1):
            gc.collect()
            t.add(*time_call(fn, mb, k))
        out[phase] = t.as_dict()
        if phase == "train":
            out["train_losses"] = [float(v) for v in t.values]
    return out


def _child_count(dy, a) -> dict[str, Any]:
    """DyNet's own batch count: with profiling level 2 its engine prints one ``BatchSize:`` line per batch (to
    C++ stdout, read by the parent); here only the inference forward of timing minibatch 1 runs."""
    r = _Runner(dy, a.workload, a.hidden, a.seed, a.lr)
    mbs = timing_minibatches(r.wl, a.seed, a.batch, 2)
    sys.stdout.flush()
    print("@@dynet_ref count begin", flush=True)
    outs = r.infer(mbs[1])
    return {"digest": minibatch_digest(mbs), "outputs": outs}


def _child_check(dy, a) -> dict[str, Any]:
    """Outputs and the weights after one SGD step, per workload, on a small minibatch (for the agreement test)."""
    import numpy as np

    arrays: dict[str, Any] = {}
    meta: dict[str, Any] = {}
    for name in a.workloads:
        r = _Runner(dy, name, a.hidden, a.seed, a.lr)
        mb = check_minibatch(r.wl, a.seed, a.batch, a.length)
        outs = r.build(mb)
        arrays[f"{name}/out"] = np.stack([o.npvalue() for o in outs])
        arrays[f"{name}/loss"] = np.array(r.train(mb, 0))
        for k, v in r.m.values().items():
            arrays[f"{name}/param/{k}"] = v
        meta[name] = {"sources": r.m.sources, "digest": minibatch_digest([mb])}
    np.savez(a.out, **arrays)
    return meta


def check_minibatch(wl, seed: int, batch: int, length: int | None) -> list:
    """The small minibatch of the agreement check (the workload's generator, its own stream)."""
    return wl.minibatch(random.Random(seed + 31), batch, length)


def _child_parser() -> argparse.ArgumentParser:
    from .workloads import FAMILIES

    ap = argparse.ArgumentParser(prog="python -m dynamic_batcher.dynet_ref",
                                 description="time / count / check a workload's DyNet twin (one strategy)")
    ap.add_argument("mode", choices=("time", "count", "check"))
    ap.add_argument("--workload", choices=list(FAMILIES), default="treelstm")
    ap.add_argument("--workloads", nargs="*", choices=list(FAMILIES), default=[])
    ap.add_argument("--strategy", type=int, default=1, choices=[NO_AUTOBATCH, *STRATEGIES])
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--minibatches", type=int, default=5, help="timed minibatches (after one warm-up)")
    ap.add_argument("--length", type=int, default=None, help="check: instance size (tokens/leaves/chars)")
    ap.add_argument("--train", action="store_true", help="time: also time SGD training steps")
    ap.add_argument("--lr", type=float, default=LEARNING_RATE)
    ap.add_argument("--out", required=True, help="JSON (time, count) or .npz (check) to write")
    return ap


def child_main(argv: list[str] | None = None) -> int:
    a = _child_parser().parse_args(argv)
    dy, reason = _import_dynet(a.strategy, profiling=2 if a.mode == "count" else 0)
    meta_path = a.out + ".json" if a.mode == "check" else a.out
    if dy is None:
        _write(meta_path, {"unavailable": reason})
        return UNAVAILABLE_RC
    import torch

    torch.set_num_threads(1)
    res = {"check": _child_check, "time": _child_time, "count": _child_count}[a.mode](dy, a)
    _write(meta_path, {"dynet_version": dynet_version(dy), "strategy": a.strategy, "result": res})
    return 0


def _write(path: str, doc: Any) -> None:
    from shared_ir import atomic_write_text

    atomic_write_text(path, json.dumps(doc))


# --- the parent side -----------------------------------------------------------------------------------------------
def _child_env() -> dict[str, str]:
    """One thread everywhere (DyNet's Eigen, torch, BLAS), and this checkout importable."""
    import shared_ir

    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[k] = "1"
    roots = [os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
             os.path.dirname(os.path.dirname(os.path.abspath(shared_ir.__file__)))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(roots + [p for p in env.get("PYTHONPATH", "").split(
        os.pathsep) if p]))
    return env


class DynetUnavailable(BatcherError):
    """``import dynet`` fails in the child (not installed, or an unusable build); ``reason`` says why."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(f"DyNet unavailable: {reason}")


def run_child(args: list[str], timeout: float = 900.0) -> tuple[dict[str, Any], str]:
    """Run ``python -m dynamic_batcher.dynet_ref <args> --out TMP``: (its JSON record, its stdout)."""
    with tempfile.TemporaryDirectory(prefix="dynet_ref-") as d:
        out = os.path.join(d, "out.npz" if args[0] == "check" else "out.json")
        cmd = [sys.executable, "-m", "dynamic_batcher.dynet_ref", *args, "--out", out]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_child_env())
        except subprocess.TimeoutExpired as e:
            raise BatcherError(f"dynet_ref {' '.join(args)}: no result within {timeout:.0f} s") from e
        meta = out + ".json" if args[0] == "check" else out
        doc = json.load(open(meta)) if os.path.exists(meta) else None
        if p.returncode == UNAVAILABLE_RC and doc and "unavailable" in doc:
            raise DynetUnavailable(doc["unavailable"])
        if p.returncode != 0 or doc is None:
            tail = (p.stderr or p.stdout).strip().splitlines()[-5:]
            raise BatcherError(f"dynet_ref {' '.join(args)}: exit status {p.returncode}: " + " | ".join(tail))
        if args[0] == "check":
            import numpy as np

            with np.load(out) as z:
                doc["arrays"] = {k: z[k] for k in z.files}
        return doc, p.stdout


def _count_batches(stdout: str) -> int:
    """``BatchSize:`` lines DyNet printed after the child's marker (the inference forward of one minibatch)."""
    _, _, after = stdout.partition("@@dynet_ref count begin")
    return sum(1 for line in after.splitlines() if line.startswith("BatchSize:"))


def measure(name: str, hidden: int, seed: int, batch: int, minibatches: int, digest: str,
            strategies: Sequence[int] = tuple(STRATEGIES), train: bool = True, counts: bool = False,
            clock: str = "cpu", timeout: float = 900.0) -> dict[str, Any]:
    """Real DyNet on ``minibatches`` fresh minibatches per strategy (each in its own process): medians of wall
    and CPU seconds per minibatch, inference and training step; the best strategy on ``clock``; DyNet's own
    batch counts when ``counts``. ``digest`` is the parent's :func:`minibatch_digest` of the same minibatches
    (checked). Raises :class:`DynetUnavailable` when DyNet cannot be imported."""
    from shared_ir.benchkit import median

    if clock not in ("cpu", "wall"):
        raise ConfigError("clock", f"one of 'cpu', 'wall', got {clock!r}")
    base = ["--workload", name, "--hidden", str(hidden), "--seed", str(seed), "--batch", str(batch)]
    res: dict[str, Any] = {"strategies": {}, "clock": clock, "minibatches": minibatches}
    for s in strategies:
        try:
            doc, _ = run_child(["time", *base, "--strategy", str(s), "--minibatches", str(minibatches)]
                               + (["--train"] if train else []), timeout)
        except DynetUnavailable:
            raise
        except BatcherError as e:  # a strategy that crashes DyNet (seen: a segfault) is reported, not fatal
            res["strategies"][STRATEGIES.get(s, "no_autobatch")] = {"number": s, "error": str(e)}
            continue
        r = doc["result"]
        if r["digest"] != digest:
            raise BatcherError(f"dynet_ref {name}: the child ran other minibatches (digest {r['digest']} != "
                               f"{digest}): the instance generator is not deterministic")
        res["dynet_version"] = doc["dynet_version"]
        row = {"number": s, "inference_ms": {c: round(1e3 * median(r["inference"][f"all_{c}_s"]), 3)
                                             for c in ("wall", "cpu")},
               "inference_all_s": {c: r["inference"][f"all_{c}_s"] for c in ("wall", "cpu")}}
        if train:
            row["train_ms"] = {c: round(1e3 * median(r["train"][f"all_{c}_s"]), 3) for c in ("wall", "cpu")}
            row["train_all_s"] = {c: r["train"][f"all_{c}_s"] for c in ("wall", "cpu")}
            row["train_losses"] = r["train_losses"]
        if counts:
            cdoc, out = run_child(["count", *base, "--strategy", str(s)], timeout)
            row["batches"] = _count_batches(out)
            row["outputs"] = cdoc["result"]["outputs"]
        res["strategies"][STRATEGIES.get(s, "no_autobatch")] = row
    shipped = {k: v for k, v in res["strategies"].items() if v["number"] in STRATEGIES and "error" not in v}
    if shipped:
        res["best_strategy"] = min(shipped, key=lambda k: shipped[k]["inference_ms"][clock])
        if train:
            res["best_train_strategy"] = min(shipped, key=lambda k: shipped[k]["train_ms"][clock])
    return res


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
