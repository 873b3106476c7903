"""The user-facing API: finetune() on a user's own model, LSP-Offload inside transformers.Trainer (training,
gradient accumulation, exact resume from the Trainer's checkpoint), device-dependent defaults, errors naming the
field."""
import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from offload_trainer import ConfigError, DataError, Finetuned, LSPOffload, finetune  # noqa: E402
from offload_trainer.api import linear_kinds, token_data, unwrap_model  # noqa: E402
from offload_trainer.config import DEFAULT_TARGETS, LSPConfig, from_dict  # noqa: E402
from offload_trainer.lsp_linear import lsp_linear_class, wrap_model  # noqa: E402
from offload_trainer.projector import SparseProjector, fit_projectors  # noqa: E402
from offload_trainer.trainer import Trainer  # noqa: E402

FAST = {"fit_steps": 10, "progress": False, "gradient_checkpointing": False}


def _llama(seed=0, classes=0):
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

    torch.manual_seed(seed)
    c = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=4, pad_token_id=0, **({"num_labels": classes} if classes else {}))
    return LlamaForSequenceClassification(c) if classes else LlamaForCausalLM(c)


def _data(n=32, length=32):
    """A learnable pattern: shifted copies of one short sequence, labels = inputs."""
    base = (torch.arange(8) * 37 + 11) % 256
    rows = []
    for i in range(n):
        ids = base.repeat(length // 8 + 1).roll(i)[:length]
        rows.append({"input_ids": ids, "labels": ids})
    return rows


def _loss(model, rows):
    model.eval()
    with torch.no_grad():
        ids = torch.stack([r["input_ids"] for r in rows])
        return model(input_ids=ids, labels=ids).loss.item()


# --- finetune() --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("method,lr", [("lsp", 3e-3), ("full_ft", 1e-3)])
def test_finetune_reduces_the_loss_and_returns_a_plain_model(method, lr):
    model, data = _llama(), _data()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    res = finetune(model, data, method=method, steps=6, lr=lr, d=16, r=4, device="cpu", **FAST)
    assert isinstance(res, Finetuned) and res.summary["steps"] == 6 and len(res.summary["history"]) == 6
    hist = res.summary["history"]
    assert hist[-1]["loss"] < hist[0]["loss"] - 0.05, hist
    assert _loss(res.model, data) < _loss(model, data) - 0.05
    assert not any(isinstance(m, lsp_linear_class()) for m in res.model.modules())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # the input model is untouched
    assert all(p.requires_grad for p in res.model.parameters())


def test_finetune_checkpoints_and_resumes_like_an_uninterrupted_run(tmp_path):
    model, data = _llama(), _data(16)
    kw = dict(method="lsp", lr=3e-3, d=16, r=4, device="cpu", **FAST)
    straight = finetune(model, data, steps=4, **kw).summary
    finetune(model, data, steps=2, out_dir=str(tmp_path), **kw)
    resumed = finetune(model, data, steps=4, out_dir=str(tmp_path), **kw).summary
    assert (tmp_path / "checkpoint.pt").is_file() and (tmp_path / "metrics.csv").is_file()
    assert resumed["steps"] == 4 and len(resumed["history"]) == 4
    assert resumed["eval_loss"] == straight["eval_loss"]
    with pytest.raises(ConfigError, match="train.lr"):  # a changed setting is refused, as for every run
        finetune(model, data, steps=5, out_dir=str(tmp_path), **{**kw, "lr": 1e-3})


def test_finetune_classifier_text_and_dataset_shapes():
    from offload_trainer.models import ByteTokenizer

    tok = ByteTokenizer()  # ids 0..258: a model of vocabulary 259+
    rows = [{"input_ids": [1, 2, 3, 4], "label": 1}, {"input_ids": torch.tensor([[5, 6]]), "labels": 0}]
    td = token_data(rows, classify=True, pad_id=9)
    assert td.input_ids.tolist() == [[1, 2, 3, 4], [5, 6, 9, 9]] and td.attention_mask.tolist()[1] == [1, 1, 0, 0]
    assert td.labels.tolist() == [1, 0]
    cols = token_data({"input_ids": torch.ones(3, 5, dtype=torch.long), "attention_mask": torch.ones(3, 5)})
    assert tuple(cols.input_ids.shape) == (3, 5) and cols.labels is None
    text = token_data(["ab", {"text": "abcd"}], tokenizer=tok, pad_id=tok.pad_token_id, max_length=4)
    assert text.input_ids.tolist() == [[256, 97, 98, 258], [256, 97, 98, 99]]

    class DS(torch.utils.data.Dataset):  # a map-style torch Dataset of (text, label)
        def __len__(self):
            return 12

        def __getitem__(self, i):
            return {"input_ids": torch.tensor([1 + i % 3] * 8), "label": i % 3}

    res = finetune(_llama(classes=3), DS(), steps=2, lr=3e-3, d=16, device="cpu", **FAST)
    assert 0 <= res.summary["eval_acc"] <= 1 and res.summary["eval_on"] == "train"
    assert type(res.model).__name__ == "LlamaForSequenceClassification"


def test_bad_arguments_raise_errors_naming_the_field():
    model, data = _llama(), _data(8)
    bad = [({"method": "nope"}, "train.method"), ({"steps": 0}, "train.steps"), ({"lr": -1.0}, "train.lr"),
           ({"d": 0}, "lsp.d"), ({"r": 32, "d": 16}, "lsp.r"), ({"fitsteps": 3}, "fitsteps"),
           ({"weight_dtype": "int8"}, "lsp.weight_dtype"), ({"fit_budget_s": -1}, "lsp.fit_budget_s"),
           ({"device": "tpu"}, "device"), ({"max_length": 0}, "max_length")]
    for kw, path in bad:
        with pytest.raises(ConfigError) as e:
            finetune(model, data, **{"progress": False, **kw})
        assert e.value.path == path, (kw, e.value.path)
    with pytest.raises(ConfigError, match="tokenizer"):
        finetune(model, ["some text"], progress=False)
    with pytest.raises(ConfigError) as e:
        finetune("gpt2", data, progress=False)
    assert e.value.path == "model"
    with pytest.raises(DataError) as e:
        finetune(model, [{"input_ids": [1, 2, 999]}], progress=False)
    assert e.value.path == "dataset[0].input_ids" and "vocabulary" in str(e.value)
    with pytest.raises(DataError) as e:
        finetune(model, [{"input_ids": [1.5, 2.0]}], progress=False)
    assert e.value.path == "dataset[0].input_ids"
    for kw, path in [({"steps": 3}, "steps"), ({"d": -1}, "lsp.d"), ({"fit_lr": 0}, "lsp.fit_lr")]:
        with pytest.raises(ConfigError) as e:
            LSPOffload(_llama(), **kw)
        assert e.value.path == path


# --- transformers.Trainer ------------------------------------------------------------------------------------------
def _hf_run(out, resume=None, accum=2):
    from transformers import Trainer as HFTrainer
    from transformers import TrainingArguments

    model = _llama()
    off = LSPOffload(model, d=16, r=4, lr=3e-3, device="cpu", fit_steps=10, progress=False)
    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=4, gradient_accumulation_steps=accum,
                             max_steps=6, save_steps=3, logging_steps=1, report_to=[], use_cpu=True, disable_tqdm=True)
    tr = HFTrainer(model=model, args=args, train_dataset=_data(), optimizers=(off.optimizer, None),
                   callbacks=[off.callback])
    tr.train(resume_from_checkpoint=resume)
    return off, tr


