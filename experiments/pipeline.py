"""``experiment=pipeline/bert_base``: one zoo model through all five packages, on the one shared IR.

The model (default ``bert_base`` from :mod:`shared_ir.zoo`, the ``workload`` group) is traced once into a
:class:`shared_ir.Graph`; every stage reads that graph:

- ``fusion_perf``: each distinct attention chain (QKᵀ → softmax → ·V, from :meth:`Graph.chains`) becomes a
  :func:`fusion_perf.attention` problem whose MACs are checked against the traced ops; every fusion template is
  searched on ``edge_accel`` and the best fused dataflow is compared with layer-by-layer.
- ``chain_fuser``: the same chain, recognised by :func:`chain_fuser.spec_from_chain`, is compiled (TVM) for one
  head's shapes on this host, checked against eager PyTorch and timed against it.
- ``soc_mapper``: the model's compute layers, together with other zoo models (default resnet18), are mapped on
  ``soc_small`` by COMB (small GA budget) and list heuristics.
- ``offload_trainer``: the transformer shape read off the graph (hidden, FFN width, layers, heads, vocabulary) is
  planned by the LSP-Offload memory planner and iteration-time model on ``rtx4090_workstation`` and ``laptop_4gb``.
- ``dynamic_batcher``: BERT has no recurrent or tree variant in the zoo, so a TreeLSTM at the model's hidden size
  stands in (see :data:`STAND_IN_REASON`), batched by the learned FSM policy vs DyNet's heuristics.

Each stage runs in its own try/except: a failing package (or one that does not import) is recorded with its error in
the summary and the others go on. Writes ``pipeline.csv`` (stage, metric, value), ``pipeline_errors.log`` (the
tracebacks, when a stage failed) and ``soc_schedule_comb.csv``; prints one rich table; returns the summary.
"""
from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import sys
import time
import traceback
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from .config import ExperimentConfigError

STAGES = ("fusion_perf", "chain_fuser", "soc_mapper", "offload_trainer", "dynamic_batcher")
"""The stages, in the order they run."""
SCALES = ("small", "full")

STAND_IN_REASON = (
    "BERT is a static graph: no recurrent or tree variant of it exists in the zoo, so nothing in it needs dynamic "
    "batching. The stand-in is a TreeLSTM (per-instance tree topology, the workload ED-Batch targets) at the traced "
    "model's hidden size, so every cell runs the same hidden x hidden projections as BERT's attention projections.")

# what `scale` sets for every knob left null: small keeps the default run near a minute on 2 cores
_SCALE_DEFAULTS: dict[str, dict[str, Any]] = {
    "small": {"fusion_perf.iterations": 30, "fusion_perf.rollouts": 64, "chain_fuser.top_k": 2,
              "chain_fuser.repeat": 5, "chain_fuser.budget_s": 1.0, "soc_mapper.time_budget_s": 5.0,
              "soc_mapper.generations": 5, "dynamic_batcher.scale": "tiny"},
    "full": {"fusion_perf.iterations": 150, "fusion_perf.rollouts": 128, "chain_fuser.top_k": 4,
             "chain_fuser.repeat": 9, "chain_fuser.budget_s": 3.0, "soc_mapper.time_budget_s": 30.0,
             "soc_mapper.generations": 20, "dynamic_batcher.scale": "small"},
}


# ------------------------------------------------------------------------------------------------ config
def _err(path: str, problem: str, value: Any = None) -> ExperimentConfigError:
    return ExperimentConfigError(path, problem, value)


def _pos_int(path: str, v: Any, allow_none: bool = True) -> None:
    if v is None and allow_none:
        return
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise _err(path, f"must be an integer >= 1{' or null' if allow_none else ''}, got {v!r}", v)


def _pos_num(path: str, v: Any) -> None:
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise _err(path, f"must be a number > 0 or null, got {v!r}", v)


def _names(path: str, v: Any) -> list[str]:
    items = [v] if isinstance(v, str) else list(v or [])
    for i, x in enumerate(items):
        if not isinstance(x, str) or not x:
            raise _err(f"{path}[{i}]", f"must be a non-empty string, got {x!r}", x)
    return items


def _sub(cls: type, data: Any, path: str):
    if isinstance(data, cls):
        return data
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise _err(path, f"must be a mapping, got {data!r}", data)
    known = {f.name for f in fields(cls)}
    bad = sorted(set(data) - known)
    if bad:
        raise _err(path, f"has unknown fields {bad}; expected some of {sorted(known)}", bad)
    return cls(**dict(data))


@dataclass
class FusionStage:
    """``task.fusion_perf``: the TileFlow-style model of the attention chains."""

    arch: str = "edge_accel"
    """Hardware preset (or fusion_perf architecture) the dataflows are modelled on."""
    templates: list[str] = field(default_factory=lambda: ["layerwise", "flat_hgran", "flat_rgran", "chimera", "fused",
                                                         "tileflow"])
    """Fusion templates searched; ``layerwise`` must be among them for the fused-vs-layerwise ratio."""
    iterations: Optional[int] = None
    """MCTS iterations per template (null: from ``scale``)."""
    rollouts: Optional[int] = None
    """Random completions per MCTS iteration (null: from ``scale``)."""
    seed: int = 0
    """Search seed."""

    def __post_init__(self) -> None:
        p = "task.fusion_perf"
        self.templates = _names(f"{p}.templates", self.templates)
        if not self.templates:
            raise _err(f"{p}.templates", "must name at least one template", self.templates)
        _pos_int(f"{p}.iterations", self.iterations)
        _pos_int(f"{p}.rollouts", self.rollouts)


