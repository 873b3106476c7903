"""Operators as loop nests.

An :class:`Op` is a perfect loop nest over named :class:`Dim` s (extent, reduction flag) and a list of
:class:`Access` es: for each tensor it reads or writes, one index expression per tensor dimension. Everything a
package needs about an op — MACs, FLOPs, bytes per tensor, the footprint of a tile — is derived here from that one
description.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Iterable, Mapping

from .affine import AffineExpr, IndexExpr, IndirectIndex
from .dtypes import DType
from .errors import ShapeError, ValidationError


class OpKind(str, enum.Enum):
    matmul = "matmul"
    linear = "linear"
    batch_matmul = "batch_matmul"
    conv2d = "conv2d"
    elementwise = "elementwise"
    softmax = "softmax"
    layernorm = "layernorm"
    reduce = "reduce"
    pool = "pool"
    embedding = "embedding"
    view = "view"  # reshape / flatten / permute / transpose: data movement only
    concat = "concat"
    conv1d = "conv1d"
    conv3d = "conv3d"
    conv_transpose = "conv_transpose"  # 1-3 spatial axes; the output index is affine in input and kernel dims
    interpolate = "interpolate"  # linear / bilinear / trilinear: fixed-weight taps
    opaque = "opaque"  # an operator no frontend translates: whole tensors in and out, no FLOPs

    @property
    def compute_intensive(self) -> bool:
        """Ops whose MACs dominate: the ones chains are built around."""
        return self in _COMPUTE_INTENSIVE

    @property
    def is_mac(self) -> bool:
        """Ops whose loop-nest points are multiply-accumulates (FLOPs = 2·MACs)."""
        return self in _COMPUTE_INTENSIVE


_COMPUTE_INTENSIVE = frozenset({OpKind.matmul, OpKind.linear, OpKind.batch_matmul, OpKind.conv2d, OpKind.conv1d,
                                OpKind.conv3d, OpKind.conv_transpose})
# ops that may sit between two compute-intensive ops of a fusable chain
CHAIN_GLUE_KINDS = frozenset({OpKind.elementwise, OpKind.softmax})


class TensorRole(str, enum.Enum):
    input = "input"
    weight = "weight"
    activation = "activation"
    output = "output"


@dataclass(frozen=True)
class Dim:
    """One loop of the nest."""

    name: str
    """Loop name, unique within the op (e.g. ``m``, ``k``, ``p``, ``r``)."""
    extent: int
    """Trip count (≥ 1)."""
    reduction: bool = False
    """True when the loop does not index the output (accumulated over)."""

    def __post_init__(self):
        if not isinstance(self.extent, int) or isinstance(self.extent, bool) or self.extent < 1:
            raise ValidationError(f"dims.{self.name}.extent", f"must be an integer >= 1, got {self.extent!r}",
                                  self.extent)


@dataclass(frozen=True)
class Tensor:
    """A named tensor. Identity is the name: two accesses with one name are one tensor (shared weights)."""

    name: str
    shape: tuple[int, ...]
    dtype: DType = DType.float32
    role: TensorRole = TensorRole.activation

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "dtype", DType.parse(self.dtype, f"tensors.{self.name}.dtype"))
        object.__setattr__(self, "role", TensorRole(self.role))
        if any(s < 1 for s in self.shape):
            raise ShapeError(f"tensors.{self.name}.shape", f"every extent must be >= 1, got {list(self.shape)}",
                             self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.nbytes

    def with_role(self, role: TensorRole) -> "Tensor":
        return Tensor(self.name, self.shape, self.dtype, role)

    def renamed(self, name: str) -> "Tensor":
        new = object.__new__(Tensor)  # fields already validated; merging model copies renames thousands
        for f, v in (("name", name), ("shape", self.shape), ("dtype", self.dtype), ("role", self.role)):
            object.__setattr__(new, f, v)
        return new


@dataclass(frozen=True)
class Access:
    """How an op touches one tensor: one index expression per tensor dimension.

    ``flat=True`` means a single expression indexes the row-major flattened tensor (reshape/flatten).
    """

    tensor: Tensor
    indices: tuple[IndexExpr, ...]
    flat: bool = False

    def __post_init__(self):
        object.__setattr__(self, "indices", tuple(self.indices))
        want = 1 if self.flat else len(self.tensor.shape)
        if len(self.indices) != want:
            raise ShapeError(f"accesses.{self.tensor.name}",
                             f"{len(self.indices)} index expressions for a tensor of rank {len(self.tensor.shape)}"
                             + (" (flat access takes one)" if self.flat else ""), self.indices)

    def with_tensor(self, tensor: Tensor) -> "Access":
        """The same access to another tensor of the same shape (renames; no re-validation)."""
        new = object.__new__(Access)
        object.__setattr__(new, "tensor", tensor)
        object.__setattr__(new, "indices", self.indices)
        object.__setattr__(new, "flat", self.flat)
        return new

    @property
    def extents(self) -> tuple[int, ...]:
        return (self.tensor.numel,) if self.flat else self.tensor.shape

    @property
    def dims(self) -> frozenset[str]:
        return frozenset(d for e in self.indices for d in e.dims)

    def footprint_box(self, tile: Mapping[str, int]) -> int:
        """Elements of the bounding box of the tile's touched set (span product; what a buffer holding the tile
        as a box must hold). Used by fusion_perf for capacity checks, Timeloop-style. Not clipped at padding."""
        return math.prod(e.span(tile) for e in self.indices)

    def footprint(self, tile: Mapping[str, int], lo: Mapping[str, int] | None = None) -> int:
        """Exact number of distinct in-bounds elements touched by the tile box (what actually moves). Excludes
        stride gaps and zero padding. ``lo`` is the tile's origin (default 0); border tiles touch less."""
        if self._separable:
            return math.prod(e.distinct(tile, n, lo) for e, n in zip(self.indices, self.extents))
        return _enumerate_footprint(self, tile, lo or {})

    @cached_property
    def _separable(self) -> bool:
        seen: set[str] = set()
        for e in self.indices:
            if seen & set(e.dims):
                return False
            seen |= set(e.dims)
        return True


