"""The attention DSE on TileFlow's own inputs: its ``tests/cases/13-test-attention`` files (the ``edge`` and
``cloud`` architectures, the two-op attention problem and the six dataflow mappings ``no-fuse``, ``flat``,
``chimera``, ``flash-attention``, ``pipeline`` and ``tileflow``) read unchanged, every free factor (``?``)
searched with the same budget, over the nine Bert/ViT shapes of the case's ``script.py``.

The headline compares the best dataflow with the **strongest** FLAT variant: TileFlow's ``flat.yaml`` as shipped
(heads over the buffer instances) and ``flat-rowsplit``, the same mapping whose instance-level spatial tiles also
split a head's rows (``M``) — a FLAT that uses all buffer instances when there are fewer heads than instances, or
heads that do not divide among them. Both keep FLAT's defining property: the score matrix ``C`` never leaves the
chip (``bypass: [C]`` at the DRAM level), which is why the root ``M`` loop cannot be dropped (a FLAT whose ``C`` is
spilled is layer-by-layer, the ``no-fuse`` row). ``python -m fusion_perf.tileflow_dse`` prints the table.
"""
from __future__ import annotations

import copy
import math
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from .errors import FusionPerfError
from .tileflow_cases import CASES
from .tileflow_io import parse_arch, parse_mapping, parse_problem, yaml_load

CASE = CASES / "13-test-attention"
# (name, macros) exactly as the case's script.py lists them (B H M N A L)
SHAPES: list[tuple[str, dict[str, int]]] = [
    (n, dict(zip("BHMNAL", v))) for n, v in (
        ("BERT-small", (1, 8, 512, 64, 64, 512)), ("BERT-base", (1, 12, 512, 64, 64, 512)),
        ("BERT-large", (1, 16, 512, 64, 64, 512)), ("ViT_14-Base", (1, 12, 256, 64, 64, 256)),
        ("ViT_14-Large", (1, 16, 256, 64, 64, 256)), ("ViT_14-High", (1, 16, 256, 80, 80, 256)),
        ("ViT_16-Base", (1, 12, 192, 64, 64, 192)), ("ViT_16-Large", (1, 16, 192, 64, 64, 192)),
        ("ViT_16-High", (1, 16, 192, 80, 80, 192)))]
DATAFLOWS = ("no-fuse", "flat", "chimera", "flash-attention", "pipeline", "tileflow")
FLAT_VARIANTS = ("flat", "flat-rowsplit")
ARCHS = ("edge", "cloud")
# The rules the DSE evaluates by: TileFlow's own analysis and capacity check (``semantics: tileflow``), which
# reproduce what TileFlow prints on the mappings its mapper picks for these files; the closed-form ``reference``
# rules charge an intermediate bypassed below its ops' scope to DRAM, TileFlow keeps it in the PEs
SEMANTICS = "tileflow"
# the budget every mapping gets (MCTS restarts sharing the iterations, then local search from the best points);
# about 1,000-1,700 evaluations, at 10-90 ms each under TileFlow's analysis
BUDGET = {"iterations": 16, "rollouts": 32, "restarts": 2, "top_k": 4, "refine_sweeps": 4}


def _read(path: Path) -> Any:
    return yaml_load(path.read_text(encoding="utf-8"), str(path))


def rowsplit(mapping: Mapping) -> dict:
    """FLAT with a head's rows also over the buffer instances: every spatial tile that targets the root (DRAM)
    level gets a free ``M`` factor."""
    out = copy.deepcopy(dict(mapping))
    root = out["mapping"]["target"]

    def visit(node: Any) -> None:
        if not isinstance(node, dict):
            return
        if node.get("node-type") == "Tile" and str(node.get("type", "")).lower() == "spatial" \
                and node.get("target") == root and "M=" not in str(node.get("factors", "")):
            node["factors"] = f"{node['factors']} M=?"
            node["permutation"] = f"M{node.get('permutation', '')}"
        for child in node.get("subtree") or []:
            visit(child)

    visit(out["mapping"])
    return out


def load_case(arch: str, dataflow: str, macros: Mapping[str, int], case: Path = CASE):
    """(problem, arch, tree) of one architecture file, mapping file (or ``flat-rowsplit``) and shape."""
    a = case / "arch" / f"{arch}.yaml"
    p = case / "prob" / "attention.yaml"
    name = "flat" if dataflow == "flat-rowsplit" else dataflow
    m = case / "map" / f"{name}.yaml"
    mdoc = _read(m)
    if dataflow == "flat-rowsplit":
        mdoc = rowsplit(mdoc)
    arch_ = parse_arch(_read(a)["architecture"], f"{a}: architecture")
    prob = parse_problem(_read(p)["problem"], macros, f"{p}: problem")
    tree = parse_mapping(mdoc["mapping"], macros, f"{m}: mapping", True)
    return prob, arch_, tree


