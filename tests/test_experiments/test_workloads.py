"""experiments.workloads.load_workload: zoo models, YAML/JSON graph files, ONNX files, and its errors."""
from __future__ import annotations

import pytest

from experiments.config import ExperimentConfigError, WorkloadConfig
from experiments.workloads import load_workload, workload_label
from shared_ir import Graph, Tensor, ops


def _tiny_graph() -> Graph:
    x = Tensor("x", (4, 16), role="input")
    w1, w2 = Tensor("w1", (32, 16), role="weight"), Tensor("w2", (8, 32), role="weight")
    fc1 = ops.linear("fc1", x, w1, "h")
    act = ops.unary("act", fc1.outputs[0].tensor, "relu", "a")
    fc2 = ops.linear("fc2", act.outputs[0].tensor, w2, "y")
    return Graph([fc1, act, fc2], name="tiny")


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_file_workload_round_trips(tmp_path, suffix):
    g = _tiny_graph()
    path = tmp_path / f"tiny{suffix}"
    g.save(str(path))
    loaded = load_workload({"source": "file", "path": str(path)})
    assert loaded == g
    assert loaded.macs == 4 * 16 * 32 + 4 * 32 * 8
    renamed = load_workload({"source": "file", "path": str(path), "name": "renamed"})
    assert renamed.name == "renamed"


def test_relative_path_from_cwd(tmp_path, monkeypatch):
    _tiny_graph().save(str(tmp_path / "g.yaml"))
    monkeypatch.chdir(tmp_path)
    assert len(load_workload({"source": "file", "path": "g.yaml"})) == 3


def test_zoo_workload_matches_zoo():
    from shared_ir import zoo

    g = load_workload({"source": "zoo", "name": "mlp2", "batch": 2, "kwargs": {}})
    assert g == zoo.graph("mlp2", batch=2)
    assert g.macs > 0
    # batch scales every MAC-carrying op of an MLP linearly
    assert load_workload({"source": "zoo", "name": "mlp2", "batch": 4}).macs == 2 * g.macs


@pytest.mark.parametrize("cfg, path, pattern", [
    ({"source": "zoo", "name": "no_such_model"}, "workload.name", "unknown zoo model 'no_such_model'"),
    ({"source": "zoo"}, "workload.name", "required"),
    ({"source": "zoo", "name": "mlp2", "batch": 0}, "workload.batch", "must be an integer >= 1, got 0"),
    ({"source": "zoo", "name": "mlp2", "bacth": 2}, "workload", "unknown fields \\['bacth'\\]"),
    ({"source": "web", "name": "mlp2"}, "workload.source", "must be one of \\['zoo', 'file', 'hf', 'python'\\]"),
    ({"source": "file", "path": "???"}, "workload.path", "required"),
    ({"source": "file", "path": "model.pt"}, "workload.path", "must end with one of"),
    ({"source": "file", "path": "no/such/file.yaml"}, "workload.path", "file not found"),
    (None, "workload", "is not set"),
])
def test_bad_workload_configs_name_the_field(cfg, path, pattern):
    with pytest.raises(ExperimentConfigError, match=pattern) as e:
        load_workload(cfg)
    assert e.value.path == path


def test_malformed_graph_file_gives_ir_error(tmp_path):
    from shared_ir import ValidationError

    p = tmp_path / "bad.yaml"
    p.write_text("name: bad\nops:\n  - {name: a, kind: not_a_kind, dims: [], inputs: [], outputs: []}\n")
    with pytest.raises(ValidationError, match="kind"):
        load_workload({"source": "file", "path": str(p)})


def test_onnx_workload(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from shared_ir.frontends.onnx_frontend import from_onnx  # noqa: F401  (the frontend must exist)

    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()
    path = tmp_path / "mlp.onnx"
    try:
        torch.onnx.export(model, (torch.randn(4, 16),), str(path), dynamo=False)
    except TypeError:  # older signature without `dynamo`
        torch.onnx.export(model, (torch.randn(4, 16),), str(path))
    g = load_workload({"source": "file", "path": str(path), "name": "mlp_onnx"})
    assert g.name == "mlp_onnx"
    assert g.macs == 4 * 16 * 32 + 4 * 32 * 8


def test_labels():
    assert workload_label({"source": "zoo", "name": "resnet18", "batch": 1}) == "resnet18"
    assert workload_label({"source": "zoo", "name": "resnet18", "batch": 8}) == "resnet18_b8"
    assert workload_label({"source": "file", "path": "/x/y/model.onnx"}) == "model"
    assert workload_label(None) == "none"
    assert WorkloadConfig.from_dict({"name": "mlp2"}).source == "zoo"


def test_hf_workload_builds_from_config_fields_and_names_a_bad_one():
    pytest.importorskip("transformers")
    cfg = {"source": "hf", "name": "gpt2", "seq": 16,
           "config": {"n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 64}}
    g = load_workload(cfg)
    # one block: q/k/v + projection, the two attention GEMMs and the MLP's two, per token
    assert g.name == "gpt2" and g.macs == 16 * (32 * 96 + 32 * 32 + 2 * 16 * 32 + 2 * 32 * 128)
    with pytest.raises(ExperimentConfigError, match=r"workload.config.n_layers.*not a field of GPT2Config"):
        load_workload({**cfg, "config": {"n_layers": 1}})
    with pytest.raises(ExperimentConfigError, match=r"workload.name.*unknown Hugging Face model type 'gtp2'"):
        load_workload({**cfg, "name": "gtp2"})
    assert workload_label(cfg) == "gpt2"


def test_python_workload_takes_a_graph_or_a_module_with_inputs(tmp_path, monkeypatch):
    (tmp_path / "user_models.py").write_text(
        "import torch\n"
        "from shared_ir import Graph, Tensor, ops\n"
        "def graph(width=16):\n"
        "    x, w = Tensor('x', (4, width), role='input'), Tensor('w', (8, width), role='weight')\n"
        "    return Graph([ops.linear('fc', x, w, 'y')], name='g')\n"
        "def module(width=16):\n"
        "    return torch.nn.Sequential(torch.nn.Conv1d(3, width, 3), torch.nn.ReLU()), (torch.randn(1, 3, 10),)\n"
        "def neither():\n"
        "    return 3\n")
    monkeypatch.chdir(tmp_path)
    g = load_workload({"source": "python", "target": "user_models:graph", "kwargs": {"width": 32}})
    assert g.macs == 4 * 32 * 8
    g = load_workload({"source": "python", "target": "user_models:module", "name": "mine"})
    assert g.name == "mine" and g.macs == 16 * 8 * 3 * 3
    with pytest.raises(ExperimentConfigError, match="workload.target.*returned int"):
        load_workload({"source": "python", "target": "user_models:neither"})
    with pytest.raises(ExperimentConfigError, match="workload.target.*cannot load"):
        load_workload({"source": "python", "target": "user_models:missing"})
    with pytest.raises(ExperimentConfigError, match="workload.target.*module:function"):
        WorkloadConfig(source="python", target="user_models")


def test_open_dict_overrides_add_config_fields():
    from experiments.run import open_dict_overrides

    assert open_dict_overrides(["experiment=ir_summary", "workload.config.n_layer=2", "workload.kwargs.w=3",
                                "+workload.config.x=1", "workload.seq=8"]) == [
        "experiment=ir_summary", "++workload.config.n_layer=2", "++workload.kwargs.w=3", "+workload.config.x=1",
        "workload.seq=8"]