@dataclass
class ChainFuserStage:
    """``task.chain_fuser``: compile one attention chain on this host and time it against eager PyTorch."""

    heads: int = 1
    """Heads (batch of the chain) the kernel is compiled for: 1 = one head's shapes; at most the model's heads."""
    top_k: Optional[int] = None
    """Model-ranked plans compiled and timed; the fastest is kept (null: from ``scale``)."""
    repeat: Optional[int] = None
    """Interleaved timing repeats (medians; null: from ``scale``)."""
    budget_s: Optional[float] = None
    """Seconds of timing, all variants together (null: from ``scale``)."""
    threads: int = 1
    """Threads of both the TVM kernel and eager PyTorch (equal). 1 by default: one head's GEMMs are small, and on
    a loaded 2-core machine multi-threaded eager PyTorch can be descheduled mid-GEMM (we saw 100x slowdowns)."""

    def __post_init__(self) -> None:
        p = "task.chain_fuser"
        _pos_int(f"{p}.heads", self.heads, allow_none=False)
        _pos_int(f"{p}.threads", self.threads, allow_none=False)
        _pos_int(f"{p}.top_k", self.top_k)
        _pos_int(f"{p}.repeat", self.repeat)
        _pos_num(f"{p}.budget_s", self.budget_s)


@dataclass
class SocStage:
    """``task.soc_mapper``: the model mapped together with other zoo models on a multi-accelerator SoC."""

    hardware: str = "soc_small"
    """SoC hardware preset."""
    companions: list[str] = field(default_factory=lambda: ["resnet18"])
    """Other zoo models (batch 1, default kwargs) mapped alongside the model, one copy each."""
    algorithms: list[str] = field(default_factory=lambda: ["comb", "heft", "greedy"])
    """soc_mapper algorithms run (``comb`` first gives the headline; the others are its baselines)."""
    time_budget_s: Optional[float] = None
    """Search seconds of each searching algorithm (null: from ``scale``)."""
    population: int = 8
    """COMB GA population."""
    generations: Optional[int] = None
    """COMB GA generations (null: from ``scale``)."""
    seed: int = 0
    """Seed of every algorithm."""

    def __post_init__(self) -> None:
        p = "task.soc_mapper"
        self.companions = _names(f"{p}.companions", self.companions)
        self.algorithms = _names(f"{p}.algorithms", self.algorithms)
        if not self.algorithms:
            raise _err(f"{p}.algorithms", "must name at least one algorithm", self.algorithms)
        _pos_num(f"{p}.time_budget_s", self.time_budget_s)
        _pos_int(f"{p}.population", self.population, allow_none=False)
        _pos_int(f"{p}.generations", self.generations)


@dataclass
class OffloadStage:
    """``task.offload_trainer``: memory and iteration time of fine-tuning the model (LSP-Offload planner)."""

    hardware: list[str] = field(default_factory=lambda: ["rtx4090_workstation", "laptop_4gb"])
    """Hardware presets planned on (each needs a host CPU and an accelerator linked to it)."""
    batch: int = 8
    """Training batch (sequences)."""
    seq: Optional[int] = None
    """Sequence length (null: the traced model's)."""
    d: Optional[int] = None
    """LSP subspace size (null: min(512, the smallest projection dimension))."""

    def __post_init__(self) -> None:
        p = "task.offload_trainer"
        self.hardware = _names(f"{p}.hardware", self.hardware)
        if not self.hardware:
            raise _err(f"{p}.hardware", "must name at least one preset", self.hardware)
        _pos_int(f"{p}.batch", self.batch, allow_none=False)
        _pos_int(f"{p}.seq", self.seq)
        _pos_int(f"{p}.d", self.d)


@dataclass
class BatcherStage:
    """``task.dynamic_batcher``: the recurrent/tree stand-in batched by the learned FSM policy vs DyNet's."""

    workload: str = "treelstm"
    """dynamic_batcher workload (``treelstm``, ``treegru``, ``lstm_lm``, ``bilstm_tagger``, ...)."""
    batch: int = 8
    """Instances per minibatch."""
    hidden: Optional[int] = None
    """Hidden size (null: the traced model's hidden size)."""
    scale: Optional[str] = None
    """dynamic_batcher scale (tiny | small | full: repeats, minibatches, RL episodes; null: from ``scale``)."""
    threads: int = 1
    """torch threads, equal for every variant."""
    seed: int = 0
    """Seed of instance sampling and exploration."""

    def __post_init__(self) -> None:
        p = "task.dynamic_batcher"
        if not isinstance(self.workload, str) or not self.workload:
            raise _err(f"{p}.workload", f"must be a workload name, got {self.workload!r}", self.workload)
        _pos_int(f"{p}.batch", self.batch, allow_none=False)
        _pos_int(f"{p}.hidden", self.hidden)
        _pos_int(f"{p}.threads", self.threads, allow_none=False)
        if self.scale is not None and self.scale not in ("tiny", "small", "full"):
            raise _err(f"{p}.scale", f"must be tiny, small, full or null, got {self.scale!r}", self.scale)


