"""Memory planner and iteration-time model for LSP-Offload, ZeRO-Offload and native training.

The transformer layer is described once as ``shared_ir`` ops (the seven projections as ``linear``, attention as
``batch_matmul`` + ``softmax``, norms, the SwiGLU/GELU elementwise ops); MACs, FLOPs and bytes come from the IR and
per-op times from ``shared_ir.roofline`` on the preset's accelerator (bf16 tensor-core peak), scaled by
``compute_efficiency``. Transfers use the preset's host link (pinned bandwidth, full or half duplex) and the CPU
Adam is modeled as memory-bound on the host DRAM (or from a measured throughput).

The time model is a discrete-event simulation: every task (a layer's forward, backward, gradient download, CPU
update, upload, weight update) has a duration, a resource (``gpu``, ``d2h``, ``h2d``, ``cpu``; one ``link`` for
a half-duplex link) and dependencies; each resource runs its tasks in program order as soon as their dependencies
are done. Six iterations are simulated; the steady-state time is the mean of the last two (and never below
the busiest resource's share).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from .errors import PlannerError

GiB = 1024 ** 3


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer's shape."""

    name: str
    """Label."""
    hidden: int
    """Hidden size h."""
    intermediate: int
    """MLP size."""
    layers: int
    """Transformer blocks."""
    heads: int
    """Attention heads."""
    vocab: int
    """Vocabulary."""
    kv_heads: int = 0
    """Key/value heads (grouped-query attention); 0 = heads."""
    mlp: str = "swiglu"
    """``swiglu`` (gate, up, down: LLaMA) or ``gelu`` (fc, proj: GPT-2)."""
    tied_embeddings: bool = False
    """lm_head shares the embedding matrix."""

    def __post_init__(self) -> None:
        for f in ("hidden", "intermediate", "layers", "heads", "vocab"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise PlannerError(f"model.{f}", f"must be an integer >= 1, got {v!r}", v)
        if self.hidden % self.heads:
            raise PlannerError("model.heads", f"must divide hidden ({self.hidden}), got {self.heads}", self.heads)
        if self.kv_heads < 0 or (self.kv_heads and self.heads % self.kv_heads):
            raise PlannerError("model.kv_heads", f"must divide heads ({self.heads}), got {self.kv_heads}",
                               self.kv_heads)
        if self.mlp not in ("swiglu", "gelu"):
            raise PlannerError("model.mlp", f"must be swiglu or gelu, got {self.mlp!r}", self.mlp)

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def linear_shapes(self) -> list[tuple[str, int, int]]:
        """(name, out, in) of the trainable projections of one block."""
        h, f, kvd = self.hidden, self.intermediate, self.kv * self.head_dim
        att = [("q_proj", h, h), ("k_proj", kvd, h), ("v_proj", kvd, h), ("o_proj", h, h)]
        if self.mlp == "swiglu":
            return att + [("gate_proj", f, h), ("up_proj", f, h), ("down_proj", h, f)]
        return att + [("fc", f, h), ("proj", h, f)]

    @property
    def layer_params(self) -> int:
        return sum(o * i for _, o, i in self.linear_shapes()) + 2 * self.hidden

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2) + self.hidden

    @property
    def params(self) -> int:
        return self.layers * self.layer_params + self.embedding_params


MODEL_PRESETS: dict[str, ModelSpec] = {
    # LLaMA-7B / Deepseek-Coder-6.7B class (the reference's 4090 case)
    "llama-6.7b": ModelSpec("llama-6.7b", 4096, 11008, 32, 32, 32256),
    "llama-7b": ModelSpec("llama-7b", 4096, 11008, 32, 32, 32000),
    # Deepseek-Coder-1.3B class (the reference's 4 GB laptop case)
    "llama-1.3b": ModelSpec("llama-1.3b", 2048, 5504, 24, 16, 32256),
    "llama-3b": ModelSpec("llama-3b", 3200, 8640, 26, 32, 32000),
    "gpt2-774m": ModelSpec("gpt2-774m", 1280, 5120, 36, 20, 50257, mlp="gelu", tied_embeddings=True),
    "smollm2-135m": ModelSpec("smollm2-135m", 576, 1536, 30, 9, 49152, kv_heads=3, tied_embeddings=True),
    "llama-1b": ModelSpec("llama-1b", 2048, 8192, 16, 32, 32000, kv_heads=8),
}


