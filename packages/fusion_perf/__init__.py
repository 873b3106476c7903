"""fusion_perf: an exact, fast analytical performance model of fused dataflows (TileFlow-style), with search.

    from fusion_perf import evaluate, search, attention, load_arch, T, S, Scope, OpLeaf
    res = evaluate(problem, "edge_accel", tree)        # -> Result (cycles, energy, per-level counts)
    best = search_template(problem, "edge_accel", "tileflow")

The buffer semantics that make the counts exact are documented in :mod:`fusion_perf.model`; the reference's rules
(Timeloop v0.2 / TileFlow), which TileFlow files get, in :mod:`fusion_perf.semantics`; TileFlow's own
call-by-call analysis (``semantics: tileflow``) in :mod:`fusion_perf.nest`.
"""
from .arch import Arch, Level, load_arch
from .energy import EnergyTable, load_table
from .errors import (
    ArchError,
    CapacityError,
    ConfigError,
    ConstraintError,
    FanoutError,
    FusionPerfError,
    InputFormatError,
    MappingError,
    ProblemError,
)
from .mapping import OpLeaf, S, Scope, T, Tile, dump_mapping, free_variables, load_mapping, substitute
from .model import BatchResult, Compiled, compile_tree, evaluate, tree_factors
from .problem import Problem, attention, conv_chain, gemm_chain
from .result import LevelStats, Result
from .search import TEMPLATES, FactorSpace, SearchResult, explore, search, search_template, template
from .semantics import PROJECT, REFERENCE, TILEFLOW, TILEFLOW_4200E63, Semantics


def evaluate_batch(problem: Problem, arch, tree, X) -> BatchResult:
    """Many factor vectors of one tree shape in one vectorised call (shape [B, loops], loop order as
    :func:`tree_factors`); infeasible rows get ``inf``."""
    c = compile_tree(problem, load_arch(arch), tree)
    return c.evaluate(X, batched=True)


__all__ = ["Arch", "Level", "load_arch", "ArchError", "CapacityError", "ConfigError", "ConstraintError",
           "FanoutError", "FusionPerfError", "InputFormatError", "MappingError", "ProblemError", "OpLeaf", "S",
           "Scope", "T", "Tile", "dump_mapping", "free_variables", "load_mapping", "substitute", "BatchResult",
           "Compiled", "compile_tree", "evaluate", "evaluate_batch", "tree_factors", "Problem", "attention",
           "conv_chain", "gemm_chain", "LevelStats", "Result", "TEMPLATES", "FactorSpace", "SearchResult", "explore",
           "search", "search_template", "template", "Semantics", "REFERENCE", "PROJECT", "TILEFLOW", "TILEFLOW_4200E63",
           "EnergyTable", "load_table"]