@dataclass
class PipelineConfig:
    """Parameters of :func:`run` (the ``task`` node of ``experiment=pipeline/<name>``)."""

    scale: str = "small"
    """``small`` or ``full``: the search budgets of every knob left null (``make reproduce SCALE=full``)."""
    stages: list[str] = field(default_factory=lambda: list(STAGES))
    """Stages to run (a subset of :data:`STAGES`; they always run in that order)."""
    fusion_perf: FusionStage = field(default_factory=FusionStage)
    chain_fuser: ChainFuserStage = field(default_factory=ChainFuserStage)
    soc_mapper: SocStage = field(default_factory=SocStage)
    offload_trainer: OffloadStage = field(default_factory=OffloadStage)
    dynamic_batcher: BatcherStage = field(default_factory=BatcherStage)
    top: int = 120
    """Rows of the printed table (every row is in the CSV); 0 prints nothing."""
    csv_name: str = "pipeline.csv"
    """File name of the combined (stage, metric, value) table under the run folder."""
    plots: bool = True
    """Write ``pipeline.png`` (one panel per package) and the SoC mapping's Gantt chart."""

    def __post_init__(self) -> None:
        if self.scale not in SCALES:
            raise _err("task.scale", f"must be one of {list(SCALES)}, got {self.scale!r}", self.scale)
        self.stages = _names("task.stages", self.stages)
        for i, s in enumerate(self.stages):
            if s not in STAGES:
                raise _err(f"task.stages[{i}]", f"unknown stage {s!r}; expected some of {list(STAGES)}", s)
        if not self.stages:
            raise _err("task.stages", f"must name at least one of {list(STAGES)}", self.stages)
        self.fusion_perf = _sub(FusionStage, self.fusion_perf, "task.fusion_perf")
        self.chain_fuser = _sub(ChainFuserStage, self.chain_fuser, "task.chain_fuser")
        self.soc_mapper = _sub(SocStage, self.soc_mapper, "task.soc_mapper")
        self.offload_trainer = _sub(OffloadStage, self.offload_trainer, "task.offload_trainer")
        self.dynamic_batcher = _sub(BatcherStage, self.dynamic_batcher, "task.dynamic_batcher")
        # fill the knobs left null from the scale
        for key, v in _SCALE_DEFAULTS[self.scale].items():
            stage, knob = key.split(".")
            sub = getattr(self, stage)
            if getattr(sub, knob) is None:
                setattr(sub, knob, v)
        if isinstance(self.top, bool) or not isinstance(self.top, int) or self.top < 0:
            raise _err("task.top", f"must be an integer >= 0, got {self.top!r}", self.top)
        if not isinstance(self.csv_name, str) or not self.csv_name.endswith(".csv") or "/" in self.csv_name:
            raise _err("task.csv_name", f"must be a file name ending in .csv, got {self.csv_name!r}", self.csv_name)


# ----------------------------------------------------------------------------------------- the model, from the IR
@dataclass(frozen=True)
class AttentionShape:
    """An attention chain's extents, read from its two batch-matmul ops: S = Q·Kᵀ [batch, M, L] (reduction K),
    O = softmax(S)·V [batch, M, N] (reduction L)."""

    batch: int
    M: int
    K: int
    L: int
    N: int

    @property
    def macs(self) -> int:
        return self.batch * self.M * self.L * (self.K + self.N)


def attention_shape(chain: Any) -> Optional[AttentionShape]:
    """The shape of a QKᵀ → (scale) → softmax → ·V chain, or None when ``chain`` is not one."""
    comp = chain.compute_ops
    kinds = {o.kind.value for o in chain.ops}
    if len(comp) != 2 or "softmax" not in kinds or any(o.kind.value != "batch_matmul" for o in comp):
        return None
    qk, pv = comp[0].extents, comp[1].extents
    batch = math.prod(v for d, v in qk.items() if d.startswith("b"))
    if qk.get("n") != pv.get("k") or qk.get("m") != pv.get("m"):
        return None  # the intermediate is not P[m, l] feeding the second GEMM's reduction
    return AttentionShape(batch, qk["m"], qk["k"], qk["n"], pv["n"])


@dataclass
class ModelFacts:
    """What every stage reads off the traced graph."""

    graph: Any
    attention: list[tuple[Any, AttentionShape]]
    """(chain, shape) of every attention chain, in topological order."""
    ffn: list[Any]
    """linear → elementwise → linear chains (the FFNs)."""
    other_chains: int

    @property
    def heads(self) -> int:
        g = self.attention[0][0].compute_ops[0].extents
        return max((v for d, v in g.items() if d.startswith("b")), default=1)

    @property
    def head_dim(self) -> int:
        return self.attention[0][1].K

    @property
    def hidden(self) -> int:
        return self.heads * self.head_dim

    @property
    def seq(self) -> int:
        return self.attention[0][1].M


