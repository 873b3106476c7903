"""``chain_fuser.compile`` on model blocks built from their configs (no downloads): eager PyTorch against the compiled
module, interleaved, medians of repeats after warm-up, the same thread count. Eager runs in a child process with
torch's own settings (``timing.TorchServer``), the compiled module in this one: timed in one process, each library's
spinning thread pool took the cores from the other (eager ViT-B attention 28 ms instead of 1.3 ms right after
compiled calls). A model that mixes both pays that price.

The unseen chains are batch-GEMM chains drawn by a seeded generator (``--unseen-seed``), sized to this machine's
last-level cache: cache-resident and memory-bound ones, on dims no benchmark lists (the "shapes nobody tuned for"
figure: ``unseen.min_speedup`` and the geomean per kind, with each row's fraction of the FMA probe's peak).

``python -m chain_fuser.bench_compile [--only NAMES] [--repeat N]`` (or ``make bench-chain_fuser-compile``) →
``results/bench-chain_fuser-compile.json`` and ``.csv`` (written atomically) and a table. Each row says what compile
decided for the block's chain: fused (with the kernel's plan) or kept eager because its tuned kernel measured
slower than PyTorch (``frontend.measure_vs_eager``), so a compiled block should never be slower than eager beyond
the machine's noise.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Any, Callable

from .bench import geomean
from .timing import time_interleaved

UNSEEN_SEED = 7
"""Seed of the unseen batch-GEMM chains (``--unseen-seed``): the shapes come from a generator, not from a list."""
UNSEEN_COUNTS = {"cache-resident": 6, "memory-bound": 3}
_UNSEEN_NAME = re.compile(r"unseen (?P<kind>[a-z-]+) bmm chain (?P<dims>\d+(?:x\d+){4})(?: (?P<glue>relu))?$")


def blocks(unseen_seed: int = UNSEEN_SEED) -> list[dict[str, Any]]:
    """The blocks: name, a builder of (module, example inputs). Sizes are the models' own (ViT-S/B, BERT-base,
    Mixer-S, ResNet-50), one image or sequence; then Hugging Face layers and the unseen chains of the seed."""
    import torch

    class MLP(torch.nn.Module):
        def __init__(self, d: int, h: int):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(d, h), torch.nn.Linear(h, d)

        def forward(self, x):
            return self.fc2(torch.nn.functional.gelu(self.fc1(x)))

    class Attention(torch.nn.Module):
        def __init__(self, scale: float):
            super().__init__()
            self.scale = scale

        def forward(self, q, k, v):
            return torch.softmax(q @ k.transpose(-1, -2) * self.scale, dim=-1) @ v

    class ConvPair(torch.nn.Module):
        def __init__(self, c: int, k1: int, k2: int, r2: int):
            super().__init__()
            self.c1 = torch.nn.Conv2d(c, k1, 3, padding=1)
            self.c2 = torch.nn.Conv2d(k1, k2, r2, padding=r2 // 2)

        def forward(self, x):
            return self.c2(torch.relu(self.c1(x)))

    rnd = _rnd
    return [
        {"name": "ViT-S MLP (197 tokens, 384→1536→384)", "build": lambda: (MLP(384, 1536), (rnd(197, 384),))},
        {"name": "BERT-base MLP (512 tokens, 768→3072→768)", "build": lambda: (MLP(768, 3072), (rnd(512, 768),))},
        {"name": "Mixer-S token MLP (512 ch, 64→256→64)", "build": lambda: (MLP(64, 256), (rnd(512, 64),))},
        {"name": "ViT-B attention (12 heads, 197 tokens)",
         "build": lambda: (Attention(0.125), tuple(rnd(12, 197, 64) for _ in range(3)))},
        {"name": "BERT-base attention (12 heads, 512 tokens)",
         "build": lambda: (Attention(0.125), tuple(rnd(12, 512, 64) for _ in range(3)))},
        {"name": "ResNet-50 conv 3x3→1x1 (64@56)", "build": lambda: (ConvPair(64, 64, 256, 1), (rnd(1, 64, 56, 56),))},
        {"name": "ResNet-50 conv 3x3→3x3 (64@56)", "build": lambda: (ConvPair(64, 64, 64, 3), (rnd(1, 64, 56, 56),))},
    ] + hf_blocks(rnd) + unseen_blocks(unseen_seed)


HF_BLOCKS = {  # name: (model family, config fields, tokens)
    "HF BERT-base layer (128 tokens)": ("bert", dict(hidden_size=768, num_attention_heads=12,
                                                     intermediate_size=3072), 128),
    "HF BERT-base layer (384 tokens)": ("bert", dict(hidden_size=768, num_attention_heads=12,
                                                     intermediate_size=3072), 384),
    "HF ViT-S layer (197 tokens)": ("vit", dict(hidden_size=384, num_attention_heads=6, intermediate_size=1536), 197),
    "HF ViT-B layer (197 tokens)": ("vit", dict(hidden_size=768, num_attention_heads=12,
                                                intermediate_size=3072), 197),
    "HF GPT-2 block (128 tokens)": ("gpt2", dict(n_embd=768, n_head=12), 128),
    "HF GPT-2 block (512 tokens)": ("gpt2", dict(n_embd=768, n_head=12), 512),
}
"""Hugging Face transformer layers built from configs (random weights, SDPA attention as HF's default): torch.fx
cannot trace them, ``compile()`` captures them with torch.export."""


def _rnd(*s):
    """Inputs of a block: the same values in this process and in the torch child that rebuilds it."""
    import torch

    return torch.randn(*s, generator=torch.Generator().manual_seed(0))


def _llc_bytes() -> int:
    from shared_ir.hostinfo import caches

    c = caches()
    return c[-1]["size_bytes"] * c[-1]["instances"] if c else 32 << 20


def unseen_shapes(seed: int = UNSEEN_SEED, counts: dict[str, int] | None = None,
                  llc_bytes: int | None = None) -> list[tuple[str, int, int, int, int, int, str]]:
    """(kind, batch, M, K, L, N, glue) of batch-GEMM chains E = glue(A·B)·D that no benchmark lists, drawn from a
    seeded generator sized to this machine's last-level cache: ``cache-resident`` (all five matrices in half of
    it, at least 20 MFLOP so the timing means something) and ``memory-bound`` (the intermediate A·B at least twice
    the cache, K and N at most 64: a low-rank or head-sized chain). Dims are any integers, not tile multiples."""
    import random

    from .bench import MEMORY_BOUND, REFERENCE_GEMM

    rng, llc = random.Random(seed), llc_bytes or _llc_bytes()
    # the benchmarks' shapes count as seen: none is drawn
    seen = {(b, M, K, L, N) for _, b, M, N, K, L in REFERENCE_GEMM + sum(MEMORY_BOUND.values(), [])}
    out = []
    for kind, n in (counts or UNSEEN_COUNTS).items():
        while sum(o[0] == kind for o in out) < n:
            if kind == "cache-resident":
                b, M, K, L, N = rng.randint(1, 8), rng.randint(64, 1024), rng.randint(16, 256), \
                    rng.randint(64, 1024), rng.randint(16, 256)
                words = b * (M * K + K * L + M * L + L * N + M * N)
                if 4 * words > llc // 2 or 2 * b * M * L * (K + N) < 20e6:
                    continue
            else:
                b, K, N = rng.randint(1, 2), rng.randint(8, 64), rng.randint(8, 64)
                M = rng.randint(2048, 8192)
                L = -(-2 * llc // (4 * b * M)) + rng.randint(0, 2048)
            glue = rng.choice(["none", "relu"])
            if (b, M, K, L, N) not in seen:
                seen.add((b, M, K, L, N))
                out.append((kind, b, M, K, L, N, glue))
    return out


def unseen_name(kind: str, b: int, M: int, K: int, L: int, N: int, glue: str) -> str:
    return f"unseen {kind} bmm chain {b}x{M}x{K}x{L}x{N}" + ("" if glue == "none" else f" {glue}")


def _bmm_chain_block(name: str) -> dict[str, Any] | None:
    """The block an :func:`unseen_name` names (any shape), with its FLOPs; None for another name."""
    import torch

    m = _UNSEEN_NAME.match(name)
    if not m:
        return None
    b, M, K, L, N = map(int, m["dims"].split("x"))

    class BmmChain(torch.nn.Module):
        def forward(self, a, w, d):
            c = torch.bmm(a, w)
            return torch.bmm(torch.relu(c) if m["glue"] else c, d)

    return {"name": name, "kind": m["kind"], "flops": 2 * b * M * L * (K + N),
            "build": lambda: (BmmChain(), (_rnd(b, M, K), _rnd(b, K, L), _rnd(b, L, N)))}


def unseen_blocks(seed: int = UNSEEN_SEED) -> list[dict[str, Any]]:
    return [_bmm_chain_block(unseen_name(*s)) for s in unseen_shapes(seed)]


def find_block(name: str) -> dict[str, Any]:
    """A block of :func:`blocks` by name, or an unseen chain of any seed by its name."""
    found = _bmm_chain_block(name) or next((b for b in blocks() if b["name"] == name), None)
    if found is None:
        raise KeyError(f"no block named {name!r}")
    return found


def hf_layer(family: str, fields: dict):
    """One layer of a Hugging Face model family, from its config class (no download)."""
    from transformers import BertConfig, GPT2Config, ViTConfig
    from transformers.models.bert.modeling_bert import BertLayer
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block
    from transformers.models.vit.modeling_vit import ViTLayer

    cfg_cls, layer = {"bert": (BertConfig, BertLayer), "vit": (ViTConfig, ViTLayer),
                      "gpt2": (GPT2Config, GPT2Block)}[family]
    cfg = cfg_cls(**fields)
    cfg._attn_implementation = "sdpa"
    return layer(cfg, layer_idx=0) if family == "gpt2" else layer(cfg)


def hf_blocks(rnd) -> list[dict[str, Any]]:
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        return []
    out = []
    for name, (family, fields, tokens) in HF_BLOCKS.items():
        width = fields.get("hidden_size", fields.get("n_embd"))
        out.append({"name": name, "build": lambda f=family, c=fields, t=tokens, w=width: (hf_layer(f, c),
                                                                                        (rnd(1, t, w),))})
    return out


def _first(y):
    """The hidden states of a block's output (HF layers return a tuple)."""
    return y[0] if isinstance(y, (tuple, list)) else y