def model_spec(x: "str | ModelSpec | dict") -> ModelSpec:
    if isinstance(x, ModelSpec):
        return x
    if isinstance(x, str):
        if x not in MODEL_PRESETS:
            raise PlannerError("model", f"unknown model preset {x!r}; available: {sorted(MODEL_PRESETS)}", x)
        return MODEL_PRESETS[x]
    if isinstance(x, dict):
        d = dict(x)
        d.setdefault("name", "custom")
        try:
            return ModelSpec(**d)
        except TypeError as e:
            raise PlannerError("model", f"bad model spec fields: {e}", d) from None
    raise PlannerError("model", f"must be a preset name or a mapping, got {x!r}", x)


# --- the layer as IR ops --------------------------------------------------------------------------------------------
def layer_ops(spec: ModelSpec, batch: int, seq: int, dtype: str = "bfloat16") -> list:
    """One transformer block's forward as shared_ir ops."""
    from shared_ir import Tensor, TensorRole, ops

    b, s, h, nh, hd = batch, seq, spec.hidden, spec.heads, spec.head_dim
    def act(name, shape):
        return Tensor(name, shape, dtype)

    def w(name, shape):
        return Tensor(name, shape, dtype, TensorRole.weight)

    x = act("x", (b, s, h))
    out = [ops.layernorm("norm1", x, act("xn", (b, s, h)))]
    xn = out[-1].outputs[0].tensor
    for nm, o, i in spec.linear_shapes()[:3]:
        out.append(ops.linear(nm, xn, w(f"W_{nm}", (o, i)), act(nm[0], (b, s, o))))
    q = act("qh", (b, nh, s, hd))
    kt = act("kt", (b, nh, hd, s))  # GQA keys repeated to all heads
    v = act("vh", (b, nh, s, hd))
    sc = ops.batch_matmul("scores", q, kt, act("sc", (b, nh, s, s)))
    sm = ops.softmax("softmax", sc.outputs[0].tensor, act("pr", (b, nh, s, s)))
    ctxo = ops.batch_matmul("context", sm.outputs[0].tensor, v, act("ctx", (b, nh, s, hd)))
    out += [sc, sm, ctxo]
    c2 = act("ctx2", (b, s, h))
    out.append(ops.linear("o_proj", c2, w("W_o_proj", (h, h)), act("ao", (b, s, h))))
    out.append(ops.binary("res1", x, out[-1].outputs[0].tensor, "add", act("x1", (b, s, h))))
    x1 = out[-1].outputs[0].tensor
    out.append(ops.layernorm("norm2", x1, act("xn2", (b, s, h))))
    xn2 = out[-1].outputs[0].tensor
    f = spec.intermediate
    if spec.mlp == "swiglu":
        g = ops.linear("gate_proj", xn2, w("W_gate", (f, h)), act("g", (b, s, f)))
        u = ops.linear("up_proj", xn2, w("W_up", (f, h)), act("u", (b, s, f)))
        sg = ops.unary("silu", g.outputs[0].tensor, "silu", act("sg", (b, s, f)), 4)
        gu = ops.binary("gu", sg.outputs[0].tensor, u.outputs[0].tensor, "mul", act("gu_o", (b, s, f)))
        dn = ops.linear("down_proj", gu.outputs[0].tensor, w("W_down", (h, f)), act("dn", (b, s, h)))
        out += [g, u, sg, gu, dn]
    else:
        fc = ops.linear("fc", xn2, w("W_fc", (f, h)), act("fc_o", (b, s, f)))
        ge = ops.unary("gelu", fc.outputs[0].tensor, "gelu", act("ge", (b, s, f)), 8)
        pr = ops.linear("proj", ge.outputs[0].tensor, w("W_proj", (h, f)), act("dn", (b, s, h)))
        out += [fc, ge, pr]
    out.append(ops.binary("res2", x1, out[-1].outputs[0].tensor, "add", act("y", (b, s, h))))
    return out


# --- hardware -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Machine:
    """What the model needs from a hardware preset."""

    name: str
    gpu_mem_bytes: int
    gpu_peak_flops: float
    gpu_mem_bw: float
    host_mem_bytes: int
    host_mem_bw: float
    host_peak_flops: float
    link_bw: float
    link_latency_s: float
    full_duplex: bool
    system: Any = field(repr=False, compare=False, default=None)


