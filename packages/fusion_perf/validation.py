"""The reference's own validation points through the public API, against what Timeloop and TileFlow print.

TileFlow's ``AE/validation`` inputs (``examples/validation/timeloop`` — one GEMM on a 16x16 systolic array — and
``examples/validation/accelerator`` — fused GEMM→GEMM), one evaluation per CSV row with the row's macros, under
the reference semantics (:mod:`fusion_perf.semantics`), and again under TileFlow's own (``tileflow``) against
the cycles and energy TileFlow printed (``tileflow_rules_*``). ``python -m fusion_perf.validation [--timeloop CSV]
[--tileflow CSV]`` prints the summary; :func:`compare` returns it (the bench keys
``timeloop_cycles_equal_fraction``, ``timeloop_energy_max_rel_err``, ``tileflow_fused_cycles_max_rel_err``).
The CSVs default to ``../shared/reference/fusion_perf_validation/`` beside the repository when present, else
to the copies in ``examples/validation/``.
"""
from __future__ import annotations

import csv
import os
import sys
import time
from functools import lru_cache
from pathlib import Path

from .model import evaluate
from .result import Result
from .tileflow_io import parse_arch, parse_mapping, parse_problem, solve_factor_names, yaml_load

HERE = Path(__file__).resolve().parent / "examples" / "validation"
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "fusion_perf_validation"
TIMELOOP_CSV, TILEFLOW_CSV = "timeloop_single_gemm.csv", "tileflow_fused_gemm_gemm.csv"
TIMELOOP_MACROS = ("M", "N", "K", "MO", "MM", "NO", "NI", "KO", "KM")
TILEFLOW_MACROS = ("M", "N", "K", "L", "KO", "KM", "LO", "LM", "MO", "MM", "NO", "SX", "SY")


def default_csv(name: str) -> Path:
    """The shared reference copy of CSV ``name`` when present, else the one in ``examples/validation``."""
    return SHARED / name if (SHARED / name).is_file() else HERE / name


def read_rows(path: str | os.PathLike) -> list[dict[str, float]]:
    with open(path, newline="", encoding="utf-8") as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


@lru_cache(maxsize=None)
def _inputs(kind: str):
    """(arch, problem section, mapping section) of ``examples/validation/<kind>``, read once."""
    docs = {}
    for f in ("arch", "prob", "map"):
        p = HERE / kind / f"{f}.yaml"
        docs[f] = (yaml_load(p.read_text(encoding="utf-8"), str(p)), str(p))
    (a, ap), (pr, pp), (m, mp) = docs["arch"], docs["prob"], docs["map"]
    return parse_arch(a["architecture"], f"{ap}: architecture"), (pr["problem"], pp), (m["mapping"], mp)


def evaluate_point(kind: str, macros: dict[str, int], semantics: str | None = None) -> Result:
    """One validation point: ``kind`` ``timeloop`` or ``accelerator`` with its macros (factor names that are no
    macros are solved from the loop counts, as TileFlow's mapper fixes them), under the files' rules or
    ``semantics``."""
    arch, (prob_doc, pp), (map_doc, mp) = _inputs(kind)
    arch = arch.with_semantics(semantics) if semantics else arch
    prob = parse_problem(prob_doc, macros, f"{pp}: problem")
    tree = solve_factor_names(parse_mapping(map_doc, macros, f"{mp}: mapping", True), prob, f"{mp}: mapping")
    return evaluate(prob, arch, tree)


def _macros(row: dict, names: tuple[str, ...]) -> dict[str, int]:
    return {k: int(row[k]) for k in names}


def tileflow_rules(rows: list[tuple[str, dict]]) -> dict:
    """The points ``(kind, CSV row)`` under TileFlow's own analysis (``semantics: tileflow``) against what
    TileFlow printed: the fraction with its cycles exactly and the worst energy error (it prints 6 digits)."""
    t0 = time.perf_counter()
    equal, worst = 0, 0.0
    for kind, row in rows:
        r = evaluate_point(kind, _macros(row, TIMELOOP_MACROS if kind == "timeloop" else TILEFLOW_MACROS), "tileflow")
        equal += r.cycles == row["tileflow_cycles"]
        worst = max(worst, abs(r.energy_pj / row["tileflow_energy"] - 1))
    return {"tileflow_rules_points": len(rows), "tileflow_rules_cycles_equal_fraction": equal / len(rows),
            "tileflow_rules_energy_max_rel_err": worst, "tileflow_rules_s": time.perf_counter() - t0}


def compare(timeloop_csv=None, tileflow_csv=None, with_tileflow_rules: bool = True) -> dict:
    """Every point of both CSVs: the fraction of single-GEMM points with Timeloop's cycles exactly, the worst
    energy error against Timeloop, and the worst cycle error of the fused points against TileFlow; with
    ``with_tileflow_rules``, every point under TileFlow's own rules against TileFlow (:func:`tileflow_rules`)."""
    tl_path = Path(timeloop_csv or default_csv(TIMELOOP_CSV))
    tf_path = Path(tileflow_csv or default_csv(TILEFLOW_CSV))
    t0 = time.perf_counter()
    tl = []
    for row in read_rows(tl_path):
        r = evaluate_point("timeloop", _macros(row, TIMELOOP_MACROS))
        tl.append((row, r.cycles, abs(r.energy_pj / row["timeloop_energy"] - 1)))
    tf = []
    for row in read_rows(tf_path):
        r = evaluate_point("accelerator", _macros(row, TILEFLOW_MACROS))
        tf.append((row, r.cycles, abs(r.cycles / row["tileflow_cycles"] - 1)))
    wall = time.perf_counter() - t0
    miss = [(_macros(row, TIMELOOP_MACROS), c, row["timeloop_cycles"]) for row, c, _ in tl
            if c != row["timeloop_cycles"]]
    worst_tf = max(tf, key=lambda x: x[2]) if tf else None
    return {
        "timeloop_points": len(tl), "timeloop_csv": str(tl_path),
        "timeloop_cycles_equal_fraction": (len(tl) - len(miss)) / len(tl) if tl else None,
        "timeloop_cycles_mismatches": [{"macros": m, "cycles": c, "timeloop": t} for m, c, t in miss[:10]],
        "timeloop_energy_max_rel_err": max(e for _, _, e in tl) if tl else None,
        "tileflow_points": len(tf), "tileflow_csv": str(tf_path),
        "tileflow_fused_cycles_max_rel_err": worst_tf[2] if tf else None,
        "tileflow_fused_cycles_mean_rel_err": sum(e for _, _, e in tf) / len(tf) if tf else None,
        "tileflow_fused_worst": ({"macros": _macros(worst_tf[0], TILEFLOW_MACROS), "cycles": worst_tf[1],
                                  "tileflow": worst_tf[0]["tileflow_cycles"]} if tf else None),
        "validation_s": wall,
        **(tileflow_rules([("timeloop", row) for row, _, _ in tl] + [("accelerator", row) for row, _, _ in tf])
           if with_tileflow_rules else {}),
    }


def main(argv=None) -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m fusion_perf.validation", description=__doc__)
    ap.add_argument("--timeloop", help=f"CSV of single-GEMM points (default {default_csv(TIMELOOP_CSV)})")
    ap.add_argument("--tileflow", help=f"CSV of fused points (default {default_csv(TILEFLOW_CSV)})")
    a = ap.parse_args(argv)
    for p in (a.timeloop, a.tileflow):
        if p and not os.path.isfile(p):
            print(f"error: {p}: file not found", file=sys.stderr)
            return 2
    print(json.dumps(compare(a.timeloop, a.tileflow), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
