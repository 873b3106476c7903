"""The trainer: every method runs, resume is exact, bad gradients stop cleanly, bad input names the field."""
import json
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from offload_trainer.config import from_dict  # noqa: E402
from offload_trainer.errors import ConfigError, DataError, ModelError, NonFiniteGradientError  # noqa: E402
from offload_trainer.trainer import CHECKPOINT, Trainer, run  # noqa: E402


def _cfg(method="lsp", src="llama", steps=4, out_dir=None, **over):
    d = {"model": {"source": src, "hidden": 32, "intermediate": 64, "layers": 2, "heads": 2},
         "data": {"source": "synthetic", "seq_len": 24, "max_examples": 60, "eval_examples": 8, "calib_examples": 8},
         "train": {"method": method, "steps": steps, "batch": 4, "lr": 1e-2, "progress": False},
         "lsp": {"d": 8, "r": 2, "fit_steps": 5, "check_interval": 2, "weight_dtype": "float32"},
         "out_dir": out_dir, "device": "cpu"}
    for k, v in over.items():
        d[k].update(v)
    return from_dict(d)


@pytest.mark.parametrize("method", ["full_ft", "lsp", "zero_offload", "zero_offload_delayed", "lora", "galore"])
def test_every_method_trains_llama(method):
    s = run(_cfg(method, steps=3))
    assert s["steps"] == 3 and s["eval_loss"] > 0 and s["trainable_params"] > 0


def test_gpt2_conv1d_and_encoder_classifier():
    s = run(_cfg("lsp", src="gpt2", steps=2))
    assert s["eval_loss"] > 0
    c = _cfg("lsp", steps=2, model={"source": "bert", "num_labels": 5})
    s = run(c)
    assert 0 <= s["eval_acc"] <= 1


def test_zero_offload_equals_full_ft_and_delayed_differs():
    a = run(_cfg("full_ft", steps=3))
    b = run(_cfg("zero_offload", steps=3))
    c = run(_cfg("zero_offload_delayed", steps=3))
    assert b["eval_loss"] == pytest.approx(a["eval_loss"], rel=1e-5)
    assert c["eval_loss"] != pytest.approx(a["eval_loss"], rel=1e-7)  # one-step stale weights


