"""Every Hydra config composes: each option of each group, and every experiment config (including the ones packages
add later under experiments/conf/experiment/<pkg>/), and follows the runner convention."""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from experiments.config import RunConfig, WorkloadConfig
from shared_ir.hardware import preset_dir

from .common import CONF


def _options(group: str) -> list[str]:
    root = preset_dir() if group == "hardware" else CONF / group  # hardware presets are shared_ir's package data
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml"))


EXPERIMENTS = _options("experiment")
HARDWARE = _options("hardware")
WORKLOADS = _options("workload")


def _compose(*overrides: str, hydra_cfg: bool = False):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=hydra_cfg)


def test_groups_are_populated():
    assert "ir_summary" in EXPERIMENTS
    assert {"host", "edge_accel", "rtx4090_workstation", "soc_small"} <= set(HARDWARE)
    zoo = {"resnet18", "resnet50", "mobilenet_v2", "googlenet", "yolov5s", "bert_base", "vit_base", "lstm_lm",
           "mlp2", "transformer_block"}
    assert zoo | {"file", "hf", "python"} == set(WORKLOADS)


def test_default_config():
    cfg = _compose(hydra_cfg=True)
    assert cfg.hardware.name == "host"
    assert cfg.workload.name == "resnet18"
    assert cfg.task._target_ == "experiments.ir_summary.run"
    choices = cfg.hydra.runtime.choices
    assert (choices.hardware, choices.workload, choices.experiment) == ("host", "resnet18", "ir_summary")
    # unresolved: ${hydra:...} resolves only inside a real run
    assert OmegaConf.to_container(cfg.hydra.run)["dir"].startswith("outputs/")
    assert OmegaConf.to_container(cfg.hydra.sweep)["dir"].startswith("multirun/")


@pytest.mark.parametrize("name", HARDWARE)
def test_hardware_option_composes_and_loads(name):
    from shared_ir.hardware import load_hardware

    cfg = _compose(f"hardware={name}")
    system = load_hardware(cfg.hardware)  # the composed node, as the runner hands it over
    assert system.primary is not None
    assert system.all_devices


@pytest.mark.parametrize("name", WORKLOADS)
def test_workload_option_composes_and_validates(name):
    overrides = [f"workload={name}"]
    required = {"file": "workload.path=graph.yaml", "hf": "workload.name=gpt2", "python": "workload.target=m:build"}
    if name in required:
        overrides.append(required[name])
    cfg = _compose(*overrides)
    wl = WorkloadConfig.from_dict(OmegaConf.to_container(cfg.workload, resolve=True))
    if name == "file":
        assert wl.source == "file" and wl.path == "graph.yaml"
    elif name == "hf":
        assert (wl.source, wl.name, wl.seq, wl.config) == ("hf", "gpt2", 128, {})
    elif name == "python":
        assert (wl.source, wl.target) == ("python", "m:build")
    else:
        assert (wl.source, wl.name, wl.batch) == ("zoo", name, 1)


def test_zoo_workloads_name_real_models():
    zoo = pytest.importorskip("shared_ir.zoo")
    models = getattr(zoo, "MODELS", None)
    if models is None:
        pytest.skip("shared_ir.zoo.MODELS not available")
    for name in WORKLOADS:
        if name not in ("file", "hf", "python"):
            assert name in models, f"workload/{name}.yaml names a model the zoo does not have"


def _experiment_yaml(name: str) -> Path:
    return CONF / "experiment" / f"{name}.yaml"


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_composes_and_follows_convention(name):
    text = _experiment_yaml(name).read_text()
    first = next(ln for ln in text.splitlines() if ln.strip())
    assert first.strip() == "# @package _global_", f"experiment/{name}.yaml must start with '# @package _global_'"
    cfg = _compose(f"experiment={name}", hydra_cfg=True)
    assert cfg.hydra.runtime.choices.experiment == name
    plain = OmegaConf.to_container(cfg, resolve=False)
    plain.pop("hydra")
    rc = RunConfig(task=plain.get("task"), hardware=plain.get("hardware"), workload=plain.get("workload"))
    # the target resolves to a function accepting the runner's keyword arguments and the task's parameters
    from hydra.utils import get_method

    fn = get_method(rc.target)
    sig = inspect.signature(fn)
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    wanted = ["hardware", "workload", "out_dir"] + [k for k in rc.task if not k.startswith("_")]
    missing = [k for k in wanted if k not in sig.parameters and not takes_kwargs]
    assert not missing, f"{rc.target} does not accept {missing}"


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_composes_with_other_groups(name):
    # an experiment must not pin something that breaks the usual command-line choices
    cfg = _compose(f"experiment={name}", "hardware=edge_accel", "workload=mlp2")
    assert cfg.hardware.name == "edge_accel"
    assert "task" in cfg


def test_unknown_option_is_a_composition_error():
    from hydra.errors import MissingConfigException

    with pytest.raises(MissingConfigException, match="experiment/no_such_experiment"):
        _compose("experiment=no_such_experiment")


def test_workload_can_be_removed():
    cfg = _compose("~workload")
    assert "workload" not in cfg


# fields a task takes that its YAML leaves out on purpose: a catch-all, a grid's per-point values, an option of the
# other suite, a knob the conv-chain task ignores
_NOT_IN_YAML = {"extra", "batch", "hidden", "scale", "winograd", "softmax"}


@pytest.mark.parametrize("exp", [e for e in EXPERIMENTS if "/" in e])
def test_every_field_a_task_accepts_is_in_its_yaml(exp):
    """A user overrides ``task.<field>=...`` without ``+``: every parameter of the task is in the YAML."""
    import dataclasses
    import importlib

    import yaml

    task = yaml.safe_load((CONF / "experiment" / f"{exp}.yaml").read_text())["task"]
    mod, fn = task["_target_"].rsplit(".", 1)
    f = getattr(importlib.import_module(mod), fn)
    sig = inspect.signature(f)
    fields = {p for p, v in sig.parameters.items() if p not in ("hardware", "workload", "out_dir")
              and v.kind is not inspect.Parameter.VAR_KEYWORD}
    if any(v.kind is inspect.Parameter.VAR_KEYWORD for v in sig.parameters.values()):
        cfg = {"chain_fuser.config": "ChainsExperiment", "fusion_perf.config": "DSEConfig"}
        src = inspect.getsource(f)
        for m, cls in [*cfg.items(), ("dynamic_batcher.config", "SweepConfig" if "Sweep" in src else "BenchConfig"),
                       ("experiments.pipeline", "PipelineConfig")]:
            if f"{cls}(" in src:
                fields |= {x.name for x in dataclasses.fields(getattr(importlib.import_module(m), cls))}
    missing = sorted(fields - set(task) - _NOT_IN_YAML)
    assert not missing, f"{exp}.yaml lacks task fields {missing}"
