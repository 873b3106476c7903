"""The LSP linear layer: frozen weight (bf16 by default) on the compute device, and a backward that returns the
compressed gradient Pᵀ ∇W Q (d×d) instead of ∇W.

With torch's layout y = x Wᵀ (W is out×in) the weight gradient is ∇W = dYᵀ X, so
    Pᵀ ∇W Q = (dY P)ᵀ (X Q),
where P is out×d and Q is in×d. The forward saves only X Q (tokens×d, smaller than X when d < in); the backward
forms dY P (tokens×d) and one d×d product. ∇W (out×in) is never built.
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
        @staticmethod
        def forward(ctx, x, weight, bias, anchor, mod):  # noqa: ARG004 - anchor only routes the backward
            xw = x.to(weight.dtype)
            y = F.linear(xw, weight, None if bias is None else bias.to(weight.dtype)).to(x.dtype)
            with torch.autocast(x.device.type, enabled=False):  # sparse products stay fp32 under AMP
                xq = mod.Q.right(x.reshape(-1, x.shape[-1]))  # tokens×d
            ctx.save_for_backward(weight, xq)
            ctx.mod = mod
            return y

        @staticmethod
        def backward(ctx, dy):
            weight, xq = ctx.saved_tensors
            mod = ctx.mod
            dy2 = dy.reshape(-1, dy.shape[-1])
            dx = None
            if ctx.needs_input_grad[0]:
                dx = (dy2.to(weight.dtype) @ weight).to(dy.dtype).reshape(*dy.shape[:-1], weight.shape[1])
            b = mod.P.right(dy2)  # tokens×d
            mod.receive(b.t() @ xq)  # Pᵀ ∇W Q, d×d
            return dx, None, None, None, None

    _LSPFn = LSPLinearFn
    return _LSPFn


_LSPFn = None


def _build_class():
    import torch
    import torch.nn.functional as F

    class _LSPLinear(torch.nn.Module):
        """A linear whose weight is frozen and whose training signal is the compressed gradient."""

        def __init__(self, weight: "torch.Tensor", bias: "Optional[torch.Tensor]", d: int, r: int, seed: int,
                     name: str, weight_dtype: "torch.dtype"):
            super().__init__()
            out_f, in_f = weight.shape
            for dim, size in (("out_features", out_f), ("in_features", in_f)):
                if d > size:
                    raise ModelError("lsp.d", f"d = {d} exceeds {dim} = {size} of layer {name!r}", d)
            self.name = name
            self.in_features, self.out_features = in_f, out_f
            self.weight = torch.nn.Parameter(weight.detach().to(weight_dtype).clone(), requires_grad=False)
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
            self.calibrating = False
            self.calib_grad: Optional[torch.Tensor] = None

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
            if self.calibrating:
                return _CalibFn.apply(x, self.weight, self.bias, self.anchor, self)
            return _fn().apply(x, self.weight, self.bias, self.anchor, self)

        @torch.no_grad()
        def apply_update(self, delta: "torch.Tensor", lr: float, chunk_elems: int | None = None) -> None:
            """W ← W − lr · P Δ Qᵀ, in row chunks of ``chunk_elems`` so the m×n update never exists whole (default:
            4 M elements on the CPU, 64 M on a GPU, where each chunk's half-dozen kernel launches cost more than its
            memory: an H200 step of a 1.14 B LLaMA is bound by the host's launches)."""
            if chunk_elems is None:
                chunk_elems = 1 << (26 if self.weight.is_cuda else 22)
            pd = self.P.matmul(delta.to(self.weight.device))  # out×d
            rows = max(1, chunk_elems // max(1, self.in_features))
            for a in range(0, self.out_features, rows):
                b = min(self.out_features, a + rows)
                upd = self.Q.matmul(pd[a:b].t()).t()  # (b-a)×in, fp32
                # one kernel: lr·upd subtracted in fp32, rounded to the weight's dtype once
                self.weight[a:b].sub_(upd, alpha=lr)

        def full_weight_grad_hook(self, g: "torch.Tensor") -> None:
            self.calib_grad = g if self.calib_grad is None else self.calib_grad.add_(g)

        def extra_repr(self) -> str:
            return f"{self.in_features}->{self.out_features}, d={self.P.d}, r={self.P.r}, dtype={self.weight.dtype}"

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

    return _LSPLinear, CalibFn


_CLS = None
_CalibFn = None


def lsp_linear_class():
    """The nn.Module class of the LSP linear."""
    global _CLS, _CalibFn
    if _CLS is None:
        _CLS, _CalibFn = _build_class()
    return _CLS


def _stable_hash(s: str) -> int:
    import zlib

    return zlib.crc32(s.encode()) & 0x7FFFFFFF


def make_lsp_linear(weight, bias, d: int, r: int, seed: int = 0, name: str = "linear", weight_dtype=None):
    """An LSP linear from a torch-layout weight (out×in) and optional bias."""
    import torch

    return lsp_linear_class()(weight, bias, d, r, seed, name, weight_dtype or torch.bfloat16)


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


def wrap_model(model, targets: Iterable[str], d: int, r: int, seed: int = 0, weight_dtype=None) -> list:
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
        new = make_lsp_linear(w, b, d, r, seed, name, weight_dtype)
        parent_name, _, leaf = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, leaf, new)
        layers.append(new)
    return layers
