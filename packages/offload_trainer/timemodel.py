"""A per-machine calibrated time model of one training step on the CPU, for every method, and its check against
measured steps.

Calibration (:func:`calibrate`, about half a minute): the rates the model needs, each from a micro-benchmark of its
own, none from a training step of the checked shapes: dense GEMM throughput as a function of shape
(``peak · Π x/(x + k0)`` over the three dimensions, fitted to a grid of products), streaming bandwidth, the host
cost of one dispatched operator with autograd, CSR-times-dense throughput, the CPU Adam kernels (ours, DeepSpeed's,
torch's fused and foreach Adam) and the SVD.
They are stored per CPU and thread count next to the host's peak record (:func:`shared_ir.hostinfo.record_dir`).

Prediction (:func:`predict_step`): per block, the GEMMs of forward and backward that the method runs (dX for all;
dW for full FT, ZeRO and GaLore; LSP's projections X Q, dY P and (dY P)ᵀ(X Q); LoRA's adapters) at the fitted GEMM
rate; attention's batched products at the same rate; norms, activations and residuals as bytes (the shared_ir
ops of the block) at the streaming rate, backward twice forward; the optimizer (torch's fused Adam over the
weights; ours over d² per LSP linear plus its update W ← W − η P Δ Qᵀ; DeepSpeed's (or the ablation's) CPU Adam
plus the gradient and weight copies; GaLore's projection, Adam on rank × n and back-projection; LoRA's Adam); and
the host cost of each dispatched operator (operators per block and method counted once with ``torch.profiler`` on a
tiny model of the same family). On a CPU every resource is the same cores, so the parts add up.

Check (:func:`validate`): measured median step times of the real trainer against the predictions, the worst
relative error is ``time_model_max_rel_err``.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional

from .planner import ModelSpec

CALIBRATION_VERSION = 1
METHODS = ("full_ft", "lsp", "lora", "galore", "deepspeed_zero_offload", "zero_offload")


@dataclass(frozen=True)
class HostRates:
    """Measured rates of this CPU at ``threads`` torch threads."""

    cpu: str
    threads: int
    gemm_peak: float
    """FLOP/s a large fp32 GEMM approaches."""
    gemm_k0: float
    """The dimension at which a GEMM's efficiency halves along that dimension."""
    mem_bw: float
    """Bytes/s of a streaming elementwise operator."""
    op_s: float
    """Seconds of host time per dispatched operator (forward + its autograd node, amortised)."""
    spmm_macs: float
    """Multiply-adds/s of a CSR matrix times a dense one."""
    adam_ours: float
    """Elements/s of the package's C Adam (parameter update)."""
    adam_fused: float
    """Elements/s of torch's fused Adam."""
    adam_foreach: float
    """Elements/s of torch's default (foreach) Adam on many small tensors."""
    svd_s_per_unit: float
    """Seconds per m·n·min(m, n) of ``torch.linalg.svd``."""
    adam_deepspeed: float = 0.0
    """Elements/s of DeepSpeed's CPU Adam (0: DeepSpeed unavailable here)."""
    ops: dict = field(default_factory=dict)
    """Per method: ``{"per_block", "fixed", "op_s"}``: top-level operators of a step per block and outside the
    blocks (counted with torch.profiler on a tiny model of the family), and the host seconds of each (a tiny model's
    step time, whose arithmetic is negligible, over its operator count)."""
    version: int = CALIBRATION_VERSION

    def gemm_s(self, m: int, n: int, k: int) -> float:
        eff = 1.0
        for x in (m, n, k):
            eff *= x / (x + self.gemm_k0)
        return 2.0 * m * n * k / (self.gemm_peak * eff)


def _median_time(fn: Callable[[], Any], repeats: int = 5, warmup: int = 1) -> float:
    from shared_ir.benchkit import do_bench

    return do_bench(fn, warmup=warmup, repeats=repeats).wall