def run(out: str = "results/bench-chain_fuser-compile.json", only: list[str] | None = None, repeat: int = 7,
        budget_s: float = 0.5, log: Callable[..., None] = print,
        baselines: tuple[str, ...] = ("torch_compile",), unseen_seed: int = UNSEEN_SEED) -> dict:
    """Every block (or those named in ``only``): compiled against eager and the ``baselines`` (keys of
    ``timing.TORCH_COMPILE_MODES``), interleaved."""

    import torch

    from shared_ir import atomic_write_text
    from shared_ir.hostinfo import num_cores

    from . import compile as cf_compile
    from .timing import TorchServer

    threads = num_cores()
    torch.set_num_threads(threads)
    server = TorchServer(threads)
    rows = []
    t_start = time.perf_counter()
    items = [b for b in blocks(unseen_seed) if not only or any(o in b["name"] for o in only)]
    for i, b in enumerate(items):
        module, ins = b["build"]()
        module.eval()
        log(f"[{i + 1}/{len(items)}] {b['name']}: compiling (chain_fuser, then {', '.join(baselines) or 'no'} "
            "baseline) ...")
        row = _time_block(b, module, ins, server, baselines, repeat, budget_s, cf_compile)
        if "flops" in b:
            row.update(_peak_fractions(b, row["ms"]))
        rows.append(row)
        ms = row["ms"]
        what = "; ".join(("fused: " if ch["fused"] else "not fused: ") + ch["reason"] for ch in row["chains"])
        base = "".join(f"  {k} {ms[k]:8.3f} ms" for k in baselines)
        log(f"[{i + 1}/{len(items)}] {b['name']:44s} eager {ms['eager']:8.3f} ms{base}  compiled "
            f"{ms['compiled']:8.3f} ms  ×{row['speedup']:.2f}  err {row['max_rel_error']:.1e}  ({what})")
    server.close()
    sp = [r["speedup"] for r in rows]
    vs_tc = [r["speedup_vs_torch_compile"] for r in rows if r.get("speedup_vs_torch_compile")]
    hf = [r["speedup"] for r in rows if r["name"].startswith("HF ")]
    res = {"threads": threads, "repeat": repeat, "rows": rows, "baselines": list(baselines),
           "geomean_speedup": geomean(sp),
           "min_speedup": min(sp) if sp else None,
           "geomean_vs_torch_compile": geomean(vs_tc) if vs_tc else None,
           "hf_geomean_speedup": geomean(hf) if hf else None, "hf_min_speedup": min(hf) if hf else None,
           "fused_blocks": sum(r["fused_chains"] > 0 for r in rows), "seconds": time.perf_counter() - t_start,
           "unseen": _unseen_summary(rows, unseen_seed),
           "note": "eager (in a child process, torch's defaults) and compiled (in this process) timed interleaved, "
                   "medians of repeats after warm-up; a chain whose tuned kernel measured slower than eager at "
                   "compile time is kept eager (see chains)"}
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    atomic_write_text(out, json.dumps(res, indent=1, default=str))
    csv = ["block,eager_ms,compiled_ms,speedup,fused_chains,max_rel_error,compiled_peak_fraction"]
    csv += [f"\"{r['name']}\",{r['ms']['eager']:.4f},{r['ms']['compiled']:.4f},{r['speedup']:.3f},"
            f"{r['fused_chains']},{r['max_rel_error']:.2e},"
            + (f"{r['peak_fraction']['compiled']:.3f}" if "peak_fraction" in r else "") for r in rows]
    atomic_write_text(os.path.splitext(out)[0] + ".csv", "\n".join(csv) + "\n")
    u = res["unseen"]
    if u["rows"]:
        log(f"unseen chains (seed {unseen_seed}): min ×{u['min_speedup']:.2f}; geomean cache-resident "
            f"×{_f(u['geomean_cache_resident'])}, memory-bound ×{_f(u['geomean_memory_bound'])}")
    if sp:
        log(f"compile vs eager: geomean ×{res['geomean_speedup']:.2f}, min ×{res['min_speedup']:.2f}, "
            f"{res['fused_blocks']}/{len(rows)} blocks fused, {threads} threads, {res['seconds']:.0f} s → {out}")
    return res


