"""``python -m fusion_perf.bench [--scale small|full] [--jobs N]`` → ``results/bench-fusion_perf.json``.

Keys: ``exact_fraction`` and ``n_random_mappings`` (random trees over GEMM chains, convolutions incl. 3x3→3x3
chains, attention; per-level, per-tensor counts equal to the trace simulator's, ``fusion_perf.tracesim``),
``us_per_eval`` (median µs of one fused-attention evaluation through the public API),
``evals_per_s_batched`` (one vectorised call over many factor assignments of one tree shape),
``attention_dse``: for the nine Bert/ViT attention shapes on edge_accel and cloud_accel, the best searched
dataflow's cycles against layer-by-layer, FLAT at head granularity (``flat_hgran``, the baseline of the reference's
1.8x, laid out as TileFlow's published FLAT mapping: heads over the buffer instances), a stronger FLAT-HGran whose
head rows are split over the instances (``flat_hgran_split``) and FLAT at row granularity (``flat_rgran``), per
shape and as geomeans; ``seed_spread`` (max over a subset
of shapes of (max − min)/min of the best cycles over seeds); ``conv_chain`` (``geomean_vs_fused_layer``: best fused
dataflow vs the Fused-Layer structure on 3x3→1x1, 3x3→3x3 and 1x1→3x3 conv chains); ``wall_s``, ``cpu_s``,
``load_average`` and what the small scale reduces (``reduced``). Against the reference's own tools, on TileFlow's
validation inputs (``fusion_perf.validation``; the points of ``../shared/reference/fusion_perf_validation/`` when
present, else the copies in ``examples/validation``): ``timeloop_cycles_equal_fraction`` (single-GEMM mappings
whose cycles equal Timeloop's exactly), ``timeloop_energy_max_rel_err`` (worst energy error against Timeloop's),
``tileflow_fused_cycles_max_rel_err`` (worst cycle error of the fused GEMM→GEMM mappings against TileFlow's),
with the point counts and sources under ``validation``; ``tileflow_rules_cycles_equal_fraction`` and
``tileflow_rules_energy_max_rel_err`` (every point of both CSVs under TileFlow's own analysis, ``semantics:
tileflow``, against the cycles and energy TileFlow printed); ``tileflow_result_csvs``: TileFlow's own test cases
that ship result CSVs replayed with the factors its mapper printed under the rules of the commit that wrote them
(:mod:`fusion_perf.tileflow_cases`), cycles, energy and per-level per-tensor counts side by side;
``attention_dse_tileflow_files`` / ``conv_chain_tileflow_files``: the DSE on TileFlow's own test-case files
(:mod:`fusion_perf.tileflow_dse`, best vs the strongest FLAT / Fused-Layer), its mapper's picks replayed and the DSE
against its mapper per file; ``attention_dse.edge_accel.geomean_vs_strongest_flat`` is the first's edge figure.
"""
from __future__ import annotations

import math
import os
import random
import resource
import sys
import time

import numpy as np

# Search budget per template (the same for every template, FLAT-like and layer-by-layer included): MCTS
# iterations split over ``restarts`` seeded runs, ``rollouts`` completions per iteration, local search from
# ``top_k`` diverse starts (fusion_perf.dse.DSE_SEARCH).
# cloud_accel's trees have a fourth level (about 60 free variables, twice edge's local-search cost per start),
# so the small scale refines fewer starts there, without kicks; within an arch every template gets the same budget.
SCALES = {"small": {"n_random": 600, "iterations": 24, "rollouts": 256, "restarts": 4, "top_k": 8, "kicks": 1,
                    "sweep": 4, "per_arch": {"cloud_accel": {"top_k": 4, "kicks": 0, "sweep": 2}},
                    "tileflow_files": {"attention": {"archs": ["edge"], "budget": {}},
                                       "conv": {"archs": ["cloud"], "budget": {}}},
                    "seed_spread": {"seeds": [0, 1], "archs": ["edge_accel", "cloud_accel"],
                                    "shapes": {"edge_accel": ["ViT-Base/14", "ViT-Huge/14", "ViT-Large/16",
                                                              "ViT-Huge/16"],
                                               "cloud_accel": ["Bert-Base", "ViT-Huge/14"]}}},
          "full": {"n_random": 2000, "iterations": 160, "rollouts": 256, "restarts": 8, "top_k": 64, "kicks": 4,
                   "sweep": 8, "per_arch": {},
                   "tileflow_files": {c: {"archs": a, "budget": {"iterations": 32, "top_k": 8, "refine_sweeps": 8}}
                                      for c, a in (("attention", ["edge", "cloud"]), ("conv", ["cloud"]))},
                   "seed_spread": {"seeds": [0, 1, 2], "archs": ["edge_accel", "cloud_accel"],
                                   "shapes": ["Bert-Small", "Bert-Base", "Bert-Large", "ViT-Base/14", "ViT-Large/14",
                                              "ViT-Huge/14", "ViT-Base/16", "ViT-Large/16", "ViT-Huge/16"]}}}