def model_facts(graph: Any) -> ModelFacts:
    att, ffn, other = [], [], 0
    for c in graph.chains():
        s = attention_shape(c)
        if s is not None:
            att.append((c, s))
        elif [o.kind.value for o in c.compute_ops] == ["linear", "linear"]:
            ffn.append(c)
        else:
            other += 1
    return ModelFacts(graph, att, ffn, other)


def _need_attention(facts: ModelFacts, stage: str) -> None:
    if not facts.attention:
        raise ValueError(f"{stage}: graph {facts.graph.name!r} has no attention chain (QK^T -> softmax -> .V); "
                         f"Graph.chains() found {len(facts.ffn)} FFN chain(s) and {facts.other_chains} other(s)")


def _weight_params(graph: Any) -> int:
    return sum(t.numel for t in graph.tensors.values()
               if t.role.value == "weight" and t.dtype.value.startswith("float"))


def model_spec_from_graph(facts: ModelFacts, name: str) -> Any:
    """offload_trainer's ModelSpec (a transformer's shape) read off the traced graph: heads and head size from the
    attention chains, the FFN width from the first FFN chain's weight, the vocabulary from the largest embedding
    table. No LM head in the graph (an encoder): the vocabulary matrix is counted once (``tied_embeddings``)."""
    from offload_trainer.planner import ModelSpec

    _need_attention(facts, "offload_trainer")
    g = facts.graph
    if facts.ffn:
        w = [a.tensor for a in facts.ffn[0].compute_ops[0].inputs if a.tensor.role.value == "weight"][0]
        inter = int(w.shape[0])
        glue = [o for o in facts.ffn[0].ops if not o.kind.compute_intensive]
        fn = str(glue[0].attr("fn", glue[0].attr("op", ""))) if glue else ""
        mlp = "swiglu" if "silu" in fn else "gelu"
    else:
        inter, mlp = 4 * facts.hidden, "gelu"
    vocab = max((int(a.tensor.shape[0]) for o in g.topological_ops() if o.kind.value == "embedding"
                 for a in o.inputs if a.tensor.role.value == "weight" and len(a.tensor.shape) == 2), default=0)
    if vocab < 1:
        raise ValueError(f"offload_trainer: graph {g.name!r} has no embedding table to read the vocabulary from")
    head = any(o.kind.value == "linear" and any(a.tensor.role.value == "weight" and a.tensor.shape[0] == vocab
                                                 for a in o.inputs) for o in g.topological_ops())
    return ModelSpec(name, facts.hidden, inter, len(facts.attention), facts.heads, vocab, mlp=mlp,
                     tied_embeddings=not head)


# ------------------------------------------------------------------------------------------------ stages
@contextlib.contextmanager
def _torch_threads():
    """Restore torch's thread count after a stage (stages set their own; the next must not inherit it)."""
    torch = sys.modules.get("torch")
    n = torch.get_num_threads() if torch is not None else None
    try:
        yield
    finally:
        torch = sys.modules.get("torch")
        if torch is not None and n is not None:
            torch.set_num_threads(n)


@contextlib.contextmanager
def _tvm_threads(n: int):
    """TVM's thread pool at ``n`` threads for the block (TVM reads TVM_NUM_THREADS only once, at import), then
    back to what it was; a no-op when this TVM has no ``runtime.config_threadpool``."""
    try:
        import tvm_ffi

        config = tvm_ffi.get_global_func("runtime.config_threadpool")
        before = int(tvm_ffi.get_global_func("runtime.NumThreads")())
    except Exception:  # noqa: BLE001 - older/newer TVM: keep its default pool
        yield
        return
    config(0, int(n))
    try:
        yield
    finally:
        config(0, before)