def _enumerate_footprint(acc: Access, tile: Mapping[str, int], lo: Mapping[str, int]) -> int:
    import itertools

    dims = sorted(acc.dims)
    pts = set()
    for vals in itertools.product(*[range(lo.get(d, 0), lo.get(d, 0) + tile.get(d, 1)) for d in dims]):
        p = dict(zip(dims, vals))
        idx = tuple(e.evaluate(p) for e in acc.indices)
        if all(0 <= i < n for i, n in zip(idx, acc.extents)):
            pts.add(idx)
    return len(pts)


@dataclass(frozen=True)
class Op:
    """A loop-nest operator.

    ``inputs``/``outputs`` are accesses; an output is written (and, for reductions, accumulated) at every point.
    ``attrs`` hold kind-specific parameters (stride, padding, the elementwise function, ...) that do not change
    the loop nest but are needed to execute or re-emit the op.
    """

    name: str
    kind: OpKind
    dims: tuple[Dim, ...]
    inputs: tuple[Access, ...]
    outputs: tuple[Access, ...]
    attrs: tuple[tuple[str, Any], ...] = ()
    flops_per_point: int = 1
    """FLOPs per loop-nest point for non-MAC ops (e.g. softmax ≈ 5: max, sub, exp, sum, div)."""

    def __post_init__(self):
        object.__setattr__(self, "kind", OpKind(self.kind))
        object.__setattr__(self, "dims", tuple(self.dims))
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        if isinstance(self.attrs, Mapping):
            object.__setattr__(self, "attrs", tuple(sorted(self.attrs.items())))
        p = f"ops.{self.name}"
        names = [d.name for d in self.dims]
        if len(set(names)) != len(names):
            raise ValidationError(f"{p}.dims", f"duplicate dimension names {names}", names)
        if not self.outputs:
            raise ValidationError(f"{p}.outputs", "an op must write at least one tensor")
        known = set(names)
        for a in self.inputs + self.outputs:
            unknown = a.dims - known
            if unknown:
                raise ValidationError(f"{p}.accesses.{a.tensor.name}", f"index uses unknown dims {sorted(unknown)}")
        for a in self.outputs:
            red = {d.name for d in self.dims if d.reduction} & a.dims
            if red:
                raise ValidationError(f"{p}.outputs.{a.tensor.name}", f"output indexed by reduction dims {sorted(red)}")
        # every access stays inside its tensor except where padding is intended (affine exprs may go below 0 or
        # beyond the extent only for ops that declare padding)
        if not self.attr("padded", False):
            box = {d.name: 0 for d in self.dims}
            full = {d.name: d.extent for d in self.dims}
            for a in self.inputs + self.outputs:
                for i, (e, n) in enumerate(zip(a.indices, a.extents)):
                    if isinstance(e, AffineExpr):
                        mn, mx = e.bounds(box, full)
                        if mn < 0 or mx >= n:
                            raise ShapeError(f"{p}.accesses.{a.tensor.name}[{i}]",
                                             f"index {e} ranges over [{mn}, {mx}] but the tensor dimension "
                                             f"has extent {n}",
                                             (mn, mx))
        self._check_coverage(p)

    def _check_coverage(self, p: str) -> None:
        """A tensor axis indexed by one bare loop must get a loop of the axis' extent: a shorter loop leaves part
        of the tensor untouched and under-counts the MACs. Data-movement ops may read part of an input (a
        slice); every op writes all of its output."""
        ext = {d.name: d.extent for d in self.dims}
        partial_reads = self.kind in (OpKind.view, OpKind.concat)
        for a in (self.outputs if partial_reads else self.inputs + self.outputs):
            for i, (e, n) in enumerate(zip(a.indices, a.extents)):
                if isinstance(e, AffineExpr) and e.const == 0 and len(e.terms) == 1 and e.terms[0][1] == 1:
                    d = e.terms[0][0]
                    if ext[d] < n:
                        raise ShapeError(f"{p}.accesses.{a.tensor.name}[{i}]",
                                         f"dim {d!r} has extent {ext[d]} but indexes a tensor dimension of extent "
                                         f"{n}: the access cannot cover the tensor", (d, ext[d], n))

    # --- basic queries ------------------------------------------------------------------------------------------
    def attr(self, key: str, default: Any = None) -> Any:
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    @property
    def attr_dict(self) -> dict[str, Any]:
        return dict(self.attrs)

    @property
    def extents(self) -> dict[str, int]:
        return {d.name: d.extent for d in self.dims}

    @property
    def reduction_dims(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dims if d.reduction)

    @property
    def accesses(self) -> tuple[Access, ...]:
        return self.inputs + self.outputs

    def access(self, tensor: str) -> Access:
        for a in self.accesses:
            if a.tensor.name == tensor:
                return a
        raise KeyError(f"op {self.name!r} does not access tensor {tensor!r}")

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        return tuple(a.tensor for a in self.accesses)

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(a.tensor.name for a in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(a.tensor.name for a in self.outputs)

    @property
    def weights(self) -> tuple[Tensor, ...]:
        return tuple(a.tensor for a in self.inputs if a.tensor.role == TensorRole.weight)

    # --- derived costs ------------------------------------------------------------------------------------------
    @cached_property
    def points(self) -> int:
        """Number of points of the iteration space (product of all extents)."""
        return math.prod(d.extent for d in self.dims)

    @property
    def macs(self) -> int:
        """Multiply-accumulates: every point of a MAC op's nest (a grouped conv's group is one of its dims)."""
        return self.points if self.kind.is_mac else 0

    @property
    def flops(self) -> int:
        return 2 * self.macs if self.kind.is_mac else self.points * self.flops_per_point

    def tensor_bytes(self) -> dict[str, int]:
        """Bytes of each tensor the op touches (whole tensors)."""
        return {a.tensor.name: a.tensor.nbytes for a in self.accesses}

    @cached_property
    def touched_bytes(self) -> dict[str, int]:
        """Bytes of each tensor the whole nest actually touches: the full tensor for most ops, only the gathered
        rows of an embedding table, only the strided rows of a strided 1×1 conv's input."""
        fp = self.footprint()
        return {a.tensor.name: fp[a.tensor.name] * a.tensor.dtype.nbytes for a in self.accesses}

    @property
    def total_bytes(self) -> int:
        """Compulsory traffic: bytes read + written, each tensor counted once at its touched size (the roofline's
        memory term)."""
        return sum(self.touched_bytes.values())

    @property
    def weight_bytes(self) -> int:
        return sum(t.nbytes for t in self.weights)

    @property
    def output_bytes(self) -> int:
        return sum(a.tensor.nbytes for a in self.outputs)

    @property
    def arithmetic_intensity(self) -> float:
        return self.flops / max(1, self.total_bytes)

    def _full_tile(self, tile: Mapping[str, int] | None) -> dict[str, int]:
        ext = self.extents
        if tile is None:
            return ext
        bad = set(tile) - set(ext)
        if bad:
            raise ValidationError(f"ops.{self.name}.tile", f"unknown dims {sorted(bad)}; op has {list(ext)}", tile)
        return {d: int(tile.get(d, ext[d])) for d in ext}

    def footprint(self, tile: Mapping[str, int] | None = None, lo: Mapping[str, int] | None = None) -> dict[str, int]:
        """Distinct in-bounds elements of each tensor touched by a tile (dims missing from ``tile`` take their
        full extent). Exact for strided, dilated and padded windows and grouped channels."""
        t = self._full_tile(tile)
        return {a.tensor.name: a.footprint(t, lo) for a in self.accesses}

    def footprint_box(self, tile: Mapping[str, int] | None = None) -> dict[str, int]:
        """Bounding-box elements of each tensor's touched set (span product), Timeloop-style buffer size."""
        t = self._full_tile(tile)
        return {a.tensor.name: a.footprint_box(t) for a in self.accesses}

    def footprint_bytes(self, tile: Mapping[str, int] | None = None, box: bool = False) -> dict[str, int]:
        fp = self.footprint_box(tile) if box else self.footprint(tile)
        return {a.tensor.name: fp[a.tensor.name] * a.tensor.dtype.nbytes for a in self.accesses}

    # --- transformations ----------------------------------------------------------------------------------------
    def renamed(self, prefix: str, keep: Iterable[str] = ()) -> "Op":
        """Copy with the op and its tensors prefixed (``prefix/name``), except tensors in ``keep``."""
        keep = set(keep)

        def ren(a: Access) -> Access:
            return a if a.tensor.name in keep else a.with_tensor(a.tensor.renamed(f"{prefix}/{a.tensor.name}"))

        return self._copy(name=f"{prefix}/{self.name}", inputs=tuple(map(ren, self.inputs)),
                          outputs=tuple(map(ren, self.outputs)))

    def with_tensor_renames(self, mapping: Mapping[str, str]) -> "Op":
        def ren(a: Access) -> Access:
            n = mapping.get(a.tensor.name)
            return a.with_tensor(a.tensor.renamed(n)) if n else a

        return self._copy(inputs=tuple(map(ren, self.inputs)), outputs=tuple(map(ren, self.outputs)))

    def _copy(self, **changes: Any) -> "Op":
        """A copy with some fields replaced, skipping re-validation: renaming tensors or the op cannot make a valid
        loop nest invalid, and merging many model copies would otherwise re-check every index range."""
        new = object.__new__(Op)
        for f in ("name", "kind", "dims", "inputs", "outputs", "attrs", "flops_per_point"):
            object.__setattr__(new, f, changes.get(f, getattr(self, f)))
        if "points" in self.__dict__:  # cached costs survive a rename (touched_bytes is keyed by tensor name)
            new.__dict__["points"] = self.__dict__["points"]
        return new

    # --- serialisation ------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        def acc(a: Access) -> dict[str, Any]:
            d: dict[str, Any] = {"tensor": a.tensor.name, "index": [str(e) for e in a.indices]}
            if a.flat:
                d["flat"] = True
            return d

        out: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind.value,
            "dims": [{"name": d.name, "extent": d.extent, **({"reduction": True} if d.reduction else {})}
                     for d in self.dims],
            "inputs": [acc(a) for a in self.inputs],
            "outputs": [acc(a) for a in self.outputs],
        }
        if self.attrs:
            out["attrs"] = {k: _plain(v) for k, v in self.attrs}
        if self.flops_per_point != 1:
            out["flops_per_point"] = self.flops_per_point
        return out


