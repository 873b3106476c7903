"""TileFlow's own test cases replayed: the case's files read unchanged, the factors TileFlow's mapper chose (its
printed ``result/<name>.mapping.txt``) put in place of the mapping's ``X``, evaluated, and compared metric by
metric with the case's ``result/<name>.csv`` (``Cycle``, ``Energy``, ``<level>::Read|Fill|Update[::tensor]``).

The cases are evaluated under TileFlow's own analysis as of the commit that wrote their CSVs (``semantics:
tileflow-4200e63``, :mod:`fusion_perf.semantics`, :mod:`fusion_perf.nest`); ``--semantics tileflow`` gives what
the released TileFlow prints on them instead. ``python -m fusion_perf.tileflow_cases [CASE_DIR ...]`` prints one
row per case and mapping; :func:`replay_all` returns the rows (the bench key ``tileflow_result_csvs``). The cases
that ship with the package are in ``examples/tileflow_cases/`` (copied from ``pku-liang/TileFlow``
``tests/cases/``, the only case there with result CSVs).
"""
from __future__ import annotations

import copy
import csv
import re
import sys
from pathlib import Path
from typing import Any

from .errors import InputFormatError
from .tileflow_io import parse_arch, parse_mapping, parse_problem, yaml_load

CASES = Path(__file__).resolve().parent / "examples" / "tileflow_cases"
_LOOP = re.compile(r"^\s*for (\w+) in \[0:(?:[\w?]+\((\d+)\)|(\d+))\)( \(Spatial-[XY]\))?, (\w+)\s*$")
_COUNTS = ("Read", "Fill", "Update")
# TileFlow commit 4200e63 (2023-04-23) wrote the cases' result CSVs; its analysis differs from the released one
CASE_SEMANTICS = "tileflow-4200e63"


def printed_tiles(text: str, where: str) -> list[dict[str, int]]:
    """The loops of a TileFlow ``***Optimal Mapping`` printout as one {dim: extent} per tile, in tree order:
    consecutive ``for`` lines of one level and kind (temporal / spatial) are one tile."""
    tiles: list[dict[str, int]] = []
    key = None
    for line in text.splitlines():
        m = _LOOP.match(line)
        if not m:
            key = None
            continue
        dim, x, n, spatial, level = m.groups()
        k = (level, bool(spatial))
        if k != key or dim in tiles[-1]:
            tiles.append({})
            key = k
        tiles[-1][dim] = int(x or n)
    if not tiles:
        raise InputFormatError(where, "no loops found (expected TileFlow's printed optimal mapping)")
    return tiles


def fill_factors(mapping: Any, tiles: list[dict[str, int]], where: str) -> Any:
    """A copy of the mapping section whose Tile nodes take the printed factors, in tree order."""
    out = copy.deepcopy(mapping)
    todo = iter(tiles)
    count = 0

    def visit(node: Any, path: str) -> None:
        nonlocal count
        if not isinstance(node, dict):
            return
        if node.get("node-type") == "Tile":
            t = next(todo, None)
            if t is None:
                raise InputFormatError(path, "more Tile nodes than tiles in the printed mapping")
            names = str(node.get("factors", "")).split()
            dims = [f.split("=")[0] for f in names]
            if set(dims) != set(t):
                raise InputFormatError(f"{path}.factors", f"dims {dims}, the printed tile has {sorted(t)}")
            node["factors"] = " ".join(f"{d}={t[d]}" for d in dims)
            count += 1
        for j, child in enumerate(node.get("subtree") or []):
            visit(child, f"{path}.subtree[{j}]")

    visit(out, where)
    if next(todo, None) is not None:
        raise InputFormatError(where, f"the printed mapping has more tiles than the {count} Tile nodes")
    return out


def reference_metrics(path: Path) -> dict[str, float]:
    with open(path, newline="", encoding="utf-8") as f:
        return {r[0].strip(): float(r[1]) for r in csv.reader(f) if len(r) == 2 and r[0].strip() and _number(r[1])}


