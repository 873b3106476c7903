"""numpy's OpenBLAS as a benchmark baseline in a process of its own: ``python -m chain_fuser.openblas_server THREADS
pin|free``, driven by :class:`chain_fuser.timing.OpenBLASServer` (which sets ``OPENBLAS_NUM_THREADS`` and unsets
``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE`` before this process loads numpy)."""
from __future__ import annotations

import json
import sys

import numpy as np

from .timing import child_place_threads, child_serve, malloc_steady_state


def _setup(rng):
    def setup(j):
        b, M, N, K, L, glue, scale = j["b"], j["M"], j["N"], j["K"], j["L"], j["glue"], j["scale"]
        A = rng.standard_normal((b, M, K), dtype=np.float32)
        B = rng.standard_normal((b, K, L), dtype=np.float32)
        D = rng.standard_normal((b, L, N), dtype=np.float32)

        def run(A=A, B=B, D=D, glue=glue, scale=scale):
            C = np.matmul(A, B)
            if glue == "relu":
                np.maximum(C, 0, out=C)
            elif glue == "softmax":
                C *= scale
                C -= C.max(-1, keepdims=True)
                np.exp(C, out=C)
                C /= C.sum(-1, keepdims=True)
            return np.matmul(C, D)

        return run

    return setup


def main(argv: list[str]) -> None:
    from threadpoolctl import threadpool_info

    rng = np.random.default_rng(0)
    malloc_steady_state()
    placement = None
    if argv[1] == "pin":  # OpenBLAS's workers exist after a first call
        one = np.ones((256, 256), np.float32)
        placement = child_place_threads(lambda: np.matmul(one, one))
    print(json.dumps({"threadpool_info": threadpool_info(), "placement": placement}), flush=True)
    child_serve({"setup": _setup(rng)})


if __name__ == "__main__":
    main(sys.argv[1:])