def _f(x) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _peak_fractions(b: dict, ms: dict) -> dict:
    """GFLOP/s of the compiled and eager block and their fraction of the FMA probe's peak (both cores)."""
    from .peak import fma_peak_gflops

    peak = fma_peak_gflops()
    rate = {k: b["flops"] / (ms[k] * 1e6) for k in ("compiled", "eager")}
    return {"kind": b["kind"], "gflops": rate, "peak_gflops": peak,
            "peak_fraction": {k: v / peak for k, v in rate.items()}}


def _unseen_summary(rows: list[dict], seed: int) -> dict:
    """The issue's figures on chains no benchmark lists: the worst speedup and the geomean per kind."""
    un = [r for r in rows if r["name"].startswith("unseen ")]
    by = {k: [r["speedup"] for r in un if r.get("kind") == k] for k in UNSEEN_COUNTS}
    return {"seed": seed, "rows": [r["name"] for r in un],
            "min_speedup": min((r["speedup"] for r in un), default=None),
            "geomean_cache_resident": geomean(by["cache-resident"]) if by["cache-resident"] else None,
            "geomean_memory_bound": geomean(by["memory-bound"]) if by["memory-bound"] else None}


def _time_block(b, module, ins, server, baselines, repeat, budget_s, cf_compile) -> dict:
    """One row: compile, check against eager, then time eager, the baselines and the compiled module interleaved."""
    import warnings

    import torch

    t = time.perf_counter()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the decisions are reported in the row
        c = cf_compile(module, ins)
        compile_s = time.perf_counter() - t
        want, got = _first(module(*ins)), _first(c(*ins))
        err = float((got - want).abs().max() / (want.abs().max() + 1e-6))
        variants = {"eager": server.block_variant(b["name"])}
        variants.update({k: server.block_variant(b["name"], k) for k in baselines})
        ms = time_interleaved({**variants, "compiled": lambda: c(*ins)}, repeat, budget_s)
        for v in variants.values():
            v.done()
    chains = [{"ops": "→".join(d.ops), "fused": d.fused, "reason": d.reason} for d in c.decisions]
    row = {"name": b["name"], "ms": ms, "speedup": ms["eager"] / ms["compiled"], "max_rel_error": err,
           "fused_chains": sum(d.fused for d in c.decisions), "chains": chains, "compile_s": compile_s}
    row.update({f"speedup_vs_{k}": ms[k] / ms["compiled"] for k in baselines})
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chain_fuser.bench_compile", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="results/bench-chain_fuser-compile.json")
    ap.add_argument("--only", nargs="*", help="blocks whose name contains one of these")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--baselines", nargs="*", default=["torch_compile"],
                    help="torch.compile modes timed beside eager: torch_compile, torch_compile_max_autotune")
    ap.add_argument("--unseen-seed", type=int, default=UNSEEN_SEED,
                    help="seed of the generated batch-GEMM chains that no benchmark lists")
    a = ap.parse_args(argv)
    run(a.out, a.only, a.repeat, baselines=tuple(a.baselines), unseen_seed=a.unseen_seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
