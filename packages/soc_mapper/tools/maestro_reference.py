"""Regenerate ``soc_mapper/reference/maestro_layers.json``: MAESTRO's runtime and energy of zoo layers.

MAESTRO (``maestro-project/maestro``, C++) is the cost model the reference mapper used per (layer,
accelerator). CI cannot fetch or build it, so its outputs are committed as reference data and
:mod:`soc_mapper.maestro_check` compares :mod:`soc_mapper.cost` against them. To regenerate::

    git clone https://github.com/maestro-project/maestro && cd maestro && git checkout <commit>
    apt-get install scons libboost-program-options-dev libboost-filesystem-dev libboost-system-dev
    scons -j2                                              # builds ./maestro
    .venv/bin/python -m soc_mapper.tools.maestro_reference --maestro /path/to/maestro/maestro \\
        --commit "$(git -C /path/to/maestro rev-parse HEAD)"

For each checked layer and dataflow it writes one hardware file (the preset accelerator's PEs, NoC and
off-chip bandwidth in elements per cycle, L1/L2 sizes) and one DFSL mapping, runs ``maestro`` on them in a
temporary directory and records the inputs, the command, MAESTRO's runtime (cycles), its energy in units of
one MAC's energy (the "Total energy consumption" it prints: MACs + 18.61 × L2 accesses + 1.68 × L1 accesses)
and every access count. The dataflows are MAESTRO's own templates, with cluster sizes set to the preset's
array: ``kcp_ws`` (NVDLA-style, ``tools/frontend/dataflow/kcp_ws.m``), ``rs`` (Eyeriss-style row stationary,
``tools/frontend/dataflow/rs.m``), ``yxp_os`` (ShiDianNao-style, ``data/mapping/*_yxp_os.m``); depthwise
layers (MAESTRO's ``DSCONV``) use ``dpt.m`` as MAESTRO's frontend does, except ShiDianNao, whose own
MobileNetV2 mapping keeps ``yxp_os``. Tracing the zoo models needs torch (this tool only, not the check).
"""
from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

REFERENCE = Path(__file__).resolve().parent.parent / "reference" / "maestro_layers.json"
MAESTRO_REPO = "https://github.com/maestro-project/maestro"

# (zoo model, op name): conv k×k with stride 1 and 2, pointwise, depthwise (stride 1 and 2), FC and GEMM
LAYERS: tuple[tuple[str, str], ...] = (
    ("resnet18", "conv1"), ("resnet18", "layer1_0_conv1"), ("resnet18", "layer2_0_downsample_0"),
    ("resnet18", "layer2_0_conv1"), ("resnet18", "layer2_0_conv2"), ("resnet18", "layer3_0_downsample_0"),
    ("resnet18", "layer3_0_conv2"), ("resnet18", "layer4_0_conv1"), ("resnet18", "layer4_0_conv2"),
    ("resnet18", "fc"),
    ("mobilenet_v2", "features_0_0"), ("mobilenet_v2", "features_1_conv_0_0"),
    ("mobilenet_v2", "features_1_conv_1"), ("mobilenet_v2", "features_2_conv_0_0"),
    ("mobilenet_v2", "features_2_conv_1_0"), ("mobilenet_v2", "features_2_conv_2"),
    ("mobilenet_v2", "features_8_conv_1_0"), ("mobilenet_v2", "features_12_conv_0_0"),
    ("mobilenet_v2", "features_14_conv_1_0"), ("mobilenet_v2", "features_15_conv_2"),
    ("mobilenet_v2", "features_18_0"), ("mobilenet_v2", "classifier_1"),
    ("googlenet", "conv3_conv"), ("googlenet", "inception3a_branch3_1_conv"),
    ("googlenet", "inception4e_branch1_conv"), ("yolov5s", "b0_conv"), ("yolov5s", "b1_conv"),
    ("bert_base", "layer_0_attn_query"), ("bert_base", "layer_0_fc1"), ("bert_base", "layer_0_fc2"),
    ("bert_base", "pooler"),
)

# dataflow -> (preset, device whose hardware is used, MAESTRO template name)
# No preset has an Eyeriss; its rows run on the NVDLA device's hardware (same PEs, buffers and NoC).
HARDWARE: dict[str, tuple[str, str, str]] = {
    "nvdla": ("soc_small", "nvdla0", "kcp_ws"),
    "eyeriss": ("soc_small", "nvdla0", "rs"),
    "shidiannao": ("soc_small", "shidiannao0", "yxp_os"),
}