# --- calibration ----------------------------------------------------------------------------------------------------
GEMM_GRID = ((1024, 1024, 1024), (256, 1024, 1024), (1024, 256, 1024), (1024, 1024, 256), (64, 1024, 1024),
             (1024, 64, 1024), (1024, 1024, 64), (256, 256, 256), (128, 128, 128), (512, 2048, 512),
             (32, 512, 512), (512, 512, 32))
"""(m, n, k) of the calibration GEMMs: large, skinny in each dimension, small."""


def _gemm_fit(times: dict[tuple[int, int, int], float]) -> tuple[float, float]:
    """(peak, k0) minimising the squared log error of ``peak · Π x/(x + k0)`` against the measured rates."""
    best = (float("inf"), 0.0, 0.0)
    for k0 in [2 ** (e / 4) for e in range(0, 41)]:  # 1 … 1024
        logs = [math.log(2 * m * n * k / t) - sum(math.log(x / (x + k0)) for x in (m, n, k))
                for (m, n, k), t in times.items()]
        mu = statistics.fmean(logs)
        err = sum((v - mu) ** 2 for v in logs)
        if err < best[0]:
            best = (err, math.exp(mu), k0)
    return best[1], best[2]


def _calib_gemm() -> tuple[float, float]:
    import torch

    times = {}
    for m, n, k in GEMM_GRID:
        a, b = torch.randn(m, k), torch.randn(k, n)
        times[(m, n, k)] = _median_time(lambda a=a, b=b: torch.mm(a, b), repeats=5, warmup=2)
    return _gemm_fit(times)


def _calib_stream() -> float:
    import torch

    n = 1 << 23  # 32 MB per operand: far beyond the caches
    a, b, c = torch.randn(n), torch.randn(n), torch.empty(n)
    return 12 * n / _median_time(lambda: torch.add(a, b, out=c), repeats=7, warmup=2)


def _calib_op() -> float:
    """Host seconds per operator of a chain of tiny elementwise operators, forward and backward (autograd)."""
    import torch

    x = torch.randn(8, requires_grad=True)
    k = 64

    def chain():
        y = x
        for _ in range(k):
            y = y * 1.0001
        y.sum().backward()

    return _median_time(chain, repeats=7, warmup=2) / (2 * k)


def _calib_spmm() -> float:
    import torch

    from .projector import SparseProjector

    n, d, r, t = 1536, 192, 4, 512
    P = SparseProjector(n, d, r, seed=0)
    x = torch.randn(d, t)
    csr = P.mat_form(False)
    return n * r * t / _median_time(lambda: torch.mm(csr, x), repeats=7, warmup=2)


