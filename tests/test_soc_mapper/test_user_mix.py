"""A user's own mix: zoo names, graph files and mappings, through the task and the Hydra CLI's list syntax."""
from __future__ import annotations

import pytest
from soc_mapper.errors import MapperError
from soc_mapper.tasks import run_mix
from soc_mapper.workload import load_mix, load_user_mix


def _models(w):
    return sorted({layer.model for layer in w.layers})


def test_a_reference_mix_by_name_is_unchanged():
    assert len(load_user_mix("nlp1")) == len(load_mix("nlp1"))


def test_zoo_names_a_graph_file_and_a_mapping(tmp_path):
    from shared_ir.zoo import graph

    f = tmp_path / "mine.yaml"
    graph("mlp2", batch=1).save(str(f))
    w = load_user_mix(["resnet18", str(f), {"model": "mobilenet_v2", "copies": 2}])
    assert _models(w) == ["mlp2#0", "mobilenet_v2#0", "mobilenet_v2#1", "resnet18#0"]
    assert len(load_user_mix("resnet18", copies=3).layers) == 3 * len(load_user_mix("resnet18").layers)


@pytest.mark.parametrize("mix, where", [
    (["resnet18", "nosuch"], "task.mix[1]"),
    ([{"model": "resnet18", "copies": 0}], "task.mix[0].copies"),
    ([{"path": "/no/such.yaml"}], "task.mix[0].path"),
    ([{"model": "resnet18", "path": "x.yaml"}], "task.mix[0]"),
    ([{"workload": {"source": "zoo", "name": "nosuch"}}], "task.mix[0].workload.name"),
    (["resnet18", "resnet18"], "task.mix"),
    ([], "task.mix"),
    ("nosuch_mix", "task.mix"),
])
def test_bad_entries_name_the_field(mix, where):
    with pytest.raises(MapperError) as e:
        load_user_mix(mix)
    assert e.value.path == where


def test_run_mix_takes_a_list(tmp_path):
    s = run_mix(out_dir=str(tmp_path), mix=["mlp2", "resnet18"], algorithms=["heft", "greedy"], gantt=False)
    assert s["mix"] == "mlp2+resnet18" and set(s["algorithms"]) == {"heft", "greedy"}
    assert (tmp_path / "summary.csv").is_file()


def test_any_imported_model_through_a_workload_entry():
    pytest.importorskip("transformers")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w = load_user_mix([{"workload": {"source": "hf", "name": "gpt2", "seq": 32,
                                         "config": {"n_layer": 1, "n_embd": 64, "n_head": 4, "vocab_size": 128}},
                            "name": "tiny_gpt2", "copies": 2}, "mlp2"])
    assert _models(w) == ["mlp2#0", "tiny_gpt2#0", "tiny_gpt2#1"]
    assert any(layer.model == "tiny_gpt2#0" and layer.macs > 0 for layer in w.layers)