OFFCHIP_UNLIMITED = 2**31 - 1
"""MAESTRO's own default when a hardware file names no off-chip bandwidth (INT_MAX)."""

_TEMPLATES = {
    # tools/frontend/dataflow/kcp_ws.m ("This is a NVDLA-like dataflow"); Cluster(64) as in NVDLA
    "kcp_ws": """SpatialMap(1,1) K;
TemporalMap(64,64) C;
TemporalMap(Sz(R),Sz(R)) R;
TemporalMap(Sz(S),Sz(S)) S;
TemporalMap(Sz(R),1) Y;
TemporalMap(Sz(S),1) X;
Cluster(64, P);
SpatialMap(1,1) C;
TemporalMap(Sz(R),1) Y;
TemporalMap(Sz(S),1) X;
TemporalMap(Sz(R),Sz(R)) R;
TemporalMap(Sz(S),Sz(S)) S;""",
    # tools/frontend/dataflow/rs.m ("This is an Eyeriss-like row-stationary dataflow")
    "rs": """SpatialMap(1,1) Y';
TemporalMap(1,1) X';
TemporalMap(1,1) C;
TemporalMap(16,16) K;
TemporalMap(Sz(R),Sz(R)) R;
TemporalMap(Sz(S),Sz(S)) S;
Cluster(Sz(R),P);
SpatialMap(1,1) Y;
SpatialMap(1,1) R;
TemporalMap(Sz(S),Sz(S)) S;""",
    # data/mapping/Resnet50_yxp_os.m with Cluster(8) widened to the array's columns ({cols}); the X tile
    # covers {cols} output columns (MAESTRO rescales it by the stride itself)
    "yxp_os": """TemporalMap(1,1) K;
TemporalMap(1,1) C;
SpatialMap(Sz(R), 1) Y;
TemporalMap({xtile},{cols}) X;
Cluster({cols}, P);
SpatialMap(Sz(S), 1) X;
TemporalMap(Sz(R), Sz(R)) R;
TemporalMap(Sz(S), Sz(S)) S;""",
    # tools/frontend/dataflow/dpt.m: what MAESTRO's frontend writes for every DSCONV layer
    "dpt": """SpatialMap(1,1) C;
TemporalMap(Sz(R),1) Y;
TemporalMap(Sz(S),1) X;
TemporalMap(Sz(R),Sz(R)) R;
TemporalMap(Sz(S),Sz(S)) S;""",
    # data/mapping/MobileNetV2_yxp_os.m's DSCONV layers, Cluster(8) widened as above
    "yxp_os_dw": """TemporalMap(1,1) C;
SpatialMap(Sz(R), 1) Y;
TemporalMap({xtile},{cols}) X;
TemporalMap(Sz(R), Sz(R)) R;
TemporalMap(Sz(S), Sz(S)) S;
Cluster({cols}, P);
SpatialMap(Sz(S), 1) X;""",
}


def maestro_layer(op_kind: str, dims: dict[str, int], stride: int) -> tuple[str, dict[str, int]]:
    """MAESTRO's layer type and dimensions of a project layer. Inputs are sized so that MAESTRO's unpadded
    convolution yields exactly the layer's output (Y = (P-1)·stride + R); GEMMs run as 1×1 convs with the
    rows M as output rows, as :mod:`soc_mapper.cost` does on conv dataflows."""
    if op_kind == "conv2d":
        d = dims
        out = {"K": d["K"], "C": d["C"], "R": d["R"], "S": d["S"],
               "Y": (d["P"] - 1) * stride + d["R"], "X": (d["Q"] - 1) * stride + d["S"]}
        if d["G"] > 1:
            if d["K"] != 1 or d["C"] != 1:
                raise ValueError(f"grouped conv {dims} is not depthwise: MAESTRO's DSCONV needs K = C = 1")
            out.update(K=1, C=d["G"])
        if d["B"] > 1:
            out = {"N": d["B"], **out}
        return ("DSCONV" if d["G"] > 1 else "CONV"), out
    if stride != 1:
        raise ValueError(f"a {op_kind} layer has no stride (got {stride})")
    out = {"K": dims["N"], "C": dims["K"], "R": 1, "S": 1, "Y": dims["M"], "X": 1}
    return "CONV", ({"N": dims["B"], **out} if dims["B"] > 1 else out)


