"""DeepSpeed's ZeRO-Offload as a training method (``train.method: deepspeed_zero_offload``): the model under a
DeepSpeed engine with ZeRO stage 2 and ``offload_optimizer: cpu``, so the fp32 master weights and Adam moments live
on the host and ``DeepSpeedCPUAdam`` steps them, as ZeRO-Offload runs. One process (world size 1); on a machine
without a GPU DeepSpeed's CPU accelerator (``DS_ACCELERATOR=cpu``) and the gloo back end run it, which is the same
ZeRO-2 partitioning, gradient buffers and CPU Adam, with host memory standing in for the device's.
"""
from __future__ import annotations

import contextlib
import os
import socket
from typing import Any

from .errors import ConfigError


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _rank0_env():
    """The launcher's variables of a one-rank job, set only while DeepSpeed reads them: left in the environment
    they would make every later child process (an HF Trainer script, a test worker's subprocess) believe it is a
    distributed rank and bind the port this process already holds."""
    keys = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE")
    saved = {k: os.environ.get(k) for k in keys}
    for k, v in (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
        os.environ.setdefault(k, v)
    if saved["MASTER_PORT"] is None:
        os.environ["MASTER_PORT"] = str(_free_port())
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _init_process_group(cuda: bool) -> None:
    """A one-rank process group, once per process (DeepSpeed's engine requires one)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return
    import deepspeed

    deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo", verbose=False)


def ds_config(batch: int, accum: int, lr: float, betas, eps: float, cuda: bool) -> dict[str, Any]:
    """ZeRO stage 2, optimizer states offloaded to the CPU, DeepSpeed's CPU Adam (plain Adam, no weight decay: the
    update full fine-tuning's torch Adam makes); bf16 on a GPU, fp32 on the CPU."""
    return {"train_micro_batch_size_per_gpu": batch, "gradient_accumulation_steps": accum,
            "optimizer": {"type": "Adam", "params": {"lr": lr, "betas": list(betas), "eps": eps, "weight_decay": 0.0,
                                                      "adam_w_mode": False, "torch_adam": False}},
            "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": cuda},
                                  "contiguous_gradients": True, "overlap_comm": cuda},
            "bf16": {"enabled": cuda}, "fp16": {"enabled": False}, "gradient_clipping": 0.0,
            "steps_per_print": 1 << 30, "wall_clock_breakdown": False}


class DeepSpeedZeroOffload:
    """The engine around ``model`` training ``params``; ``backward(loss)`` and ``step()`` per micro-batch (DeepSpeed
    scales by the accumulation steps and updates at their boundary)."""

    def __init__(self, model, params: list, batch: int, accum: int, lr: float, betas, eps: float):
        import torch

        os.environ.setdefault("DS_ACCELERATOR", "cuda" if torch.cuda.is_available() else "cpu")
        try:
            import deepspeed
        except Exception as e:  # noqa: BLE001 - any import or build failure: the method is unavailable here
            raise ConfigError("train.method", f"deepspeed_zero_offload needs deepspeed ({type(e).__name__}: {e})",
                              "deepspeed_zero_offload") from None
        cuda = next(model.parameters()).is_cuda
        cfg = ds_config(batch, accum, lr, betas, eps, cuda)
        with _rank0_env():
            _init_process_group(cuda)
            self.engine, self.optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=params,
                                                                     config=cfg)

    def backward(self, loss) -> None:
        self.engine.backward(loss)

    def step(self) -> None:
        self.engine.step()

    def close(self) -> None:
        self.engine.destroy()
