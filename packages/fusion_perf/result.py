"""Results of one evaluation: per-level, per-tensor counts, cycles, energy, utilisation; JSON/CSV and a plot."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

COUNTS = ("reads", "fills", "updates", "writes")


@dataclass
class LevelStats:
    """Counts (words) at one storage level."""

    name: str
    tensors: dict[str, dict[str, int]]
    """Per tensor: reads, fills, updates, writes (writes = fills + updates)."""
    slowdown: float = 1.0
    """Max over nodes holding tiles here of cycles / cycles without this level's bandwidth limit (> 1: binds)."""
    capacity_util: float = 0.0
    """Peak words live per instance / capacity (0 for an unbounded level)."""
    peak_words: int = 0
    """Peak words live per instance."""

    def total(self, what: str) -> int:
        return sum(v[what] for v in self.tensors.values())


@dataclass
class Result:
    """What :func:`fusion_perf.evaluate` returns."""

    cycles: float
    energy_pj: float
    macs: int
    points: int
    levels: list[LevelStats]
    bottleneck: str
    """Name of the level whose bandwidth binds most, or ``compute``."""
    spatial_util: float
    """PEs used by the widest op / PEs available."""
    pipeline_fill_drain: float = 0.0
    """Cycles added by pipeline fill/drain over all Pipeline scopes (the term TileFlow leaves out)."""
    factors: dict[str, int] = field(default_factory=dict)
    node_cycles: list = field(default_factory=list)
    """Cycles breakdown: per tree node (path, label, cycles before its own bandwidth limit, cycles)."""

    def level(self, name: str) -> LevelStats:
        for lv in self.levels:
            if lv.name == name:
                return lv
        raise KeyError(name)

    def counts(self) -> dict[tuple[str, str], dict[str, int]]:
        """{(level, tensor): {reads, fills, updates, writes}} with zero rows omitted."""
        return {(lv.name, t): dict(v) for lv in self.levels for t, v in lv.tensors.items() if any(v.values())}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def metrics(self) -> list[tuple[str, float]]:
        """TileFlow-style ``metric,value`` rows: Cycle, Energy, then ``Level::Read|Fill|Update|Write[::tensor]``,
        ``Level::SlowDown``, ``Level::CapUtil``, ``SpatialUtil``, ``Bottleneck`` is not numeric and left out."""
        rows: list[tuple[str, float]] = [("Cycle", self.cycles), ("Energy", self.energy_pj), ("MAC", self.macs)]
        for lv in self.levels:
            for what in COUNTS:
                rows.append((f"{lv.name}::{what[:-1].capitalize()}", lv.total(what)))
                for t, v in sorted(lv.tensors.items()):
                    rows.append((f"{lv.name}::{what[:-1].capitalize()}::{t}", v[what]))
            rows.append((f"{lv.name}::SlowDown", lv.slowdown))
            rows.append((f"{lv.name}::CapUtil", lv.capacity_util))
        rows.append(("SpatialUtil", self.spatial_util))
        rows.append(("PipelineFillDrain", self.pipeline_fill_drain))
        return rows

    def to_csv(self) -> str:
        lines = ["metric,value"]
        for k, v in self.metrics():
            lines.append(f"{k},{int(v) if float(v).is_integer() else repr(float(v))}")
        return "\n".join(lines) + "\n"

    def save_csv(self, path: str) -> None:
        from shared_ir import atomic_write_text

        atomic_write_text(path, self.to_csv())

    def summary(self) -> str:
        out = [f"Cycle: {self.cycles:.6g}  Energy: {self.energy_pj:.6g} pJ  bottleneck: {self.bottleneck}  "
               f"spatial util: {self.spatial_util:.3f}"]
        for lv in self.levels:
            out.append(f"  {lv.name:>8}: reads {lv.total('reads'):>12}  fills {lv.total('fills'):>12}  updates "
                       f"{lv.total('updates'):>12}  slowdown {lv.slowdown:6.3f}  cap {lv.capacity_util:6.3f}")
        return "\n".join(out)

    def plot(self, path: str, title: str = "") -> None:
        """Stacked data movement per level and tensor, per-level slowdown, and the cycles of each scope child
        (the cycles breakdown of the fused ops), PNG."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (a, b, cax) = plt.subplots(1, 3, figsize=(15, 4))
        names = [lv.name for lv in self.levels]
        tensors = sorted({t for lv in self.levels for t in lv.tensors})
        bottom = [0.0] * len(names)
        for t in tensors:
            vals = [lv.tensors.get(t, {}).get("reads", 0) + lv.tensors.get(t, {}).get("writes", 0)
                    for lv in self.levels]
            a.bar(names, vals, bottom=bottom, label=t)
            bottom = [x + y for x, y in zip(bottom, vals)]
        a.set_ylabel("words moved (reads + writes)")
        a.legend(fontsize=7)
        a.set_title("data movement per level")
        b.bar(names, [lv.slowdown for lv in self.levels], color="tab:red")
        b.axhline(1.0, color="k", lw=0.8)
        b.set_ylabel("slowdown vs compute-bound")
        b.set_title(f"cycles {self.cycles:.3g}, bottleneck {self.bottleneck}")
        labels = {p: lab for p, lab, _, _ in self.node_cycles}
        parts = [(p, lab, c) for p, lab, _, c in self.node_cycles
                 if labels.get(p.rsplit(".subtree[", 1)[0], "").startswith("Scope") and ".subtree[" in p]
        if not parts and self.node_cycles:
            parts = [self.node_cycles[0][:2] + (self.node_cycles[0][3],)]
        cax.barh([f"{i}: {lab[:28]}" for i, (_, lab, _) in enumerate(parts)], [c for _, _, c in parts],
                 color="tab:green")
        cax.set_xlabel("cycles per entry of the enclosing scope")
        cax.set_title("cycles breakdown")
        cax.tick_params(axis="y", labelsize=7)
        fig.suptitle(title)
        fig.tight_layout()
        from shared_ir import atomic_savefig

        atomic_savefig(fig, path, dpi=100)
        plt.close(fig)


__all__ = ["Result", "LevelStats", "COUNTS"]
