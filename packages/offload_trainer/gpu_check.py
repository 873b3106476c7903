"""GPU check (prepared for a lent accelerator; not run in CI): one real training iteration of LSP-Offload,
DeepSpeed's ZeRO-Offload, this package's ZeRO-style ablation and native training on a random-weight LLaMA (``1b``:
1.14 B parameters; ``6.7b`` with ``--mem-cap-gb 24``: the case where native does not fit), timed after warm-up,
with peak memory and the ratios next to the time model's for the same machine. Writes ``$OUT/gpu_check.json`` (or
``--out``); a method that fails (out of memory included) is recorded and the others still run.

    PYTHONUNBUFFERED=1 python -m offload_trainer.gpu_check            # ~3-5 min on an H200
    python -m offload_trainer.gpu_check --model 6.7b --mem-cap-gb 24 --methods lsp,deepspeed_zero_offload,native
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from shared_ir.atomic import atomic_write_text
from shared_ir.benchkit import do_bench, machine, machine_line, write_json

HARDWARE_PRESET = "h200"
"""The machine this is meant for (one H200 behind PCIe 5, a 16-core host share; a shared_ir hardware preset): used
only for the modeled ratios next to the measured ones."""


MODELS = {"1b": (2048, 5504, 20, 16), "6.7b": (4096, 11008, 32, 32)}
"""(hidden, intermediate, layers, heads) of the random LLaMAs (vocabulary 32,000): 1.14 B and 6.7 B parameters."""


def _model(dtype, device, size: str = "1b"):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    h, f, n, heads = MODELS[size]
    cfg = LlamaConfig(vocab_size=32000, hidden_size=h, intermediate_size=f, num_hidden_layers=n,
                      num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=4096,
                      tie_word_embeddings=False)
    with torch.device(device):
        m = LlamaForCausalLM(cfg).to(dtype)
    m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    m.config.use_cache = False
    m.train()
    return m


def _setup(method: str, d: int, r: int, overlap: bool, size: str = "1b", batch: int = 4):
    """The model and the optimizer side of ``method`` on the GPU: (model, LSP scheduler, ZeRO offload, optimizer,
    DeepSpeed engine)."""
    import torch

    from .config import ModelConfig
    from .lsp_linear import find_target_linears, wrap_model
    from .schedule import LayerwiseScheduler
    from .trainer import _ZeroOffload

    targets = ModelConfig().target_modules
    native = method == "native"
    # DeepSpeed casts the model to bf16 itself and keeps the fp32 master weights on the host
    fp32 = native or method == "deepspeed_zero_offload"
    model = _model(torch.float32 if fp32 else torch.bfloat16, torch.device("cuda"), size)
    for p in model.parameters():
        p.requires_grad_(False)
    sched = zero = opt = ds = None
    if method == "deepspeed_zero_offload":
        from .ds_zero import DeepSpeedZeroOffload

        ws = [m.weight for _, m in find_target_linears(model, targets)]
        for w in ws:
            w.requires_grad_(True)
        ds = DeepSpeedZeroOffload(model, ws, batch, 1, 1e-4, (0.9, 0.999), 1e-8)
        return ds.engine, sched, zero, opt, ds
    if method == "lsp":
        layers = wrap_model(model, targets, d, r, seed=0, weight_dtype=torch.bfloat16)
        sched = LayerwiseScheduler(layers, 1e-4, overlap=overlap)
    else:
        ws = [m.weight for _, m in find_target_linears(model, targets)]
        for w in ws:
            w.requires_grad_(True)
        if native:
            opt = torch.optim.AdamW(ws, lr=1e-4, fused=True)
        else:
            zero = _ZeroOffload(ws, 1e-4, (0.9, 0.999), 1e-8, delayed=method.endswith("delayed"))
    return model, sched, zero, opt, ds


def _profile(step, method: str, path: str) -> None:
    """The PyTorch profiler's tables (by GPU time and by CPU time) of two more steps, written to ``path``."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            step()
        torch.cuda.synchronize()
    ka = prof.key_averages()
    text = (f"{method}: two steps\n\nby GPU time\n"
            + ka.table(sort_by="self_cuda_time_total", row_limit=30, max_name_column_width=70)
            + "\n\nby CPU time\n"
            + ka.table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=70))
    atomic_write_text(path, text)


