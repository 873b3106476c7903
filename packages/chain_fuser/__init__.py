"""chain_fuser: fused kernels for chains of compute-intensive operators (Chimera, HPCA 2023).

An analytical data-movement model over shared_ir loop nests picks, for every memory level, the block order (all
permutations) and tile sizes of a fused chain (GEMM→GEMM, attention, conv→conv); TVM generates the kernel with a
register-blocked vector micro kernel; the model's top K plans are timed and the fastest is cached on disk.

    import chain_fuser
    plans = chain_fuser.plan_chain(chain_fuser.GemmChain(8, 512, 64, 64, 512))
    chain_fuser.explain(plans[0])
    fast = chain_fuser.compile(module, example_inputs)     # a callable on torch tensors

Light to import: torch and tvm are imported inside the functions that need them.
"""
from .errors import (
    ChainDTypeError,
    ChainFuserError,
    ChainShapeError,
    InfeasiblePlanError,
    UnsupportedChainError,
)
from .model import ChainNest, LevelPlan, MicroKernel, Plan, explain
from .spec import ConvChain, GemmChain, chain_nest, spec_from_chain

__all__ = ["ChainDTypeError", "ChainFuserError", "ChainShapeError", "InfeasiblePlanError", "UnsupportedChainError",
           "ChainNest", "LevelPlan", "MicroKernel", "Plan", "explain", "ConvChain", "GemmChain", "chain_nest",
           "spec_from_chain", "plan_chain", "compile", "tune", "build_kernel", "fma_peak_gflops"]


def plan_chain(spec, device=None, top_k: int = 4, **kw):
    """The model's top ``top_k`` plans for a chain spec on ``device`` (default: the host preset)."""
    from .planner import plan_chain as _plan

    return _plan(spec, device, top_k=top_k, **kw)


def tune(spec, top_k: int = 4, **kw):
    """Compile and time the model's top ``top_k`` plans; return (fastest kernel, report). Cached on disk."""
    from .kernel import tune as _tune

    return _tune(spec, top_k=top_k, **kw)


def build_kernel(spec, plan, fused: bool = True, use_cache: bool = True, algorithm: str = "direct"):
    from .kernel import build_kernel as _build

    return _build(spec, plan, fused, use_cache, algorithm)


def compile(fn_or_module, example_inputs, **kw):  # noqa: A001 - the public name the issue asks for
    """Trace ``fn_or_module`` on ``example_inputs``, fuse every chain a template covers, and return a callable on
    torch tensors numerically equal to eager PyTorch. See :func:`chain_fuser.frontend.compile`."""
    from .frontend import compile as _compile

    return _compile(fn_or_module, example_inputs, **kw)


def fma_peak_gflops(refresh: bool = False) -> float:
    from .peak import fma_peak_gflops as _peak

    return _peak(refresh)
