"""Design-space exploration drivers shared by the benchmark and the Hydra tasks: every fusion template searched
for tiles, the best dataflow compared with layer-by-layer and with the FLAT-like template."""
from __future__ import annotations

import math
import time
from typing import Any, Sequence

from shared_ir.benchkit import geomean

from .arch import load_arch
from .problem import Problem, attention, conv_chain
from .search import TEMPLATES, explore

# (name, batch·heads, M, N, K, L) — chain_fuser's Bert/ViT attention shapes (208 = 196 rounded up to 16)
ATTENTION_SHAPES = [
    ("Bert-Small", 8, 512, 64, 64, 512), ("Bert-Base", 12, 512, 64, 64, 512), ("Bert-Large", 16, 512, 64, 64, 512),
    ("ViT-Base/14", 12, 256, 64, 64, 256), ("ViT-Large/14", 16, 256, 64, 64, 256),
    ("ViT-Huge/14", 16, 256, 80, 80, 256),
    ("ViT-Base/16", 12, 208, 64, 64, 208), ("ViT-Large/16", 16, 208, 64, 64, 208),
    ("ViT-Huge/16", 16, 208, 80, 80, 208),
]
# (name, C, H, W, K1, R1, K2[, R2]): conv R1xR1 then conv R2xR2 (R2 = 1: valid 3x3 then 1x1; R2 = 3: both convs
# "same"-padded, the intermediate read with a halo — fusion_perf.problem.conv_chain)
CONV_SHAPES = [
    ("Inception-like", 64, 58, 58, 192, 3, 128), ("ResNet50-like", 64, 58, 58, 64, 3, 256),
    ("Darknet-like", 128, 30, 30, 128, 3, 512),
    # 3x3 -> 3x3: ResNet-18/34 basic blocks (conv2_x at 56x56x64, conv3_x at 28x28x128) and the CSP block of
    # YOLOv4-tiny (two 3x3 convs on the 32-channel split at 104x104 for a 416x416 input)
    ("ResNet18-3x3-3x3-56", 64, 56, 56, 64, 3, 64, 3), ("ResNet18-3x3-3x3-28", 128, 28, 28, 128, 3, 128, 3),
    ("YOLOv4tiny-3x3-3x3-104", 32, 104, 104, 32, 3, 32, 3),
    # ResNet-50 bottleneck 1x1 -> 3x3 (conv2_x: 256 -> 64 -> 64 at 56x56; the 3x3 reads a halo of the 1x1's output)
    ("ResNet50-1x1-3x3-56", 256, 56, 56, 64, 1, 64, 3),
]
# the Fused-Layer baseline (Alwani et al., MICRO 2016) on conv chains is the row/pixel-granular FLAT structure:
# shared loops over the output pixels only, the intermediate's whole channel depth of a pixel tile on chip, its
# halo kept (fusion_perf.search.template "flat_rgran")
FUSED_LAYER = "flat_rgran"


def attention_problem(shape: Sequence, softmax: bool = True) -> Problem:
    name, b, M, N, K, L = shape
    return attention(b, M, K, L, N, softmax=softmax, name=name)


def conv_problem(shape: Sequence) -> Problem:
    name, C, H, W, K1, R1, K2 = shape[:7]
    return conv_chain(C, H, W, K1, R1, K2, name=name, R2=shape[7] if len(shape) > 7 else 1)


# The search budget every template gets in the DSE (fairness: FLAT and layer-by-layer are searched exactly as
# hard as the fused templates): MCTS restarts sharing the iterations, then local search from the best ``top_k``
# diverse points with single and two-variable moves, ``kicks`` rounds of iterated local search each, then
# deterministic block sweeps (shared loop factors on every loop order, each op's PE-array shape) refining the
# ``sweep`` best of each block — which is what makes the best found per shape nearly seed independent.
DSE_SEARCH = {"restarts": 4, "top_k": 8, "pair_moves": True, "kicks": 1, "sweep": 4}


def describe(tree: Any) -> str:
    """A one-line summary of a tree's fusion structure: the shared root loops and the scope below them."""
    from .mapping import Scope, Tile

    n, shared = tree, []
    while isinstance(n, Tile):
        shared += [f"{d}={f}" for d, f in n.loops]
        n = n.child
    if isinstance(n, Scope):
        return f"[{' '.join(shared)}] -> {n.kind}({len(n.children)} ops)" if shared else f"{n.kind} at the root"
    return "single op"


# baselines the best dataflow is compared with (``flat`` = the old name of ``flat_rgran``, kept for old configs;
# ``flat_hgran_split`` = FLAT-HGran with one head's rows spread over the buffer instances, stronger than published)
REFERENCES = ("layerwise", "flat_hgran", "flat_hgran_split", "flat_rgran", "flat")


def compare(problem: Problem, arch: Any, templates: Sequence[str] = TEMPLATES, iterations: int = 24,
            rollouts: int = 256, seed: int = 0, **search_kw) -> dict:
    """Search every template with the same budget; cycles per template, the best one and its ratios
    ``speedup_vs_<ref>`` to each baseline of :data:`REFERENCES` that was searched (layerwise, FLAT at head and at
    row granularity). ``search_kw`` overrides :data:`DSE_SEARCH` (restarts, top_k, kicks, pair_moves)."""
    arch = load_arch(arch)
    kw = {**DSE_SEARCH, **search_kw}
    t0 = time.perf_counter()
    res = explore(problem, arch, templates, iterations=iterations, rollouts=rollouts, seed=seed, **kw)
    cyc = {k: v.cycles for k, v in res.items()}
    best = min(cyc, key=cyc.get)
    out = {"problem": problem.name, "arch": arch.name, "cycles": cyc, "best": best, "best_cycles": cyc[best],
           "energy_pj": {k: v.energy_pj for k, v in res.items()},
           "evaluations": sum(v.evaluations for v in res.values()),
           "evaluations_per_template": {k: v.evaluations for k, v in res.items()},
           "budget": {"iterations": iterations, "rollouts": rollouts, "seed": seed, **kw},
           "search_s": time.perf_counter() - t0,
           "compute_bound_cycles": problem.points / arch.num_pes,
           "best_structure": describe(res[best].tree) if res[best].tree is not None else "",
           "variants": {k: v.variant for k, v in res.items() if v.variant}}
    for ref in REFERENCES:
        if ref in cyc and math.isfinite(cyc[ref]) and math.isfinite(cyc[best]):
            out[f"speedup_vs_{ref}"] = cyc[ref] / cyc[best]
    fused = {k: v for k, v in cyc.items() if k != "layerwise" and math.isfinite(v)}
    if fused:
        bf = min(fused, key=fused.get)
        out["best_fused"], out["best_fused_cycles"] = bf, fused[bf]
        fl = next((k for k in (FUSED_LAYER, "flat") if k in fused), None)  # "flat": the old name
        if fl is not None:
            out["speedup_vs_fused_layer"] = cyc[fl] / fused[bf]
    out["trees"] = {k: v.tree for k, v in res.items()}
    return out


__all__ = ["ATTENTION_SHAPES", "CONV_SHAPES", "DSE_SEARCH", "REFERENCES", "FUSED_LAYER", "attention_problem",
           "conv_problem", "compare", "describe", "geomean"]
