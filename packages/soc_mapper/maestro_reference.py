"""Reference data from MAESTRO itself: ``python -m soc_mapper.maestro_reference --maestro BIN --out JSON``.

Runs the MAESTRO binary (``maestro-project/maestro``, C++) on conv and GEMM layers of zoo models under the four
dataflow styles of :func:`soc_mapper.maestro_model.dataflow` (NVDLA-style KC-P weight stationary, Eyeriss row
stationary, ShiDianNao YX-P output stationary, the TPU's weight-stationary systolic GEMM with convs lowered by
im2col), and on the models' batched matmuls under the TPU style only (the presets run them nowhere else), with the
hardware of the ``soc_small`` preset's accelerators, and writes what the tool printed (cycles, MACs, L1/L2 reads
and writes per tensor, energy) to ``soc_mapper/data/maestro_reference.json``, which the tests and the bench
compare :mod:`soc_mapper.cost` against (CI cannot fetch or build MAESTRO, so the data is committed).

MAESTRO is not built here (the project ships no build scripts for fetched code). The committed data came from
commit ``4eb08d17c87caf1ee3f3a351b10eb9b8ef70dd87`` (2022-08-27), built with::

    git clone https://github.com/maestro-project/maestro && cd maestro
    git checkout 4eb08d17c87caf1ee3f3a351b10eb9b8ef70dd87
    apt-get install -y scons libboost-program-options-dev libboost-filesystem-dev libboost-system-dev
    scons                 # g++ -std=c++17; builds ./maestro

then ``python -m soc_mapper.maestro_reference --maestro maestro/maestro --commit 4eb08d1...`` (``--commit`` is
read from the binary's git checkout when there is one). One mapping file per (layer, dataflow) runs as
``maestro --HW_file=hw_<style>.m --Mapping_file=<entry>.m --print_res=true --print_res_csv_file=false
--print_log_file=false``; the screen report is parsed (its CSV's energy column is not used: with one layer per
file it leaves the L1 accesses out, it reads them from the previous layer). Energies are in MAC energies
(MAESTRO's table: an L1 access 1.68, an L2 access 18.61, a MAC 1). A layer of ``repeat`` > 1 identical,
independent copies (a conv lowered to one GEMM per group, a batched matmul) is run once: its entry holds the
printed counts of one copy and ``repeat``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import tempfile
from typing import Any

from .maestro_model import L1_ENERGY, L2_ENERGY, STYLES, TENSORS, dataflow, hw_of, mapping_text, problem_of

DEFAULT_OUT = os.path.join(os.path.dirname(__file__), "data", "maestro_reference.json")
MODELS = (("resnet50", 12), ("mobilenet_v2", 12), ("yolov5s", 10), ("bert_base", 4))
"""Zoo models and how many of their distinct layer shapes to take (evenly spaced over the network)."""
REPEAT_NOTE = ("an entry's counts are MAESTRO's for one copy of its problem; the layer runs `repeat` independent "
               "copies one after another (groups of a conv lowered to GEMM, batches of a batched matmul), so its "
               "totals are repeat × those counts")
FLAGS = ("--print_res=true", "--print_res_csv_file=false", "--print_log_file=false")


def layer_category(l) -> str:
    if l.op_kind != "conv2d":
        return "batched_gemm" if l.op_kind == "batch_matmul" else "gemm"
    kind = "depthwise" if l.is_depthwise else "pointwise" if l.dims["R"] == l.dims["S"] == 1 else "spatial"
    return kind + ("_strided" if max(l.stride) > 1 else "")


def _spread(items: list, k: int) -> list:
    """``k`` of ``items``, evenly spaced from the first to the last."""
    if k >= len(items):
        return list(items)
    return [items[round(i * (len(items) - 1) / max(1, k - 1))] for i in range(k)]


def select_layers(models=MODELS) -> list[tuple[str, Any]]:
    """(model, layer) of up to ``quota`` distinct shapes per model: the quota is dealt round robin over the
    model's categories (pointwise, k×k, depthwise, each strided or not; FC/GEMM), each category's share evenly
    spaced from stem to classifier; batched matmuls (no weights) are left out (:func:`batched_matmuls` has
    them)."""
    from .workload import layers_of_graph, zoo_graph

    out = []
    for name, quota in models:
        layers, _ = layers_of_graph(zoo_graph(name))
        seen: dict[tuple, Any] = {}
        for l in layers:
            if problem_of(l).repeat == 1:
                seen.setdefault((l.op_kind, tuple(sorted(l.dims.items())), l.stride), l)
        cats: dict[str, list] = {}
        for l in seen.values():
            cats.setdefault(layer_category(l), []).append(l)
        share = dict.fromkeys(cats, 0)
        while sum(share.values()) < min(quota, len(seen)):
            for c in cats:
                if share[c] < len(cats[c]) and sum(share.values()) < quota:
                    share[c] += 1
        pick = {id(l) for c in cats for l in _spread(cats[c], share[c])}
        out += [(name, l) for l in seen.values() if id(l) in pick]
    return out


def batched_matmuls(models=MODELS) -> list[tuple[str, Any]]:
    """(model, layer) of every distinct batched-matmul shape of the models (attention's QKᵀ and AV): the
    presets run them only on TPUs, so they are costed only there."""
    from .workload import layers_of_graph, zoo_graph

    out: dict[tuple, tuple[str, Any]] = {}
    for name, _ in models:
        for l in layers_of_graph(zoo_graph(name))[0]:
            if l.op_kind == "batch_matmul":
                out.setdefault(tuple(sorted(l.dims.items())), (name, l))
    return list(out.values())


def styles_for(l, hw: dict[str, dict]) -> list[str]:
    """Every style for convs and GEMMs (MAESTRO maps them on any array, whatever the preset's op kinds); a batched
    matmul only under the styles whose preset accelerator runs it."""
    if l.op_kind != "batch_matmul":
        return list(hw)
    return [s for s, h in hw.items() if not h.get("op_kinds") or l.op_kind in h["op_kinds"]]


def hardware(preset: str = "soc_small") -> dict[str, dict]:
    """MAESTRO parameters per style from the preset's first accelerator of that dataflow (Eyeriss, which no preset
    has: the first accelerator's array and buffers)."""
    from .soc import soc_from_system

    soc = soc_from_system(preset)
    out = {}
    for style in STYLES:
        a = next((x for x in soc.accs if x.dataflow == style), soc.accs[0])
        out[style] = dict(hw_of(a), source=f"{preset}/{a.name}", op_kinds=list(a.op_kinds))
    return out


def hw_text(hw: dict) -> str:
    return (f"num_pes: {hw['num_pes']}\nl1_size_cstr: {hw['l1_size']}\nl2_size_cstr: {hw['l2_size']}\n"
            f"noc_bw_cstr: {hw['noc_bw']}\noffchip_bw_cstr: {hw['offchip_bw']}\n")


_NUM = r"([-+0-9.eE]+)"


def parse_report(text: str) -> dict:
    """Cycles, MACs, per-tensor L1/L2 reads and writes and the energy from MAESTRO's screen report."""
    def one(pat: str) -> float:
        m = re.search(pat, text)
        if m is None:
            raise ValueError(f"MAESTRO's report has no {pat!r}:\n{text[-2000:]}")
        return float(m.group(1))

    out: dict[str, Any] = {"cycles": int(one(r"Runtime: " + _NUM + " cycles")),
                           "macs": int(one(r"Num MACs: " + _NUM))}
    access = text.split("[Buffer Access Analysis]", 1)[1].split("[Energy Analysis]", 1)[0]
    blocks = dict(re.findall(r"Tensor (\w+)\n(.*?)(?=Tensor |Overall)", access, re.S))
    for key, label in (("l2_write", "L2 buffer write"), ("l2_read", "L2 buffer read"),
                       ("l1_write", "L1 buffer write"), ("l1_read", "L1 buffer read")):
        out[key] = {t: int(re.search(label + ": " + _NUM, blocks[t]).group(1)) for t in TENSORS}
    out["energy_printed"] = one(r"Total energy consumption: " + _NUM)
    out["avg_utilized_pes"] = one(r"Average number of utilized PEs: " + _NUM)
    return out


def energy_of(r: dict) -> float:
    """MAESTRO's total energy from the exact counts (the printed total has 6 significant digits)."""
    l1 = sum(r["l1_read"].values()) + sum(r["l1_write"].values())
    l2 = sum(r["l2_read"].values()) + sum(r["l2_write"].values())
    return r["macs"] + L1_ENERGY * l1 + L2_ENERGY * l2


def run_one(binary: str, work: str, hw_file: str, map_file: str) -> tuple[str, dict]:
    """(command line, parsed report) of one MAESTRO run in ``work``."""
    cmd = [binary, f"--HW_file={hw_file}", f"--Mapping_file={map_file}", *FLAGS]
    p = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=600)
    if p.returncode != 0 or "Runtime:" not in p.stdout:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return " ".join(["maestro", *cmd[1:]]), parse_report(p.stdout)


def entry(i: int, model: str, l, style: str, hw: dict, binary: str, work: str) -> dict:
    """Run one (layer, dataflow) and describe it."""
    p = problem_of(l, style)
    flow = dataflow(style, p, hw["rows"], hw["cols"], hw["num_pes"])
    name = f"e{i:03d}_{style}"
    with open(os.path.join(work, name + ".m"), "w") as f:
        f.write(mapping_text(p, flow, name))
    cmd, r = run_one(binary, work, f"hw_{style}.m", name + ".m")
    return {"id": f"{model}/{l.name}/{style}", "model": model, "layer": l.name, "op_kind": l.op_kind,
            "dims": dict(l.dims), "stride": list(l.stride), "macs_layer": l.macs,
            "bytes": {"in": l.in_bytes, "weight": l.weight_bytes, "out": l.out_bytes}, "dataflow": style,
            "hardware": style,
            "maestro_problem": {"type": p.kind, "dims": dict(p.dims), "stride": list(p.stride)},
            "repeat": p.repeat, "mapping": [list(d) for d in flow], "command": cmd, **r, "energy": energy_of(r)}


def git_commit(binary: str) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=os.path.dirname(os.path.abspath(binary)),
                             capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def generate(binary: str, commit: str, preset: str = "soc_small", models=MODELS) -> dict:
    """Every selected layer under every style whose preset accelerator runs it: the reference document."""
    hw = hardware(preset)
    rows = []
    with tempfile.TemporaryDirectory(prefix="maestro_ref_") as work:
        for style, h in hw.items():
            with open(os.path.join(work, f"hw_{style}.m"), "w") as f:
                f.write(hw_text(h))
        for i, (model, l) in enumerate(select_layers(models) + batched_matmuls(models)):
            for style in styles_for(l, hw):
                rows.append(entry(i, model, l, style, hw[style], binary, work))
                print(f"{rows[-1]['id']:55s} {rows[-1]['cycles']:>12d} cycles  energy {rows[-1]['energy']:.4g}")
    return {"about": __doc__.split("\n\n")[0],
            "maestro": {"repository": "https://github.com/maestro-project/maestro", "commit": commit,
                        "build": "scons (g++ -std=c++17; boost program_options, filesystem, system)",
                        "flags": list(FLAGS)},
            "energy_unit": f"MAC energies: MAC 1, L1 access {L1_ENERGY}, L2 access {L2_ENERGY}",
            "repeat": REPEAT_NOTE,
            "hardware": hw, "models": [list(m) for m in models], "entries": rows}


def dump(doc: dict) -> str:
    """JSON with one line per entry (diffs of a regenerated file stay readable)."""
    head = {k: v for k, v in doc.items() if k != "entries"}
    text = json.dumps(head, indent=1)[:-2]
    rows = ",\n".join("  " + json.dumps(e) for e in doc["entries"])
    return text + ',\n "entries": [\n' + rows + "\n ]\n}\n"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--maestro", required=True, help="the built MAESTRO binary")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--commit", default=None, help="MAESTRO commit the binary was built from (default: git)")
    ap.add_argument("--preset", default="soc_small", help="hardware preset whose accelerators to model")
    args = ap.parse_args(argv)
    commit = args.commit or git_commit(args.maestro)
    if not commit:
        raise SystemExit("cannot tell the MAESTRO commit (no git checkout next to the binary): pass --commit")
    doc = generate(os.path.abspath(args.maestro), commit, args.preset)
    from shared_ir import atomic_write_text

    atomic_write_text(args.out, dump(doc))
    print(f"wrote {len(doc['entries'])} entries to {args.out}")
    return doc


if __name__ == "__main__":
    main()
