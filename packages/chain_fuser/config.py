"""Structured configs of chain_fuser's experiments (validated on construction; errors name the field)."""
from __future__ import annotations

from dataclasses import dataclass, field

from shared_ir.errors import ValidationError


@dataclass
class ChainsExperiment:
    """Parameters of ``experiment=chain_fuser/gemm_chains`` and ``chain_fuser/conv_chains``."""

    shapes: list | None = None
    """Shapes to run (null: the whole suite): names of the suite's shapes and/or your own chains as mappings of
    the spec's fields, e.g. ``{batch: 4, M: 384, N: 96, K: 96, L: 384}`` (a GemmChain; ``glue: softmax`` makes it
    attention) or ``{N: 1, C: 64, H: 56, W: 56, K1: 64, R1: 3, S1: 3, K2: 64, R2: 1, S2: 1, glue: relu}`` (a
    ConvChain), with an optional ``name``."""
    from_workload: bool = False
    """Take the shapes from the experiment's workload graph instead of the suite: the distinct chains of the
    imported model that a template covers (any ``workload=``: a zoo model, a graph or ONNX file, ``workload=hf
    workload.name=bert``, ``workload=python``); inference batch norms after a conv are folded into it. The chains
    left out are listed with the reason in the summary."""
    max_chains: int = 8
    """With ``from_workload``: at most this many distinct chains, in the model's order."""
    top_k: int = 4
    """Plans of the model compiled and timed per shape (measured re-ranking)."""
    repeat: int = 5
    """Timing repeats (median reported)."""
    budget_s: float = 0.5
    """Seconds of timing per shape and variant set."""
    unfused: bool = True
    """Also time TVM without fusion using the same micro kernel."""
    scale: str = "small"
    """small or full: the conv suite's shape sizes (full: the reference's)."""
    plots: bool = True
    """Write the bar plot of speedups."""
    torch_in_process: bool = False
    """Time eager PyTorch in this process (the old way). Default: in a child process of its own, as the benchmark
    does (``bench.TorchServer``): in one process, torch's OpenMP workers and TVM's pool took the cores from each
    other, and eager times of the same chain ranged over 1.7-66 ms between runs (Darknet-19, 2 threads)."""
    winograd: list[int] = field(default_factory=lambda: [2])
    """Winograd tile sizes ``tune`` tries on 3×3 conv chains: [2] (a direct conv's rounding error), [2, 4] (adds the
    opt-in F(4×4, 3×3): faster, 10× the error), or [] (direct kernels only)."""
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.top_k, int) or self.top_k < 1:
            raise ValidationError("task.top_k", f"must be an integer >= 1, got {self.top_k!r}", self.top_k)
        if not isinstance(self.repeat, int) or self.repeat < 1:
            raise ValidationError("task.repeat", f"must be an integer >= 1, got {self.repeat!r}", self.repeat)
        if not (isinstance(self.budget_s, (int, float)) and self.budget_s > 0):
            raise ValidationError("task.budget_s", f"must be > 0, got {self.budget_s!r}", self.budget_s)
        if not isinstance(self.from_workload, bool):
            raise ValidationError("task.from_workload", f"must be true or false, got {self.from_workload!r}",
                                  self.from_workload)
        if isinstance(self.max_chains, bool) or not isinstance(self.max_chains, int) or self.max_chains < 1:
            raise ValidationError("task.max_chains", f"must be an integer >= 1, got {self.max_chains!r}",
                                  self.max_chains)
        if self.from_workload and self.shapes is not None:
            raise ValidationError("task.shapes", "must be null with task.from_workload=true (the workload's chains "
                                  "are the shapes)", self.shapes)
        if self.scale not in ("small", "full"):
            raise ValidationError("task.scale", f"must be small or full, got {self.scale!r}", self.scale)
        from .winograd import WINOGRAD_TILES

        # Hydra hands a ListConfig: any sequence but a string
        tiles = list(self.winograd) if hasattr(self.winograd, "__iter__") and not isinstance(self.winograd, str) \
            else None
        if tiles is None or any(isinstance(t, bool) or t not in WINOGRAD_TILES for t in tiles):
            raise ValidationError("task.winograd", f"must be a list of tile sizes among {list(WINOGRAD_TILES)}, got "
                                  f"{self.winograd!r}", self.winograd)
        self.winograd = tiles
        if self.shapes is not None:
            if isinstance(self.shapes, str) or not hasattr(self.shapes, "__iter__"):
                raise ValidationError("task.shapes", f"must be a list of shape names or chain mappings, got "
                                      f"{self.shapes!r}", self.shapes)
            self.shapes = [s if isinstance(s, str) else user_chain(s, f"task.shapes[{i}]")
                           for i, s in enumerate(self.shapes)]


def user_chain(fields, where: str):
    """A GemmChain or ConvChain from a mapping of its fields (a ConvChain when it has ``C``); errors name
    ``where``."""
    import dataclasses

    from .spec import ConvChain, GemmChain

    if not hasattr(fields, "items"):
        raise ValidationError(where, f"must be a shape name or a mapping of chain fields, got {fields!r}", fields)
    d = dict(fields)
    cls = ConvChain if "C" in d else GemmChain
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValidationError(f"{where}.{unknown[0]}", f"is not a {cls.__name__} field (fields: {sorted(known)})",
                              d[unknown[0]])
    for k, v in d.items():
        if k[0].isupper() or k == "batch":
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValidationError(f"{where}.{k}", f"must be an integer >= 1, got {v!r}", v)
    dims = [f.name for f in dataclasses.fields(cls) if f.name in d and (f.name[0].isupper() or f.name == "batch")]
    d.setdefault("name", "user_" + "x".join(str(d[k]) for k in dims))
    try:
        return cls(**d)
    except (TypeError, ValueError) as e:
        raise ValidationError(where, f"not a valid {cls.__name__}: {e}", fields) from e