def dataflow_text(dataflow: str, mtype: str, mdims: dict[str, int], stride: int, pe_cols: int) -> str:
    """The DFSL ``Dataflow`` body of one layer on one dataflow."""
    template = HARDWARE[dataflow][2]
    if mtype == "DSCONV":
        template = "yxp_os_dw" if template == "yxp_os" else "dpt"
    xtile = (pe_cols - 1) * stride + mdims["S"]
    return _TEMPLATES[template].format(cols=pe_cols, xtile=xtile)


def mapping_text(name: str, mtype: str, mdims: dict[str, int], stride: int, dataflow_body: str) -> str:
    dims = ", ".join(f"{k}: {v}" for k, v in mdims.items())
    body = "\n".join("\t\t\t" + line for line in dataflow_body.splitlines())
    return (f"Network check {{\n\tLayer {name} {{\n\t\tType: {mtype}\n\t\tStride {{ X: {stride}, Y: {stride} }}\n"
            f"\t\tDimensions {{ {dims} }}\n\t\tDataflow {{\n{body}\n\t\t}}\n\t}}\n}}\n")


def hardware_params(preset: str, device: str) -> dict[str, Any]:
    """MAESTRO's hardware parameters of one preset accelerator. The NoC bandwidth is the global buffer's read
    bandwidth in int8 elements per cycle (the port the cost model's memory term divides by). The presets have no
    memory behind the global buffer (transfers between accelerators are the simulator's), so the off-chip
    bandwidth is unlimited: MAESTRO's off-chip term re-reads the whole L2 working set from off-chip every
    outer iteration, which would model a DRAM the SoC does not have."""
    from soc_mapper.soc import soc_from_system

    soc = soc_from_system(preset)
    a = soc.accs[soc.index(device)]
    per_cycle = a.buffer_bandwidth_bytes_per_s / a.frequency_hz
    from shared_ir.hardware import load_preset

    dev = next(d for d in load_preset(preset).devices if d.name == device)
    l1 = dev.memory[1].capacity_bytes if len(dev.memory) > 1 else 0
    return {"preset": preset, "device": device, "num_pes": a.num_pes, "pe_rows": a.pe_rows, "pe_cols": a.pe_cols,
            "l1_size_cstr": int(l1), "l2_size_cstr": int(a.buffer_bytes), "noc_bw_cstr": int(round(per_cycle)),
            "offchip_bw_cstr": OFFCHIP_UNLIMITED, "frequency_hz": a.frequency_hz}


def hw_text(hw: dict[str, Any]) -> str:
    keys = ("num_pes", "l1_size_cstr", "l2_size_cstr", "noc_bw_cstr", "offchip_bw_cstr")
    return "".join(f"{k}: {hw[k]}\n" for k in keys)


def select_layers() -> list[dict[str, Any]]:
    """The checked layers from the zoo: project inputs (dims, bytes, MACs) and the conv stride."""
    from soc_mapper.workload import layers_of_graph, zoo_graph

    out = []
    for model, op_name in LAYERS:
        g = zoo_graph(model)
        layers = {l.name: l for l in layers_of_graph(g)[0]}
        if op_name not in layers:
            raise KeyError(f"{model}: no compute layer {op_name!r}")
        l = layers[op_name]
        stride = 1
        if l.op_kind == "conv2d":
            st = dict(g.op(op_name).attrs)["stride"]
            if st[0] != st[1]:
                raise ValueError(f"{model}/{op_name}: unequal strides {st}")
            stride = int(st[0])
        out.append({"model": model, "layer": op_name, "op_kind": l.op_kind, "dims": dict(l.dims),
                    "macs": l.macs, "in_bytes": l.in_bytes, "weight_bytes": l.weight_bytes,
                    "out_bytes": l.out_bytes, "stride": stride})
    return out


def maestro_command(binary: str, hw_file: str, mapping_file: str) -> list[str]:
    return [binary, f"--HW_file={hw_file}", f"--Mapping_file={mapping_file}", "--print_res=true",
            "--print_res_csv_file=true", "--print_log_file=false"]


_SCREEN = {"runtime_cycles": r"Runtime: (\d+) cycles", "energy_mac_units": r"Total energy consumption: ([\d.e+]+) X",
           "maestro_macs": r"Num MACs: (\d+)", "avg_utilized_pes": r"Average number of utilized PEs: ([\d.e+]+)"}
_CSV_COUNTS = ("input l1 read", "input l1 write", "input l2 read", "input l2 write", "filter l1 read",
               "filter l1 write", "filter l2 read", "filter l2 write", "output l1 read", "output l1 write",
               "output l2 read", "output l2 write")