@pytest.mark.parametrize("method", ["lsp", "full_ft"])
def test_resume_continues_exactly(tmp_path, method):
    full = Trainer(_cfg(method, steps=5, out_dir=str(tmp_path / "a")))
    sa = full.train()
    wa = full._trainable_state()
    full.close()
    part = Trainer(_cfg(method, steps=3, out_dir=str(tmp_path / "b")))
    part.train()
    part.close()
    assert os.path.isfile(tmp_path / "b" / CHECKPOINT)
    resumed = Trainer(_cfg(method, steps=5, out_dir=str(tmp_path / "b")))
    assert resumed.step == 3
    sb = resumed.train()
    wb = resumed._trainable_state()
    resumed.close()
    assert sb["eval_loss"] == sa["eval_loss"]
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    rows = (tmp_path / "b" / "metrics.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + 5 and (tmp_path / "b" / "loss.png").is_file()


@pytest.mark.parametrize("method", ["lsp", "full_ft"])
def test_nan_gradient_stops_cleanly_and_keeps_checkpoint(tmp_path, method):
    out = str(tmp_path)
    tr = Trainer(_cfg(method, steps=6, out_dir=out, train={"checkpoint_every": 2}))
    target = "model.layers.1.mlp.down_proj"
    mod = tr.model.get_submodule(target)
    state = {"n": 0}

    def poison(module, grad_out):
        state["n"] += 1
        if tr.step >= 3:
            return (grad_out[0] * float("nan"),)
        return None

    mod.register_full_backward_pre_hook(poison)
    with pytest.raises(NonFiniteGradientError) as ei:
        tr.train()
    assert ei.value.path.startswith("model.layers.")
    if method == "lsp":
        assert ei.value.path == target  # the deepest poisoned layer is the first one processed
    tr.close()
    ck = torch.load(os.path.join(out, CHECKPOINT), weights_only=False)
    assert ck["step"] == 2  # the last good checkpoint, untouched
    assert all(torch.isfinite(t).all() for t in ck["weights"].values())
    assert not [f for f in os.listdir(out) if ".tmp" in f]
    resumed = Trainer(_cfg(method, steps=3, out_dir=out))
    assert resumed.step == 2
    resumed.close()


def test_bad_input_errors_name_the_field(tmp_path):
    with pytest.raises(ModelError, match=r"model\.target_modules"):
        Trainer(_cfg("lsp", model={"target_modules": ["nothing_here"]}))
    with pytest.raises(ModelError, match=r"model\.target_modules"):
        Trainer(_cfg("full_ft", model={"target_modules": ["nothing_here"]}))
    with pytest.raises(ModelError, match=r"lsp\.d.*exceeds"):
        Trainer(_cfg("lsp", lsp={"d": 48, "r": 2}))
    bad = tmp_path / "c.jsonl"
    bad.write_text(json.dumps({"text": "fine"}) + "\n{not json\n")
    with pytest.raises(DataError, match=r"c\.jsonl:2"):
        Trainer(_cfg("lsp", data={"source": str(bad)}))
    bad.write_text(json.dumps({"txt": "wrong key"}) + "\n")
    with pytest.raises(DataError, match=r"c\.jsonl:1\.text"):
        Trainer(_cfg("lsp", data={"source": str(bad)}))
    with pytest.raises(ConfigError, match=r"train\.method"):
        _cfg("sgd")
    with pytest.raises(ConfigError, match=r"lsp\.r"):
        _cfg(lsp={"d": 4, "r": 8})
    with pytest.raises(ConfigError, match=r"train\.nope"):
        _cfg(train={"nope": 1})


def test_local_text_and_jsonl_corpora(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text("\n\n".join(f"paragraph {i} about markets and games and films" * 3 for i in range(40)))
    s = run(_cfg("lsp", steps=2, data={"source": str(p)}))
    assert s["eval_loss"] > 0
    j = tmp_path / "c.jsonl"
    j.write_text("\n".join(json.dumps({"text": f"news item {i} " * 8, "label": i % 3}) for i in range(40)))
    s = run(_cfg("full_ft", steps=2, data={"source": str(j)}, model={"source": "bert", "num_labels": 3}))
    assert "eval_acc" in s


def test_projector_check_refits_only_above_alpha():
    hi = Trainer(_cfg("lsp", steps=3, lsp={"alpha": 100.0}))
    assert hi.train()["refits"] == 0
    hi.close()
    lo = Trainer(_cfg("lsp", steps=3, lsp={"alpha": 1e-6}))
    n = len(lo.layers)
    before = [lay.P.val.clone() for lay in lo.layers]
    assert lo.train()["refits"] == n  # one check (step 2), every layer above the threshold
    assert any(not torch.equal(b, lay.P.val) for b, lay in zip(before, lo.layers))
    lo.close()


def test_initial_fit_per_module_or_per_shape():
    per = Trainer(_cfg("lsp", steps=1, lsp={"fit_steps": 20}))
    shared = Trainer(_cfg("lsp", steps=1, lsp={"fit_steps": 20, "fit_per_module": False}))
    try:
        g = per.calibration_grads()
        e_per = sum(per.projection_errors(g))
        e_shared = sum(shared.projection_errors(g))
        assert e_per <= e_shared + 1e-6  # each module fitted on its own gradient is at least as good
        # the shared fit copies one shape's values to every layer of that shape
        same = [lay for lay in shared.layers if tuple(lay.weight.shape) == tuple(shared.layers[0].weight.shape)]
        assert all(torch.equal(same[0].P.val, lay.P.val) for lay in same)
        assert not all(torch.equal(per.layers[0].P.val, lay.P.val) for lay in per.layers[1:]
                       if tuple(lay.weight.shape) == tuple(per.layers[0].weight.shape))
    finally:
        per.close()
        shared.close()