def search_case(arch: str, dataflow: str, macros: Mapping[str, int], seed: int = 0,
                budget: Mapping[str, Any] | None = None, semantics: str = SEMANTICS) -> dict:
    """The best mapping of one dataflow found with the budget: cycles, energy, evaluations, the tree."""
    from .model import evaluate
    from .search import search

    prob, arch_, tree = load_case(arch, dataflow, macros)
    arch_ = arch_.with_semantics(semantics)
    t0 = time.perf_counter()
    try:
        sr = search(prob, arch_, tree, "cycles", seed=seed, **{**BUDGET, **(budget or {})})
    except FusionPerfError as e:  # e.g. no feasible assignment on this shape: the row says why
        return {"cycles": math.inf, "energy_pj": math.inf, "error": str(e), "search_s": time.perf_counter() - t0}
    res = evaluate(prob, arch_, sr.tree)
    return {"cycles": res.cycles, "energy_pj": res.energy_pj, "evaluations": sr.evaluations,
            "bottleneck": res.bottleneck, "search_s": time.perf_counter() - t0, "tree": sr.tree}


def _job(job: tuple) -> dict:
    arch, shape, dataflow, seed, budget, semantics = job
    r = search_case(arch, dataflow, dict(SHAPES)[shape], seed, budget, semantics)
    r.pop("tree", None)
    return r


def _pool_map(fn, jobs: list, workers: int, progress: bool) -> list:
    """``fn`` over ``jobs`` in ``workers`` processes (fork; 1 = here), printing each job as it ends."""
    if workers <= 1:
        out = []
        for j in jobs:
            out.append(fn(j))
            if progress:
                print(f"  [{len(out)}/{len(jobs)}] {j[0]} {j[1]} {j[2]}: {out[-1]['cycles']:,.0f}", flush=True)
        return out
    import multiprocessing as mp
    import os
    from concurrent.futures import ProcessPoolExecutor, as_completed

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    out: list = [None] * len(jobs)
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) as ex:
        futs = {ex.submit(fn, j): i for i, j in enumerate(jobs)}
        for k, f in enumerate(as_completed(futs), 1):
            i = futs[f]
            out[i] = f.result()
            if progress:
                j = jobs[i]
                print(f"  [{k}/{len(jobs)}] {j[0]} {j[1]} {j[2]}: {out[i]['cycles']:,.0f} cycles "
                      f"({out[i]['search_s']:.0f} s)", flush=True)
    return out