def machine_from(hw: Any) -> Machine:
    """A :class:`Machine` from a preset name, a hardware dict/YAML or a ``System``; errors name the field."""
    from shared_ir.hardware import System, load_hardware, load_preset

    sysm = hw if isinstance(hw, System) else (load_preset(hw) if isinstance(hw, str) and "\n" not in hw
                                               and not hw.endswith((".yaml", ".yml", ".json")) else load_hardware(hw))
    if sysm.host is None:
        raise PlannerError("hardware.host", f"preset {sysm.name!r} has no host CPU; offloading needs one", sysm.name)
    if not sysm.devices:
        raise PlannerError("hardware.devices", f"preset {sysm.name!r} has no accelerator to train on", sysm.name)
    dev = sysm.devices[0]
    ln = sysm.link(sysm.host.name, dev.name)
    if ln is None:
        raise PlannerError("hardware.links", f"preset {sysm.name!r} has no link between host {sysm.host.name!r} and "
                                             f"device {dev.name!r}; the offload traffic needs one", sysm.name)
    return Machine(name=sysm.name, gpu_mem_bytes=dev.memory_capacity_bytes, gpu_peak_flops=dev.compute.peak("bfloat16"),
                   gpu_mem_bw=dev.dram_bandwidth_bytes_per_s, host_mem_bytes=sysm.host.memory_capacity_bytes,
                   host_mem_bw=sysm.host.dram_bandwidth_bytes_per_s, host_peak_flops=sysm.host.peak_flops,
                   link_bw=ln.bandwidth(pinned=True), link_latency_s=ln.latency_s, full_duplex=ln.duplex == "full",
                   system=sysm)


