"""``python -m fusion_perf.bench [--scale small|full]`` → ``results/bench-fusion_perf.json``.

Keys: ``exact_fraction`` and ``n_random_mappings`` (random trees over GEMM chains and convolutions whose
per-level, per-tensor counts equal the trace simulator's — the simulator lives in the test code,
``tests/test_fusion_perf/simulator.py``), ``us_per_eval`` (median µs of one fused-attention evaluation through the
public API), ``evals_per_s_batched`` (one vectorised call over many factor assignments of one tree shape), and
``attention_dse``: for the nine Bert/ViT attention shapes on edge_accel and cloud_accel, the best searched
dataflow's cycles against layer-by-layer and against the FLAT-like template (geomean ratios).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time

import numpy as np

# Search budget per template (the same for every template, FLAT-like and layer-by-layer included): MCTS
# iterations split over ``restarts`` seeded runs, ``rollouts`` completions per iteration, local search from
# ``top_k`` diverse starts (fusion_perf.dse.DSE_SEARCH).
# cloud_accel's trees have a fourth level (about 60 free variables, twice edge's local-search cost per start),
# so the small scale refines fewer starts there, without kicks; within an arch every template gets the same budget.
SCALES = {"small": {"n_random": 600, "iterations": 40, "rollouts": 256, "restarts": 4, "top_k": 24,
                    "kicks": 2, "per_arch": {"cloud_accel": {"top_k": 8, "kicks": 0}}},
          "full": {"n_random": 2000, "iterations": 160, "rollouts": 256, "restarts": 8, "top_k": 64, "kicks": 4,
                   "per_arch": {}}}


TESTS_REL = os.path.join("tests", "test_fusion_perf")


def _simulator():
    """The trace simulator and random-tree generator from the checkout's ``tests/test_fusion_perf`` (the issue puts
    the simulator in the test code). Looked up next to this package's source (editable install / repo checkout),
    then under the current directory; loaded by file path so that an unrelated installed ``tests`` package cannot
    shadow it. Returns None (with the reason) when no checkout with those tests is found."""
    import importlib.util

    here = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    tried = []
    for root in dict.fromkeys([here, os.getcwd()]):
        d = os.path.join(root, TESTS_REL)
        tried.append(d)
        if not (os.path.isfile(os.path.join(d, "simulator.py")) and os.path.isfile(os.path.join(d, "randtree.py"))):
            continue
        mods = {}
        for name in ("simulator", "randtree"):
            spec = importlib.util.spec_from_file_location(f"_fusion_perf_bench_{name}", os.path.join(d, f"{name}.py"))
            m = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(m)
            mods[name] = m
        r = mods["randtree"]
        return (r.make_arch, r.random_problem, r.random_tree, mods["simulator"].simulate), d
    return None, f"no {TESTS_REL}/simulator.py in {' or '.join(tried)} (run from a repository checkout)"


def bench_exact(n: int, seed0: int = 10_000) -> dict:
    from .model import compile_tree, tree_factors

    sim, where = _simulator()
    if sim is None:
        print(f"  EXACTNESS NOT CHECKED: the trace simulator lives in the repository's tests and is unavailable: "
              f"{where}", flush=True)
        return {"exact_fraction": None, "n_random_mappings": 0, "exactness_unavailable": where}
    make_arch, random_problem, random_tree, simulate = sim
    ok, bad = 0, []
    t = time.perf_counter()
    for s in range(seed0, seed0 + n):
        rng = random.Random(s)
        prob = random_problem(rng)
        tree = random_tree(rng, prob)
        c = compile_tree(prob, make_arch(), tree)
        x = tree_factors(tree)
        if c.evaluate(x, check=False).counts() == simulate(c, x):
            ok += 1
        else:
            bad.append(s)
    return {"exact_fraction": ok / n, "n_random_mappings": n, "inexact_seeds": bad[:20],
            "exact_check_s": time.perf_counter() - t, "simulator": os.path.relpath(where)}


def attention_tree():
    from .mapping import OpLeaf, S, Scope, T

    return T("dram", "b=12 m=16 l=4", Scope("sequential", [
        T("l1", "m=2 l=2 k=4", S("l1", "m=16 l=16", T("l1", "l=4 k=16", T("l0", "k=1", OpLeaf("QK"))), split=1)),
        T("l1", "m=2 l=2", S("l1", "m=16 l=16", T("l1", "l=4", T("l0", "l=1", OpLeaf("Softmax"))), split=1)),
        T("l1", "m=2 n=4 l=2", S("l1", "m=16 n=16", T("l1", "l=64", T("l0", "l=1", OpLeaf("PV"))), split=1))]),
        bypass=["S", "P"])


def bench_speed(repeats: int = 7) -> dict:
    from .arch import load_arch
    from .model import compile_tree, evaluate
    from .problem import attention
    from .search import FactorSpace, template

    p = attention(12, 512, 64, 512, 64)
    arch = load_arch("edge_accel")
    tree = attention_tree()
    for _ in range(20):
        evaluate(p, arch, tree)
    per = []
    for _ in range(repeats):
        n = 200
        t = time.perf_counter()
        for _ in range(n):
            evaluate(p, arch, tree)
        per.append((time.perf_counter() - t) / n * 1e6)
    tf = template(p, arch, "tileflow")
    c = compile_tree(p, arch, tf)
    X = FactorSpace(c).complete(np.random.default_rng(0), 20000)
    c.evaluate(X[:100], batched=True)
    rates = []
    for _ in range(3):
        t = time.perf_counter()
        br = c.evaluate(X, batched=True)
        rates.append(len(X) / (time.perf_counter() - t))
    return {"us_per_eval": statistics.median(per), "evals_per_s_batched": statistics.median(rates),
            "batched_feasible_fraction": float(br.feasible.mean()), "batch_size": len(X)}


def bench_dse(budget: dict, archs=("edge_accel", "cloud_accel"), shapes=None) -> dict:
    from .dse import ATTENTION_SHAPES, attention_problem, compare, geomean

    out = {}
    for a in archs:
        rows = []
        for sh in ATTENTION_SHAPES:
            if shapes and sh[0] not in shapes:
                continue
            kw = {**{k: v for k, v in budget.items() if k != "per_arch"}, **budget.get("per_arch", {}).get(a, {})}
            r = compare(attention_problem(sh), a, **kw)
            rows.append({"shape": sh[0], "best": r["best"], "best_structure": r["best_structure"],
                         "cycles": r["cycles"], "speedup_vs_layerwise": r.get("speedup_vs_layerwise"),
                         "speedup_vs_flat": r.get("speedup_vs_flat"),
                         "compute_bound_cycles": r["compute_bound_cycles"], "search_s": r["search_s"],
                         "evaluations_per_template": r["evaluations_per_template"]})
            print(f"  {a:12} {sh[0]:13} best {r['best']:9} {r['best_cycles']:12.4g} cycles  "
                  f"vs layerwise {r.get('speedup_vs_layerwise', float('nan')):5.2f}x  "
                  f"vs FLAT {r.get('speedup_vs_flat', float('nan')):5.2f}x  ({r['search_s']:.1f}s, "
                  f"{min(r['evaluations_per_template'].values())}-{max(r['evaluations_per_template'].values())} "
                  f"evals/template)  {r['best_structure']}", flush=True)
        out[a] = {"geomean_speedup_vs_layerwise": geomean([x["speedup_vs_layerwise"] for x in rows]),
                  "geomean_speedup_vs_flat": geomean([x["speedup_vs_flat"] for x in rows]),
                  "budget_per_template": r["budget"], "shapes": rows}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fusion_perf.bench", description=__doc__)
    ap.add_argument("--scale", choices=list(SCALES), default="small")
    ap.add_argument("--out", default="results/bench-fusion_perf.json")
    ap.add_argument("--shapes", nargs="*", default=None, help="attention shapes to run (default: all nine)")
    a = ap.parse_args(argv)
    sc = SCALES[a.scale]
    t0 = time.perf_counter()
    res: dict = {"scale": a.scale}
    print(f"exactness: {sc['n_random']} random trees vs the trace simulator ...", flush=True)
    res.update(bench_exact(sc["n_random"]))
    if res["exact_fraction"] is not None:
        print(f"  exact_fraction {res['exact_fraction']:.4f} of {res['n_random_mappings']}", flush=True)
    res.update(bench_speed())
    print(f"speed: {res['us_per_eval']:.0f} us per fused attention evaluation (target < 1000), "
          f"{res['evals_per_s_batched']:.0f} evals/s batched (target > 10000)", flush=True)
    print("attention DSE (every template searched; ratios = template cycles / best cycles):", flush=True)
    budget = {k: v for k, v in sc.items() if k != "n_random"}
    res["attention_dse"] = bench_dse(budget, shapes=a.shapes)
    res["wall_s"] = time.perf_counter() - t0
    print("\nsummary")
    if res["exact_fraction"] is None:
        print(f"  exact_fraction        NOT CHECKED ({res['exactness_unavailable']})")
    else:
        print(f"  exact_fraction        {res['exact_fraction']:.4f}  ({res['n_random_mappings']} mappings)")
    print(f"  us_per_eval           {res['us_per_eval']:.0f}")
    print(f"  evals_per_s_batched   {res['evals_per_s_batched']:.0f}")
    for k, v in res["attention_dse"].items():
        print(f"  {k:12} geomean best vs layerwise {v['geomean_speedup_vs_layerwise']:.2f}x, "
              f"vs FLAT-like {v['geomean_speedup_vs_flat']:.2f}x")
    from shared_ir import atomic_write_text

    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    atomic_write_text(a.out, json.dumps(res, indent=2, default=float))
    print(f"wrote {a.out} ({res['wall_s']:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
