"""Reference data from TileFlow's own mapper on its cases: ``python -m fusion_perf.mapper_reference --case
attention|conv --tileflow BIN [--timeout 30] [--workdir DIR] [--out JSON]``.

Runs the TileFlow binary on a case of :data:`fusion_perf.tileflow_dse.TASKS` (``tests/cases/13-test-attention``,
``12-test-fused-cnn``) as the case's ``script.py`` does (its files unchanged, one macro file per shape with
``tileflow-mapper: {timeout, objective: cycle}``), for every dataflow, shape and architecture of the case, and
writes what it printed (cycles, energy and the factors of its ``***Optimal Mapping``, one ``{dim: factor}`` per
tile in tree order) to the case's ``result/mapper.json``. The tests and the DSE evaluate those
mappings under ``semantics: tileflow`` and compare with the printed cycles and energy, and compare the DSE's
best per dataflow with the mapper's (CI cannot build TileFlow, so the data is committed).

The committed data came from pku-liang/TileFlow ``d72d278`` with its Timeloop fork (gulang2019/timeloop
``b6d7e9b``), built with ``scons`` as TileFlow's README says; ``--workdir`` keeps the runs (a rerun reuses the
outputs there, so an interrupted collection resumes).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from .tileflow_cases import printed_tiles
from .tileflow_dse import ATTENTION, TASKS, Case


def _case(case: Case | str) -> Case:
    return TASKS[case] if isinstance(case, str) else case


def _macro_text(macros: dict, output: Path, timeout: int, case: Case) -> str:
    lines = ["macro:"] + [f"  {k}: {v}" for k, v in macros.items()]
    lines += [f"output: {output}", "tileflow-mapper:", f"  timeout: {timeout}", "  objective: cycle", "verbose: 1"]
    if case.name == "conv":  # as the case's script.py writes it
        lines += ["check:", "  loopcount: False"]
    return "\n".join(lines + [""])


def parse_output(csv_path: Path, mapping_path: Path) -> dict[str, Any]:
    """Cycles and energy from TileFlow's ``<output>.csv``, the tiles from its ``<output>.mapping.txt``."""
    metrics = {}
    for line in csv_path.read_text().splitlines()[1:]:
        k, _, v = line.partition(",")
        metrics[k.strip()] = v.strip()
    tiles = printed_tiles(mapping_path.read_text(), str(mapping_path))
    return {"cycles": float(metrics["Cycle"]), "energy_pj": float(metrics["Energy"]), "tiles": tiles}


def collect(tileflow: str | None, workdir: Path, timeout: int, case: Case | str = ATTENTION) -> dict[str, Any]:
    """Runs (or reuses) every (arch, shape, dataflow) and returns the entries keyed ``shape/dataflow/arch``;
    with ``tileflow`` None only the runs already in ``workdir`` are read."""
    case = _case(case)
    workdir.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {}
    for arch in case.archs:
        for shape, macros in case.shapes:
            for df in case.dataflows:
                tag = f"{shape}-{df}-{arch}"
                res = workdir / tag
                if not Path(f"{res}.csv").is_file() and tileflow:
                    macro = workdir / f"{tag}.macro.yaml"
                    macro.write_text(_macro_text(macros, res, timeout, case))
                    cmd = [tileflow, str(case.dir / "map" / f"{df}.yaml"), str(case.dir / "arch" / f"{arch}.yaml"),
                           str(case.dir / case.problem), str(macro)]
                    with open(workdir / f"{tag}.log", "w") as log:
                        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout * 4 + 60)
                if Path(f"{res}.csv").is_file():
                    out[f"{shape}/{df}/{arch}"] = parse_output(Path(f"{res}.csv"), Path(f"{res}.mapping.txt"))
                    print(f"{tag}: {out[f'{shape}/{df}/{arch}']['cycles']:,.0f} cycles", flush=True)
                else:
                    print(f"{tag}: no result (see {workdir / f'{tag}.log'})", flush=True)
    return out


def load(case: Case | str = ATTENTION) -> dict[str, Any]:
    """A case's committed reference: ``{"meta": ..., "entries": {"shape/dataflow/arch": {cycles, energy_pj,
    tiles}}}`` (no entries when the case has none)."""
    path = _case(case).dir / "result" / "mapper.json"
    return json.loads(path.read_text()) if path.is_file() else {"meta": {}, "entries": {}}


def replay(key: str, entry: dict[str, Any], semantics: str = "tileflow", case: Case | str = ATTENTION):
    """The mapper's mapping of entry ``shape/dataflow/arch`` (its printed factors put into the unchanged mapping
    file) evaluated under ``semantics``: a :class:`fusion_perf.result.Result`."""
    from .model import evaluate
    from .tileflow_cases import fill_factors
    from .tileflow_dse import _read, load_case
    from .tileflow_io import parse_mapping

    case = _case(case)
    shape, df, arch = key.split("/")
    macros = dict(case.shapes)[shape]
    prob, arch_, _ = load_case(arch, df, macros, case)
    m = case.dir / "map" / f"{df}.yaml"
    doc = fill_factors(_read(m)["mapping"], [dict(t) for t in entry["tiles"]], f"{m}: mapping")
    tree = parse_mapping(doc, macros, f"{m}: mapping", True)
    return evaluate(prob, arch_.with_semantics(semantics), tree)


def check(case: Case | str = ATTENTION, keys: list[str] | None = None) -> dict[str, Any]:
    """Every (or the given) mapper entries of a case replayed under ``semantics: tileflow``: per entry the printed
    and our cycles and energy; the fraction of equal cycles and the worst energy error."""
    ref = load(case)
    rows = []
    for key, e in ref["entries"].items():
        if keys and key not in keys:
            continue
        r = replay(key, e, case=case)
        rows.append({"entry": key, "tileflow_cycles": e["cycles"], "cycles": r.cycles,
                     "tileflow_energy_pj": e["energy_pj"], "energy_pj": r.energy_pj,
                     "energy_rel_err": abs(r.energy_pj - e["energy_pj"]) / e["energy_pj"]})
    return {"points": len(rows), "meta": ref["meta"],
            "cycles_equal_fraction": sum(r["cycles"] == r["tileflow_cycles"] for r in rows) / max(len(rows), 1),
            "energy_max_rel_err": max((r["energy_rel_err"] for r in rows), default=float("nan")), "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fusion_perf.mapper_reference", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", default="attention", choices=sorted(TASKS))
    ap.add_argument("--tileflow", help="the TileFlow binary (its libraries on LD_LIBRARY_PATH); without it only "
                                       "the runs already in --workdir are read")
    ap.add_argument("--timeout", type=int, default=30, help="the mapper's timeout per run, seconds")
    ap.add_argument("--workdir", default="tileflow-mapper-runs", help="where the runs' files go")
    ap.add_argument("--commit", default="d72d278", help="the TileFlow commit the binary was built from")
    ap.add_argument("--out", default=None, help="default: the case's result/mapper.json")
    a = ap.parse_args(argv)
    case = TASKS[a.case]
    a.out = a.out or str(case.dir / "result" / "mapper.json")
    entries = collect(a.tileflow, Path(a.workdir), a.timeout, case)
    meta = {"tool": "pku-liang/TileFlow", "commit": a.commit, "case": f"tests/cases/{case.dir.name}",
            "mapper_timeout_s": a.timeout, "objective": "cycle"}
    tmp = f"{a.out}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump({"meta": meta, "entries": entries}, f, indent=0)
    os.replace(tmp, a.out)
    print(f"wrote {a.out}: {len(entries)} entries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