def stage_fusion_perf(facts: ModelFacts, cfg: FusionStage, out: Path) -> dict[str, Any]:
    from fusion_perf import attention
    from fusion_perf.dse import compare

    _need_attention(facts, "fusion_perf")
    shapes: dict[AttentionShape, list[Any]] = {}
    for c, s in facts.attention:
        shapes.setdefault(s, []).append(c)
    figs: dict[str, Any] = {"arch": cfg.arch, "attention_chains": len(facts.attention),
                            "distinct_shapes": len(shapes)}
    tot_best = tot_lw = 0.0
    for i, (s, chains) in enumerate(shapes.items()):
        prob = attention(s.batch, s.M, s.K, s.L, s.N, softmax=True,
                         name=f"{facts.graph.name}_attn_b{s.batch}_m{s.M}_k{s.K}_l{s.L}_n{s.N}")
        ir_macs = sum(o.macs for o in chains[0].compute_ops)
        if prob.macs != ir_macs:  # the problem must be the traced chain, not a look-alike
            raise ValueError(f"fusion_perf: problem {prob.name} has {prob.macs} MACs, the traced chain "
                             f"{'→'.join(chains[0].names)} has {ir_macs}")
        r = compare(prob, cfg.arch, cfg.templates, cfg.iterations, cfg.rollouts, cfg.seed)
        key = "" if len(shapes) == 1 else f"shape{i}."
        figs[f"{key}shape"] = f"batch·heads={s.batch} M={s.M} K={s.K} L={s.L} N={s.N}"
        figs[f"{key}macs_per_chain"] = ir_macs
        figs[f"{key}best_template"] = r["best"]
        figs[f"{key}best_cycles"] = r["best_cycles"]
        for t, c in r["cycles"].items():
            figs[f"{key}cycles.{t}"] = c
        if "speedup_vs_layerwise" in r:
            figs[f"{key}speedup_vs_layerwise"] = r["speedup_vs_layerwise"]
        for ref in ("flat_hgran", "flat_rgran", "flat"):  # FLAT at head / row granularity ("flat" = row, old name)
            if f"speedup_vs_{ref}" in r:
                figs[f"{key}speedup_vs_{ref}"] = r[f"speedup_vs_{ref}"]
        if "layerwise" in r["energy_pj"] and r["energy_pj"].get(r["best"]):
            figs[f"{key}energy_best_over_layerwise"] = r["energy_pj"][r["best"]] / r["energy_pj"]["layerwise"]
        figs[f"{key}compute_bound_cycles"] = r["compute_bound_cycles"]
        figs[f"{key}search_s"] = r["search_s"]
        tot_best += r["best_cycles"] * len(chains)
        tot_lw += r["cycles"].get("layerwise", math.nan) * len(chains)
    figs["model_attention_cycles_best"] = tot_best
    if "layerwise" in cfg.templates:
        figs["model_attention_cycles_layerwise"] = tot_lw
        figs["model_speedup_vs_layerwise"] = tot_lw / tot_best if tot_best else None
    return figs


def stage_chain_fuser(facts: ModelFacts, cfg: ChainFuserStage, out: Path) -> dict[str, Any]:
    import dataclasses

    import chain_fuser
    import torch
    from chain_fuser.kernel import import_tvm, random_inputs, reference
    from chain_fuser.timing import time_interleaved, torch_eager

    _need_attention(facts, "chain_fuser")
    chain, shape = facts.attention[0]
    spec = chain_fuser.spec_from_chain(chain, name=f"{facts.graph.name}_attention")
    if (spec.M, spec.K, spec.L, spec.N) != (shape.M, shape.K, shape.L, shape.N) or spec.glue != "softmax":
        raise ValueError(f"chain_fuser: spec_from_chain read {spec} from {'→'.join(chain.names)}, which disagrees "
                         f"with the IR's extents {shape}")
    heads = min(cfg.heads, spec.batch)
    head = dataclasses.replace(spec, batch=heads, name=f"{spec.name}_{heads}head")
    import_tvm()
    with _tvm_threads(cfg.threads):
        torch.set_num_threads(cfg.threads)  # restored by the caller (_torch_threads)
        kernel, rep = chain_fuser.tune(head, top_k=cfg.top_k)
        ins = random_inputs(head, seed=1)
        ref = reference(head, *ins)
        got = kernel(*ins)
        err = float((got - ref).abs().max())
        tol = 1e-3 * float(ref.abs().max()) + 1e-5
        ms = time_interleaved({"fused": lambda: kernel(*ins), "eager": torch_eager(head, ins)}, cfg.repeat,
                              cfg.budget_s)
    figs: dict[str, Any] = {
        "chain": "→".join(chain.names), "glue": spec.glue, "scale": spec.scale,
        "model_heads": spec.batch, "compiled_heads": heads, "shape": f"M={spec.M} K={spec.K} L={spec.L} N={spec.N}",
        "max_abs_err_vs_torch": err, "allclose_vs_torch": bool(err <= tol),
        "fused_ms": ms["fused"], "eager_ms": ms["eager"], "speedup_vs_eager": ms["eager"] / ms["fused"],
        "gflops": head.flops / ms["fused"] / 1e6, "micro_kernel": kernel.plan.micro.name,
        "order": ",".join(kernel.plan.fused.order), "predicted_ms": kernel.plan.predicted_s * 1e3,
        "model_pick_vs_best": rep.model_pick_vs_best, "from_cache": bool(rep.from_cache),
        "tune_s": rep.seconds, "threads": cfg.threads,
    }
    if err > tol:
        raise AssertionError(f"chain_fuser: fused kernel differs from PyTorch by {err:.3g} (tolerance {tol:.3g})")
    return figs


