"""Design-space exploration drivers shared by the benchmark and the Hydra tasks: every fusion template searched
for tiles, the best dataflow compared with layer-by-layer and with the FLAT-like template."""
from __future__ import annotations

import math
import time
from typing import Any, Sequence

from .arch import load_arch
from .problem import Problem, attention, conv_chain
from .search import TEMPLATES, explore

# (name, batch·heads, M, N, K, L) — chain_fuser's Bert/ViT attention shapes (208 = 196 rounded up to 16)
ATTENTION_SHAPES = [
    ("Bert-Small", 8, 512, 64, 64, 512), ("Bert-Base", 12, 512, 64, 64, 512), ("Bert-Large", 16, 512, 64, 64, 512),
    ("ViT-Base/14", 12, 256, 64, 64, 256), ("ViT-Large/14", 16, 256, 64, 64, 256), ("ViT-Huge/14", 16, 256, 80, 80, 256),
    ("ViT-Base/16", 12, 208, 64, 64, 208), ("ViT-Large/16", 16, 208, 64, 64, 208), ("ViT-Huge/16", 16, 208, 80, 80, 208),
]
# (name, C, H, W, K1, R1, K2): 3x3 then 1x1 conv pairs (valid convolution)
CONV_SHAPES = [
    ("Inception-like", 64, 58, 58, 192, 3, 128), ("ResNet50-like", 64, 58, 58, 64, 3, 256),
    ("Darknet-like", 128, 30, 30, 128, 3, 512),
]


def attention_problem(shape: Sequence, softmax: bool = True) -> Problem:
    name, b, M, N, K, L = shape
    return attention(b, M, K, L, N, softmax=softmax, name=name)


def conv_problem(shape: Sequence) -> Problem:
    name, C, H, W, K1, R1, K2 = shape
    return conv_chain(C, H, W, K1, R1, K2, name=name)


# The search budget every template gets in the DSE (fairness: FLAT-like and layer-by-layer are searched exactly
# as hard as the fused templates): MCTS restarts sharing the iterations, then local search from the best
# ``top_k`` diverse points with single and two-variable moves, then ``kicks`` rounds of iterated local search each.
DSE_SEARCH = {"restarts": 4, "top_k": 24, "pair_moves": True, "kicks": 2}


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


def compare(problem: Problem, arch: Any, templates: Sequence[str] = TEMPLATES, iterations: int = 60,
            rollouts: int = 128, seed: int = 0, **search_kw) -> dict:
    """Search every template with the same budget; cycles per template, the best one and its ratios to
    layerwise and FLAT-like. ``search_kw`` overrides :data:`DSE_SEARCH` (restarts, top_k, kicks, pair_moves)."""
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
           "best_structure": describe(res[best].tree) if res[best].tree is not None else ""}
    for ref in ("layerwise", "flat"):
        if ref in cyc and math.isfinite(cyc[ref]) and math.isfinite(cyc[best]):
            out[f"speedup_vs_{ref}"] = cyc[ref] / cyc[best]
    out["trees"] = {k: v.tree for k, v in res.items()}
    return out


def geomean(xs: Sequence[float]) -> float:
    xs = [x for x in xs if x and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


__all__ = ["ATTENTION_SHAPES", "CONV_SHAPES", "DSE_SEARCH", "attention_problem", "conv_problem", "compare", "describe",
           "geomean"]