# what the small scale reduces against full (stated in the JSON): fewer random trees for exactness, a smaller
# MCTS/local-search budget per template (the same for every template), the seed spread over 2 seeds on a subset
# of shapes; the DSE runs on 2 worker processes
REDUCED = {"small": "exactness on 600 random trees (full: 2000); per template 24 MCTS iterations x 256 rollouts over "
                    "4 restarts, local search from 8 starts with 1 kick, block sweeps refining 4 (full: 160 "
                    "iterations, 8 restarts, 64 starts, 4 kicks, sweeps refining 8); cloud_accel 4 starts, no "
                    "kicks, sweeps refining 2; seed_spread over seeds 0 and 1 on 4 edge_accel and 2 cloud_accel "
                    "shapes (full: 3 seeds, all shapes, both archs)", "full": ""}


def bench_exact(n: int, seed0: int = 10_000) -> dict:
    from .model import compile_tree, tree_factors
    from .randtree import make_arch, random_problem, random_tree
    from .tracesim import simulate

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
            "exact_check_s": time.perf_counter() - t, "simulator": "fusion_perf.tracesim"}


def bench_validation() -> dict:
    """The reference's validation points (single GEMM vs Timeloop, fused GEMM→GEMM vs TileFlow)."""
    from .validation import compare

    v = compare()
    from .tileflow_cases import replay_all

    keys = ("timeloop_cycles_equal_fraction", "timeloop_energy_max_rel_err", "tileflow_fused_cycles_max_rel_err",
            "tileflow_rules_cycles_equal_fraction", "tileflow_rules_energy_max_rel_err")
    return {**{k: v[k] for k in keys}, "validation": {k: x for k, x in v.items() if k not in keys},
            "tileflow_result_csvs": replay_all()}


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
    from shared_ir.benchkit import do_bench

    one = do_bench(lambda: evaluate(p, arch, tree), warmup=20, repeats=repeats, inner=200)
    tf = template(p, arch, "tileflow")
    c = compile_tree(p, arch, tf)
    X = FactorSpace(c).complete(np.random.default_rng(0), 20000)
    c.evaluate(X[:100], batched=True)
    batched = do_bench(lambda: c.evaluate(X, batched=True), warmup=0, repeats=3)
    br = batched.values[-1]
    return {"us_per_eval": one.wall * 1e6, "evals_per_s_batched": len(X) / batched.wall,
            "batched_feasible_fraction": float(br.feasible.mean()), "batch_size": len(X)}


def _job(job: tuple) -> dict:
    """One DSE comparison (run in a worker process): ``(kind, arch, shape, seed, budget)``."""
    from .dse import attention_problem, compare, conv_problem

    kind, arch, sh, seed, kw = job
    prob = attention_problem(sh) if kind == "attention" else conv_problem(sh)
    t = time.process_time()
    r = compare(prob, arch, seed=seed, **kw)
    keep = ("best", "best_cycles", "best_structure", "cycles", "compute_bound_cycles", "search_s", "variants",
            "evaluations_per_template", "budget", "best_fused", "best_fused_cycles")
    out = {k: r[k] for k in keep if k in r}
    out.update({k: v for k, v in r.items() if k.startswith("speedup_vs_")})
    out["cpu_s"] = time.process_time() - t
    return out


