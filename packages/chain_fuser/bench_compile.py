"""``chain_fuser.compile`` on model blocks built from their configs (no downloads): eager PyTorch against the compiled
module, interleaved, medians of repeats after warm-up, the same thread count. Eager runs in a child process with
torch's own settings (``timing.TorchServer``), the compiled module in this one: timed in one process, each library's
spinning thread pool took the cores from the other (eager ViT-B attention 28 ms instead of 1.3 ms right after
compiled calls). A model that mixes both pays that price.

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
import sys
import time
from typing import Any, Callable

from .bench import geomean
from .timing import time_interleaved


def blocks() -> list[dict[str, Any]]:
    """The blocks: name, a builder of (module, example inputs). Sizes are the models' own (ViT-S/B, BERT-base,
    Mixer-S, ResNet-50), one image or sequence."""
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

    def rnd(*s):
        return torch.randn(*s, generator=torch.Generator().manual_seed(0))

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
    ] + hf_blocks(rnd)


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
        baselines: tuple[str, ...] = ("torch_compile",)) -> dict:
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
    items = [b for b in blocks() if not only or any(o in b["name"] for o in only)]
    for i, b in enumerate(items):
        module, ins = b["build"]()
        module.eval()
        log(f"[{i + 1}/{len(items)}] {b['name']}: compiling (chain_fuser, then {', '.join(baselines) or 'no'} "
            "baseline) ...")
        row = _time_block(b, module, ins, server, baselines, repeat, budget_s, cf_compile)
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
           "note": "eager (in a child process, torch's defaults) and compiled (in this process) timed interleaved, "
                   "medians of repeats after warm-up; a chain whose tuned kernel measured slower than eager at "
                   "compile time is kept eager (see chains)"}
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    atomic_write_text(out, json.dumps(res, indent=1, default=str))
    csv = ["block,eager_ms,compiled_ms,speedup,fused_chains,max_rel_error"]
    csv += [f"\"{r['name']}\",{r['ms']['eager']:.4f},{r['ms']['compiled']:.4f},{r['speedup']:.3f},"
            f"{r['fused_chains']},{r['max_rel_error']:.2e}" for r in rows]
    atomic_write_text(os.path.splitext(out)[0] + ".csv", "\n".join(csv) + "\n")
    if sp:
        log(f"compile vs eager: geomean ×{res['geomean_speedup']:.2f}, min ×{res['min_speedup']:.2f}, "
            f"{res['fused_blocks']}/{len(rows)} blocks fused, {threads} threads, {res['seconds']:.0f} s → {out}")
    return res


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
    a = ap.parse_args(argv)
    run(a.out, a.only, a.repeat, baselines=tuple(a.baselines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