def stage_soc_mapper(facts: ModelFacts, cfg: SocStage, out: Path, label: str, gantt: bool = True) -> dict[str, Any]:
    from collections import Counter

    from soc_mapper import RunConfig, build_workload, cost_table, soc_from_system
    from soc_mapper.algorithms import ALGORITHMS
    from soc_mapper.report import schedule_rows, write_gantt, write_schedule_csv

    from .workloads import load_workload

    models = [(label, facts.graph, 1)]
    for i, c in enumerate(cfg.companions):
        try:
            g = load_workload({"source": "zoo", "name": c})
        except Exception as e:
            raise ExperimentConfigError(f"task.soc_mapper.companions[{i}]", f"{c!r} could not be traced: {e}", c) from e
        models.append((c, g, 1))
    w = build_workload(models, name=f"pipeline_{label}")
    soc = soc_from_system(cfg.hardware)
    cost = cost_table(w, soc)
    rc = RunConfig(algorithms=list(cfg.algorithms), time_budget_s=float(cfg.time_budget_s), seed=cfg.seed,
                   ga={"population": cfg.population, "generations": cfg.generations})
    per_model = Counter(l.model for l in w.layers)
    figs: dict[str, Any] = {"soc": soc.name, "accelerators": ",".join(a.name for a in soc.accs),
                            "models": ",".join(m for m, _, _ in models), "layers": len(w),
                            f"layers.{label}": per_model.get(f"{label}#0", 0)}
    results = {}
    for name in rc.algorithms:
        r = ALGORITHMS[name](w, soc, cost, rc)
        results[name] = r
        figs[f"{name}.latency_ms"] = r.result.latency * 1e3
        figs[f"{name}.energy_mj"] = r.result.energy * 1e3
        figs[f"{name}.pe_occupancy"] = r.result.occupancy
        figs[f"{name}.search_s"] = r.search_seconds
    first = rc.algorithms[0]
    r0 = results[first]
    for name in rc.algorithms[1:]:
        figs[f"latency_{name}_over_{first}"] = results[name].result.latency / r0.result.latency
    # where the model's layers went, and when each model finished, under the first algorithm's plan
    place = Counter(soc.accs[a].name for l, a in zip(w.layers, r0.plan.placement) if l.model == f"{label}#0")
    figs[f"{first}.{label}_layers_per_accelerator"] = ",".join(f"{k}:{v}" for k, v in sorted(place.items()))
    for m, _, _ in models:
        fin = [float(r0.result.finish[v]) for v, l in enumerate(w.layers) if l.model == f"{m}#0"]
        figs[f"{first}.finish_ms.{m}"] = max(fin) * 1e3 if fin else None
    write_schedule_csv(str(out / f"soc_schedule_{first}.csv"), schedule_rows(w, soc, cost, r0.plan, r0.result))
    if gantt:
        write_gantt(str(out / f"soc_gantt_{first}.png"), w, soc, r0.plan, r0.result,
                    title=f"{first} on {soc.name}: {figs['models']} ({figs[f'{first}.latency_ms']:.2f} ms)")
    return figs


def stage_offload_trainer(facts: ModelFacts, cfg: OffloadStage, out: Path, label: str) -> dict[str, Any]:
    from offload_trainer.planner import PlanParams, plan_memory, plan_time

    spec = model_spec_from_graph(facts, label)
    seq = cfg.seq or facts.seq
    d = cfg.d or min(512, min(min(o, i) for _, o, i in spec.linear_shapes()))
    p = PlanParams(d=d)
    gp = _weight_params(facts.graph)
    figs: dict[str, Any] = {"hidden": spec.hidden, "intermediate": spec.intermediate, "layers": spec.layers,
                            "heads": spec.heads, "vocab": spec.vocab, "mlp": spec.mlp,
                            "params_planner": spec.params, "params_graph": gp,
                            "params_planner_over_graph": spec.params / gp if gp else None,
                            "batch": cfg.batch, "seq": seq, "lsp_d": d}
    for hw in cfg.hardware:
        t = plan_time(spec, cfg.batch, seq, hw, p)
        for m in ("lsp", "zero_offload", "native"):
            figs[f"{hw}.iteration_ms.{m}"] = t[m] * 1e3
        figs[f"{hw}.lsp_over_zero_offload"] = t["lsp_vs_zero"]
        figs[f"{hw}.lsp_over_native"] = t["lsp_vs_native"]
        for m in ("lsp", "zero_offload", "native"):
            pm = plan_memory(spec, m, cfg.batch, seq, hw, p)
            figs[f"{hw}.accelerator_gb.{m}"] = pm["accelerator_gb"]
            figs[f"{hw}.host_gb.{m}"] = pm["host_gb"]
            figs[f"{hw}.fits.{m}"] = pm["fits"]
        figs[f"{hw}.accelerator_capacity_gb"] = pm["accelerator_capacity_gb"]
    return figs


def stage_dynamic_batcher(facts: ModelFacts | None, cfg: BatcherStage, out: Path) -> dict[str, Any]:
    from dynamic_batcher.evaluation import run_workload, set_clock

    if cfg.hidden is None and (facts is None or not facts.attention):
        raise ValueError("dynamic_batcher: task.dynamic_batcher.hidden is null and the graph has no attention "
                         "chain to read the hidden size from")
    hidden = cfg.hidden or facts.hidden
    set_clock("cpu")  # process CPU time: steadier than wall time on a shared machine (the package's default)
    r = run_workload(cfg.workload, cfg.batch, hidden, cfg.scale, cfg.seed, cfg.threads, None, log=lambda *a: None)
    b = r["batches"]
    best = r["best_baseline"]
    return {"workload": cfg.workload, "family": r["family"], "hidden": hidden, "batch": cfg.batch,
            "scale": cfg.scale, "stand_in_reason": STAND_IN_REASON, "nodes": b["nodes"],
            "batches.lower_bound": b["lower_bound"], "batches.fsm": b["fsm"], "batches.typewise_lb": b["typewise_lb"],
            **{f"batches.{k}": v for k, v in b.items() if k.startswith("dynet") and isinstance(v, int)},
            "throughput.fsm_pq": r["throughput"]["fsm_pq"], "speedup_vs_real_dynet": r["speedup_vs_real_dynet"],
            "best_baseline": best, "speedup_vs_best_baseline": r["speedup_vs_best_baseline"],
            "exec_speedup_vs_best_baseline": r["exec_speedup_vs_best_baseline"],
            "sched_fraction": r["sched_fraction"]}


