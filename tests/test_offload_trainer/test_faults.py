"""Resume and checkpoint faults: changed settings, unreadable checkpoints and stale temp files give typed errors
naming the fields or files; the config rejects bad values with an error naming the field."""
import os
import shutil
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from offload_trainer.config import (  # noqa: E402
    DataConfig,
    LSPConfig,
    ModelConfig,
    RunConfig,
    TrainConfig,
    from_dict,
)
from offload_trainer.errors import CheckpointError, ConfigError, OffloadError  # noqa: E402
from offload_trainer.trainer import CHECKPOINT, Trainer  # noqa: E402


def _cfg(out_dir=None, method="full_ft", steps=2, **over):
    d = {"model": {"source": "llama", "hidden": 32, "intermediate": 64, "layers": 1, "heads": 2},
         "data": {"source": "synthetic", "seq_len": 16, "max_examples": 40, "eval_examples": 4, "calib_examples": 4},
         "train": {"method": method, "steps": steps, "batch": 4, "lr": 1e-2, "progress": False},
         "lsp": {"d": 8, "r": 2, "fit_steps": 2, "check_interval": 0, "weight_dtype": "float32"},
         "out_dir": out_dir, "device": "cpu"}
    for k, v in over.items():
        d[k].update(v)
    return from_dict(d)


def _train(cfg):
    tr = Trainer(cfg)
    try:
        tr.train()
        return tr, [r["loss"] for r in tr.history]
    finally:
        tr.close()


@pytest.fixture
def ckpt_dir(tmp_path):
    """A folder holding the checkpoint of 2 full_ft steps."""
    _train(_cfg(str(tmp_path)))
    return tmp_path


def test_resume_with_changed_lr_or_batch_is_refused_naming_the_fields(ckpt_dir):
    with pytest.raises(ConfigError) as e:
        Trainer(_cfg(str(ckpt_dir), steps=4, train={"lr": 2e-2}))
    assert "train.lr: 0.01 -> 0.02" in str(e.value) and CHECKPOINT in str(e.value)
    assert "resume_allow_changes" in str(e.value)
    with pytest.raises(ConfigError) as e:
        Trainer(_cfg(str(ckpt_dir), steps=4, train={"lr": 2e-2, "batch": 2}))
    assert "train.lr: 0.01 -> 0.02" in str(e.value) and "train.batch: 4 -> 2" in str(e.value)
    with pytest.raises(ConfigError, match=r"model\.hidden: 32 -> 64"):
        Trainer(_cfg(str(ckpt_dir), steps=4, model={"hidden": 64}))
    # more steps, progress and checkpoint cadence do not change what is trained: allowed without asking
    tr = Trainer(_cfg(str(ckpt_dir), steps=4, train={"checkpoint_every": 1, "progress": False}))
    assert tr.step == 2
    tr.close()


def test_allowed_lr_change_takes_effect_on_resume(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    _train(_cfg(a))
    shutil.copytree(a, b)
    _, same = _train(_cfg(a, steps=4))
    tr, changed = _train(_cfg(b, steps=4, train={"lr": 5e-2, "resume_allow_changes": ["lr"]}))
    assert same[:2] == changed[:2] and same[2:] != changed[2:]
    assert all(g["lr"] == 5e-2 for g in tr.opt.param_groups)
    with pytest.raises(ConfigError) as e:
        _cfg(train={"resume_allow_changes": ["lrr"]})
    assert e.value.path == "train.resume_allow_changes[0]" and "'lrr'" in str(e.value)


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage"])
def test_unreadable_checkpoint_names_the_file_and_an_older_good_one(ckpt_dir, damage):
    path = ckpt_dir / CHECKPOINT
    good = ckpt_dir / "checkpoint-step2.pt"
    shutil.copy(path, good)
    data = path.read_bytes()
    path.write_bytes({"truncated": data[: len(data) // 2], "empty": b"", "garbage": b"\x80\x02not a pickle"}[damage])
    with pytest.raises(CheckpointError) as e:
        Trainer(_cfg(str(ckpt_dir), steps=4))
    assert e.value.path == str(path) and str(good) in str(e.value)
    good.unlink()
    with pytest.raises(CheckpointError) as e:
        Trainer(_cfg(str(ckpt_dir), steps=4))
    assert str(path) in str(e.value) and "checkpoint-step2" not in str(e.value)


def test_checkpoint_of_another_model_size_names_the_file_and_parameter(ckpt_dir):
    with pytest.raises(CheckpointError) as e:
        Trainer(_cfg(str(ckpt_dir), steps=4, model={"hidden": 64, "intermediate": 96},
                     train={"resume_allow_changes": ["model.hidden", "model.intermediate"]}))
    msg = str(e.value)
    assert e.value.path == str(ckpt_dir / CHECKPOINT) and "shape" in msg and "proj.weight" in msg


def _dead_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_stale_temp_files_of_an_interrupted_write_are_removed(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    stale = out / f".checkpoint.tmp{_dead_pid()}.pt"
    live = out / f".checkpoint.tmp{os.getppid()}.pt"  # a running process may still be writing it
    other = out / "notes.tmp1.pt"
    for f in (stale, live, other):
        f.write_bytes(b"\0" * (1 << 20))
    tr = Trainer(_cfg(str(out)))  # at resume
    assert not stale.exists() and live.exists() and other.exists()
    stale.write_bytes(b"\0" * 1024)
    tr.train()  # and at each save
    tr.close()
    assert not stale.exists() and live.exists() and (out / CHECKPOINT).is_file()


# --- fuzz: every config value is accepted or rejected with ConfigError naming the field -------------------------
_SECTIONS = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig, "lsp": LSPConfig}
_leaf = st.one_of(st.none(), st.booleans(), st.integers(-3, 2 ** 70), st.floats(allow_nan=True),
                  st.floats(0, 1), st.text(max_size=6),
                  st.sampled_from(["lsp", "full_ft", "cpu", "bfloat16", "lr", "train.lr", "q_proj", ""]))
_value = st.one_of(_leaf, st.lists(_leaf, max_size=3), st.dictionaries(st.text(max_size=4), _leaf, max_size=2))


def _section(cls):
    names = [f for f in cls.__dataclass_fields__] + ["nope"]
    return st.dictionaries(st.sampled_from(names), _value, max_size=4)


_doc = st.fixed_dictionaries({}, optional={**{k: st.one_of(_section(c), _leaf) for k, c in _SECTIONS.items()},
                                           "out_dir": _value, "device": _value, "extra": _leaf})


@settings(max_examples=100, deadline=None)
@given(st.one_of(_doc, _value))
def test_fuzz_config_is_accepted_or_names_the_field(doc):
    try:
        cfg = from_dict(doc)
    except ConfigError as e:
        heads = {k if isinstance(k, str) and k.isidentifier() else repr(k) for k in doc} if isinstance(doc, dict) \
            else {"config"}
        assert any(e.path == h or e.path.startswith(h + ".") for h in heads), e.path
        return
    assert isinstance(cfg, RunConfig) and isinstance(cfg.train.lr, (int, float))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(_SECTIONS)), st.data())
def test_fuzz_config_dataclasses_accept_or_name_the_field(section, data):
    cls = _SECTIONS[section]
    kw = data.draw(st.dictionaries(st.sampled_from(list(cls.__dataclass_fields__)), _value, max_size=3))
    try:
        cls(**kw)
    except OffloadError as e:
        assert isinstance(e, ConfigError) and e.path.split(".")[-1].split("[")[0] in cls.__dataclass_fields__, e.path
