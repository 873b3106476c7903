"""Small SoCs and workloads for the soc_mapper tests (no tracing)."""
from __future__ import annotations

from soc_mapper.cost import cost_table
from soc_mapper.soc import soc_from_system
from soc_mapper.synthetic import tiny_branchy, tiny_cnn, tiny_transformer
from soc_mapper.workload import build_workload

KINDS = {
    "nvdla": ("conv2d", "linear", "matmul"),
    "shidiannao": ("conv2d",),
    "tpu": ("matmul", "linear", "batch_matmul", "conv2d"),
    "eyeriss": ("conv2d",),
}


def device(name, dataflow, pos, streams=2, rows=128, cols=128, op_kinds=None, power=2.0, buffer=4 << 20):
    return {
        "name": name, "kind": "accelerator", "mesh_position": list(pos) if pos is not None else None,
        "memory": [{"name": "global_buffer", "capacity_bytes": buffer, "read_bandwidth_bytes_per_s": 32e9,
                    "read_energy_pj": 5.0, "word_bytes": 1}],
        "compute": {"name": dataflow, "pe_rows": rows, "pe_cols": cols, "frequency_hz": 2e8, "dataflow": dataflow,
                    "op_kinds": list(op_kinds if op_kinds is not None else KINDS[dataflow]), "streams": streams,
                    "power_w": power, "mac_energy_pj": 0.25},
    }


def soc_dict(devices, nn=3.2e9, topology=True):
    d = {"name": "test_soc", "devices": devices, "links": []}
    if topology:
        d["topology"] = {"kind": "mesh2d", "nn_bandwidth_bytes_per_s": nn, "intra_bandwidth_bytes_per_s": 32e9}
    return d


def small_soc(nn=3.2e9, streams=(2, 2, 1, 2)):
    """The soc_small layout: [nvdla, nvdla] / [shidiannao, tpu]."""
    return soc_from_system(soc_dict([
        device("nvdla0", "nvdla", (0, 0), streams[0]), device("nvdla1", "nvdla", (1, 0), streams[1]),
        device("shidiannao0", "shidiannao", (0, 1), streams[2]), device("tpu0", "tpu", (1, 1), streams[3])], nn))


def mixed_workload(cnn=2, tf=1, br=1):
    models = [("cnn", tiny_cnn(), cnn), ("tf", tiny_transformer(), tf), ("br", tiny_branchy(), br)]
    return build_workload([m for m in models if m[2] > 0], name="test_mix")


def problem(**kw):
    soc = small_soc()
    w = mixed_workload(**kw)
    return w, soc, cost_table(w, soc)
