"""(d, r)-sparse projectors: an m×d matrix with exactly r non-zeros per row at fixed random columns and learnable
values (a count-sketch with learned values), stored compactly as (m, r) column indices + (m, r) values.

Products use torch's CSR kernels so that no m×d (let alone m×n) dense matrix is built on the training path, or,
where a measurement at setup shows it faster and its memory fits (:mod:`offload_trainer.lsp_linear`), the dense
scattered form (zeros off the pattern, cached until the values change): on a CPU a BLAS product with a small d
beats a sparse kernel's per-call overhead by 2–5×, while at d ≈ 192 the CSR kernels win.
"""
from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING

from .errors import ModelError

if TYPE_CHECKING:  # pragma: no cover
    import torch


class SparseProjector:
    """P ∈ R^{rows×d} with ``r`` non-zeros per row. ``idx`` (rows, r) int32 columns, ``val`` (rows, r) float32."""

    def __init__(self, rows: int, d: int, r: int, seed: int = 0, device: "str | torch.device" = "cpu",
                 name: str = "P"):
        import torch

        if d > rows:
            raise ModelError(f"{name}.d", f"d = {d} exceeds the dimension it projects ({rows} rows)", d)
        if r > d:
            raise ModelError(f"{name}.r", f"r = {r} exceeds d = {d}", r)
        self.rows, self.d, self.r, self.name = int(rows), int(d), int(r), name
        g = torch.Generator().manual_seed(int(seed))
        # r distinct columns per row: the top-r of random keys (in row chunks to bound the rows×d temporary)
        parts = []
        for a in range(0, rows, 4096):
            b = min(rows, a + 4096)
            parts.append(torch.rand(b - a, d, generator=g).topk(r, dim=1).indices)
        idx = torch.cat(parts).sort(dim=1).values.to(torch.int32)
        sign = torch.randint(0, 2, (rows, r), generator=g).float() * 2 - 1
        # scale so that E[PᵀP] = I: each column gets rows·r/d entries of variance d/(rows·r)
        val = sign * math.sqrt(d / (rows * r))
        self.idx = idx.to(device)
        self.val = val.to(device)
        self._cache: dict = {}

    # --- storage ---------------------------------------------------------------------------------------------------
    @property
    def device(self):
        return self.val.device

    @property
    def nbytes(self) -> int:
        """Bytes of the compact form (indices + values)."""
        return self.idx.numel() * self.idx.element_size() + self.val.numel() * self.val.element_size()

    def set_values(self, val: "torch.Tensor") -> None:
        """Replace the non-zero values (same pattern); invalidates the cached CSR forms."""
        if tuple(val.shape) != (self.rows, self.r):
            raise ModelError(f"{self.name}.val", f"expected shape {[self.rows, self.r]}, got {list(val.shape)}")
        self.val = val.detach().to(self.val.device, self.val.dtype).contiguous()
        self._cache.clear()

    def clone(self) -> "SparseProjector":
        c = object.__new__(SparseProjector)
        c.rows, c.d, c.r, c.name = self.rows, self.d, self.r, self.name
        c.idx, c.val, c._cache = self.idx, self.val.clone(), {}
        return c

    def to(self, device) -> "SparseProjector":
        self.idx, self.val = self.idx.to(device), self.val.to(device)
        self._cache.clear()
        return self

    def state_dict(self) -> dict:
        return {"idx": self.idx.cpu(), "val": self.val.cpu()}

    def load_state_dict(self, sd: dict) -> None:
        if tuple(sd["idx"].shape) != (self.rows, self.r):
            raise ModelError(f"{self.name}.idx", f"checkpoint shape {list(sd['idx'].shape)} != {[self.rows, self.r]}")
        self.idx = sd["idx"].to(self.val.device)
        self.set_values(sd["val"])

    # --- sparse forms --------------------------------------------------------------------------------------------
    def _csr(self, transposed: bool):
        import torch

        key = "t" if transposed else "n"
        m = self._cache.get(key)
        if m is None:
            dev, n = self.device, self.rows * self.r
            cols = self.idx.reshape(-1).long()
            vals = self.val.reshape(-1)
            if transposed:  # CSR of Pᵀ (d×rows): entries sorted by column of P, then row
                rows = torch.arange(self.rows, device=dev).repeat_interleave(self.r)
                order = torch.argsort(cols * self.rows + rows)
                counts = torch.bincount(cols, minlength=self.d)
                crow = torch.zeros(self.d + 1, dtype=torch.long, device=dev)
                crow[1:] = torch.cumsum(counts, 0)
                ccol, cval, shape = rows[order], vals[order], (self.d, self.rows)
            else:  # rows already hold r sorted columns each
                crow = torch.arange(0, n + 1, self.r, device=dev)
                ccol, cval, shape = cols, vals, (self.rows, self.d)
            if n < 2 ** 31:  # int32 indices: what MKL/cuSPARSE take, so no product converts them per call
                crow, ccol = crow.to(torch.int32), ccol.to(torch.int32)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
                m = torch.sparse_csr_tensor(crow, ccol, cval, shape, check_invariants=False)
            self._cache[key] = m
        return m

    def fwd_form(self, dense: bool):
        """Pᵀ (d×rows) as the first operand of the training path's products (``F.linear(Pᵀ, Y)`` = Pᵀ Yᵀ): the CSR of
        Pᵀ, or with ``dense`` the scattered dense Pᵀ (contiguous fp32). Built once, cached until the values change."""
        if not dense:
            return self._csr(True)
        m = self._cache.get("dt")
        if m is None:
            m = self._cache["dt"] = self.dense().t().contiguous()
        return m

    def mat_form(self, dense: bool):
        """P (rows×d) as the first operand of ``mm``/``addmm_``: the CSR of P, or with ``dense`` a transposed view
        of the cached dense Pᵀ (no copy; BLAS reads it transposed)."""
        if not dense:
            return self._csr(False)
        m = self._cache.get("dtv")
        if m is None:
            m = self._cache["dtv"] = self.fwd_form(True).t()
        return m

    def release_dense(self) -> None:
        """Drop the cached dense forms (the CSR ones stay)."""
        self._cache.pop("dt", None)
        self._cache.pop("dtv", None)

    def dense_nbytes(self) -> int:
        """Bytes of the dense scattered form (what :meth:`fwd_form` with ``dense`` keeps)."""
        return self.rows * self.d * 4

    def t_matmul(self, y: "torch.Tensor") -> "torch.Tensor":
        """Pᵀ·Y for Y (rows×k) → (d×k)."""
        return self._csr(True) @ y.float()

    def right(self, x: "torch.Tensor") -> "torch.Tensor":
        """X·P for X (t×rows) → (t×d), without forming P densely."""
        return (self._csr(True) @ x.float().t()).t()

    def matmul(self, y: "torch.Tensor") -> "torch.Tensor":
        """P·Y for Y (d×k) → (rows×k)."""
        return self._csr(False) @ y.float()

    def dense(self, val: "torch.Tensor | None" = None) -> "torch.Tensor":
        """The dense rows×d matrix (differentiable with respect to ``val`` if given): fitting and tests only."""
        import torch

        v = self.val if val is None else val
        out = torch.zeros(self.rows, self.d, device=v.device, dtype=v.dtype)
        return out.scatter(1, self.idx.long(), v)

    def gram_with(self, prev: "SparseProjector") -> "torch.Tensor":
        """selfᵀ·prev (d×d): the change of basis used to re-project Adam moments on a subspace change."""
        return self.t_matmul(prev.dense())


