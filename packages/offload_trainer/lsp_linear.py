"""The LSP linear layer: frozen weight (the trainer's ``lsp.weight_dtype``: fp32 on a CPU, bf16 on a GPU) on the
compute device, and a backward that returns the compressed gradient Pᵀ ∇W Q (d×d) instead of ∇W.

With torch's layout y = x Wᵀ (W is out×in) the weight gradient is ∇W = dYᵀ X, so
    Pᵀ ∇W Q = (dY P)ᵀ (X Q),
where P is out×d and Q is in×d. The forward saves only (X Q)ᵀ (d×tokens, smaller than X when d < in); the backward
forms (dY P)ᵀ (d×tokens) and one d×d product. ∇W (out×in) is never built.

Host cost: every product is one ``F.linear``/``mm``/``addmm_`` on cached projector forms (no per-step CSR build,
transpose or cast when dtypes already match), so a layer-step dispatches about as many ATen operators as a native
linear with its optimizer (:mod:`offload_trainer.dispatch` counts them). The projector forms are CSR or the dense
scattered matrices, chosen per layer shape by a quick measurement at the first training forward
(:func:`choose_dense`; ``proj_mode`` or ``$OFFLOAD_TRAINER_PROJ`` force one); both take the same operators.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Optional

from .errors import ModelError
from .projector import SparseProjector

if TYPE_CHECKING:  # pragma: no cover
    import torch


def _fn():
    """The autograd Function, built on first use so that importing this module does not import torch."""
    global _LSPFn
    if _LSPFn is not None:
        return _LSPFn
    import torch
    import torch.nn.functional as F

    class LSPLinearFn(torch.autograd.Function):
        """Forward: y = x Wᵀ + b and (XQ)ᵀ = F.linear(Qᵀ, X), saved instead of X. Backward: dX = dY W and
        Pᵀ∇WQ = (PᵀdYᵀ)(XQ) as two ``F.linear`` calls, each one operator. Casts only where dtypes differ."""

        @staticmethod
        def forward(ctx, x, weight, bias, anchor, mod):  # noqa: ARG004 - anchor only routes the backward
            wdt = weight.dtype
            if bias is not None and bias.dtype != wdt:
                bias = bias.to(wdt)
            y = F.linear(x if x.dtype == wdt else x.to(wdt), weight, bias)
            if y.dtype != x.dtype:
                y = y.to(x.dtype)
            dense = bool(mod.dense_proj)
            x2 = x.reshape(-1, x.shape[-1])
            if x2.dtype != torch.float32:
                x2 = x2.float()
            qf = mod.Q.fwd_form(dense)
            if torch.is_autocast_enabled(x.device.type):
                with torch.autocast(x.device.type, enabled=False):  # the projections stay fp32 under AMP
                    xqT = F.linear(qf, x2)
            else:
                xqT = F.linear(qf, x2)  # (X Q)ᵀ: d×tokens
            ctx.save_for_backward(weight, xqT)
            ctx.mod, ctx.dense = mod, dense
            return y

        @staticmethod
        def backward(ctx, dy):
            weight, xqT = ctx.saved_tensors
            mod = ctx.mod
            dx = None
            if ctx.needs_input_grad[0]:
                if dy.dtype == weight.dtype:
                    dx = torch.matmul(dy, weight)
                else:
                    dx = torch.matmul(dy.to(weight.dtype), weight).to(dy.dtype)
            dy2 = dy.reshape(-1, dy.shape[-1])
            if dy2.dtype != torch.float32:
                dy2 = dy2.float()
            bT = F.linear(mod.P.fwd_form(ctx.dense), dy2)  # (dY P)ᵀ: d×tokens
            mod.receive(F.linear(bT, xqT))  # (dY P)ᵀ (X Q) = Pᵀ ∇W Q, d×d
            return dx, None, None, None, None

    _LSPFn = LSPLinearFn
    return _LSPFn


_LSPFn = None


def _build_class():
    import torch

    class _LSPLinear(torch.nn.Module):
        """A linear whose weight is frozen and whose training signal is the compressed gradient."""

        def __init__(self, weight: "torch.Tensor", bias: "Optional[torch.Tensor]", d: int, r: int, seed: int,
                     name: str, weight_dtype: "torch.dtype", proj_mode: Optional[str] = None):
            super().__init__()
            out_f, in_f = weight.shape
            for dim, size in (("out_features", out_f), ("in_features", in_f)):
                if d > size:
                    raise ModelError("lsp.d", f"d = {d} exceeds {dim} = {size} of layer {name!r}", d)
            self.name = name
            self.in_features, self.out_features = in_f, out_f
            # contiguous (a GPT-2 Conv1D weight arrives transposed): the in-place update writes it with one GEMM
            w = weight.detach().to(weight_dtype).clone(memory_format=torch.contiguous_format)
            self.weight = torch.nn.Parameter(w, requires_grad=False)
            self.bias = None if bias is None else torch.nn.Parameter(bias.detach().clone(), requires_grad=False)
            dev = weight.device
            # the pattern is seeded by the weight shape: layers of one shape share it, so one fit per shape can
            # initialise them all (the reference's default), and per-module refits only change values
            base = seed * 1_000_003 + 2 * _stable_hash(f"{out_f}x{in_f}")
            self.P = SparseProjector(out_f, d, r, seed=base, device=dev, name=f"{name}.P")
            self.Q = SparseProjector(in_f, d, r, seed=base + 1, device=dev, name=f"{name}.Q")
            # a scalar that requires grad routes every backward through this layer even when its input does not
            # require grad (frozen embeddings feed the first block)
            self.anchor = torch.nn.Parameter(torch.zeros((), device=dev), requires_grad=True)
            self.grad_acc: Optional[torch.Tensor] = None
            self.on_grad: Optional[Callable[["_LSPLinear"], None]] = None
            # called first in every forward (the scheduler lands a pending update there); a plain attribute, not
            # a forward pre-hook, which would send every call through nn.Module's slow hook path
            self.before_forward: Optional[Callable[["_LSPLinear"], None]] = None
            self.calibrating = False
            self.calib_grad: Optional[torch.Tensor] = None
            self.proj_mode = check_proj_mode(proj_mode or default_proj_mode())
            # dense scattered P/Q products (True) or CSR (False): None until the first training forward decides
            self.dense_proj: Optional[bool] = None
            self.proj_timings: dict = {}

        @property
        def d(self) -> int:
            return self.P.d

        def receive(self, g: "torch.Tensor") -> None:
            """Called by the backward with the d×d compressed gradient (accumulated over micro-batches)."""
            if self.grad_acc is None:
                self.grad_acc = g
            else:
                self.grad_acc.add_(g)
            if self.on_grad is not None:
                self.on_grad(self)

        def take_grad(self) -> "Optional[torch.Tensor]":
            g, self.grad_acc = self.grad_acc, None
            return g

        def forward(self, x: "torch.Tensor") -> "torch.Tensor":
            if self.before_forward is not None:
                self.before_forward(self)
            if self.calibrating:
                return _CalibFn.apply(x, self.weight, self.bias, self.anchor, self)
            if not torch.is_grad_enabled():  # evaluation: no compressed gradient, so no projection
                return _plain_linear(x, self.weight, self.bias)
            if self.dense_proj is None:
                self.dense_proj = choose_dense(self, x.numel() // max(1, x.shape[-1]))
            return _fn().apply(x, self.weight, self.bias, self.anchor, self)

        def set_proj_mode(self, mode: str) -> None:
            """``auto`` (measure at the next training forward), ``dense`` or ``csr``; drops cached dense forms."""
            self.proj_mode, self.dense_proj = check_proj_mode(mode), None
            self.P.release_dense()
            self.Q.release_dense()

        def apply_update(self, delta: "torch.Tensor", lr: float, chunk_elems: int | None = None,
                         delta_t: "Optional[torch.Tensor]" = None, scratch: Optional[dict] = None) -> None:
            """W ← W − lr · P Δ Qᵀ (:func:`update_weight`)."""
            update_weight(self, delta, lr, chunk_elems, delta_t, scratch)

        def full_weight_grad_hook(self, g: "torch.Tensor") -> None:
            self.calib_grad = g if self.calib_grad is None else self.calib_grad.add_(g)

        def extra_repr(self) -> str:
            return f"{self.in_features}->{self.out_features}, d={self.P.d}, r={self.P.r}, dtype={self.weight.dtype}"

    return _LSPLinear, _calib_fn_class()


def _calib_fn_class():
    import torch
    import torch.nn.functional as F

    class CalibFn(torch.autograd.Function):
        """Calibration pass: a normal linear that also accumulates the full ∇W (for fitting/checking projectors)."""

        @staticmethod
        def forward(ctx, x, weight, bias, anchor, mod):  # noqa: ARG004
            xw = x.to(weight.dtype)
            ctx.save_for_backward(weight, x)
            ctx.mod = mod
            return F.linear(xw, weight, None if bias is None else bias.to(weight.dtype)).to(x.dtype)

        @staticmethod
        def backward(ctx, dy):
            weight, x = ctx.saved_tensors
            dy2 = dy.reshape(-1, dy.shape[-1])
            dx = (dy2.to(weight.dtype) @ weight).to(dy.dtype).reshape(*dy.shape[:-1], weight.shape[1])
            ctx.mod.full_weight_grad_hook(dy2.float().t() @ x.reshape(-1, x.shape[-1]).float())
            return dx, None, None, None, None

    return CalibFn


_CLS = None
_CalibFn = None


def _plain_linear(x, w, b):
    """y = x Wᵀ + b in the weight's dtype, returned in x's (casts only where dtypes differ)."""
    import torch.nn.functional as F

    if b is not None and b.dtype != w.dtype:
        b = b.to(w.dtype)
    y = F.linear(x if x.dtype == w.dtype else x.to(w.dtype), w, b)
    return y if y.dtype == x.dtype else y.to(x.dtype)


def update_weight(lay, delta, lr: float, chunk_elems: Optional[int] = None, delta_t=None,
                  scratch: Optional[dict] = None) -> None:
    """W ← W − lr · P Δ Qᵀ for LSP linear ``lay``. With fp32 weights two operators: U = Q Δᵀ (in×d) and
    ``W.addmm_(P, Uᵀ)`` in place (no m×n temporary at all). Lower-precision weights take the product in fp32 and
    subtract it (rounded to the weight's dtype once) in row chunks of ``chunk_elems`` (default: 4 M elements on the
    CPU, 64 M on a GPU, where each chunk's launches cost more than its memory). ``delta_t`` (Δᵀ, a view made once)
    and ``scratch`` (a dict of in×d buffers shared by the layers of one scheduler, whose updates run one after the
    other on one stream) save the per-call transpose and allocation."""
    import torch

    W = lay.weight
    with torch.no_grad():
        if delta.device != W.device:
            delta, delta_t = delta.to(W.device), None
        dense = bool(lay.dense_proj)
        m, n = lay.out_features, lay.in_features
        if chunk_elems is None:
            chunk_elems = 1 << (26 if W.is_cuda else 22)
        rows = max(1, chunk_elems // max(1, n))
        if W.dtype != torch.float32 and rows < m and not dense:
            # chunked CSR update: P Δ once (m×d), then Q (PΔ)[a:b]ᵀ per chunk (a CSR slices rows badly)
            pd = torch.mm(lay.P.mat_form(False), delta)
            for a in range(0, m, rows):
                b = min(m, a + rows)
                W[a:b].sub_(torch.mm(lay.Q.mat_form(False), pd[a:b].t()).t(), alpha=lr)
            return
        dt = delta.t() if delta_t is None else delta_t
        qm = lay.Q.mat_form(dense)
        if scratch is None:
            u = torch.mm(qm, dt).t()  # U = Δ Qᵀ: d×in
        else:
            buf = scratch.get((n, lay.d))
            if buf is None or buf[0].device != W.device:
                ub = torch.empty(n, lay.d, device=W.device)
                buf = scratch[(n, lay.d)] = (ub, ub.t())
            torch.mm(qm, dt, out=buf[0])
            u = buf[1]
        pm = lay.P.mat_form(dense)
        if W.dtype == torch.float32:
            W.addmm_(pm, u, alpha=-lr)  # W − lr·P(ΔQᵀ), in place
        elif rows >= m:
            W.sub_(torch.mm(pm, u), alpha=lr)  # fp32 product, rounded once
        else:
            for a in range(0, m, rows):
                b = min(m, a + rows)
                W[a:b].sub_(torch.mm(pm[a:b], u), alpha=lr)

PROJ_MODES = ("auto", "dense", "csr")
DENSE_MAX_FRACTION = 0.5
"""``auto`` considers dense scattered P/Q only when their bytes ((m + n)·d·4) are at most this fraction of the
layer's weight bytes: LSP exists to save accelerator memory, and the two CSR forms of P and Q take about
(m + n)·r·16 bytes."""
DENSE_MIN_GAIN = 0.9
"""``auto`` takes the dense products when their measured time is below this fraction of the CSR ones'."""
_DECISIONS: dict = {}
"""(m, n, d, r, tokens bucket, device, weight dtype) → (dense?, timings): one measurement per layer shape and
process, so every layer of a shape (and every trainer of a process) takes the same products."""


def default_proj_mode() -> str:
    """``$OFFLOAD_TRAINER_PROJ`` (auto, dense or csr), default auto."""
    import os

    return os.environ.get("OFFLOAD_TRAINER_PROJ", "auto").strip().lower() or "auto"


def check_proj_mode(mode: str) -> str:
    if mode not in PROJ_MODES:
        raise ModelError("lsp.proj_mode", f"must be one of {list(PROJ_MODES)}, got {mode!r}", mode)
    return mode


def choose_dense(lay, tokens: int) -> bool:
    """Whether ``lay`` takes dense scattered P/Q products: its ``proj_mode`` if not ``auto``, else CSR unless the
    dense forms fit :data:`DENSE_MAX_FRACTION` and a quick measurement of the layer's own products (forward and
    backward projections at ``tokens`` rounded up to a power of two, and the update) shows them faster by
    :data:`DENSE_MIN_GAIN`. The timings are kept in ``lay.proj_timings``."""
    if lay.proj_mode != "auto":
        return lay.proj_mode == "dense"
    W = lay.weight
    if lay.P.dense_nbytes() + lay.Q.dense_nbytes() > DENSE_MAX_FRACTION * W.numel() * W.element_size():
        lay.proj_timings = {"dense": None, "reason": "dense forms exceed the memory cap"}
        return False
    t = 1 << max(0, int(tokens) - 1).bit_length()
    key = (lay.out_features, lay.in_features, lay.d, lay.P.r, t, str(W.device), W.dtype)
    if key not in _DECISIONS:
        times = _time_products(lay, t)
        _DECISIONS[key] = (times["dense"] < DENSE_MIN_GAIN * times["csr"], times)
    dense, lay.proj_timings = _DECISIONS[key]
    if not dense:
        lay.P.release_dense()
        lay.Q.release_dense()
    return dense


def _time_products(lay, tokens: int, trials: int = 7) -> dict[str, float]:
    """Median seconds of one layer-step's projector products with the dense and with the CSR forms, interleaved
    (constant inputs: the global RNG is not touched)."""
    import statistics
    import time

    import torch
    import torch.nn.functional as F

    dev, m, n, d = lay.weight.device, lay.out_features, lay.in_features, lay.d
    x, dy = torch.full((tokens, n), 0.5, device=dev), torch.full((tokens, m), 0.25, device=dev)
    delta = torch.full((d, d), 0.125, device=dev)
    out = torch.empty(m, n, device=dev) if m * n <= (1 << 24) else None
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def run(dense: bool) -> float:
        sync()
        t0 = time.perf_counter()
        F.linear(F.linear(lay.P.fwd_form(dense), dy), F.linear(lay.Q.fwd_form(dense), x))
        u = torch.mm(lay.Q.mat_form(dense), delta.t())
        if out is not None:
            torch.mm(lay.P.mat_form(dense), u.t(), out=out)
        sync()
        return time.perf_counter() - t0

    res: dict[str, list[float]] = {"dense": [], "csr": []}
    with torch.no_grad(), torch.autocast(dev.type, enabled=False):
        run(True), run(False)  # warm-up (builds the forms)
        for k in range(trials):
            for dense in ((True, False) if k % 2 else (False, True)):
                res["dense" if dense else "csr"].append(run(dense))
    return {k: statistics.median(v) for k, v in res.items()}


def lsp_linear_class():
    """The nn.Module class of the LSP linear."""
    global _CLS, _CalibFn
    if _CLS is None:
        _CLS, _CalibFn = _build_class()
    return _CLS


def _stable_hash(s: str) -> int:
    import zlib

    return zlib.crc32(s.encode()) & 0x7FFFFFFF


def make_lsp_linear(weight, bias, d: int, r: int, seed: int = 0, name: str = "linear", weight_dtype=None,
                    proj_mode: Optional[str] = None):
    """An LSP linear from a torch-layout weight (out×in) and optional bias. ``proj_mode``: ``auto`` (default, or
    ``$OFFLOAD_TRAINER_PROJ``), ``dense`` or ``csr`` products with the projectors (see :func:`choose_dense`)."""
    import torch

    return lsp_linear_class()(weight, bias, d, r, seed, name, weight_dtype or torch.bfloat16, proj_mode)


def find_target_linears(model, targets: Iterable[str]) -> list[tuple[str, object]]:
    """(qualified name, module) of every nn.Linear / transformers Conv1D whose name ends with one of ``targets``."""
    import torch

    targets = tuple(targets)
    out = []
    for name, mod in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if leaf not in targets:
            continue
        if isinstance(mod, torch.nn.Linear) or type(mod).__name__ == "Conv1D":
            out.append((name, mod))
    return out


def linear_weight(mod) -> tuple["torch.Tensor", "Optional[torch.Tensor]"]:
    """(weight in torch layout out×in, bias) of an nn.Linear or a GPT-2 Conv1D (which stores in×out)."""
    if type(mod).__name__ == "Conv1D":
        return mod.weight.t(), mod.bias
    return mod.weight, mod.bias


def wrap_model(model, targets: Iterable[str], d: int, r: int, seed: int = 0, weight_dtype=None,
               proj_mode: Optional[str] = None) -> list:
    """Replace every target linear of ``model`` by an LSP linear (in place); freeze everything else.
    Returns the LSP linears in forward order. Errors name the field at fault."""
    targets = tuple(targets)
    found = find_target_linears(model, targets)
    if not found:
        raise ModelError("model.target_modules", f"no trainable linear in {type(model).__name__} matches "
                                                 f"{list(targets)}", list(targets))
    for p in model.parameters():
        p.requires_grad_(False)
    layers = []
    for name, mod in found:
        w, b = linear_weight(mod)
        new = make_lsp_linear(w, b, d, r, seed, name, weight_dtype, proj_mode)
        parent_name, _, leaf = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, leaf, new)
        layers.append(new)
    return layers
