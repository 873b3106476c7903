"""How far the model's first pick is from the best of its top K, measured so that a shared machine cannot decide it:
``python -m chain_fuser.pickcheck [--scale small|full] [--only NAMES] [--out PATH]``.

Every candidate runs on one thread (TVM's pool and torch's set to 1 before they load) and is timed in CPU time
(other processes' time slices are not counted), the minimum over interleaved repeats. The benchmark's own
``model_pick_vs_best_measured`` uses the same candidates at full thread count in wall clock, which on a loaded
2-core machine is mostly noise. Writes a JSON with every candidate's predicted and measured time.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def run(scale: str = "small", top_k: int = 4, repeat: int = 7, only: list[str] | None = None,
        out: str | None = None, log=print) -> dict:
    import torch

    from shared_ir import atomic_write_text

    from .bench import shapes
    from .kernel import build_kernel, random_inputs
    from .planner import plan_chain

    torch.set_num_threads(1)
    rows = {}
    load_start = os.getloadavg()
    for it in shapes(scale):
        if only and it["name"] not in only and it["suite"] not in only:
            continue
        spec = it["spec"]
        plans = plan_chain(spec, top_k=top_k)
        ins = random_inputs(spec)
        ks = [build_kernel(spec, p) for p in plans]
        t = time.perf_counter()
        for k in ks:
            k(*ins)  # warm-up
        n = max(1, min(3, int(0.05 / max(1e-6, (time.perf_counter() - t) / len(ks)))))
        runs: list[list[float]] = [[] for _ in ks]
        for _ in range(repeat):
            for i, k in enumerate(ks):  # interleaved: a load change hits every candidate
                c = time.process_time()
                for _ in range(n):
                    k(*ins)
                runs[i].append((time.process_time() - c) / n * 1e3)
        best = [min(r) for r in runs]
        ratio = best[0] / min(best)
        rows[it["name"]] = {"suite": it["suite"], "pick_vs_best": ratio, "cpu_ms": best,
                            "predicted_ms": [p.predicted_s * 1e3 for p in plans],
                            "plans": [{"micro": p.micro.name, "level": p.fusion_level, "order": list(p.signature[0]),
                                       "tiles": dict(p.signature[1])} for p in plans]}
        log(f"{it['name']:20s} first pick / best of {len(plans)}: ×{ratio:.3f}   CPU ms " +
            " ".join(f"{x:.3f}" for x in best))
    ratios = [r["pick_vs_best"] for r in rows.values()]
    res = {"scale": scale, "top_k": top_k, "threads": 1, "timing": f"CPU time, min of {repeat} interleaved repeats",
           "within_10_percent": sum(r <= 1.10 for r in ratios), "shapes": len(ratios),
           "max": max(ratios, default=None), "load_avg_start": list(load_start),
           "load_avg_end": list(os.getloadavg()), "per_shape": rows}
    log(f"within 10 %: {res['within_10_percent']}/{res['shapes']}, max ×{res['max']:.3f}" if ratios else "no shapes")
    if out:
        atomic_write_text(out, json.dumps(res, indent=1))
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chain_fuser.pickcheck", description=__doc__.split("\n")[0])
    ap.add_argument("--scale", choices=["small", "full"], default="small")
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--out", default="results/pickcheck-chain_fuser.json")
    a = ap.parse_args(argv)
    os.environ["TVM_NUM_THREADS"] = "1"  # before TVM creates its pool
    run(a.scale, a.top_k, a.repeat, a.only, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