def estimation_error(P: SparseProjector, Q: SparseProjector, G: "torch.Tensor") -> float:
    """‖P Pᵀ G Q Qᵀ − G‖_F / ‖G‖_F for G (P.rows × Q.rows), computed with the sparse forms."""
    G = G.float()
    core = Q.right(P.t_matmul(G))  # Pᵀ G Q: d×d
    est = Q.matmul(P.matmul(core).t()).t()  # P (PᵀGQ) Qᵀ = P Pᵀ G Q Qᵀ
    num = (est - G).norm().item()
    den = G.norm().item()
    return num / den if den > 0 else 0.0


def relative_error_sq(P: SparseProjector, Q: SparseProjector, pv: "torch.Tensor", qv: "torch.Tensor",
                      Gn: "torch.Tensor") -> "torch.Tensor":
    """‖P Pᵀ G Q Qᵀ − G‖²_F for a unit-norm G, differentiable in the values ``pv``/``qv``, without forming any m×n
    product: with A = PᵀGQ, ⟨G, PAQᵀ⟩ = ‖A‖² and ‖PAQᵀ‖² = ⟨(PᵀP)A, A(QᵀQ)⟩, so the error is
    1 − 2‖A‖² + ⟨(PᵀP)A, A(QᵀQ)⟩. Dense P, Q here: on the CPU one BLAS product beats a sparse scatter-add with
    autograd (measured 3× faster), and fitting is off the training path."""
    Pd, Qd = P.dense(pv), Q.dense(qv)
    A = Pd.t() @ Gn @ Qd  # d×d
    return (1 - 2 * (A * A).sum() + (((Pd.t() @ Pd) @ A) * (A @ (Qd.t() @ Qd))).sum()).clamp_min(0)