def measure(method: str, batch: int, seq: int, iters: int, d: int, r: int, profile: str | None = None,
            overlap: bool = True, size: str = "1b") -> dict[str, Any]:
    """One method's median iteration time after two warm-up steps; ``profile``: a path where the PyTorch profiler's
    tables (by GPU time and by CPU time) of two more steps are written; ``overlap`` (LSP): the layer-wise schedule
    overlapped with the backward (False: every layer's tasks after it, the synchronous reference)."""
    import torch

    dev = torch.device("cuda")
    torch.cuda.reset_peak_memory_stats()
    model, sched, zero, opt, ds = _setup(method, d, r, overlap, size, batch)
    n_params = sum(p.numel() for p in model.parameters())
    native = method == "native"
    g = torch.Generator(device=dev).manual_seed(0)

    def step():
        ids = torch.randint(0, 32000, (batch, seq), device=dev, generator=g)
        if sched is not None:
            sched.begin_step(True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=native):
            loss = model(input_ids=ids, labels=ids).loss
        if ds is not None:
            ds.backward(loss)
            ds.step()
            return loss
        loss.backward()
        if sched is not None:
            sched.end_step()
        if zero is not None:
            zero.step()
        if opt is not None:
            opt.step()
            opt.zero_grad(set_to_none=True)
        return loss

    def synced_step():
        step()
        torch.cuda.synchronize()  # LSP: updates still in flight land in the next forward, as in training

    t = do_bench(synced_step, warmup=2, repeats=iters)
    if profile:
        _profile(step, method, profile)
    if sched is not None:
        sched.close()
    if zero is not None:
        zero.close()
    if ds is not None:
        ds.close()
    out = {"iteration_s": t.wall, "all_s": t.wall_s, "host_cpu_s": t.cpu,
           "peak_gpu_gb": torch.cuda.max_memory_allocated() / 1e9, "params": n_params}
    model = sched = zero = opt = ds = None  # free the GPU memory before the next method
    torch.cuda.empty_cache()
    return out


def main(argv=None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--r", type=int, default=4)
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "results"), "gpu_check.json"))
    ap.add_argument("--model", default="1b", choices=sorted(MODELS))
    ap.add_argument("--mem-cap-gb", type=float, default=0.0,
                    help="cap this process's GPU memory (torch.cuda.set_per_process_memory_fraction); 0: none")
    ap.add_argument("--methods", default="native,lsp,deepspeed_zero_offload,zero_offload,zero_offload_delayed",
                    help="comma-separated; lsp_sync: LSP with the synchronous (not overlapped) schedule")
    ap.add_argument("--profile", action="store_true",
                    help="also write each method's PyTorch profiler tables next to --out (<method>_profile.txt)")
    a = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device", file=sys.stderr)
        raise SystemExit(2)
    mach = machine()
    print(machine_line(mach), flush=True)
    res: dict[str, Any] = {"machine": mach, "device": torch.cuda.get_device_name(0), "batch": a.batch, "seq": a.seq,
                           "d": a.d, "r": a.r, "cpu_threads": torch.get_num_threads(), "model": a.model,
                           "mem_cap_gb": a.mem_cap_gb}
    if a.mem_cap_gb:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, a.mem_cap_gb * 1e9 / total))
    for m in a.methods.split(","):
        t0 = time.perf_counter()
        prof = os.path.join(os.path.dirname(os.path.abspath(a.out)), f"{m}_profile.txt") if a.profile else None
        try:
            res[m] = measure("lsp" if m == "lsp_sync" else m, a.batch, a.seq, a.iters, a.d, a.r, prof,
                             overlap=m != "lsp_sync", size=a.model)
        except Exception as e:  # noqa: BLE001 - one method failing must not lose the others' measurements
            import traceback

            res[m] = {"error": repr(e), "traceback": traceback.format_exc()}
            print(f"{m:22s} failed: {e!r}", flush=True)
            torch.cuda.empty_cache()
        else:
            print(f"{m:22s} {res[m]['iteration_s']:.3f}s/iter  peak {res[m]['peak_gpu_gb']:.1f} GB "
                  f"({time.perf_counter() - t0:.0f}s)", flush=True)
        write_json(a.out, res, indent=2)  # after every method: a run cut short keeps what it measured
    ok = {m: res[m]["iteration_s"] for m in ("native", "lsp", "zero_offload", "deepspeed_zero_offload")
          if "iteration_s" in res.get(m, {})}
    res["measured"] = {k: ok[x] / ok[y] for k, x, y in (("lsp_vs_zero", "lsp", "zero_offload"),
                                                        ("lsp_vs_deepspeed", "lsp", "deepspeed_zero_offload"),
                                                        ("lsp_vs_native", "lsp", "native")) if x in ok and y in ok}
    try:
        from shared_ir.hardware import load_preset

        from .planner import ModelSpec, PlanParams, plan_time

        h, f, n, heads = MODELS[a.model]
        spec = ModelSpec(f"llama-{a.model}-check", h, f, n, heads, 32000)
        res["modeled"] = plan_time(spec, a.batch, a.seq, load_preset(HARDWARE_PRESET), PlanParams(d=a.d, r=a.r))
        res["modeled_hardware"] = HARDWARE_PRESET
    except Exception as e:  # the measurement matters more than the model
        res["modeled_error"] = repr(e)
    write_json(a.out, res, indent=2)
    print(json.dumps({k: res[k] for k in ("measured", "modeled") if k in res}, indent=2))
    return res


if __name__ == "__main__":
    main()
