"""Random mapping trees over small problems, for the exactness property test and the benchmark."""
from __future__ import annotations

import math
import random

from fusion_perf.arch import Arch, Level
from fusion_perf.mapping import OpLeaf, Scope, Tile
from fusion_perf.problem import Problem, attention, conv_chain, gemm_chain

LEVELS = ["dram", "l2", "l1", "l0"]


def make_arch() -> Arch:
    """Four levels with room to spare (capacity is not what the exactness test is about)."""
    return Arch((Level("dram", math.inf, 8, 4, 10, 10), Level("l2", 10**7, 16, 16, 2, 2, 2, 2, 1),
                 Level("l1", 10**7, 8, 8, 1, 1, 8, 4, 2), Level("l0", 10**7, 4, 4, .1, .1, 32, 8, 4)),
                128, (16, 8), 0.3, "test4")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _tile(rng: random.Random, level: str, dims: list[str], rem: dict, tensors: list[str], child_fn, final=False,
          inter: tuple = ()) -> Tile:
    if final:
        chosen = [d for d in dims if rem[d] > 1] or dims[:1]
    else:
        chosen = [d for d in dims if rng.random() < 0.6]
    rng.shuffle(chosen)
    loops = []
    for d in chosen:
        f = rem[d] if final else rng.choice(_divisors(rem[d]))
        rem[d] //= f
        loops.append((d, f))
    kind = "spatial" if (not final and rng.random() < 0.35) else "temporal"
    byp = [t for t in tensors if rng.random() < 0.15] if level != "dram" else \
        [t for t in inter if rng.random() < 0.5]
    return Tile(level, loops, child_fn(), kind, tuple(byp))


def random_tree(rng: random.Random, problem: Problem):
    ops = problem.op_names
    shared = sorted(set.intersection(*[set(problem.op_dims(o)) for o in ops]))
    rem = dict(problem.dims)
    inter = problem.intermediates()
    all_t = sorted(problem.tensors)
    above = []  # (level, kind) of nodes above the scope
    lv = 0
    for _ in range(rng.randint(0, 2)):
        above.append(lv)
        lv = min(len(LEVELS) - 2, lv + rng.randint(0, 1))
    branches = []
    for o in ops:
        r = dict(rem)
        # factors above the scope are shared: remove them from every branch later
        branches.append(r)

    # build the above-scope chain first (shared factors)
    above_specs = []
    for level in above:
        chosen = [d for d in shared if rng.random() < 0.6]
        rng.shuffle(chosen)
        loops = []
        for d in chosen:
            f = rng.choice(_divisors(rem[d]))
            rem[d] //= f
            loops.append((d, f))
        kind = "spatial" if (level > 0 and rng.random() < 0.3) else "temporal"
        byp = [t for t in all_t if rng.random() < 0.1] if level > 0 else [t for t in inter if rng.random() < 0.4]
        above_specs.append((LEVELS[level], loops, kind, tuple(byp)))

    def branch(o: str):
        r = {d: rem[d] for d in problem.op_dims(o)}
        dims = list(problem.op_dims(o))
        tens = [a.tensor.name for a in problem.op(o).accesses]
        start = lv
        seq = sorted(rng.choice(range(start, len(LEVELS))) for _ in range(rng.randint(1, 3)))
        if seq[-1] != len(LEVELS) - 1 and rng.random() < 0.7:
            seq.append(len(LEVELS) - 1)

        def build(i):
            if i == len(seq):
                return OpLeaf(o)
            final = i == len(seq) - 1
            return _tile(rng, LEVELS[seq[i]], dims, r, tens, lambda: build(i + 1), final,
                         tuple(t for t in inter if t in tens))

        return build(0)

    if len(ops) > 1:
        inner = Scope(rng.choice(["sequential", "sharing", "parallel", "pipeline"]), [branch(o) for o in ops])
    else:
        inner = branch(ops[0])
    node = inner
    for level, loops, kind, byp in reversed(above_specs):
        node = Tile(level, loops, node, kind, byp)
    return node


def random_problem(rng: random.Random) -> Problem:
    k = rng.random()
    if k < 0.55:
        return gemm_chain(rng.choice([2, 4, 6]), rng.choice([2, 4]), rng.choice([2, 4, 6]), rng.choice([2, 4]))
    if k < 0.67:
        return conv_chain(rng.choice([1, 2]), rng.choice([5, 6]), rng.choice([4, 5]), 2, rng.choice([1, 2, 3]), 2)
    if k < 0.79:
        # 3x3 -> 3x3 (or 1x1 -> 3x3) "same" convs: the consumer reads a halo window of the intermediate
        return conv_chain(rng.choice([1, 2]), rng.choice([4, 5]), rng.choice([3, 4]), 2, rng.choice([1, 3]), 2,
                          R2=3)
    if k < 0.89:
        # three ops (QK, softmax, PV) with a batch dim shared by all
        return attention(rng.choice([1, 2]), rng.choice([2, 4]), 2, rng.choice([2, 4]), 2)
    # a single strided conv (box semantics with stride gaps)
    p = conv_chain(rng.choice([1, 2]), 7, 5, 2, rng.choice([1, 3]), 2, stride=2)
    return Problem([p.ops[0]], name="conv_s2")