def _plain(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return v


def _unplain(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_unplain(x) for x in v)
    return v


def op_from_dict(d: Mapping[str, Any], tensors: Mapping[str, Tensor], path: str = "op") -> Op:
    from .affine import parse_index

    allowed = {"name", "kind", "dims", "inputs", "outputs", "attrs", "flops_per_point"}
    unknown = set(d) - allowed
    if unknown:
        raise ValidationError(path, f"unknown fields {sorted(unknown)}")
    try:
        kind = OpKind(d["kind"])
    except (KeyError, ValueError):
        raise ValidationError(f"{path}.kind", f"unknown op kind {d.get('kind')!r}; expected one of "
                                              f"{[k.value for k in OpKind]}", d.get("kind")) from None
    dims = tuple(Dim(x["name"], int(x["extent"]), bool(x.get("reduction", False))) for x in d.get("dims", []))

    def acc(x: Mapping[str, Any], p: str) -> Access:
        name = x["tensor"]
        if name not in tensors:
            raise ValidationError(f"{p}.tensor", f"unknown tensor {name!r}", name)
        idx = tuple(parse_index(e, f"{p}.index") for e in x["index"])
        return Access(tensors[name], idx, bool(x.get("flat", False)))

    return Op(
        name=d["name"], kind=kind, dims=dims,
        inputs=tuple(acc(x, f"{path}.inputs[{i}]") for i, x in enumerate(d.get("inputs", []))),
        outputs=tuple(acc(x, f"{path}.outputs[{i}]") for i, x in enumerate(d.get("outputs", []))),
        attrs=tuple(sorted((k, _unplain(v)) for k, v in (d.get("attrs") or {}).items())),
        flops_per_point=int(d.get("flops_per_point", 1)),
    )


__all__ = ["OpKind", "TensorRole", "Dim", "Tensor", "Access", "Op", "op_from_dict", "IndirectIndex",
           "CHAIN_GLUE_KINDS"]