# ------------------------------------------------------------------------------------------------ output
HEADLINES: dict[str, tuple[str, ...]] = {
    "fusion_perf": ("arch", "attention_chains", "*shape", "*best_template", "*speedup_vs_layerwise",
                    "*speedup_vs_flat_hgran", "*speedup_vs_flat_rgran", "*energy_best_over_layerwise",
                    "model_speedup_vs_layerwise"),
    "chain_fuser": ("chain", "shape", "compiled_heads", "threads", "allclose_vs_torch", "max_abs_err_vs_torch",
                    "fused_ms", "eager_ms", "speedup_vs_eager", "micro_kernel"),
    "soc_mapper": ("soc", "models", "layers*", "*.latency_ms", "*.energy_mj", "latency_*_over_*",
                   "*_layers_per_accelerator", "*.finish_ms.*"),
    "offload_trainer": ("hidden", "intermediate", "layers", "heads", "vocab", "params_planner_over_graph", "batch",
                        "seq", "*.iteration_ms.*", "*.lsp_over_zero_offload", "*.accelerator_gb.lsp", "*.fits.*"),
    "dynamic_batcher": ("workload", "hidden", "batch", "nodes", "batches.*", "best_baseline",
                        "speedup_vs_best_baseline", "exec_speedup_vs_best_baseline"),
}
"""Per stage, the figures (glob patterns, in figure order) printed and returned in the summary; the CSV and
``pipeline.json`` hold every figure."""


KEY_FIGURES: dict[str, tuple[str, ...]] = {
    "fusion_perf": ("model_speedup_vs_layerwise",),
    "chain_fuser": ("allclose_vs_torch", "speedup_vs_eager"),
    "soc_mapper": ("*.latency_ms",),
    "offload_trainer": ("*.lsp_over_zero_offload",),
    "dynamic_batcher": ("speedup_vs_best_baseline",),
}
"""The few figures per stage put at the top level of the summary as ``<stage>.<figure>`` (the reproduction
report shows a summary's top-level scalars)."""


def headline(stage: str, figures: Mapping[str, Any], patterns: Mapping[str, tuple[str, ...]] = HEADLINES
             ) -> dict[str, Any]:
    """The figures of ``stage`` whose names match its ``patterns`` (glob), in figure order."""
    import fnmatch

    pats = patterns.get(stage, ("*",))
    return {k: v for k, v in figures.items() if any(fnmatch.fnmatchcase(k, p) for p in pats)}


def _fmt(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        return f"{v:.4g}" if math.isfinite(v) else str(v)
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10_000 else str(v)
    return str(v)


def rows_of(stages: Mapping[str, Mapping[str, Any]], key: str = "figures") -> list[dict[str, Any]]:
    """The (stage, metric, value) rows: each stage's status and seconds, then its figures (``key``) or its error."""
    rows = []
    for name, st in stages.items():
        rows.append({"stage": name, "metric": "status", "value": st["status"]})
        if st.get("seconds") is not None:
            rows.append({"stage": name, "metric": "seconds", "value": st["seconds"]})
        if st.get("error"):
            rows.append({"stage": name, "metric": "error", "value": st["error"]})
        for k, v in (st.get(key) or {}).items():
            rows.append({"stage": name, "metric": k, "value": v})
    return rows


def write_rows(rows: list[dict[str, Any]], path: Path) -> None:
    from shared_ir import atomic_write_text

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["stage", "metric", "value"], lineterminator="\n")
    w.writeheader()
    for r in rows:
        v = r["value"]
        w.writerow({**r, "value": f"{v:.6g}" if isinstance(v, float) else v})
    atomic_write_text(str(path), buf.getvalue())


def print_rows(rows: list[dict[str, Any]], title: str, top: int, caption: str) -> None:
    from rich.table import Table

    from .run import console

    t = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    t.add_column("stage", style="bold cyan", no_wrap=True)
    t.add_column("metric", no_wrap=True)
    t.add_column("value", overflow="fold")
    shown = rows[:top]
    for i, r in enumerate(shown):
        style = None
        if r["metric"] == "status":
            style = "green" if r["value"] == "ok" else ("red" if r["value"] == "error" else "dim")
        elif r["metric"] == "error":
            style = "red"
        first = i == 0 or shown[i - 1]["stage"] != r["stage"]
        last = i + 1 == len(shown) or shown[i + 1]["stage"] != r["stage"]
        t.add_row(r["stage"] if first else "", r["metric"], _fmt(r["value"]), style=style, end_section=last)
    if len(rows) > len(shown):
        t.caption = f"{caption}  ({len(shown)} of {len(rows)} rows shown; every row is in the CSV)"
    console().print(t)