def test_hf_trainer_trains_lsp_and_resumes_exactly_from_its_checkpoint(tmp_path):
    off, tr = _hf_run(tmp_path)
    losses = [h["loss"] for h in tr.state.log_history if "loss" in h]
    assert len(losses) == 6 and losses[-1] < losses[0] - 0.05, losses
    assert all(st.step == 6 for st in off.scheduler.states)  # one CPU Adam step per optimizer step (accumulation 2)
    assert off.fitted and isinstance(off.model.model.layers[0].self_attn.q_proj, lsp_linear_class())
    ckpt = tmp_path / "checkpoint-3"
    assert (ckpt / "optimizer.pt").is_file()
    saved = torch.load(ckpt / "optimizer.pt", weights_only=True)  # as the Trainer reloads it
    assert saved["lsp"]["fitted"] and saved["lsp"]["sched"]["layers"][0]["step"] == 3
    final = {k: v.clone() for k, v in off.model.state_dict().items()}
    off2, _ = _hf_run(tmp_path, resume=str(ckpt))
    assert all(st.step == 6 for st in off2.scheduler.states)
    for k, v in off2.model.state_dict().items():
        assert torch.equal(v, final[k]), k
    plain = off2.unwrap()
    assert type(plain.model.layers[0].mlp.up_proj) is torch.nn.Linear and all(p.requires_grad
                                                                               for p in plain.parameters())


