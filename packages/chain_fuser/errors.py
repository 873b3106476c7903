"""Typed errors of chain_fuser. Every message names the chain, field or op at fault."""
from __future__ import annotations

from shared_ir.errors import ValidationError


class ChainFuserError(ValueError):
    """Base class of every error raised by chain_fuser."""


class UnsupportedChainError(ChainFuserError):
    """A chain that no kernel template covers (wrong op kinds, an op between the compute ops we cannot fuse,
    an index pattern other than GEMM→GEMM / conv→conv). ``chain`` names the ops, ``reason`` says why."""

    def __init__(self, chain: str, reason: str):
        self.chain, self.reason = chain, reason
        super().__init__(f"chain {chain}: {reason}")


class ChainDTypeError(ChainFuserError, TypeError):
    """A tensor of a non-floating dtype (or a dtype the kernels do not cover) was given."""

    def __init__(self, field: str, dtype: object, supported: tuple[str, ...] = ("float32",)):
        self.field, self.dtype = field, dtype
        super().__init__(f"{field}: dtype {dtype} is not supported; chain_fuser kernels take {list(supported)}")


class ChainShapeError(ChainFuserError, ValidationError):
    """Operand shapes that disagree with each other or with the compiled chain."""

    def __init__(self, path: str, message: str, value: object = None):
        ValidationError.__init__(self, path, message, value)


class InfeasiblePlanError(ChainFuserError):
    """No tile sizes fit a memory level's capacity (even the smallest tiles are too big)."""