def _calib_adam() -> tuple[float, float, float, float]:
    """(ours, torch fused, torch foreach, DeepSpeed's) elements/s."""
    import torch

    from .cpu_adam import CPUAdam

    n = 1 << 22
    p, g, m, v = (torch.zeros(n) for _ in range(4))
    ours = CPUAdam()
    step = [0]

    def run_ours():
        step[0] += 1
        ours.param(p, g, m, v, step[0], 1e-3)

    t_ours = _median_time(run_ours, repeats=5, warmup=2)
    ours.close()
    rates = [n / t_ours, _calib_deepspeed_adam(g)]
    for kw, shapes in (({"fused": True}, [(1024, n // 1024)]), ({}, [(576, 25)] * 64 + [(25, 1536)] * 64)):
        ps = [torch.zeros(s, requires_grad=True) for s in shapes]
        for q in ps:
            q.grad = torch.randn(q.shape)
        opt = torch.optim.Adam(ps, lr=1e-3, **kw)
        rates.append(sum(q.numel() for q in ps) / _median_time(opt.step, repeats=5, warmup=2))
    return rates[0], rates[2], rates[3], rates[1]


def _calib_deepspeed_adam(g) -> float:
    """Elements/s of DeepSpeed's CPU Adam on a flat buffer (0.0 when DeepSpeed does not import or build)."""
    import torch

    from .deepspeed_ref import load_deepspeed_cpu_adam

    DSAdam, _why = load_deepspeed_cpu_adam()
    if DSAdam is None:
        return 0.0
    p = torch.zeros(g.numel(), requires_grad=True)
    p.grad = g
    opt = DSAdam([p], lr=1e-3, adamw_mode=False)
    return g.numel() / _median_time(opt.step, repeats=5, warmup=2)


def _calib_svd() -> float:
    import torch

    a = torch.randn(576, 576)
    return _median_time(lambda: torch.linalg.svd(a, full_matrices=False), repeats=3, warmup=1) / 576 ** 3


def calibrate(threads: int = 0, log: Optional[Callable[[str], None]] = None) -> HostRates:
    """Measure :class:`HostRates` on this CPU at ``threads`` torch threads (0: torch's current number)."""
    import torch

    from shared_ir.hostinfo import cpu_id

    threads = threads or torch.get_num_threads()
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            peak, k0 = _calib_gemm()
            bw, spmm, svd = _calib_stream(), _calib_spmm(), _calib_svd()
        op = _calib_op()
        ours, fused, foreach, ds = _calib_adam()
        rates = HostRates(cpu_id(), threads, peak, k0, bw, op, spmm, ours, fused, foreach, svd, ds)
        rates = HostRates(**{**asdict(rates), "ops": _calib_ops(rates, threads)})
    finally:
        torch.set_num_threads(old)
    if log:
        log(f"calibrated: GEMM peak {peak / 1e9:.0f} GFLOP/s (k0 {k0:.0f}), stream {bw / 1e9:.1f} GB/s, "
            f"{op * 1e6:.1f} µs/op, CSR {spmm / 1e9:.2f} GMAC/s, Adam ours/fused/foreach "
            f"{ours / 1e6:.0f}/{fused / 1e6:.0f}/{foreach / 1e6:.0f} M/s")
    return rates


def rates_path(threads: int) -> str:
    from shared_ir.hostinfo import cpu_id, record_dir

    return os.path.join(record_dir(), f"offload_rates-{cpu_id()}-t{threads}.json")


def host_rates(threads: int = 0, recalibrate: bool = False, log=None) -> HostRates:
    """The stored calibration of this CPU and thread count, measured (and stored atomically) when missing."""
    import torch

    from shared_ir import atomic_write_text

    threads = threads or torch.get_num_threads()
    path = rates_path(threads)
    if not recalibrate and os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as f:
                rec = json.load(f)
            if rec.get("version") == CALIBRATION_VERSION:
                return HostRates(**rec)
        except (OSError, ValueError, TypeError):
            pass  # unreadable or from another layout: measure again
    rates = calibrate(threads, log)
    atomic_write_text(path, json.dumps(asdict(rates), indent=1))
    return rates


# --- prediction -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepShape:
    """What a step's cost depends on besides the model: tokens, method and its knobs."""

    method: str
    batch: int
    seq: int
    head: str = "class"
    """``class`` (a small classification head on the last token) or ``lm`` (logits over the vocabulary)."""
    num_labels: int = 5
    d: int = 192
    r: int = 4
    lora_r: int = 8
    galore_rank: int = 16

    @property
    def tokens(self) -> int:
        return self.batch * self.seq


def _proj_s(rates: HostRates, rows: int, cols: int, sh: StepShape) -> tuple[float, float]:
    """(dense, CSR) seconds of one projection of ``cols`` tokens through an rows×d projector."""
    return rates.gemm_s(sh.d, cols, rows), rows * sh.r * cols / rates.spmm_macs


def _lsp_linear_s(rates: HostRates, o: int, i: int, sh: StepShape) -> float:
    """LSP's extra work for one linear per step: X Q, dY P, their product, Δ Qᵀ and the weight update; dense
    scattered forms where the trainer may take them (memory cap) and they are faster, as it decides."""
    t, d = sh.tokens, sh.d
    xq, dyp = _proj_s(rates, i, t, sh), _proj_s(rates, o, t, sh)
    upd_dense = rates.gemm_s(i, d, d) + rates.gemm_s(o, i, d)
    upd_csr = i * sh.r * d / rates.spmm_macs + o * sh.r * i / rates.spmm_macs + 8 * o * i / rates.mem_bw
    dense, csr = xq[0] + dyp[0] + upd_dense, xq[1] + dyp[1] + upd_csr
    allowed = (o + i) * d <= 0.5 * o * i  # lsp_linear.DENSE_MAX_FRACTION
    proj = min(dense, csr) if allowed and dense < 0.9 * csr else csr
    return proj + rates.gemm_s(d, d, t) + d * d / rates.adam_ours


def _lora_linear_s(rates: HostRates, o: int, i: int, sh: StepShape) -> float:
    t, r = sh.tokens, sh.lora_r
    fwd = rates.gemm_s(t, r, i) + rates.gemm_s(t, o, r) + 3 * 4 * t * o / rates.mem_bw
    bwd = rates.gemm_s(o, r, t) + rates.gemm_s(t, r, o) + rates.gemm_s(r, i, t) + rates.gemm_s(t, i, r)
    return fwd + bwd + r * (o + i) / rates.adam_foreach


def _galore_linear_s(rates: HostRates, o: int, i: int, sh: StepShape) -> float:
    """GaLore's optimizer on one weight: project the gradient to rank R, Adam there, project back, apply."""
    R = sh.galore_rank
    proj = rates.gemm_s(o, R, i) if o >= i else rates.gemm_s(R, i, o)
    low = R * (i if o < i else o)
    return 2 * proj + low / rates.adam_foreach + 3 * 4 * o * i / rates.mem_bw


def linear_s(rates: HostRates, o: int, i: int, sh: StepShape) -> float:
    """One trainable linear's step: forward, dX, and the method's weight-gradient and optimizer work."""
    t, m = sh.tokens, sh.method
    base = rates.gemm_s(t, o, i) + rates.gemm_s(t, i, o)
    if m in ("full_ft", "zero_offload", "deepspeed_zero_offload", "galore"):
        base += rates.gemm_s(o, i, t) + 4 * o * i / rates.mem_bw  # dW and the finiteness check
    if m == "full_ft":
        return base + o * i / rates.adam_fused
    if m == "zero_offload":
        return base + o * i / rates.adam_ours + 16 * o * i / rates.mem_bw  # gradient down, weights up
    if m == "deepspeed_zero_offload":  # gradients into the flat fp32 partition, its CPU Adam, weights back
        return base + o * i / (rates.adam_deepspeed or rates.adam_ours) + 16 * o * i / rates.mem_bw
    if m == "galore":
        return base + _galore_linear_s(rates, o, i, sh)
    if m == "lsp":
        return base + _lsp_linear_s(rates, o, i, sh)
    if m == "lora":
        return base + _lora_linear_s(rates, o, i, sh)
    raise ValueError(f"method: one of {list(METHODS)}, got {m!r}")


def _block_other_s(rates: HostRates, spec: ModelSpec, sh: StepShape) -> float:
    """Attention products and the streaming operators of one block, forward and backward (twice forward)."""
    from .planner import layer_ops

    fwd = 0.0
    for op in layer_ops(spec, sh.batch, sh.seq, dtype="float32"):
        kind = op.kind.value
        if kind == "linear":
            continue
        if kind == "batch_matmul":
            a, b = op.inputs[0].tensor.shape, op.inputs[1].tensor.shape
            fwd += a[0] * a[1] * rates.gemm_s(a[2], b[3], a[3])
        else:
            fwd += sum(x.tensor.nbytes for x in (*op.inputs, *op.outputs)) / rates.mem_bw
    return 3 * fwd


def _head_s(rates: HostRates, spec: ModelSpec, sh: StepShape) -> float:
    t, h = sh.tokens, spec.hidden
    if sh.head == "lm":
        return rates.gemm_s(t, spec.vocab, h) + rates.gemm_s(t, h, spec.vocab) + 16 * t * spec.vocab / rates.mem_bw
    return 3 * rates.gemm_s(t, sh.num_labels, h) + 12 * t * h / rates.mem_bw


def predict_step(rates: HostRates, spec: ModelSpec, sh: StepShape) -> dict[str, float]:
    """Seconds of one training step of ``sh.method`` on this CPU, with its parts."""
    lin = sum(linear_s(rates, o, i, sh) for _, o, i in spec.linear_shapes())
    other = _block_other_s(rates, spec, sh)
    ops = rates.ops.get(sh.method)
    host = (ops["per_block"] * spec.layers + ops["fixed"]) * ops["op_s"] if ops else 0.0
    head = _head_s(rates, spec, sh)
    parts = {"linears_s": spec.layers * lin, "attention_and_streaming_s": spec.layers * other, "head_s": head,
             "host_ops_s": host}
    return {"step_s": sum(parts.values()), **parts}


# --- trainers for the operator counts and the check -----------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """A model shape and a step shape to measure; ``classify``: a 5-way classification head (else a causal LM)."""

    name: str
    spec: ModelSpec
    batch: int
    seq: int
    classify: bool = False

    def step_shape(self, method: str, d: int, lora_r: int, galore_rank: int) -> StepShape:
        return StepShape(method, self.batch, self.seq, "class" if self.classify else "lm", 5, d, 4, lora_r,
                         galore_rank)


def _hf_model(case: Case):
    """A random-weight HF LLaMA of ``case.spec`` (the timing does not depend on the weights' values)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

    s = case.spec
    torch.manual_seed(0)
    c = LlamaConfig(vocab_size=s.vocab, hidden_size=s.hidden, intermediate_size=s.intermediate,
                    num_hidden_layers=s.layers, num_attention_heads=s.heads, num_key_value_heads=s.kv,
                    max_position_embeddings=4096, tie_word_embeddings=s.tied_embeddings, num_labels=5,
                    pad_token_id=258, bos_token_id=256, eos_token_id=257)
    return LlamaForSequenceClassification(c) if case.classify else LlamaForCausalLM(c)


def _knobs(case: Case) -> tuple[int, int, int]:
    """(LSP d, LoRA rank matched to LSP's trainable parameters, GaLore rank = d) for the case's linears."""
    shapes = case.spec.linear_shapes()
    d = max(4, min(min(o, i) for _, o, i in shapes) // 2)
    lora_r = max(1, round(len(shapes) * d * d / sum(o + i for _, o, i in shapes)))
    return d, lora_r, d


def _trainer(case: Case, method: str, threads: int):
    from .config import from_dict
    from .models import ByteTokenizer
    from .trainer import Trainer

    d, lora_r, grank = _knobs(case)
    cfg = from_dict({
        "model": {"gradient_checkpointing": False, "num_labels": 5 if case.classify else 0},
        "data": {"source": "synthetic", "seq_len": case.seq, "max_examples": 16 * case.batch,
                 "eval_examples": case.batch, "calib_examples": case.batch},
        "train": {"method": method, "steps": 1_000_000, "batch": case.batch, "lr": 1e-4, "progress": False,
                  "threads": threads, "lora_r": lora_r, "galore_rank": grank},
        "lsp": {"d": d, "r": 4, "initial_fit": False, "check_interval": 0, "weight_dtype": "float32",
                "calib_batches": 1},
        "device": "cpu"})
    return Trainer(cfg, model=_hf_model(case), tok=ByteTokenizer())


def _step_times(tr, warmup: int, repeats: int) -> list[float]:
    for _ in range(warmup):
        tr.train_step()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        tr.train_step()
        out.append(time.perf_counter() - t0)
    return out


def _count_ops(tr, steps: int = 2) -> float:
    """Top-level ATen operators per step (the LSP scheduler's host jobs run inline so they are counted)."""
    import contextlib

    from torch.profiler import ProfilerActivity, profile

    from .dispatch import top_level_aten

    sched = tr.scheduler
    inline = sched.inline_host_jobs() if sched is not None and sched.overlap else contextlib.nullcontext()
    with inline, profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            tr.train_step()
        if sched is not None:
            sched.flush()
    return len(top_level_aten(prof.events())) / steps


TINY = {"hidden": 64, "intermediate": 128, "heads": 4, "vocab": 259}


def _calib_ops(rates: HostRates, threads: int) -> dict[str, dict[str, float]]:
    """Per method: operators per block and outside the blocks (1- and 2-block tiny LLaMAs), and host seconds per
    operator (the 2-block model's median step, less its predicted arithmetic, over its operator count)."""
    out = {}
    for m in METHODS:
        if m == "deepspeed_zero_offload" and not rates.adam_deepspeed:
            continue  # DeepSpeed unavailable here: no such step to predict
        counts, step = {}, 0.0
        for layers in (1, 2):
            case = Case(f"tiny{layers}", ModelSpec(f"tiny{layers}", layers=layers, **TINY), 4, 16)
            tr = _trainer(case, m, threads)
            try:
                counts[layers] = _count_ops(tr)
                if layers == 2:
                    step = statistics.median(_step_times(tr, 2, 9))
            finally:
                tr.close()
        per_block = counts[2] - counts[1]
        compute = predict_step(rates, case.spec, case.step_shape(m, *_knobs(case)))["step_s"]
        out[m] = {"per_block": per_block, "fixed": counts[1] - per_block,
                  "op_s": max(0.0, step - compute) / counts[2]}
    return out


CASES = (
    Case("smollm2-135m-class b8x64", ModelSpec("smollm2-135m", 576, 1536, 30, 9, 49152, kv_heads=3,
                                                tied_embeddings=True), 8, 64, classify=True),
    Case("llama-512x6 b4x128", ModelSpec("llama-512x6", 512, 1376, 6, 8, 259), 4, 128),
    Case("llama-256x4 b8x32", ModelSpec("llama-256x4", 256, 688, 4, 4, 259), 8, 32),
)
"""The shapes the model is checked on: SmolLM2-135M as the accuracy runs train it, and two random LLaMAs (a
compute-bound and a host-bound one), none of them used by the calibration."""


def measure_case(case: Case, method: str, threads: int, warmup: int = 2, repeats: int = 5) -> float:
    """Median seconds of the real trainer's step on ``case``."""
    tr = _trainer(case, method, threads)
    try:
        return statistics.median(_step_times(tr, warmup, repeats))
    finally:
        tr.close()


def validate(rates: HostRates, cases=CASES, methods=METHODS, repeats: int = 5,
             log: Optional[Callable[[str], None]] = None) -> dict[str, Any]:
    """Predicted against measured median step seconds per case and method (those the calibration could run);
    the worst relative error."""
    methods = [m for m in methods if m in rates.ops]
    rows = []
    for case in cases:
        for m in methods:
            pred = predict_step(rates, case.spec, case.step_shape(m, *_knobs(case)))
            meas = measure_case(case, m, rates.threads, repeats=repeats)
            rows.append({"case": case.name, "method": m, "measured_s": meas, "predicted_s": pred["step_s"],
                         "rel_err": pred["step_s"] / meas - 1, **{k: v for k, v in pred.items() if k != "step_s"}})
            if log:
                log(f"  {case.name:26s} {m:12s} measured {meas:.3f} s  predicted {pred['step_s']:.3f} s "
                    f"({rows[-1]['rel_err']:+.0%})")
    return {"time_model_max_rel_err": max(abs(r["rel_err"]) for r in rows), "rows": rows,
            "rates": asdict(rates)}


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    """``python -m offload_trainer.timemodel [--recalibrate] [--threads N] [--out F]``: calibrate, check, write."""
    import argparse
    import sys

    from shared_ir.benchkit import machine, machine_line, write_json

    ap = argparse.ArgumentParser(description="Calibrate the CPU step-time model and check it against measured steps")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--recalibrate", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="results/timemodel-offload_trainer.json")
    a = ap.parse_args(argv)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    log(machine_line())
    rates = host_rates(a.threads, a.recalibrate, log)
    res = {"machine": machine(), **validate(rates, repeats=a.repeats, log=log)}
    write_json(a.out, res, indent=1)
    log(f"time_model_max_rel_err {res['time_model_max_rel_err']:.3f}")
    return res


if __name__ == "__main__":
    main()