def parse_output(stdout: str, csv_text: str) -> dict[str, Any]:
    """MAESTRO's printed runtime, energy (MAC units), MACs and PE use, plus the CSV's access counts and its
    ``Activity count-based Energy (nJ)`` (which, at this commit, sums only the L2 terms)."""
    out: dict[str, Any] = {}
    for key, pat in _SCREEN.items():
        found = re.findall(pat, stdout)
        if not found:
            raise ValueError(f"MAESTRO output has no {key!r} ({pat}); tail: {stdout[-400:]!r}")
        out[key] = float(found[-1]) if "." in found[-1] or "e" in found[-1] else int(found[-1])
    rows = list(csv.reader(csv_text.splitlines()))
    header = [h.strip() for h in rows[0]]
    vals = [v.strip() for v in rows[1]]
    rec = dict(zip(header, vals))
    out["csv_energy_nj"] = float(rec["Activity count-based Energy (nJ)"])
    out["counts"] = {k.replace(" ", "_"): int(float(rec[k])) for k in _CSV_COUNTS}
    return out


def run_one(binary: str, hw: dict[str, Any], mapping: str, workdir: Path) -> dict[str, Any]:
    (workdir / "hw.m").write_text(hw_text(hw))
    (workdir / "check.m").write_text(mapping)
    for old in workdir.glob("*.csv"):
        old.unlink()
    cmd = maestro_command(binary, "hw.m", "check.m")
    p = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr[-400:] or p.stdout[-400:]}")
    return parse_output(p.stdout, (workdir / "check.csv").read_text())


def generate(binary: str, commit: str) -> dict[str, Any]:
    layers = select_layers()
    hws = {df: hardware_params(pre, dev) for df, (pre, dev, _) in HARDWARE.items()}
    from soc_mapper.soc import soc_from_system

    op_kinds = {df: soc_from_system(pre).accs[soc_from_system(pre).index(dev)].op_kinds
                for df, (pre, dev, _) in HARDWARE.items()}
    op_kinds["eyeriss"] = ()  # no preset: every layer kind
    rows = []
    with tempfile.TemporaryDirectory(prefix="maestro_ref_") as tmp:
        for df, hw in hws.items():
            for lay in layers:
                if op_kinds[df] and lay["op_kind"] not in op_kinds[df]:
                    continue  # the preset accelerator does not run this kind (ShiDianNao: no GEMMs)
                mtype, mdims = maestro_layer(lay["op_kind"], lay["dims"], lay["stride"])
                body = dataflow_text(df, mtype, mdims, lay["stride"], hw["pe_cols"])
                mapping = mapping_text(lay["layer"], mtype, mdims, lay["stride"], body)
                res = run_one(binary, hw, mapping, Path(tmp))
                rows.append({**lay, "dataflow": df, "maestro_type": mtype, "maestro_dims": mdims,
                             "mapping": mapping, **res})
                print(f"{df:10s} {lay['model']:12s} {lay['layer']:28s} {res['runtime_cycles']:>10d} cycles "
                      f"{res['energy_mac_units']:.4g} MAC-E", flush=True)
    return {"maestro": {"repo": MAESTRO_REPO, "commit": commit,
                        "build": "scons -j2 (deps: scons libboost-program-options-dev libboost-filesystem-dev "
                                 "libboost-system-dev)",
                        "command": " ".join(maestro_command("./maestro", "hw.m", "check.m")),
                        "energy_formula": "MACs + 18.61 * (L2 reads + writes) + 1.68 * (L1 reads + writes) "
                                          "(BASE_constants.hpp; the 'Total energy consumption' MAESTRO prints)",
                        "templates": {k: v for k, v in _TEMPLATES.items()}},
            "generator": "python -m soc_mapper.tools.maestro_reference",
            "hardware": hws, "rows": rows}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--maestro", required=True, help="path of the built maestro binary")
    ap.add_argument("--commit", required=True, help="MAESTRO commit the binary was built from")
    ap.add_argument("--out", default=str(REFERENCE))
    a = ap.parse_args(argv)
    if not re.fullmatch(r"[0-9a-f]{40}", a.commit):
        raise SystemExit(f"--commit must be a 40-hex-digit commit, got {a.commit!r}")
    data = generate(str(Path(a.maestro).resolve()), a.commit)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {len(data['rows'])} rows to {out}")


if __name__ == "__main__":
    main()