def geomean(xs: Sequence[float]) -> float:
    xs = [x for x in xs if x and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def _row(shape: str, res: Mapping[str, dict], mapper_flat: float | None = None) -> dict:
    """One shape's comparison: the best mapping searched and its ratios to the baselines. ``mapper_flat``:
    the cycles of TileFlow's own mapper on ``flat.yaml``, a FLAT candidate too when it beats the DSE's."""
    cyc = {k: v["cycles"] for k, v in res.items()}
    best = min(cyc, key=cyc.get)  # every mapping searched, the FLAT variant included
    flats = {k: cyc[k] for k in FLAT_VARIANTS}
    if mapper_flat is not None:
        flats["flat (TileFlow's mapper)"] = mapper_flat
    fl = min(flats, key=flats.get)
    return {"shape": shape, "macros": dict(SHAPES)[shape], "cycles": cyc, "flat_candidates": flats,
            "energy_pj": {k: v["energy_pj"] for k, v in res.items()},
            "best": best, "best_cycles": cyc[best], "strongest_flat": fl,
            "speedup_vs_strongest_flat": flats[fl] / cyc[best],
            "speedup_vs_flat_as_shipped": cyc["flat"] / cyc[best],
            "tileflow_vs_strongest_flat": flats[fl] / cyc["tileflow"],
            "speedup_vs_layerwise": cyc["no-fuse"] / cyc[best],
            "evaluations": {k: v.get("evaluations", 0) for k, v in res.items()},
            "search_s": sum(v["search_s"] for v in res.values()),
            "errors": {k: v["error"] for k, v in res.items() if "error" in v}}


def run(archs: Sequence[str] = ARCHS, shapes: Sequence[str] | None = None, seed: int = 0,
        budget: Mapping[str, Any] | None = None, semantics: str = SEMANTICS, workers: int = 2,
        progress: bool = True, mapper: Mapping[str, float] | None = None) -> dict:
    """The DSE over the architectures and shapes (every mapping of :data:`DATAFLOWS` and the FLAT variants,
    the same budget each); per arch the rows and the geomeans. ``mapper``: ``{"shape/dataflow/arch": cycles}``
    of TileFlow's own mapper, whose ``flat`` result joins the FLAT candidates (the strongest baseline)."""
    names = [n for n, _ in SHAPES if not shapes or n in shapes]
    mappings = (*DATAFLOWS, "flat-rowsplit")
    jobs = [(a, n, df, seed, budget, semantics) for a in archs for n in names for df in mappings]
    res = dict(zip([j[:3] for j in jobs], _pool_map(_job, jobs, workers, progress)))
    out: dict = {}
    for a in archs:
        rows = [_row(n, {df: res[(a, n, df)] for df in mappings}, (mapper or {}).get(f"{n}/flat/{a}"))
                for n in names]
        if progress:
            for r in rows:
                fl = r["strongest_flat"]
                print(f"  {a:5} {r['shape']:12} best {r['best']:15} {r['best_cycles']:11,.0f}  strongest FLAT "
                      f"({fl}) {r['flat_candidates'][fl]:11,.0f}  x{r['speedup_vs_strongest_flat']:.2f}  tileflow.yaml "
                      f"x{r['tileflow_vs_strongest_flat']:.2f}  vs no-fuse x{r['speedup_vs_layerwise']:.2f}",
                      flush=True)
        out[a] = {"geomean_vs_strongest_flat": geomean([r["speedup_vs_strongest_flat"] for r in rows]),
                  "geomean_vs_flat_as_shipped": geomean([r["speedup_vs_flat_as_shipped"] for r in rows]),
                  "geomean_tileflow_vs_strongest_flat": geomean([r["tileflow_vs_strongest_flat"] for r in rows]),
                  "geomean_vs_layerwise": geomean([r["speedup_vs_layerwise"] for r in rows]),
                  "rows": rows}
    out["budget_per_mapping"] = {**BUDGET, **(budget or {}), "seed": seed}
    out["semantics"] = semantics
    out["files"] = f"pku-liang/TileFlow tests/cases/13-test-attention (copied unchanged to {CASE.name})"
    return out


def write_csv(out: Mapping[str, Any], path: str) -> None:
    """One row per (arch, shape): the cycles of every mapping, the best and the ratios."""
    import csv
    import os

    mappings = (*DATAFLOWS, "flat-rowsplit")
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["arch", "shape", *mappings, "best", "strongest_flat", "speedup_vs_strongest_flat",
                    "tileflow_vs_strongest_flat", "speedup_vs_layerwise"])
        for a in ARCHS:
            for r in out.get(a, {}).get("rows", []):
                w.writerow([a, r["shape"], *(r["cycles"][m] for m in mappings), r["best"], r["strongest_flat"],
                            f"{r['speedup_vs_strongest_flat']:.4f}", f"{r['tileflow_vs_strongest_flat']:.4f}",
                            f"{r['speedup_vs_layerwise']:.4f}"])
    os.replace(tmp, path)


def main(argv=None) -> int:
    import argparse
    import json
    import os

    from .errors import cli_count

    ap = argparse.ArgumentParser(prog="python -m fusion_perf.tileflow_dse", description=__doc__)
    ap.add_argument("--archs", nargs="*", default=list(ARCHS), choices=ARCHS)
    ap.add_argument("--shapes", nargs="*", default=None, choices=[n for n, _ in SHAPES])
    ap.add_argument("--workers", type=cli_count(1), default=2, help="processes for the searches (default 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--semantics", default=SEMANTICS, choices=["tileflow", "reference", "project"],
                    help="the rules the searches evaluate by (default: TileFlow's own)")
    ap.add_argument("--mapper", default=str(CASE / "result" / "mapper.json"),
                    help="TileFlow's mapper's results (fusion_perf.mapper_reference), whose FLAT joins the baselines")
    ap.add_argument("--out", default="results/fusion_perf-tileflow-dse.json", help="JSON; the CSV goes beside it")
    a = ap.parse_args(argv)
    mapper = None
    if a.mapper and os.path.isfile(a.mapper):
        with open(a.mapper) as f:
            mapper = {k: e["cycles"] for k, e in json.load(f)["entries"].items()}
    out = run(a.archs, a.shapes, a.seed, None, a.semantics, a.workers, mapper=mapper)
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    tmp = f"{a.out}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, a.out)
    write_csv(out, os.path.splitext(a.out)[0] + ".csv")
    for k in a.archs:
        print(f"{k}: best vs strongest FLAT x{out[k]['geomean_vs_strongest_flat']:.2f} geomean, tileflow.yaml vs "
              f"strongest FLAT x{out[k]['geomean_tileflow_vs_strongest_flat']:.2f}, best vs no-fuse "
              f"x{out[k]['geomean_vs_layerwise']:.2f}")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