def fit_projectors(P: SparseProjector, Q: SparseProjector, grads: "list[torch.Tensor]", steps: int = 100,
                   lr: float = 0.1, deadline: "float | None" = None) -> tuple[float, float]:
    """Fit the non-zero values of P and Q (Adam, ``lr``: the reference's optimiser and rate) to minimise the mean
    relative estimation error ‖P Pᵀ G Q Qᵀ − G‖_F/‖G‖_F over ``grads`` (one or several gradients of the same shape).
    Returns (error before, error after) on ``grads``; P and Q keep the best values seen (the initial ones
    included), so a fit never makes the error on ``grads`` worse. No step starts after ``deadline`` (a
    ``time.perf_counter()`` value), if given."""
    import time

    import torch

    if not grads:
        raise ModelError(f"{P.name}.fit", "no calibration gradient to fit to")
    # unit-norm gradients: the objective is the relative error and the trace form needs ‖G‖ = 1
    Gs = [g.detach().float().to(P.device) / g.detach().float().norm().clamp_min(1e-30) for g in grads]
    pv = P.val.clone().requires_grad_(True)
    qv = Q.val.clone().requires_grad_(True)
    opt = torch.optim.Adam([pv, qv], lr=lr)

    def loss_fn() -> "torch.Tensor":
        tot = 0.0
        for G in Gs:
            tot = tot + (relative_error_sq(P, Q, pv, qv, G) + 1e-12).sqrt()
        return tot / len(Gs)

    with torch.enable_grad():
        with torch.no_grad():
            before = loss_fn().item()
        best, best_p, best_q = before, P.val.clone(), Q.val.clone()
        for _ in range(int(steps)):
            if deadline is not None and time.perf_counter() >= deadline:
                break
            opt.zero_grad(set_to_none=True)
            loss = loss_fn()
            lv = loss.item()
            if lv < best:
                best, best_p, best_q = lv, pv.detach().clone(), qv.detach().clone()
            loss.backward()
            opt.step()
        with torch.no_grad():
            lv = loss_fn().item()
        if lv < best:
            best, best_p, best_q = lv, pv.detach().clone(), qv.detach().clone()
    P.set_values(best_p)
    Q.set_values(best_q)
    return before, best


def reproject_moments(m: "torch.Tensor", v: "torch.Tensor", P_new: SparseProjector, P_old: SparseProjector,
                      Q_new: SparseProjector, Q_old: SparseProjector) -> None:
    """Re-express Adam's moments in the new subspace in place: M ← (P₁ᵀP₀) M (Q₀ᵀQ₁),
    V ← (P₁ᵀP₀)^∘2 V (Q₀ᵀQ₁)^∘2 (elementwise squares keep V non-negative)."""
    A = P_new.gram_with(P_old).to(m.device)  # d×d
    B = Q_new.gram_with(Q_old).t().to(m.device)  # Q₀ᵀQ₁
    m.copy_(A @ m @ B)
    v.copy_((A * A) @ v @ (B * B))
