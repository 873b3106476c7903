"""The cost model against MAESTRO's own outputs (``soc_mapper/data/maestro_reference.json``).

Each reference entry (a zoo layer under one dataflow style, from :mod:`soc_mapper.maestro_reference`) is
rebuilt as a :class:`~soc_mapper.workload.Layer` and the preset accelerator it was run for, and costed by
:func:`soc_mapper.cost.layer_model`: cycles = latency × clock; energy = the model's dynamic energy with MAESTRO's
energy table (MAC 1, L1 access 1.68, L2 access 18.61 MAC energies), so that both sides count the same units.
A layer of ``repeat`` > 1 identical copies (a conv lowered to GEMM per group, a batched matmul) was run once by
MAESTRO; its reference totals are ``repeat`` × the printed counts. The test and the bench report the relative
errors.
"""
from __future__ import annotations

import dataclasses
import json
import os
import statistics

from .maestro_model import L1_ENERGY, L2_ENERGY, hw_of
from .workload import Layer

REFERENCE = os.path.join(os.path.dirname(__file__), "data", "maestro_reference.json")
COLUMNS = ("id", "model", "layer", "dataflow", "maestro_cycles", "model_cycles", "latency_rel_err",
           "maestro_energy", "model_energy", "energy_rel_err")


def load_reference(path: str = REFERENCE) -> dict:
    with open(path) as f:
        return json.load(f)


def reference_layer(e: dict) -> Layer:
    b = e["bytes"]
    return Layer(e["layer"], e["model"], e["op_kind"], dict(e["dims"]), e["macs_layer"], b["in"], b["weight"],
                 b["out"], tuple(e["stride"]))


def reference_accelerators(doc: dict) -> dict:
    """Per hardware key: the preset accelerator it names, with that dataflow and MAESTRO's energy table; raises
    ValueError if the preset no longer has the parameters the reference was run with."""
    from .soc import soc_from_system

    socs: dict = {}
    out = {}
    for key, hw in doc["hardware"].items():
        preset, name = hw["source"].split("/")
        soc = socs.setdefault(preset, soc_from_system(preset))
        a = dataclasses.replace(soc.accs[soc.index(name)], dataflow=key, op_kinds=(), mac_energy_pj=1.0,
                                l1_energy_pj_per_byte=L1_ENERGY, buffer_energy_pj_per_byte=L2_ENERGY)
        now = hw_of(a)
        if any(now[k] != hw[k] for k in now):
            raise ValueError(f"{hw['source']} changed since the MAESTRO reference was made: {now} vs {hw}; "
                             f"regenerate it (python -m soc_mapper.maestro_reference)")
        out[key] = a
    return out


def compare(doc: dict | None = None) -> list[dict]:
    """One row per reference entry: MAESTRO's and the model's cycles and energy, and their relative errors."""
    from .cost import layer_model

    doc = doc if doc is not None else load_reference()
    accs = reference_accelerators(doc)
    rows = []
    for e in doc["entries"]:
        a = accs[e["hardware"]]
        m = layer_model(reference_layer(e), a)
        cyc, en = m.latency_s * a.frequency_hz, m.mac_pj + m.buffer_pj
        k = e.get("repeat", 1)  # MAESTRO ran one of the layer's k identical copies
        ref_cyc, ref_en = k * e["cycles"], k * e["energy"]
        rows.append({"id": e["id"], "model": e["model"], "layer": e["layer"], "dataflow": e["dataflow"],
                     "maestro_cycles": ref_cyc, "model_cycles": cyc,
                     "latency_rel_err": abs(cyc - ref_cyc) / ref_cyc,
                     "maestro_energy": ref_en, "model_energy": en,
                     "energy_rel_err": abs(en - ref_en) / ref_en})
    return rows


def summary(rows: list[dict]) -> dict:
    """Max and median relative errors over all entries, and the max errors per dataflow style."""
    lat, en = [r["latency_rel_err"] for r in rows], [r["energy_rel_err"] for r in rows]
    styles = sorted({r["dataflow"] for r in rows})
    by_style = {s: {"entries": sum(r["dataflow"] == s for r in rows),
                    "latency_max_rel_err": max(r["latency_rel_err"] for r in rows if r["dataflow"] == s),
                    "energy_max_rel_err": max(r["energy_rel_err"] for r in rows if r["dataflow"] == s)}
                for s in styles}
    return {"maestro_entries": len(rows), "maestro_latency_max_rel_err": max(lat),
            "maestro_latency_median_rel_err": statistics.median(lat), "maestro_energy_max_rel_err": max(en),
            "maestro_energy_median_rel_err": statistics.median(en), "maestro_by_dataflow": by_style}
