"""Index expressions of tensor accesses: affine sums over loop dimensions, plus data-dependent (gather) indices.

An affine index is ``Σ coeff_d · d + const`` (e.g. a conv input row ``2*p + r - 1``). Its string form is canonical
(terms sorted by dimension name) so that YAML round-trips are exact.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping

import numpy as np

from .errors import ValidationError


@dataclass(frozen=True)
class AffineExpr:
    """``Σ coeff·dim + const``; ``terms`` is sorted by dim name and holds no zero coefficient."""

    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0

    # --- construction -------------------------------------------------------------------------------------------
    @staticmethod
    def of(terms: Mapping[str, int] | None = None, const: int = 0) -> "AffineExpr":
        t = tuple(sorted((d, int(c)) for d, c in (terms or {}).items() if int(c) != 0))
        return AffineExpr(t, int(const))

    @staticmethod
    def dim(name: str) -> "AffineExpr":
        return AffineExpr(((name, 1),), 0)

    @staticmethod
    def constant(c: int) -> "AffineExpr":
        return AffineExpr((), int(c))

    def __add__(self, other: "AffineExpr | int") -> "AffineExpr":
        if isinstance(other, int):
            return AffineExpr(self.terms, self.const + other)
        acc = dict(self.terms)
        for d, c in other.terms:
            acc[d] = acc.get(d, 0) + c
        return AffineExpr.of(acc, self.const + other.const)

    def __mul__(self, k: int) -> "AffineExpr":
        return AffineExpr.of({d: c * k for d, c in self.terms}, self.const * k)

    __rmul__ = __mul__

    # --- queries ------------------------------------------------------------------------------------------------
    @property
    def dims(self) -> tuple[str, ...]:
        return tuple(d for d, _ in self.terms)

    def coeff(self, dim: str) -> int:
        for d, c in self.terms:
            if d == dim:
                return c
        return 0

    def evaluate(self, point: Mapping[str, int]) -> int:
        return self.const + sum(c * point[d] for d, c in self.terms)

    def bounds(self, lo: Mapping[str, int], size: Mapping[str, int]) -> tuple[int, int]:
        """Min and max of the expression over the box ``d ∈ [lo[d], lo[d]+size[d])``."""
        mn = mx = self.const
        for d, c in self.terms:
            a, b = c * lo.get(d, 0), c * (lo.get(d, 0) + size.get(d, 1) - 1)
            mn += min(a, b)
            mx += max(a, b)
        return mn, mx

    def span(self, tile: Mapping[str, int]) -> int:
        """Number of index values between min and max over a tile (what a buffer holding the tile as a box
        must hold along this tensor dimension; Timeloop-style). Independent of where the tile sits."""
        return 1 + sum(abs(c) * (tile.get(d, 1) - 1) for d, c in self.terms)

    def distinct(self, tile: Mapping[str, int], extent: int, lo: Mapping[str, int] | None = None) -> int:
        """Exact number of distinct values in ``[0, extent)`` the expression takes over the tile box starting at
        ``lo`` (default: origin). Smaller than :meth:`span` when a stride leaves gaps or the box overlaps padding."""
        lo = lo or {}
        base = self.const + sum(c * lo.get(d, 0) for d, c in self.terms)
        steps = tuple(sorted((abs(c), tile.get(d, 1)) for d, c in self.terms if tile.get(d, 1) > 1))
        # negative coefficients mirror the set; shift base so the set is described from its minimum
        shift = sum(c * (tile.get(d, 1) - 1) for d, c in self.terms if c < 0)
        return _distinct_count(base + shift, steps, int(extent))

    # --- text form ----------------------------------------------------------------------------------------------
    def __str__(self) -> str:
        parts: list[str] = []
        for d, c in self.terms:
            s = d if abs(c) == 1 else f"{abs(c)}*{d}"
            parts.append(("- " if c < 0 else "+ ") + s)
        if self.const or not parts:
            parts.append(("- " if self.const < 0 else "+ ") + str(abs(self.const)))
        out = " ".join(parts)
        return out[2:] if out.startswith("+ ") else "-" + out[2:]

    @staticmethod
    def parse(text: "str | int", path: str = "index") -> "AffineExpr":
        if isinstance(text, int):
            return AffineExpr.constant(text)
        s = str(text).replace(" ", "")
        if not s:
            raise ValidationError(path, "empty index expression", text)
        if s[0] not in "+-":
            s = "+" + s
        acc: dict[str, int] = {}
        const = 0
        pos = 0
        for m in _TERM.finditer(s):
            if m.start() != pos:
                break
            pos = m.end()
            sign = -1 if m.group(1) == "-" else 1
            a, b = m.group(2), m.group(3)
            if b is None:  # single factor
                if a.isdigit():
                    const += sign * int(a)
                else:
                    acc[a] = acc.get(a, 0) + sign
            else:
                if a.isdigit() and not b.isdigit():
                    acc[b] = acc.get(b, 0) + sign * int(a)
                elif b.isdigit() and not a.isdigit():
                    acc[a] = acc.get(a, 0) + sign * int(b)
                elif a.isdigit() and b.isdigit():
                    const += sign * int(a) * int(b)
                else:
                    raise ValidationError(path, f"non-affine product {a}*{b} in {text!r}", text)
        if pos != len(s):
            raise ValidationError(path, f"cannot parse index expression {text!r} at {s[pos:]!r}", text)
        return AffineExpr.of(acc, const)


_TERM = re.compile(r"([+-])([A-Za-z_][A-Za-z0-9_]*|\d+)(?:\*([A-Za-z_][A-Za-z0-9_]*|\d+))?")


@dataclass(frozen=True)
class IndirectIndex:
    """A data-dependent index (embedding lookup ``W[ids[b, s], e]``): the value comes from another tensor.

    Footprint: a tile over ``via`` touches at most ``Π tile[via]`` rows, and never more than the extent.
    """

    via: tuple[str, ...]

    @property
    def dims(self) -> tuple[str, ...]:
        return self.via

    def span(self, tile: Mapping[str, int]) -> int:
        return int(np.prod([tile.get(d, 1) for d in self.via], dtype=np.int64))

    def distinct(self, tile: Mapping[str, int], extent: int, lo: Mapping[str, int] | None = None) -> int:
        return min(self.span(tile), int(extent))

    def bounds(self, lo: Mapping[str, int], size: Mapping[str, int]) -> tuple[int, int]:
        raise ValueError("an indirect index has no static bounds")

    def __str__(self) -> str:
        return "idx(" + ",".join(self.via) + ")"


IndexExpr = AffineExpr | IndirectIndex


def parse_index(text: "str | int", path: str = "index") -> IndexExpr:
    s = str(text).strip()
    if s.startswith("idx(") and s.endswith(")"):
        via = tuple(v.strip() for v in s[4:-1].split(",") if v.strip())
        return IndirectIndex(via)
    return AffineExpr.parse(text, path)


@lru_cache(maxsize=65536)
def _distinct_count(base: int, steps: tuple[tuple[int, int], ...], extent: int) -> int:
    """|{base + Σ c_i·x_i : 0 ≤ x_i < n_i} ∩ [0, extent)| for positive c_i (``steps`` = ((c_i, n_i), ...))."""
    if not steps:
        return 1 if 0 <= base < extent else 0
    # fast path: the sumset is a full interval when every step fits inside the run built so far
    run, ok = 1, True
    for c, n in steps:  # sorted by c
        if c > run:
            ok = False
            break
        run = run + c * (n - 1)
    if ok:
        lo, hi = base, base + run - 1
        return max(0, min(hi, extent - 1) - max(lo, 0) + 1)
    # general case: build the sumset as a bitmap over [base, base+span)
    span = 1 + sum(c * (n - 1) for c, n in steps)
    lo, hi = max(base, 0), min(base + span - 1, extent - 1)
    if hi < lo:
        return 0
    mask = np.zeros(span, dtype=bool)
    mask[0] = True
    reach = 1
    for c, n in steps:
        cur = mask[:reach].copy()
        for x in range(1, n):
            mask[c * x:c * x + reach] |= cur
        reach = reach + c * (n - 1)
    return int(mask[lo - base:hi - base + 1].sum())