# --- memory ---------------------------------------------------------------------------------------------------------
@dataclass
class PlanParams:
    """Knobs of the planner (defaults: the reference's settings)."""

    d: int = 512
    """LSP subspace size."""
    r: int = 4
    """Non-zeros per projector row."""
    runtime_overhead_bytes: int = 600 * 1024 ** 2
    """CUDA context, cuBLAS workspace and allocator slack on the accelerator."""
    compute_efficiency: float = 0.6
    """Fraction of the bf16 tensor-core peak large GEMMs reach."""
    memory_efficiency: float = 0.8
    """Fraction of the DRAM bandwidth streaming kernels reach (GPU and host)."""
    cpu_adam_elems_per_s: Optional[float] = None
    """Measured CPU Adam throughput (elements/s, full fp32 Adam); None = memory-bound on the host DRAM."""
    update_chunk_elems: int = 1 << 22
    """Row-chunk of the m×n update P Δ Qᵀ materialised at once on the accelerator."""
    update_bytes_per_elem: int = 4
    """DRAM bytes per weight element of the LSP update W ← W − η P Δ Qᵀ: 4 for a fused in-place kernel (read and
    write bf16 W; P Δ Qᵀ formed tile by tile on chip), which is what the reference's measured 1 ms/layer for
    llama-7B's 202 M weights at ~1 TB/s implies (this package's update of fp32 weights is one in-place ``addmm_``);
    12 for its row-chunked update of low-precision weights (an fp32 chunk written and read back)."""
    zero_sync_step: bool = True
    """ZeRO-Offload (not delayed): the next forward starts only after the whole CPU optimizer step and its uploads
    (DeepSpeed's ``engine.step()`` returns after the fp16 parameters are back; the reference's Fig. 3a). False:
    each block's forward may start as soon as its own parameters are back."""

    def __post_init__(self) -> None:
        for f in ("d", "r", "update_chunk_elems", "update_bytes_per_elem"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise PlannerError(f"plan.{f}", f"must be an integer >= 1, got {v!r}", v)
        for f in ("compute_efficiency", "memory_efficiency"):
            v = getattr(self, f)
            if not (isinstance(v, (int, float)) and 0 < v <= 1):
                raise PlannerError(f"plan.{f}", f"must be in (0, 1], got {v!r}", v)


def _activation_bytes(spec: ModelSpec, batch: int, seq: int, method: str, p: PlanParams) -> dict[str, int]:
    """Activations with gradient checkpointing: every block's input (bf16), one block's saved tensors while it is
    recomputed and back-propagated, the logits and their gradient (fp32 for the loss)."""
    ops = layer_ops(spec, batch, seq)
    t = batch * seq
    saved = 0
    for op in ops:
        if op.kind.value == "linear" and method == "lsp":
            saved += t * p.d * 4  # X Q (fp32) instead of X
        else:
            saved += sum(a.tensor.nbytes for a in op.inputs if a.tensor.role.value != "weight")
    boundary = spec.layers * t * spec.hidden * 2
    grads = 3 * t * max(spec.hidden, spec.intermediate) * 2  # activation gradients in flight
    logits = t * spec.vocab * (2 + 4 + 4)  # bf16 logits, fp32 upcast for the loss, its gradient
    return {"boundary": boundary, "layer_working_set": saved + grads, "logits": logits}


def plan_memory(model: "str | ModelSpec | dict", method: str, batch: int, seq: int, hardware: Any,
                params: Optional[PlanParams] = None) -> dict[str, Any]:
    """Accelerator and host bytes of ``method`` (``lsp``, ``zero_offload``, ``native``) and whether they fit."""
    spec, mach, p = model_spec(model), machine_from(hardware), params or PlanParams()
    if method not in ("lsp", "zero_offload", "native"):
        raise PlannerError("method", f"must be lsp, zero_offload or native, got {method!r}", method)
    for f, v in (("batch", batch), ("seq", seq)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise PlannerError(f, f"must be an integer >= 1, got {v!r}", v)
    shapes = spec.linear_shapes()
    if method == "lsp":
        small = min(min(o, i) for _, o, i in shapes)
        if p.d > small:
            raise PlannerError("plan.d", f"d = {p.d} exceeds the smallest projection dimension ({small})", p.d)
    P = spec.params
    n_lin = spec.layers * len(shapes)
    act = _activation_bytes(spec, batch, seq, method, p)
    acc: dict[str, int] = {"weights": 2 * P}
    host: dict[str, int] = {}
    largest = max(o * i for _, o, i in shapes)
    if method == "lsp":
        acc["projectors"] = spec.layers * sum((o + i) * p.r * (4 + 4) for _, o, i in shapes)
        acc["buffers"] = n_lin * 2 * p.d * p.d * 4 + min(p.update_chunk_elems, largest) * 4
        host["adam_states_and_buffers"] = n_lin * 4 * p.d * p.d * 4  # m, v, g, Δ (pinned fp32)
    elif method == "zero_offload":
        acc["buffers"] = 2 * 2 * spec.layer_params  # double-buffered fp16 gradients/params of one block
        host["master_and_adam"] = 12 * P  # fp32 weights, m, v
        host["pinned_grads_and_params"] = 4 * P  # fp16 gradient and parameter staging
    else:
        acc["gradients"] = 2 * P
        acc["master_and_adam"] = 12 * P
    acc["activations"] = sum(act.values())
    acc["runtime"] = p.runtime_overhead_bytes
    a_tot, h_tot = sum(acc.values()), sum(host.values())
    return {"model": spec.name, "params": P, "method": method, "batch": batch, "seq": seq, "hardware": mach.name,
            "accelerator_bytes": acc, "accelerator_gb": a_tot / 1e9,
            "accelerator_capacity_gb": mach.gpu_mem_bytes / 1e9,
            "host_bytes": host, "host_gb": h_tot / 1e9, "host_capacity_gb": mach.host_mem_bytes / 1e9,
            "fits": bool(a_tot <= mach.gpu_mem_bytes and h_tot <= mach.host_mem_bytes)}


# --- time -----------------------------------------------------------------------------------------------------------
def layer_times(spec: ModelSpec, batch: int, seq: int, mach: Machine, p: PlanParams) -> dict[str, float]:
    """Per-block seconds on the accelerator: forward, backward (native: dX and dW; LSP: dX plus the compression),
    the LSP compression and weight update, native GPU Adam; and the host-side per-block costs."""
    from shared_ir.roofline import roofline

    dev = mach.system.devices[0]
    ops = layer_ops(spec, batch, seq)

    def t_op(op) -> float:
        r = roofline(op, dev)
        return max(r.compute_s / p.compute_efficiency, r.memory_s / p.memory_efficiency)

    fwd = sum(t_op(op) for op in ops)
    lin = sum(t_op(op) for op in ops if op.kind.value == "linear")
    other = fwd - lin
    bwd_native = 2 * lin + 2 * other  # dX and dW per GEMM; attention/elementwise backward ≈ 2× forward
    t = batch * seq
    shapes = spec.linear_shapes()
    bw_gpu = mach.gpu_mem_bw * p.memory_efficiency
    peak = mach.gpu_peak_flops * p.compute_efficiency
    # compression: X Q (forward) and dY P (backward) are sparse gathers — memory-bound over X and dY; g = Bᵀ(XQ)
    compress = sum((t * i * 2 + t * o * 2 + 2 * t * p.d * 4) / bw_gpu + 2 * t * p.d * p.d / peak
                   for _, o, i in shapes)
    bwd_lsp = lin + 2 * other + compress
    # update W ← W − η P Δ Qᵀ: memory-bound (update_bytes_per_elem: fused in-place, or the chunked fp32 form)
    upd = sum((o * i * p.update_bytes_per_elem) / bw_gpu + 2 * o * i * p.r / peak for _, o, i in shapes)
    lp = spec.layer_params
    gpu_adam = lp * 32 / bw_gpu  # read p32, g, m, v; write p32, m, v, p16
    # host: full fp32 Adam ≈ 30 B/element of DRAM traffic (read p, m, v, g16; write p, m, v, p16)
    host_bw = mach.host_mem_bw * p.memory_efficiency
    full_rate = p.cpu_adam_elems_per_s or host_bw / 30.0
    lsp_rate = (p.cpu_adam_elems_per_s * 30.0 / 24.0) if p.cpu_adam_elems_per_s else host_bw / 24.0  # g, m, v → m, v, Δ
    dd = len(shapes) * p.d * p.d
    return {"fwd": fwd, "bwd_native": bwd_native, "bwd_lsp": bwd_lsp, "compress": compress, "lsp_update": upd,
            "gpu_adam": gpu_adam,
            "cpu_adam_full": lp / full_rate, "cpu_adam_lsp": dd / lsp_rate,
            "xfer_full_fp16": mach.link_latency_s + 2 * lp / mach.link_bw,
            "xfer_lsp": len(shapes) * mach.link_latency_s + dd * 4 / mach.link_bw}


class _Sim:
    """Resources run their tasks in program order once dependencies are done."""

    def __init__(self):
        self.free: dict[str, float] = {}
        self.done: dict[Any, float] = {}
        self.busy: dict[str, float] = {}

    def task(self, key: Any, res: str, dur: float, deps: tuple = ()) -> float:
        start = max([self.free.get(res, 0.0)] + [self.done[d] for d in deps if d in self.done])
        end = start + dur
        self.free[res] = end
        self.done[key] = end
        self.busy[res] = self.busy.get(res, 0.0) + dur
        return end


def simulate(method: str, spec: ModelSpec, batch: int, seq: int, mach: Machine, p: PlanParams,
             iterations: int = 6, checkpointing: bool = True, delayed: bool = False) -> dict[str, Any]:
    """Steady-state seconds per iteration of ``method`` (``lsp``, ``zero_offload``, ``native``)."""
    lt = layer_times(spec, batch, seq, mach, p)
    L = spec.layers
    sim = _Sim()
    d2h, h2d = ("d2h", "h2d") if mach.full_duplex else ("link", "link")
    head = 3 * (2 * batch * seq * spec.hidden * spec.vocab) / (mach.gpu_peak_flops * p.compute_efficiency)
    for it in range(iterations):
        for l in range(L):
            deps: tuple = ()
            if method == "lsp" and it > 0:
                # the layer's update from the previous iteration lands before its forward (no stale weights)
                sim.task(("upd", it - 1, l), "gpu", lt["lsp_update"], (("h2d", it - 1, l),))
            if method == "zero_offload" and it > 0:
                src = it - 2 if delayed else it - 1  # delayed update: one-step stale parameters
                # synchronous step: every block waits for the last upload (block L-1 goes up last)
                deps = (("h2d", src, L - 1 if (p.zero_sync_step and not delayed) else l),) if src >= 0 else ()
            sim.task(("fwd", it, l), "gpu", lt["fwd"], deps)
        sim.task(("head", it), "gpu", head)
        for l in range(L - 1, -1, -1):
            if checkpointing:
                sim.task(("re", it, l), "gpu", lt["fwd"])
            if method == "lsp":
                sim.task(("bwd", it, l), "gpu", lt["bwd_lsp"])
                sim.task(("d2h", it, l), d2h, lt["xfer_lsp"], (("bwd", it, l),))
                sim.task(("cpu", it, l), "cpu", lt["cpu_adam_lsp"], (("d2h", it, l),))
                sim.task(("h2d", it, l), h2d, lt["xfer_lsp"], (("cpu", it, l),))
            else:
                sim.task(("bwd", it, l), "gpu", lt["bwd_native"])
                if method == "zero_offload":  # gradients stream to the host during the backward
                    sim.task(("d2h", it, l), d2h, lt["xfer_full_fp16"], (("bwd", it, l),))
        if method == "zero_offload":
            # ZeRO-Offload's optimizer step runs on the CPU once the whole backward is done (first block first,
            # so the next forward can start as soon as block 0's fp16 weights are back)
            for l in range(L):
                sim.task(("cpu", it, l), "cpu", lt["cpu_adam_full"], (("d2h", it, 0),))
                sim.task(("h2d", it, l), h2d, lt["xfer_full_fp16"], (("cpu", it, l),))
        if method == "native":
            sim.task(("adam", it), "gpu", L * lt["gpu_adam"])
    # steady state: the distance between the first block's forward of the last two iterations (everything an
    # iteration leaves in flight — LSP's spilled updates, ZeRO's uploads — is paid before that forward)
    starts = [sim.done[("fwd", it, 0)] for it in range(iterations)]
    k = min(2, iterations - 1)
    it_s = (starts[-1] - starts[-1 - k]) / k if k else sim.free["gpu"]
    # a periodic schedule can never beat its busiest resource
    it_s = max(it_s, max(sim.busy.values()) / iterations)
    gpu_compute = L * (2 * lt["fwd"] if checkpointing else lt["fwd"]) + head + L * lt["bwd_native"]
    return {"iteration_s": it_s, "gpu_compute_s": gpu_compute, "per_layer": lt, "busy_s": dict(sim.busy)}


def plan_time(model: "str | ModelSpec | dict", batch: int, seq: int, hardware: Any,
              params: Optional[PlanParams] = None) -> dict[str, Any]:
    """Modeled iteration seconds of lsp, zero_offload (and its delayed variant) and native, with the ratios."""
    spec, mach, p = model_spec(model), machine_from(hardware), params or PlanParams()
    res = {m: simulate(m, spec, batch, seq, mach, p)["iteration_s"] for m in ("lsp", "zero_offload", "native")}
    res["zero_offload_delayed"] = simulate("zero_offload", spec, batch, seq, mach, p, delayed=True)["iteration_s"]
    res["lsp_vs_zero"] = res["lsp"] / res["zero_offload"]
    res["lsp_vs_native"] = res["lsp"] / res["native"]
    return res


# the reference's measured llama-7B per-layer timings (4090 GPU; 16-core CPU), ms
REFERENCE_LLAMA7B_MS = {"gpu_fwd": 12.2, "gpu_bwd": 28.1, "gpu_update": 1.0, "cpu_update": 60.0}


def calibration_table(hardware: Any = "rtx4090_workstation", batch: int = 4, seq: int = 512,
                      params: Optional[PlanParams] = None) -> list[dict[str, Any]]:
    """Modeled per-layer llama-7B times next to the reference's published ones (so the calibration is visible).
    The reference does not state its batch; ``batch``×``seq`` tokens are this model's assumption."""
    p = params or PlanParams()
    mach = machine_from(hardware)
    lt = layer_times(model_spec("llama-7b"), batch, seq, mach, p)
    mod = {"gpu_fwd": lt["fwd"], "gpu_bwd": lt["bwd_native"], "gpu_update": lt["lsp_update"],
           "cpu_update": lt["cpu_adam_full"]}
    return [{"quantity": k, "reference_ms": REFERENCE_LLAMA7B_MS[k], "modeled_ms": 1e3 * mod[k],
             "ratio": 1e3 * mod[k] / REFERENCE_LLAMA7B_MS[k]} for k in REFERENCE_LLAMA7B_MS]


def plan(model: Any, hardware: Any, batch: int = 1, seq: int = 512, params: Optional[PlanParams] = None) -> dict:
    """Memory for lsp/zero_offload/native and the modeled iteration times, in one dict."""
    p = params or PlanParams()
    mem = {m: plan_memory(model, m, batch, seq, hardware, p) for m in ("lsp", "zero_offload", "native")}
    return {"memory": mem, "time": plan_time(model, batch, seq, hardware, p), "params": asdict(p)}


__all__ = ["ModelSpec", "MODEL_PRESETS", "model_spec", "layer_ops", "machine_from", "PlanParams", "plan_memory",
           "layer_times", "simulate", "plan_time", "calibration_table", "plan", "REFERENCE_LLAMA7B_MS"]