def _number(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def _arch_file(case: Path) -> Path:
    for p in sorted(case.glob("*.yaml")):
        if "architecture" in yaml_load(p.read_text(encoding="utf-8"), str(p)):
            return p
    raise InputFormatError(str(case), "no architecture file in the case")


def replay(case: Path, name: str, semantics: str = CASE_SEMANTICS):
    """(our metrics, the reference's) of mapping ``name`` of a case directory."""
    from .model import evaluate

    src = case / f"{name}.yaml"
    doc = yaml_load(src.read_text(encoding="utf-8"), str(src))
    arch_path = _arch_file(case)
    arch_doc = yaml_load(arch_path.read_text(encoding="utf-8"), str(arch_path))
    macros = doc.get("macro") or {}
    printed = case / "result" / f"{name}.mapping.txt"
    tiles = printed_tiles(printed.read_text(encoding="utf-8"), str(printed))
    mapping = fill_factors(doc["mapping"], tiles, f"{src}: mapping")
    arch = parse_arch(arch_doc["architecture"], f"{arch_path}: architecture", semantics=semantics)
    prob = parse_problem(doc["problem"], macros, f"{src}: problem")
    r = evaluate(prob, arch, parse_mapping(mapping, macros, f"{src}: mapping"))
    ours = {k: float(v) for k, v in r.metrics()}
    for (level, tensor), c in r.counts().items():
        for what in _COUNTS:
            ours[f"{level}::{what}::{tensor}"] = float(c.get(what.lower() + "s", 0))
    return ours, reference_metrics(case / "result" / f"{name}.csv")


def compare_case(case: Path, name: str, semantics: str = CASE_SEMANTICS) -> dict[str, Any]:
    """Cycles and energy side by side, and every per-level, per-tensor count the reference CSV gives."""
    ours, ref = replay(case, name, semantics)
    keys = [k for k in ref if k.count("::") == 2 and k.split("::")[1] in _COUNTS]
    wrong = {k: (ours.get(k, 0.0), ref[k]) for k in keys if not _close(ours.get(k, 0.0), ref[k])}
    return {"case": case.name, "mapping": name, "semantics": semantics, "cycles": ours["Cycle"],
            "tileflow_cycles": ref["Cycle"], "cycles_equal": ours["Cycle"] == ref["Cycle"], "energy_pj": ours["Energy"],
            "tileflow_energy": ref["Energy"],
            "energy_rel_err": abs(ours["Energy"] / ref["Energy"] - 1) if ref["Energy"] else None,
            "counts": len(keys), "counts_equal": len(keys) - len(wrong), "counts_wrong": dict(list(wrong.items())[:12]),
            "slowdowns": {k.split("::")[0]: [ours.get(k), ref[k]] for k in ref if k.endswith("::SlowDown")}}


def _close(a: float, b: float) -> bool:
    """Equal up to the 6 significant digits TileFlow prints."""
    return a == b or abs(a - b) <= 5e-6 * max(abs(a), abs(b))


def replay_all(cases: list[Path] | None = None, semantics: str = CASE_SEMANTICS) -> list[dict[str, Any]]:
    rows = []
    for case in cases or sorted(p for p in CASES.iterdir() if (p / "result").is_dir()):
        for csv_path in sorted((case / "result").glob("*.csv")):
            rows.append(compare_case(case, csv_path.stem, semantics))
    return rows


def main(argv=None) -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m fusion_perf.tileflow_cases", description=__doc__.split("\n")[0])
    ap.add_argument("cases", nargs="*", help=f"case directories with result/*.csv (default those in {CASES})")
    ap.add_argument("--semantics", default=CASE_SEMANTICS, help=f"rule set (default {CASE_SEMANTICS})")
    a = ap.parse_args(argv)
    try:
        rows = replay_all([Path(c) for c in a.cases] or None, a.semantics)
    except InputFormatError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
