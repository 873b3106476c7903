"""PyTorch eager (and SDPA) as a benchmark baseline in a process of its own, with torch's own thread defaults:
``python -m chain_fuser.torch_server THREADS pin|free``, driven by :class:`chain_fuser.timing.TorchServer`."""
from __future__ import annotations

import json
import os
import sys


def setup(j):
    from .kernel import random_inputs
    from .spec import ConvChain, GemmChain
    from .timing import TORCH_COMPILE_MODES, torch_compiled, torch_eager, torch_sdpa

    spec = (GemmChain if j["kind"] == "gemm" else ConvChain)(**j["fields"])
    ins = random_inputs(spec)
    if j["variant"] in TORCH_COMPILE_MODES:
        return torch_compiled(spec, ins, TORCH_COMPILE_MODES[j["variant"]])
    return (torch_sdpa if j["variant"] == "sdpa" else torch_eager)(spec, ins)


def setup_block(j):
    """A model block of :func:`chain_fuser.bench_compile.blocks`, built with a fixed seed; eager, or through
    ``torch.compile`` in the mode ``TORCH_COMPILE_MODES[j["variant"]]`` (compiled here by a first call)."""
    import torch

    from .bench_compile import find_block
    from .timing import TORCH_COMPILE_MODES

    torch.manual_seed(0)
    module, ins = find_block(j["block"])["build"]()
    module.eval()
    run = module
    if j.get("variant", "eager") in TORCH_COMPILE_MODES:
        run = torch.compile(module, mode=TORCH_COMPILE_MODES[j["variant"]], dynamic=False)

    def f(run=run, ins=ins):
        with torch.no_grad():
            return run(*ins)

    f()
    return f


def main(argv: list[str]) -> None:
    import torch
    import torch._dynamo

    from .timing import child_place_threads, child_serve, malloc_steady_state

    torch.set_num_threads(int(argv[0]))
    # every torch.compile variant here compiles the same Python function (the chain's or a block's forward) for
    # another shape: past dynamo's default of 8 entries per code object it silently runs eager from then on
    torch._dynamo.config.recompile_limit = 4096
    torch._dynamo.config.accumulated_recompile_limit = 16384
    malloc_steady_state()
    placement = None
    if argv[1] == "pin":  # torch's OpenMP workers exist after a first call
        placement = child_place_threads(lambda: torch.mm(torch.ones(256, 256), torch.ones(256, 256)))
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                      "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "placement": placement,
                      "recompile_limit": torch._dynamo.config.recompile_limit}), flush=True)
    child_serve({"setup": setup, "setup_block": setup_block})


if __name__ == "__main__":
    main(sys.argv[1:])
