"""Reference data from TileFlow's own mapper on its attention case: ``python -m fusion_perf.mapper_reference
--tileflow BIN [--timeout 30] [--workdir DIR] [--out JSON]``.

Runs the TileFlow binary on ``tests/cases/13-test-attention`` exactly as the case's ``script.py`` does (its
files unchanged, one macro file per shape with ``tileflow-mapper: {timeout, objective: cycle}``), for the six
dataflows, the nine shapes and the ``edge`` and ``cloud`` architectures, and writes what it printed (cycles,
energy and the factors of its ``***Optimal Mapping``, one ``{dim: factor}`` per tile in tree order) to
``examples/tileflow_cases/13-test-attention/result/mapper.json``. The tests and the DSE evaluate those
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
from .tileflow_dse import ARCHS, CASE, DATAFLOWS, SHAPES

DEFAULT_OUT = CASE / "result" / "mapper.json"


def _macro_text(macros: dict, output: Path, timeout: int) -> str:
    lines = ["macro:"] + [f"  {k}: {v}" for k, v in macros.items()]
    return "\n".join(lines + [f"output: {output}", "tileflow-mapper:", f"  timeout: {timeout}",
                              "  objective: cycle", "verbose: 1", ""])


def parse_output(csv_path: Path, mapping_path: Path) -> dict[str, Any]:
    """Cycles and energy from TileFlow's ``<output>.csv``, the tiles from its ``<output>.mapping.txt``."""
    metrics = {}
    for line in csv_path.read_text().splitlines()[1:]:
        k, _, v = line.partition(",")
        metrics[k.strip()] = v.strip()
    tiles = printed_tiles(mapping_path.read_text(), str(mapping_path))
    return {"cycles": float(metrics["Cycle"]), "energy_pj": float(metrics["Energy"]), "tiles": tiles}


def collect(tileflow: str | None, workdir: Path, timeout: int) -> dict[str, Any]:
    """Runs (or reuses) every (arch, shape, dataflow) and returns the entries keyed ``shape/dataflow/arch``;
    with ``tileflow`` None only the runs already in ``workdir`` are read."""
    workdir.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {}
    for arch in ARCHS:
        for shape, macros in SHAPES:
            for df in DATAFLOWS:
                tag = f"{shape}-{df}-{arch}"
                res = workdir / tag
                if not Path(f"{res}.csv").is_file() and tileflow:
                    macro = workdir / f"{tag}.macro.yaml"
                    macro.write_text(_macro_text(macros, res, timeout))
                    cmd = [tileflow, str(CASE / "map" / f"{df}.yaml"), str(CASE / "arch" / f"{arch}.yaml"),
                           str(CASE / "prob" / "attention.yaml"), str(macro)]
                    with open(workdir / f"{tag}.log", "w") as log:
                        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout * 4 + 60)
                if Path(f"{res}.csv").is_file():
                    out[f"{shape}/{df}/{arch}"] = parse_output(Path(f"{res}.csv"), Path(f"{res}.mapping.txt"))
                    print(f"{tag}: {out[f'{shape}/{df}/{arch}']['cycles']:,.0f} cycles", flush=True)
                else:
                    print(f"{tag}: no result (see {workdir / f'{tag}.log'})", flush=True)
    return out


def load(path: Path = DEFAULT_OUT) -> dict[str, Any]:
    """The committed reference: ``{"meta": ..., "entries": {"shape/dataflow/arch": {cycles, energy_pj, tiles}}}``."""
    return json.loads(Path(path).read_text())


def replay(key: str, entry: dict[str, Any], semantics: str = "tileflow"):
    """The mapper's mapping of entry ``shape/dataflow/arch`` (its printed factors put into the unchanged mapping
    file) evaluated under ``semantics``: a :class:`fusion_perf.result.Result`."""
    from .model import evaluate
    from .tileflow_cases import fill_factors
    from .tileflow_dse import _read, load_case
    from .tileflow_io import parse_mapping

    shape, df, arch = key.split("/")
    macros = dict(SHAPES)[shape]
    prob, arch_, _ = load_case(arch, df, macros)
    m = CASE / "map" / f"{df}.yaml"
    doc = fill_factors(_read(m)["mapping"], [dict(t) for t in entry["tiles"]], f"{m}: mapping")
    tree = parse_mapping(doc, macros, f"{m}: mapping", True)
    return evaluate(prob, arch_.with_semantics(semantics), tree)


def check(path: Path = DEFAULT_OUT, keys: list[str] | None = None) -> dict[str, Any]:
    """Every (or the given) mapper entries replayed under ``semantics: tileflow``: per entry the printed and our
    cycles and energy; the fraction of equal cycles and the worst energy error."""
    ref = load(path)
    rows = []
    for key, e in ref["entries"].items():
        if keys and key not in keys:
            continue
        r = replay(key, e)
        rows.append({"entry": key, "tileflow_cycles": e["cycles"], "cycles": r.cycles,
                     "tileflow_energy_pj": e["energy_pj"], "energy_pj": r.energy_pj,
                     "energy_rel_err": abs(r.energy_pj - e["energy_pj"]) / e["energy_pj"]})
    return {"points": len(rows), "meta": ref["meta"],
            "cycles_equal_fraction": sum(r["cycles"] == r["tileflow_cycles"] for r in rows) / max(len(rows), 1),
            "energy_max_rel_err": max((r["energy_rel_err"] for r in rows), default=float("nan")), "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fusion_perf.mapper_reference", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tileflow", help="the TileFlow binary (its libraries on LD_LIBRARY_PATH); without it only "
                                       "the runs already in --workdir are read")
    ap.add_argument("--timeout", type=int, default=30, help="the mapper's timeout per run, seconds")
    ap.add_argument("--workdir", default="tileflow-mapper-runs", help="where the runs' files go")
    ap.add_argument("--commit", default="d72d278", help="the TileFlow commit the binary was built from")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    a = ap.parse_args(argv)
    entries = collect(a.tileflow, Path(a.workdir), a.timeout)
    meta = {"tool": "pku-liang/TileFlow", "commit": a.commit, "case": "tests/cases/13-test-attention",
            "mapper_timeout_s": a.timeout, "objective": "cycle"}
    tmp = f"{a.out}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump({"meta": meta, "entries": entries}, f, indent=0)
    os.replace(tmp, a.out)
    print(f"wrote {a.out}: {len(entries)} entries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