def _run_jobs(jobs: list, workers: int) -> list:
    """Each DSE comparison is independent (search quality, not a timing): spread them over ``workers``
    processes (fork; 1 = in this process). Results come back in job order."""
    if workers <= 1:
        return [_job(j) for j in jobs]
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    # numpy in each worker single-threaded, so two workers use two cores
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) as ex:
        return list(ex.map(_job, jobs))


def _budget(budget: dict, arch: str) -> dict:
    keys = ("iterations", "rollouts", "restarts", "top_k", "kicks", "sweep")
    return {**{k: budget[k] for k in keys if k in budget}, **budget.get("per_arch", {}).get(arch, {})}


def _fmt(v) -> str:
    return f"{v:5.2f}x" if v is not None and v == v else "  n/a"


def bench_dse(budget: dict, archs=("edge_accel", "cloud_accel"), shapes=None, workers: int = 2) -> dict:
    """Attention DSE (every template, same budget), the seed spread of the best found, and the conv-chain DSE.
    Returns {"attention_dse": ..., "seed_spread": ..., "conv_chain": ...}."""
    from .dse import ATTENTION_SHAPES, CONV_SHAPES, FUSED_LAYER, geomean

    att = [sh for sh in ATTENTION_SHAPES if not shapes or sh[0] in shapes]
    jobs = [("attention", a, sh, 0, _budget(budget, a)) for a in archs for sh in att]
    sp = budget["seed_spread"]

    def sp_shapes(a):  # the spread subset of one arch (a list, or {arch: list})
        names = sp["shapes"].get(a, []) if isinstance(sp["shapes"], dict) else sp["shapes"]
        return [sh for sh in att if sh[0] in names]

    extra_seeds = [s for s in sp["seeds"] if s != 0]
    jobs += [("attention", a, sh, s, _budget(budget, a)) for a in sp["archs"] if a in archs for sh in sp_shapes(a)
             for s in extra_seeds]
    conv = [sh for sh in CONV_SHAPES if not budget.get("conv_shapes") or sh[0] in budget["conv_shapes"]]
    jobs += [("conv", "edge_accel", sh, 0, _budget(budget, "edge_accel")) for sh in conv]
    res = _run_jobs(jobs, workers)
    by = {(j[0], j[1], j[2][0], j[3]): r for j, r in zip(jobs, res)}
    out: dict = {"attention_dse": {}}
    refs = ("layerwise", "flat_hgran", "flat_hgran_split", "flat_rgran")
    for a in archs:
        rows = []
        for sh in att:
            r = by[("attention", a, sh[0], 0)]
            rows.append({"shape": sh[0], "best": r["best"], "best_structure": r["best_structure"],
                         "cycles": r["cycles"], **{f"speedup_vs_{k}": r.get(f"speedup_vs_{k}") for k in refs},
                         "flat_hgran_variant": r.get("variants", {}).get("flat_hgran"),
                         "flat_hgran_split_variant": r.get("variants", {}).get("flat_hgran_split"),
                         "compute_bound_cycles": r["compute_bound_cycles"], "search_s": r["search_s"],
                         "cpu_s": r["cpu_s"], "evaluations_per_template": r["evaluations_per_template"]})
            print(f"  {a:12} {sh[0]:13} best {r['best']:10} {r['best_cycles']:11.4g} cycles  vs layerwise "
                  f"{_fmt(r.get('speedup_vs_layerwise'))}  vs FLAT-HGran {_fmt(r.get('speedup_vs_flat_hgran'))} "
                  f"({r.get('variants', {}).get('flat_hgran', '')})  vs FLAT-HGran-split "
                  f"{_fmt(r.get('speedup_vs_flat_hgran_split'))} ({r.get('variants', {}).get('flat_hgran_split', '')})"
                  f"  vs FLAT-RGran "
                  f"{_fmt(r.get('speedup_vs_flat_rgran'))}  {r['cpu_s']:.1f}s cpu  {r['best_structure']}", flush=True)
        out["attention_dse"][a] = {
            **{f"geomean_speedup_vs_{k}": geomean([x[f"speedup_vs_{k}"] for x in rows]) for k in refs},
            # the old key (FLAT-like = the row-granularity template), kept for readers of earlier results
            "geomean_speedup_vs_flat": geomean([x["speedup_vs_flat_rgran"] for x in rows]),
            "budget_per_template": {**by[("attention", a, att[0][0], 0)]["budget"]}, "shapes": rows}
    out["attention_dse"]["reference_1_8x_compares_to"] = (
        "flat_hgran: TileFlow's attention figure reports about 1.8x geomean over FLAT-HGran (FLAT fused at head "
        "granularity, heads over the buffer instances as in TileFlow's map/flat.yaml) at edge scale; "
        "flat_hgran_split (one head's rows over the instances) and flat_rgran (row granularity) are stronger FLAT "
        "variants, reported beside it")
    # seed spread: the best found per shape, over seeds (seed 0 from the runs above)
    spread_rows, worst = [], 0.0
    for a in sp["archs"]:
        if a not in archs:
            continue
        for sh in sp_shapes(a):
            vals = {s: by[("attention", a, sh[0], s)]["best_cycles"] for s in sp["seeds"]}
            v = (max(vals.values()) - min(vals.values())) / min(vals.values())
            worst = max(worst, v)
            spread_rows.append({"arch": a, "shape": sh[0], "best_cycles_per_seed": vals, "spread": v,
                                "best_per_seed": {s: by[("attention", a, sh[0], s)]["best"] for s in sp["seeds"]}})
            print(f"  seed spread {a:12} {sh[0]:13} {100 * v:5.2f}%  " +
                  "  ".join(f"seed {s}: {c:.6g}" for s, c in vals.items()), flush=True)
    out["seed_spread"] = worst
    out["seed_spread_detail"] = {"definition": "max over (arch, shape) of (max - min) / min of the best cycles "
                                               "found with each seed", "seeds": sp["seeds"],
                                 "subset": "the shapes whose best moved most between seeds before (a subset to "
                                           "keep the default scale within its time budget)", "rows": spread_rows}
    crow = []
    for sh in conv:
        r = by[("conv", "edge_accel", sh[0], 0)]
        crow.append({"shape": sh[0], "kernels": f"{sh[5]}x{sh[5]}->{sh[7] if len(sh) > 7 else 1}x"
                                                 f"{sh[7] if len(sh) > 7 else 1}",
                     "best_fused": r.get("best_fused"), "best_fused_cycles": r.get("best_fused_cycles"),
                     "fused_layer_cycles": r["cycles"].get(FUSED_LAYER), "cycles": r["cycles"],
                     "speedup_vs_fused_layer": r.get("speedup_vs_fused_layer"),
                     "speedup_vs_layerwise": r.get("speedup_vs_layerwise"), "best_structure": r["best_structure"],
                     "cpu_s": r["cpu_s"]})
        print(f"  conv edge_accel {sh[0]:24} best fused {r.get('best_fused', ''):10} "
              f"{r.get('best_fused_cycles', float('nan')):11.4g} cycles  vs Fused-Layer "
              f"{_fmt(r.get('speedup_vs_fused_layer'))}  vs layerwise {_fmt(r.get('speedup_vs_layerwise'))}  "
              f"{r['cpu_s']:.1f}s cpu", flush=True)
    out["conv_chain"] = {"arch": "edge_accel",
                         "geomean_vs_fused_layer": geomean([x["speedup_vs_fused_layer"] for x in crow]),
                         "geomean_vs_fused_layer_3x3_3x3": geomean([x["speedup_vs_fused_layer"] for x in crow
                                                                    if x["kernels"] == "3x3->3x3"]),
                         "geomean_speedup_vs_layerwise": geomean([x["speedup_vs_layerwise"] for x in crow]),
                         "fused_layer_template": FUSED_LAYER,
                         "reference": "TileFlow reports 1.28x over Fused-Layer on conv chains",
                         "shapes": crow}
    out["dse_cpu_s"] = sum(r["cpu_s"] for r in res)
    return out