# ------------------------------------------------------------------------------------------------ the task
def run(hardware: Mapping[str, Any] | None = None, workload: Mapping[str, Any] | None = None, out_dir: str = ".",
        **params: Any) -> dict[str, Any]:
    """The pipeline task (runner convention). ``workload`` is the model (default bert_base); ``hardware`` is not
    used: each stage names its own preset (``task.<stage>.hardware`` / ``arch``)."""
    del hardware
    cfg = PipelineConfig(**params)
    from .workloads import load_workload, workload_label

    wl = dict(workload) if workload else {"source": "zoo", "name": "bert_base"}
    label = workload_label(wl)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    graph = load_workload(wl)  # the one traced graph every stage reads: failing here fails the run
    facts = model_facts(graph)
    trace_s = time.perf_counter() - t0

    runners: dict[str, Callable[[], dict[str, Any]]] = {
        "fusion_perf": lambda: stage_fusion_perf(facts, cfg.fusion_perf, out),
        "chain_fuser": lambda: stage_chain_fuser(facts, cfg.chain_fuser, out),
        "soc_mapper": lambda: stage_soc_mapper(facts, cfg.soc_mapper, out, label, gantt=cfg.plots),
        "offload_trainer": lambda: stage_offload_trainer(facts, cfg.offload_trainer, out, label),
        "dynamic_batcher": lambda: stage_dynamic_batcher(facts, cfg.dynamic_batcher, out),
    }
    stages: dict[str, dict[str, Any]] = {}
    tracebacks: list[str] = []
    for name in STAGES:
        if name not in cfg.stages:
            stages[name] = {"status": "skipped", "seconds": None, "figures": {}}
            continue
        ts = time.perf_counter()
        print(f"[pipeline] {name} on {label} ...", flush=True)  # a stage may take a while (a first TVM compile)
        try:
            with _torch_threads():
                figs = runners[name]()
            stages[name] = {"status": "ok", "seconds": round(time.perf_counter() - ts, 3), "figures": figs,
                            "headline": headline(name, figs)}
        except Exception as e:  # noqa: BLE001 - one failing package must not lose the others' results
            from .run import one_line

            stages[name] = {"status": "error", "seconds": round(time.perf_counter() - ts, 3), "figures": {},
                            "error": one_line(e)}
            tracebacks.append(f"=== {name}\n{traceback.format_exc()}")

    from shared_ir import atomic_write_text

    model = {"name": label, "ops": len(graph), "macs": int(graph.macs), "weight_params": _weight_params(graph),
             "attention_chains": len(facts.attention), "ffn_chains": len(facts.ffn),
             "hidden": facts.hidden if facts.attention else None, "heads": facts.heads if facts.attention else None,
             "seq": facts.seq if facts.attention else None, "trace_s": round(trace_s, 3)}
    model_rows = [{"stage": "model", "metric": k, "value": v} for k, v in model.items()]
    csv_path = out / cfg.csv_name
    write_rows(model_rows + rows_of(stages), csv_path)
    json_path = csv_path.with_suffix(".json")
    atomic_write_text(str(json_path), json.dumps({"model": model, "stages": stages}, indent=1, default=str) + "\n")
    png = None
    if cfg.plots:
        from .pipeline_plots import plot_stages

        png = plot_stages(stages, out / "pipeline.png", f"{label} through the five packages (scale {cfg.scale})")
    err_log = None
    if tracebacks:
        err_log = out / "pipeline_errors.log"
        atomic_write_text(str(err_log), "\n".join(tracebacks))
    ok = [n for n, s in stages.items() if s["status"] == "ok"]
    failed = [n for n, s in stages.items() if s["status"] == "error"]
    if cfg.top:
        print_rows(model_rows + rows_of(stages, "headline"),
                   f"pipeline: {label} through the five packages on one shared IR (scale {cfg.scale})", cfg.top,
                   f"{len(ok)} ok, {len(failed)} failed" + (f" ({', '.join(failed)}; tracebacks: {err_log})"
                                                             if failed else "")
                   + f" · every figure: {csv_path}")
    key: dict[str, Any] = {}
    for n, st in stages.items():
        if st["status"] == "ok":
            key.update({f"{n}.{k}": v for k, v in headline(n, st["figures"], KEY_FIGURES).items()})
        elif st["status"] == "error":
            key[f"{n}.error"] = st["error"][:80]
    brief = {n: {k: v for k, v in s.items() if k != "figures"} for n, s in stages.items()}
    return {"model": label, "stages_run": f"{len(ok)} of {len(ok) + len(failed)} ok", **key,
            "ops": len(graph), "macs": int(graph.macs), "attention_chains": len(facts.attention),
            "scale": cfg.scale, "stages_ok": ok, "stages_failed": failed, "stages": brief,
            "csv": str(csv_path), "json": str(json_path), "png": str(png) if png else None,
            "errors_log": str(err_log) if err_log else None}


__all__ = ["run", "PipelineConfig", "STAGES", "STAND_IN_REASON", "attention_shape", "model_facts",
           "model_spec_from_graph", "rows_of"]
