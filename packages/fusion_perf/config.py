"""Structured configs of the fusion_perf Hydra tasks, validated on construction (errors name ``task.<field>``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .errors import ConfigError, require_count
from .search import TEMPLATES, canonical


@dataclass
class DSEConfig:
    """Parameters of ``fusion_perf.tasks.attention_dse`` / ``conv_chain``."""

    shapes: Optional[list] = None
    """Shapes to search (null: all of the suite): names of ``fusion_perf.dse.ATTENTION_SHAPES`` / ``CONV_SHAPES``
    and/or your own as mappings: attention ``{batch: 12, M: 384, N: 64, K: 64, L: 384}`` (batch·heads, query rows,
    value width, head width, key rows), conv chains ``{C: 64, H: 58, W: 58, K1: 64, R1: 3, K2: 256, R2: 1}``;
    an optional ``name``."""
    from_workload: bool = False
    """Take the shapes from the experiment's workload graph instead of the suite (any ``workload=``: a zoo model, a
    graph or ONNX file, ``workload=hf``, ``workload=python``): its distinct attention or conv chains; the chains
    the problems cannot express are listed with the reason in the summary."""
    max_chains: int = 4
    """With ``from_workload``: at most this many distinct shapes, in the model's order."""
    templates: list[str] = field(default_factory=lambda: list(TEMPLATES))
    """Fusion templates to search (layerwise, flat_hgran, flat_hgran_split, flat_rgran, chimera, fused, tileflow;
    ``flat`` = flat_rgran)."""
    iterations: int = 24
    """MCTS iterations per template (split over ``restarts`` runs)."""
    rollouts: int = 256
    """Random completions evaluated (in one vectorised call) per MCTS iteration."""
    restarts: int = 4
    """Independent MCTS runs (seeds derived from ``seed``) sharing the iterations."""
    top_k: int = 8
    """Diverse best points refined by local search (single and two-variable moves)."""
    kicks: int = 1
    """Iterated-local-search rounds per refined start (redraw a few variables, refine, keep if better); >= 0."""
    sweep: int = 4
    """Block sweeps after local search (shared loop factors on every loop order, then each op's PE-array shape;
    the ``sweep`` best of each block refined); 0 = off. Makes the best found nearly seed independent; >= 0."""
    seed: int = 0
    """Search seed."""
    softmax: bool = True
    """Attention only: model the softmax between the GEMMs as its own op."""
    plots: bool = True
    """Write PNG plots."""

    def __post_init__(self):
        for name, minimum in (("iterations", 1), ("rollouts", 1), ("restarts", 1), ("top_k", 1), ("kicks", 0),
                              ("sweep", 0), ("seed", 0)):
            require_count(f"task.{name}", getattr(self, name), minimum)
        require_count("task.max_chains", self.max_chains, 1)
        if self.from_workload and self.shapes is not None:
            raise ConfigError("task.shapes", "must be null with task.from_workload=true (the workload's chains are the "
                              "shapes)", self.shapes)
        for name in ("softmax", "plots", "from_workload"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"task.{name}", f"must be true or false, got {getattr(self, name)!r}")
        if self.shapes is not None and (isinstance(self.shapes, (str, bytes)) or not hasattr(self.shapes, "__iter__")):
            raise ConfigError("task.shapes", f"must be a list of shape names or mappings, got {self.shapes!r}")
        if isinstance(self.templates, str) or not hasattr(self.templates, "__iter__"):
            raise ConfigError("task.templates", f"must be a list of template names, got {self.templates!r}")
        self.templates = list(self.templates)
        for i, t in enumerate(self.templates):
            if not isinstance(t, str) or canonical(t) not in TEMPLATES:
                raise ConfigError(f"task.templates[{i}]",
                                  f"unknown template {t!r}; choose from {list(TEMPLATES)}", t)
        if not self.templates:
            raise ConfigError("task.templates", "at least one template is required")

    def pick(self, table: list, fields: tuple[str, ...]) -> list:
        """The chosen rows of ``table`` (name, *fields): named rows of it, and the user's mappings of ``fields``
        (trailing fields with defaults in the table's builder may be left out)."""
        if self.shapes is None:
            return list(table)
        names = [s[0] for s in table]
        out = []
        for i, s in enumerate(self.shapes):
            if hasattr(s, "items"):
                out.append(_user_shape(dict(s), fields, f"task.shapes[{i}]"))
                continue
            if s not in names:
                raise ConfigError(f"task.shapes[{i}]", f"unknown shape {s!r}; choose from {names} or give a "
                                  f"mapping of {list(fields)}", s)
            out.append(table[names.index(s)])
        return out


_OPTIONAL_SHAPE_FIELDS = {"R2"}  # the conv chain's second kernel defaults to 1x1


def _user_shape(d: dict, fields: tuple[str, ...], where: str) -> tuple:
    unknown = sorted(set(d) - set(fields) - {"name"})
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}", f"is not a shape field (fields: {list(fields)}, name)",
                          d[unknown[0]])
    missing = [f for f in fields if f not in d and f not in _OPTIONAL_SHAPE_FIELDS]
    if missing:
        raise ConfigError(f"{where}.{missing[0]}", f"is required (fields: {list(fields)})")
    for f in fields:
        v = d.get(f)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ConfigError(f"{where}.{f}", f"must be an integer >= 1, got {v!r}", v)
    vals = [d[f] for f in fields if f in d]
    return (str(d.get("name") or "user-" + "x".join(map(str, vals))), *vals)


__all__ = ["DSEConfig"]