def bench_tileflow_files(spec: dict, workers: int) -> dict:
    """The DSE on TileFlow's own test-case files (:mod:`fusion_perf.tileflow_dse`) per case, TileFlow's mapper's
    own picks replayed under its rules, and the DSE's best per mapping file against the mapper's."""
    from . import mapper_reference, tileflow_dse

    out = {}
    for name, sp in spec.items():
        ref = mapper_reference.load(name)["entries"]
        r = tileflow_dse.run(sp["archs"], None, budget=sp["budget"], workers=workers,
                             mapper={k: e["cycles"] for k, e in ref.items()}, case=name)
        chk = mapper_reference.check(name)
        pairs = []
        for a in sp["archs"]:
            for row in r[a]["rows"]:
                for df in tileflow_dse.TASKS[name].dataflows:
                    e = ref.get(f"{row['shape']}/{df}/{a}")
                    if e is not None and math.isfinite(row["cycles"][df]):
                        pairs.append({"entry": f"{row['shape']}/{df}/{a}", "mapper_cycles": e["cycles"],
                                      "dse_cycles": row["cycles"][df],
                                      "mapper_over_dse": e["cycles"] / row["cycles"][df]})
        ratios = [p["mapper_over_dse"] for p in pairs]
        r["vs_tileflow_mapper"] = {
            "definition": "per (shape, mapping file, arch): cycles of TileFlow's mapper's pick / cycles of the DSE's "
                          "best (> 1: the DSE found a faster mapping of the same file)",
            "mapper_timeout_s": chk["meta"].get("mapper_timeout_s"), "geomean": tileflow_dse.geomean(ratios),
            "min": min(ratios, default=float("nan")), "dse_at_least_as_good": sum(x >= 1 for x in ratios),
            "points": len(pairs), "rows": pairs}
        r["mapper_replay"] = chk
        out[name] = r
        vs = r["vs_tileflow_mapper"]
        print(f"  {name}: TileFlow's mapper's picks replayed: cycles equal {chk['cycles_equal_fraction']:.4f} of "
              f"{chk['points']}, energy max rel err {chk['energy_max_rel_err']:.1e}; DSE vs mapper geomean "
              f"{vs['geomean']:.2f}x (mapper / DSE cycles, min {vs['min']:.2f}, "
              f"DSE at least as good on {vs['dse_at_least_as_good']} of "
              f"{len(pairs)})", flush=True)
    return out


