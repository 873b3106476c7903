"""The model's micro-kernel rates calibrated on this machine: each register-blocked micro kernel the planner offers,
measured on a short cache-resident GEMM chain and on a short 3×3→1×1 conv chain, against what the model predicts.

Why: the model's FMA/load-port arithmetic (``planner.micro_cycles``) is one description for every core; the cores
differ in what it leaves out (how a broadcast from memory issues, the store and address ports, the decoders). On a
Zen 3 (AVX2), one-vector-wide blocks (mr×8) measured 1.6-2.0× slower than two-vector ones (mr×16) on Bert-Base's
chain where the model predicted them within 10-20 % of each other. The ratio measured / predicted per micro kernel,
stored beside the peak record (one per CPU and ISA), scales that kernel's modelled compute time
(:func:`factor`), so the model's ranking of micro kernels is this machine's. Conv chains have factors of their
own: the conv kernel's inner loops (over channels and the window) differ from the GEMM's, and so do the kernels'
rates (Zen 4, YOLO-2: 4×16 measured 13-17 % slower than 8×16 where both calibrate at ×1.07 on the GEMM chain).

``python -m chain_fuser.calibrate`` measures and stores it (about 30 s on 2 cores: one small kernel compiled per
micro kernel and kind, all timed interleaved); the benchmark runs it when no record exists. Without a record every
factor is 1.0.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from .micro_rates import _DISABLED, FORMAT, factor, load, record_path  # noqa: F401  (the record's API)


def calibration_spec(mk, kind: str = "gemm"):
    """A cache-resident, compute-bound chain whose rows and columns the micro kernel divides (no padding), a
    fraction of a millisecond: a GEMM chain of ~2·384·64·(64 + 512) FLOPs, or a 3×3→1×1 conv chain (32 → 64 → 32
    channels rounded up to the kernel's columns, 28 rows of 28 pixels rounded up to its rows)."""
    from .spec import ConvChain, GemmChain

    def up(x: int, m: int) -> int:
        return m * -(-x // m)

    if kind == "conv":
        return ConvChain(1, 32, 28, up(28, mk.mr), up(64, mk.nr), 3, 3, up(32, mk.nr), 1, 1, glue="relu",
                         name=f"calibrate_conv_{mk.name}")
    return GemmChain(1, up(384, mk.mr), 64, 64, 512, name=f"calibrate_{mk.name}")


ROUNDS = 5
"""Interleaved rounds over all calibration kernels (medians): one kernel measured in one stretch moved by 10-25 %
between two calibrations on an idle Zen 4 (5×16: ×1.25 then ×1.52), enough to flip the planner's near ties."""


def _prepare_one(mk, kind: str, dev):
    """(plan, a call of its kernel on random inputs) of ``mk`` on its calibration chain (None: no plan with it)."""
    from .errors import ChainFuserError
    from .kernel import build_kernel, random_inputs
    from .planner import plan_chain

    spec = calibration_spec(mk, kind)
    try:
        plan = plan_chain(spec, dev, top_k=1, micro=mk)[0]
    except ChainFuserError:
        return None
    k, ins = build_kernel(spec, plan, use_cache=False), random_inputs(spec)
    return plan, (lambda: k(*ins))


def calibrate(kernels=None, log=print, save: bool = True, rounds: int = ROUNDS, budget_s: float = 0.03) -> dict:
    """Measure every micro kernel the planner offers on this host (or ``kernels``), on a GEMM and a conv chain,
    all kernels interleaved over ``rounds`` (:func:`chain_fuser.timing.time_interleaved`); store and return the
    record."""
    from shared_ir.atomic import atomic_write_text
    from shared_ir.hostinfo import cpu_id, isa

    from . import hw
    from .planner import MR_CHOICES
    from .timing import time_interleaved

    dev = hw.host_device()
    kernels = kernels or [mk for mk in hw.micro_kernels(dev) if mk.mr in MR_CHOICES]
    t0 = time.perf_counter()
    _DISABLED[0] = True
    try:
        built = {}
        for kind in ("gemm", "conv"):
            for i, mk in enumerate(kernels):
                got = _prepare_one(mk, kind, dev)
                if got is not None:
                    built[(kind, mk.name)] = got
                log(f"  calibrating micro kernels: built {kind} chain {i + 1}/{len(kernels)} ({mk.name})")
        log(f"  calibrating micro kernels: timing {len(built)} kernels interleaved, {rounds} rounds ...")
        ms = time_interleaved({f"{k}/{n}": f for (k, n), (_, f) in built.items()}, rounds, budget_s)
    finally:
        _DISABLED[0] = False
    per: dict[str, dict] = {"gemm": {}, "conv": {}}
    for (kind, name), (plan, _) in built.items():
        s = ms[f"{kind}/{name}"] / 1e3
        per[kind][name] = {"measured_s": s, "predicted_s": plan.predicted_s, "factor": s / plan.predicted_s}
        log(f"  {kind} chain, {name}: measured {s * 1e3:.3f} ms, model {plan.predicted_s * 1e3:.3f} ms "
            f"(×{s / plan.predicted_s:.2f})")
    rec = {"format": FORMAT, "cpu": cpu_id(), "isa": isa(), "seconds": time.perf_counter() - t0, "rounds": rounds,
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "factors": {n: v["factor"] for n, v in per["gemm"].items()},
           "factors_conv": {n: v["factor"] for n, v in per["conv"].items()}, "per_kernel": per}
    if save:
        atomic_write_text(record_path(), json.dumps(rec, indent=1))
    return rec


def ensure(log=print) -> dict:
    """The record, calibrating first when there is none for this CPU and ISA."""
    rec = load()
    if rec is None:
        log("calibrating the model's micro-kernel rates on this machine (once per CPU and ISA) ...")
        rec = calibrate(log=log)
    return rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chain_fuser.calibrate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--show", action="store_true", help="print the stored record instead of measuring")
    a = ap.parse_args(argv)
    if a.show:
        rec = load()
        print(json.dumps(rec, indent=1) if rec else f"no calibration recorded at {record_path()}")
        return 0
    rec = calibrate()
    print(f"stored {record_path()} ({rec['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