def test_unwrap_restores_linear_and_conv1d_exactly():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=32, n_layer=1, n_head=2, n_positions=16))
    for model in (gpt2, _llama()):
        model.eval()
        x = torch.randint(0, 64, (2, 8))
        ref = model(input_ids=x).logits
        kinds = linear_kinds(model, DEFAULT_TARGETS)
        wrap_model(model, DEFAULT_TARGETS, 8, 2, weight_dtype=torch.float32)
        unwrap_model(model, kinds)
        assert not any(isinstance(m, lsp_linear_class()) for m in model.modules())
        torch.testing.assert_close(model(input_ids=x).logits, ref)
    assert type(gpt2.transformer.h[0].attn.c_attn).__name__ == "Conv1D"


# --- device-dependent defaults ---------------------------------------------------------------------------------------
def test_cpu_defaults_fp32_weights_and_a_bounded_fit_with_progress(capfd):
    lc = LSPConfig()
    assert (lc.weight_dtype_for("cpu"), lc.weight_dtype_for("cuda")) == ("float32", "bfloat16")
    assert lc.fit_budget_for("cpu") == 30.0 and lc.fit_budget_for("cuda") == 0.0
    assert LSPConfig(weight_dtype="bfloat16", fit_budget_s=0).weight_dtype_for("cpu") == "bfloat16"
    assert LSPConfig(fit_budget_s=0).fit_budget_for("cpu") == 0.0
    cfg = from_dict({"model": {"hidden": 32, "intermediate": 64, "heads": 2, "gradient_checkpointing": False},
                     "data": {"source": "synthetic", "seq_len": 16, "max_examples": 40, "eval_examples": 4,
                              "calib_examples": 4},
                     "train": {"steps": 1, "batch": 4}, "lsp": {"d": 8, "r": 2, "fit_steps": 5}, "device": "cpu"})
    tr = Trainer(cfg)
    try:
        assert tr.layers[0].weight.dtype == torch.float32
        tr.train()
    finally:
        tr.close()
    err = capfd.readouterr().err
    for phase in ("trainable parameters on cpu", "calibration gradients: batch", "projector fit: module 14/14",
                  "lsp: step 1/1", "eval: batch"):
        assert phase in err, (phase, err)
    # a fit past its deadline takes no step and keeps the values
    G = torch.randn(32, 24)
    P, Q = SparseProjector(32, 8, 2, seed=1), SparseProjector(24, 8, 2, seed=2)
    p0 = P.val.clone()
    before, after = fit_projectors(P, Q, [G], steps=50, deadline=0.0)
    assert before == after and torch.equal(P.val, p0)
    m = copy.deepcopy(_llama())
    assert LSPOffload(m, d=16, device="cpu", progress=False).layers[0].weight.dtype == torch.float32