def main(argv=None) -> int:
    from shared_ir.benchkit import bench_parser, machine, machine_line, write_json

    from .errors import cli_count

    ap = bench_parser("python -m fusion_perf.bench", __doc__, SCALES, "results/bench-fusion_perf.json")
    ap.add_argument("--shapes", nargs="*", default=None, help="attention shapes to run (default: all nine)")
    ap.add_argument("--jobs", type=cli_count(1), default=2, help="worker processes for the DSE searches (default 2)")
    a = ap.parse_args(argv)
    sc = SCALES[a.scale]
    t0 = time.perf_counter()
    mach = machine()
    print(f"fusion_perf benchmark, {machine_line(mach)}", flush=True)
    res: dict = {"machine": mach, "scale": a.scale}
    print(f"exactness: {sc['n_random']} random trees vs the trace simulator ...", flush=True)
    res.update(bench_exact(sc["n_random"]))
    if res["exact_fraction"] is not None:
        print(f"  exact_fraction {res['exact_fraction']:.4f} of {res['n_random_mappings']}", flush=True)
    print("validation: TileFlow's own inputs vs Timeloop (single GEMM) and TileFlow (fused GEMM->GEMM) ...",
          flush=True)
    res.update(bench_validation())
    print(f"  timeloop_cycles_equal_fraction {res['timeloop_cycles_equal_fraction']:.4f} of "
          f"{res['validation']['timeloop_points']}, timeloop_energy_max_rel_err "
          f"{res['timeloop_energy_max_rel_err']:.2e}, tileflow_fused_cycles_max_rel_err "
          f"{res['tileflow_fused_cycles_max_rel_err']:.2e} over {res['validation']['tileflow_points']}", flush=True)
    print(f"  under TileFlow's own rules: cycles equal {res['tileflow_rules_cycles_equal_fraction']:.4f} of "
          f"{res['validation']['tileflow_rules_points']}, energy max rel err "
          f"{res['tileflow_rules_energy_max_rel_err']:.2e}", flush=True)
    for c in res["tileflow_result_csvs"]:
        print(f"  TileFlow case {c['case']}/{c['mapping']}: cycles {c['cycles']:.0f} vs {c['tileflow_cycles']:.0f}, "
              f"energy error {c['energy_rel_err']:.1e}, counts equal {c['counts_equal']}/{c['counts']}", flush=True)
    res.update(bench_speed())
    print(f"speed: {res['us_per_eval']:.0f} us per fused attention evaluation (target < 1000), "
          f"{res['evals_per_s_batched']:.0f} evals/s batched (target > 10000)", flush=True)
    print(f"DSE: every template searched with the same budget ({a.jobs} worker processes); "
          "ratios = template cycles / best cycles:", flush=True)
    budget = {k: v for k, v in sc.items() if k != "n_random"}
    res["reduced"] = REDUCED[a.scale]
    res["jobs"] = a.jobs
    res.update(bench_dse(budget, shapes=a.shapes, workers=a.jobs))
    print("DSE on TileFlow's own test-case files (semantics: tileflow), every mapping file and derived baseline "
          "with the same budget:", flush=True)
    tf = bench_tileflow_files(sc["tileflow_files"], a.jobs)
    res["attention_dse_tileflow_files"] = tf.get("attention")
    res["conv_chain_tileflow_files"] = tf.get("conv")
    for k, preset in (("edge", "edge_accel"), ("cloud", "cloud_accel")):
        if k in tf.get("attention", {}):
            res["attention_dse"][preset]["geomean_vs_strongest_flat"] = \
                tf["attention"][k]["geomean_vs_strongest_baseline"]
    res["wall_s"] = time.perf_counter() - t0
    ru_self, ru_kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    res["cpu_s"] = ru_self.ru_utime + ru_self.ru_stime + ru_kids.ru_utime + ru_kids.ru_stime
    res["load_average"] = list(os.getloadavg())
    print("\nsummary")
    print(f"  exact_fraction        {res['exact_fraction']:.4f}  ({res['n_random_mappings']} mappings)")
    print(f"  timeloop cycles equal {res['timeloop_cycles_equal_fraction']:.4f}, energy max err "
          f"{res['timeloop_energy_max_rel_err']:.2e}; tileflow fused cycles max err "
          f"{res['tileflow_fused_cycles_max_rel_err']:.2e}")
    print(f"  us_per_eval           {res['us_per_eval']:.0f}")
    print(f"  evals_per_s_batched   {res['evals_per_s_batched']:.0f}")
    for k, v in res["attention_dse"].items():
        if isinstance(v, dict):
            print(f"  {k:12} geomean best vs layerwise {v['geomean_speedup_vs_layerwise']:.2f}x, "
                  f"vs FLAT-HGran {v['geomean_speedup_vs_flat_hgran']:.2f}x (the reference's 1.8x baseline), "
                  f"vs FLAT-HGran-split {v['geomean_speedup_vs_flat_hgran_split']:.2f}x, "
                  f"vs FLAT-RGran {v['geomean_speedup_vs_flat_rgran']:.2f}x")
    for name, r in tf.items():
        for k in ("edge", "cloud"):
            if k in r:
                print(f"  TileFlow {name} files {k:5} geomean best vs strongest {r['baselines'][0]} "
                      f"{r[k]['geomean_vs_strongest_baseline']:.2f}x (paper: about 1.8x attention, 1.28x conv), "
                      f"tileflow.yaml {r[k]['geomean_tileflow_vs_strongest_baseline']:.2f}x, best vs layer-by-layer "
                      f"{r[k]['geomean_vs_layerwise']:.2f}x")
    print(f"  seed_spread           {100 * res['seed_spread']:.2f}% (target <= 5%)")
    print(f"  conv_chain            geomean best fused vs Fused-Layer "
          f"{res['conv_chain']['geomean_vs_fused_layer']:.2f}x (reference 1.28x)")
    print(f"  time                  {res['wall_s']:.0f}s wall, {res['cpu_s']:.0f}s cpu, load average "
          f"{res['load_average'][0]:.1f}")
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    write_json(a.out, res, indent=2)
    print(f"wrote {a.out} ({res['wall_s']:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
