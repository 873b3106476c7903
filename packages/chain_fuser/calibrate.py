"""The model's micro-kernel rates calibrated on this machine: each register-blocked micro kernel the planner offers,
measured on a short cache-resident GEMM chain, against what the model predicts for it.

Why: the model's FMA/load-port arithmetic (``planner.micro_cycles``) is one description for every core; the cores
differ in what it leaves out (how a broadcast from memory issues, the store and address ports, the decoders). On a
Zen 3 (AVX2), one-vector-wide blocks (mr×8) measured 1.6-2.0× slower than two-vector ones (mr×16) on Bert-Base's
chain where the model predicted them within 10-20 % of each other. The ratio measured / predicted per micro kernel,
stored beside the peak record (one per CPU and ISA), scales that kernel's modelled compute time
(:func:`factor`), so the model's ranking of micro kernels is this machine's.

``python -m chain_fuser.calibrate`` measures and stores it (about 20-40 s: one small kernel compiled and timed per
micro kernel); the benchmark runs it when no record exists. Without a record every factor is 1.0.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from .micro_rates import _DISABLED, FORMAT, factor, load, record_path  # noqa: F401  (the record's API)


def calibration_spec(mk):
    """A cache-resident, compute-bound GEMM chain whose rows and columns the micro kernel divides (no padding):
    ~2·384·64·(64 + 512) FLOPs, a fraction of a millisecond."""
    from .spec import GemmChain

    m = mk.mr * -(-384 // mk.mr)
    return GemmChain(1, m, 64, 64, 512, name=f"calibrate_{mk.name}")


def _measure(fn, budget_s: float = 0.15) -> float:
    """Median seconds of ``fn`` over ``budget_s`` of calls after warm-up."""
    for _ in range(3):
        fn()
    ts = []
    end = time.perf_counter() + budget_s
    while time.perf_counter() < end or len(ts) < 11:
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[len(ts) // 2]


def calibrate(kernels=None, log=print, save: bool = True) -> dict:
    """Measure every micro kernel the planner offers on this host (or ``kernels``), store and return the record."""
    from shared_ir.atomic import atomic_write_text
    from shared_ir.hostinfo import cpu_id, isa

    from . import hw
    from .kernel import build_kernel, random_inputs
    from .planner import MR_CHOICES, plan_chain

    dev = hw.host_device()
    kernels = kernels or [mk for mk in hw.micro_kernels(dev) if mk.mr in MR_CHOICES]
    per, t0 = {}, time.perf_counter()
    _DISABLED[0] = True
    try:
        for i, mk in enumerate(kernels):
            spec = calibration_spec(mk)
            plan = plan_chain(spec, dev, top_k=1, micro=mk)[0]
            k = build_kernel(spec, plan, use_cache=False)
            ins = random_inputs(spec)
            s = _measure(lambda: k(*ins))
            per[mk.name] = {"measured_s": s, "predicted_s": plan.predicted_s, "factor": s / plan.predicted_s}
            log(f"  calibrating micro kernels {i + 1}/{len(kernels)}: {mk.name} measured {s * 1e3:.3f} ms, "
                f"model {plan.predicted_s * 1e3:.3f} ms (×{s / plan.predicted_s:.2f})")
    finally:
        _DISABLED[0] = False
    rec = {"format": FORMAT, "cpu": cpu_id(), "isa": isa(), "seconds": time.perf_counter() - t0,
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "factors": {n: v["factor"] for n, v in per.items()}, "per_kernel": per}
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
