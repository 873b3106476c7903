"""What the report compares: each reference system's headline figure beside the project's measurement of it.

A :class:`Headline` names
- the published figure as the reference states it, with a verbatim ``quote`` from
  ``../shared/reference/<package>.md`` (the report checks the quote is there and cites file and line), and
- where the project measures the same thing: a package's benchmark JSON (``results/bench-<pkg>.json``, keys as the
  package issues specify them) or an experiment's summary, by dotted key paths tried in order, then a regular
  expression over all numeric leaves (so a slightly different layout is still found; the report prints the path it
  used), or a ``compute`` function over the whole document.

No measured number is written here: the report reads every one of them from the run. A figure that the run did not
produce shows as "not measured (reason)".
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence

REFERENCE_FILES = {
    "fusion_perf": "fusion_perf.md",
    "chain_fuser": "chain_fuser.md",
    "soc_mapper": "soc_mapper.md",
    "dynamic_batcher": "dynamic_batcher.md",
    "offload_trainer": "offload_trainer.md",
}
SYSTEMS = {
    "fusion_perf": "TileFlow (MICRO 2023)",
    "chain_fuser": "Chimera (HPCA 2023)",
    "soc_mapper": "COMB (DAC 2023)",
    "dynamic_batcher": "ED-Batch (ICML 2023)",
    "offload_trainer": "LSP-Offload (AAAI 2025)",
}
UNITS = ("", "x", "x+", "%", "frac", "ms", "us", "s", "GB", "GFLOP/s")
REDUCES = (None, "all", "max", "min", "geomean")
BENCH = "bench"


@dataclass(frozen=True)
class Headline:
    """One headline figure of a reference system and where the project measures it."""

    package: str
    """Package (one of :data:`REFERENCE_FILES`)."""
    figure: str
    """What is compared, in words."""
    published: str
    """The published figure, as the reference states it."""
    quote: str
    """A verbatim substring of the reference file that contains the published figure (located for the citation)."""
    sources: tuple[str, ...] = (BENCH,)
    """Where to look, in order: ``bench`` (``results/bench-<package>.json``) or ``experiment:<pkg>/<name>``."""
    keys: tuple[str, ...] = ()
    """Dotted paths (``a.b[0].c``) of the measured value, tried in order."""
    pattern: Optional[str] = None
    """Regex searched in the dotted paths of all numeric leaves when no key matches."""
    reduce: Optional[str] = None
    """For ``pattern`` matches: None (the first), ``all`` (list every one), ``max``, ``min``, ``geomean``."""
    compute: Optional[Callable[[dict], Any]] = None
    """Derives the value from the whole source document (returns a number, ``{label: number}``, or None)."""
    unit: str = ""
    """How to print it: ``x`` ratio, ``x+`` ratio with overhead %, ``%`` fraction as percent, ``frac``, ``ms``,
    ``us`` (printed as ms), ``s``, ``GB``, ``GFLOP/s``."""
    note: str = ""
    """Caveat printed with the row (e.g. how the project's measure differs from the paper's)."""

    def __post_init__(self) -> None:
        if self.package not in REFERENCE_FILES:
            raise ValueError(f"headline.package must be one of {list(REFERENCE_FILES)}, got {self.package!r}")
        if self.unit not in UNITS:
            raise ValueError(f"headline.unit must be one of {list(UNITS)}, got {self.unit!r} ({self.figure})")
        if self.reduce not in REDUCES:
            raise ValueError(f"headline.reduce must be one of {list(REDUCES)}, got {self.reduce!r}")
        for s in self.sources:
            if s != BENCH and not s.startswith("experiment:"):
                raise ValueError(f"headline.sources entries are 'bench' or 'experiment:<name>', got {s!r}")
        if not (self.keys or self.pattern or self.compute):
            raise ValueError(f"headline {self.figure!r} needs keys, a pattern or compute")
        if self.pattern:
            re.compile(self.pattern)


# --------------------------------------------------------------------------------------------- lookup helpers
def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def leaves(d: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted path, value)`` of every leaf (lists indexed as ``[i]``)."""
    if isinstance(d, dict):
        for k, v in d.items():
            yield from leaves(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield from leaves(v, f"{prefix}[{i}]")
    else:
        yield prefix, d


_PATH_TOKEN = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def get_path(d: Any, path: str) -> Any:
    """The value at ``a.b[0].c`` (KeyError when absent)."""
    cur = d
    for name, idx in _PATH_TOKEN.findall(path):
        if idx:
            if not isinstance(cur, list) or int(idx) >= len(cur):
                raise KeyError(path)
            cur = cur[int(idx)]
        else:
            if not isinstance(cur, dict) or name not in cur:
                raise KeyError(path)
            cur = cur[name]
    return cur


def dicts_with(d: Any, *keys: str, prefix: str = "") -> Iterator[tuple[str, dict]]:
    """Every nested dict holding all ``keys`` with numeric values, with its path."""
    if isinstance(d, dict):
        if all(is_number(d.get(k)) for k in keys):
            yield prefix, d
        for k, v in d.items():
            yield from dicts_with(v, *keys, prefix=f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield from dicts_with(v, *keys, prefix=f"{prefix}[{i}]")


def ratio_per_case(root: str, num: str, den: str) -> Callable[[dict], Optional[dict]]:
    """``compute`` helper: ``{case path: d[num] / d[den]}`` for each dict under ``root`` holding both."""

    def fn(doc: dict) -> Optional[dict]:
        try:
            base = get_path(doc, root) if root else doc
        except KeyError:
            return None
        out = {(p or root): d[num] / d[den] for p, d in dicts_with(base, num, den) if d[den]}
        return out or None

    return fn


def _number_at(doc: dict, *paths: str) -> Optional[float]:
    for p in paths:
        try:
            v = get_path(doc, p)
        except KeyError:
            continue
        if isinstance(v, dict):  # e.g. {"eval_loss": ...}
            for k in ("eval_loss", "loss", "final_eval_loss", "value"):
                if is_number(v.get(k)):
                    return float(v[k])
        elif is_number(v):
            return float(v)
    return None


def _convergence_ratio(doc: dict) -> Optional[dict]:
    """Eval loss of LSP over full fine-tuning (after the same steps), from the ``convergence`` block."""
    lsp = _number_at(doc, "convergence.lsp", "convergence.eval_loss.lsp", "convergence.methods.lsp")
    full = _number_at(doc, "convergence.full_ft", "convergence.eval_loss.full_ft", "convergence.methods.full_ft")
    if lsp is None or full is None or full == 0:
        return None
    return {"eval loss LSP / full fine-tuning": lsp / full}


def _exactness(doc: dict) -> Optional[dict]:
    """``exact_fraction`` labelled with the number of random mappings it was measured on."""
    f = doc.get("exact_fraction")
    if not is_number(f):
        return None
    n = doc.get("n_random_mappings")
    return {f"of {int(n)} random mappings" if is_number(n) else "exact_fraction": float(f)}


# ------------------------------------------------------------------------------------------------ the spec

_BATCHER_NOTE = ("vs the fastest baseline: real DyNet (best autobatch strategy, same fresh minibatches), DyNet's "
                 "policies on the same blocks, eager PyTorch, no batching; the other figures are against DyNet's "
                 "policies re-implemented on the op graph recorded in Python (an ablation)")


def _batcher_speedups(family: str) -> Callable[[dict], Any]:
    """The three throughput ratios of one workload family, labelled (whichever the bench JSON has)."""
    def f(doc: dict) -> Any:
        out = {}
        for label, key in (("vs the fastest baseline", "speedup_vs_best_baseline"),
                           ("vs real DyNet", "speedup_vs_real_dynet"),
                           ("training step vs real DyNet", "train_speedup_vs_real_dynet"),
                           ("ablation: vs DyNet policies, inlined graph", "speedup_vs_dynet_policies_inlined"),
                           ("ablation: schedule+plan+execute", "sched_exec_speedup_vs_best_baseline"),
                           ("ablation: exec-only", "exec_speedup_vs_best_baseline")):
            v = (doc.get(key) or {}).get(family) if isinstance(doc.get(key), dict) else None
            if is_number(v):
                out[label] = float(v)
        return out or None
    return f

HEADLINES: tuple[Headline, ...] = (
    # ---- fusion_perf vs TileFlow
    Headline("fusion_perf", "Exactness of the modelled data movement",
             "TileFlow's cycles equal Timeloop's on every point (1,152 single-GEMM mappings)",
             "TileFlow's cycles equal Timeloop's on every point",
             compute=lambda d: _exactness(d), unit="frac",
             note="here: fraction of random fused mappings whose per-level counts equal an element-wise trace "
                  "simulator's (n_random_mappings in the bench JSON)"),
    Headline("fusion_perf", "Time of one evaluation of a fused mapping",
             "about 10–60 ms (TileFlow's C++)",
             "One evaluation of TileFlow's C++ takes about 10–60 ms per fused mapping",
             keys=("us_per_eval", "us_per_eval_median"), unit="us"),
    Headline("fusion_perf", "Attention DSE at edge scale on TileFlow's own files: best dataflow vs the strongest "
             "FLAT (geomean)",
             "about 1.8× geomean over FLAT-HGran",
             "Attention DSE: about 1.8× geomean over FLAT-HGran at edge scale",
             keys=("attention_dse.edge_accel.geomean_vs_strongest_flat",
                   "attention_dse.edge_accel.geomean_speedup_vs_flat_hgran", "attention_dse.edge_accel.geomean_vs_flat",
                   "attention_dse.edge.geomean_vs_flat",
                   "attention_dse.edge_accel.vs_flat", "attention_dse.geomean_vs_flat_edge"),
             pattern=r"attention_dse.*edge.*flat|attention_dse.*flat.*edge", unit="x"),
    Headline("fusion_perf", "Conv chains: best fused dataflow vs Fused-Layer (geomean)",
             "1.28× over Fused-Layer",
             "1.28× over Fused-Layer on conv chains",
             sources=("experiment:fusion_perf/conv_chain", BENCH),
             keys=("conv_chain_tileflow_files.cloud.geomean_vs_strongest_baseline", "geomean_vs_fused_layer",
                   "conv_chain.geomean_vs_fused_layer", "speedup_vs_fused_layer"),
             pattern=r"(?i)conv.*fused_?layer|fused_?layer", unit="x"),
    # ---- chain_fuser vs Chimera
    Headline("chain_fuser", "Reference GEMM chains: fused kernel vs PyTorch eager (geomean)",
             "up to 2.87× over hand-tuned libraries (CPU)",
             "up to 2.87× over hand-tuned libraries",
             keys=("reference_geomean_vs_torch",), unit="x",
             note="the paper gives a maximum; this row is the geomean (see the next row for the maximum)"),
    Headline("chain_fuser", "Reference GEMM chains: fused kernel vs the best library, best shape",
             "up to 2.87× over hand-tuned libraries (CPU)",
             "up to 2.87× over hand-tuned libraries",
             keys=("reference_max_vs_openblas", "reference_max_vs_library"),
             pattern=r"^shapes\[\d+\]\.(ratios\.)?(speedup_)?vs_openblas$", reduce="max", unit="x",
             note="max over the reference shapes of the speedup over numpy/OpenBLAS's best kernel"),
    Headline("chain_fuser", "Reference GEMM chains: fused kernel vs OpenBLAS's best kernel (geomean)",
             "up to 2.87× over hand-tuned libraries (CPU)",
             "up to 2.87× over hand-tuned libraries",
             keys=("reference_geomean_vs_openblas",), unit="x"),
    Headline("chain_fuser", "Speedup over a compiler that does not fuse chains (TVM MetaSchedule, geomean)",
             "up to 2.29× over compilers (CPU)",
             "2.29× over compilers on CPU",
             keys=("geomean_vs_metaschedule",), unit="x"),
    Headline("chain_fuser", "Reference chains: fraction of the FMA peak measured in the run (geomean)",
             "PyTorch about 38%, OpenBLAS's best kernel about 69% (this machine)",
             "the 12 reference chains (bmm, bmm) at about 38% of the FMA limit",
             keys=("reference_peak_fraction",), unit="%"),
    Headline("chain_fuser", "FMA peak of the machine, the best measured in the run (512-bit, all cores)",
             "about 506 GFLOP/s on the two cores",
             "reaches about 506 GFLOP/s on the two cores",
             keys=("fma_peak_gflops",), unit="GFLOP/s"),
    Headline("chain_fuser", "Attention (2k–4k tokens): fused kernel vs scaled_dot_product_attention (geomean)",
             "eager bmm-softmax-bmm about 3× slower than SDPA",
             "about 3× slower than `torch.nn.functional.scaled_dot_product_attention`",
             keys=("attention_vs_sdpa",), unit="x"),
    # ---- soc_mapper vs COMB
    Headline("soc_mapper", "Latency: COMB vs MAGMA (geomean, baseline / COMB)",
             "1.28× lower latency than MAGMA",
             "1.28× lower latency than MAGMA", keys=("geomean_latency_vs_magma",), unit="x"),
    Headline("soc_mapper", "Latency: COMB vs H2H (geomean, baseline / COMB)",
             "1.37× lower latency than H2H",
             "1.37× than H2H", keys=("geomean_latency_vs_h2h",), unit="x"),
    Headline("soc_mapper", "Energy reduction vs MAGMA", "22.7% less energy",
             "22.7% and 29.2% less energy", keys=("energy_reduction_vs_magma",), unit="%"),
    Headline("soc_mapper", "Energy reduction vs H2H", "29.2% less energy",
             "22.7% and 29.2% less energy", keys=("energy_reduction_vs_h2h",), unit="%"),
    Headline("soc_mapper", "Mean PE occupancy vs the baselines", "1.1–1.4× the baselines'",
             "Mean PE occupancy 1.1–1.4× the baselines'",
             pattern=r"^(geomean_)?(pe_)?occupancy_vs_(magma|h2h|baselines?)$", reduce="all", unit="x"),
    # COMB's own experiments ran simplified baselines ("MAGMA" = COMB's GA with one stream, "H2H" = a greedy
    # wave-by-wave mapper; soc_mapper.md): the same headline against those, as the paper measured it
    Headline("soc_mapper", "Latency vs the reference's own MAGMA variant (COMB's GA, one stream; geomean)",
             "1.28× lower latency than MAGMA", "1.28× lower latency than MAGMA",
             keys=("geomean_latency_vs_magma_comb_simplified",), unit="x"),
    Headline("soc_mapper", "Latency vs the reference's own H2H variant (greedy wave-by-wave; geomean)",
             "1.37× lower latency than H2H", "1.37× than H2H",
             keys=("geomean_latency_vs_h2h_wave_greedy",), unit="x"),
    Headline("soc_mapper", "Energy reduction vs the reference's own MAGMA variant", "22.7% less energy",
             "22.7% and 29.2% less energy", keys=("energy_reduction_vs_magma_comb_simplified",), unit="%"),
    Headline("soc_mapper", "Energy reduction vs the reference's own H2H variant", "29.2% less energy",
             "22.7% and 29.2% less energy", keys=("energy_reduction_vs_h2h_wave_greedy",), unit="%"),
    # ---- dynamic_batcher vs ED-Batch
    Headline("dynamic_batcher", "Throughput vs the fastest baseline (real DyNet included), chain workloads (geomean)",
             "1.15× (chain, average)", "average throughput speedups 1.15× (chain)",
             compute=_batcher_speedups("chain"), unit="x", note=_BATCHER_NOTE),
    Headline("dynamic_batcher", "Throughput vs the fastest baseline (real DyNet included), tree workloads (geomean)",
             "1.39× (tree, average)", "1.39× (tree)",
             compute=_batcher_speedups("tree"), unit="x", note=_BATCHER_NOTE),
    Headline("dynamic_batcher", "Throughput vs the fastest baseline (real DyNet included), lattice workloads (geomean)",
             "2.45× (lattice, average)", "2.45× (lattice)",
             compute=_batcher_speedups("lattice"), unit="x", note=_BATCHER_NOTE),
    # ---- offload_trainer vs LSP-Offload
    Headline("offload_trainer", "Iteration time: LSP vs ZeRO-Offload (modelled, per case)",
             "about 0.5× ZeRO-Offload", "Per-iteration latency about 0.5× ZeRO-Offload",
             pattern=r"^modeled_iteration_s\..*lsp_vs_zero", reduce="all",
             compute=ratio_per_case("modeled_iteration_s", "lsp", "zero_offload"), unit="x"),
    Headline("offload_trainer", "Iteration time: LSP vs native GPU training (modelled, per case)",
             "overhead 10.6% at d = 256, 16.7% at d = 512",
             "overhead vs native GPU training 10.6% at d = 256, 16.7% at d = 512",
             pattern=r"^modeled_iteration_s\..*lsp_vs_native", reduce="all",
             compute=ratio_per_case("modeled_iteration_s", "lsp", "native"), unit="x+"),
    Headline("offload_trainer", "ZeRO-Offload vs GPU compute alone (modelled, per case)",
             "1.93–4.28× slower", "ZeRO-Offload runs 1.93–4.28× slower than GPU compute alone",
             pattern=r"^modeled_iteration_s\..*zero_vs_native", reduce="all",
             compute=ratio_per_case("modeled_iteration_s", "zero_offload", "native"), unit="x"),
    Headline("offload_trainer", "GPU memory with LSP (planned)",
             "Deepseek-Coder-1.3B on 4 GB: 3.6 GB; 6.7B on the RTX 4090: 17.0 GB",
             "Deepseek-Coder-1.3B on 4 GB: 3.6 GB GPU memory; 6.7B on the 4090: 17.0 GB",
             pattern=r"^memory_gb\.([^.\[]+|[^\[]+\.gb|[^\[]*(gpu|device|accel)[^\[]*)$", reduce="all",
             unit="GB"),
    Headline("offload_trainer", "Fine-tuning quality: LSP vs full fine-tuning after the same steps",
             "GLUE avg 85.53 (LSP, d = 512, r = 16) vs 83.63 (full fine-tuning)",
             "85.53 (LSP, d = 512, r = 16) vs 83.63 full fine-tuning",
             compute=_convergence_ratio, unit="",
             note="here: eval loss on a shipped corpus with a small real model (lower is better; ≤ 1.03 is the "
                  "project's target)"),
)


def headlines_for(package: str, spec: Sequence[Headline] = HEADLINES) -> list[Headline]:
    return [h for h in spec if h.package == package]


__all__ = ["Headline", "HEADLINES", "REFERENCE_FILES", "SYSTEMS", "BENCH", "headlines_for", "leaves", "get_path",
           "is_number", "dicts_with", "ratio_per_case"]
