"""Structured configs of soc_mapper (validated in __post_init__; errors name the field path)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import MapperError

EXECUTORS = ("serial", "process", "ray")
ALGORITHM_NAMES = ("comb", "comb_barriers", "magma", "h2h", "magma_comb_simplified", "h2h_wave_greedy", "fcfs",
                   "heft", "round_robin", "greedy", "exact")
"""The names of :data:`soc_mapper.algorithms.ALGORITHMS`, here so that validating a config does not import the
algorithms (which import this module); ``algorithms`` checks at import that its registry has exactly these."""
ALGORITHM_ALIASES = {"magma_1stream_comb_ga": "magma_comb_simplified"}
"""Former names still accepted in ``RunConfig.algorithms`` (mapped to the current name)."""


def _check(cond: bool, path: str, msg: str, value: object) -> None:
    if not cond:
        raise MapperError(path, f"{msg}, got {value!r}", value)


def _type_ok(v: object, hint: str) -> bool:
    """Whether ``v`` fits the annotation ``hint`` (the forms these configs use: int, float, bool, str, X | None,
    list[str], and nested configs given as a mapping)."""
    alts = [h.strip() for h in hint.split("|")]
    if v is None:
        return "None" in alts
    for h in alts:
        if h == "bool" and isinstance(v, bool):
            return True
        if h == "int" and isinstance(v, int) and not isinstance(v, bool):
            return True
        if h == "float" and isinstance(v, (int, float)) and not isinstance(v, bool):
            return True
        if h == "str" and isinstance(v, str):
            return True
        if h.startswith("list[") and isinstance(v, (list, tuple)):
            return all(_type_ok(x, h[5:-1]) for x in v)
        if h[:1].isupper() and h != "None":  # a nested config: its own __post_init__ checks it
            return True
    return False


def _check_types(obj: object, prefix: str) -> None:
    """Every field's value has its annotated type (before any range check compares it), named by path."""
    import dataclasses

    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if not _type_ok(v, str(f.type)):
            raise MapperError(f"{prefix}{f.name}", f"must be of type {f.type}, got {type(v).__name__} {v!r}", v)
        if isinstance(v, float) and v != v:
            raise MapperError(f"{prefix}{f.name}", "must be a number, got NaN", v)


@dataclass
class GAConfig:
    """COMB's genetic search (defaults: the reference's)."""

    population: int = 8
    """Individuals per generation."""
    generations: int = 20
    """Generations (the time budget may stop earlier, at a generation boundary)."""
    mutation_rate: float = 0.3
    """Probability that a child is mutated."""
    crossover_rate: float = 0.9
    """Probability that a child comes from crossover (else a copy of its first parent)."""
    freeze_fraction: float = 0.2
    """Mutation freezes this top fraction of groups by PE occupancy."""
    crossover_keep_fraction: float = 0.5
    """Crossover tries to keep this top fraction of the pooled groups (by occupancy)."""
    max_window: int = 8
    """Largest DP window j (the reference's cap is 20; 8 keeps a decode of ~4,000 layers within seconds, and
    larger windows rarely won in our runs)."""
    max_streams: int | None = None
    """Cap on concurrent tasks per accelerator (1: the one-stream 'MAGMA' of COMB's experiments)."""
    seed: int = 0
    """Seed of every random choice (runs are deterministic under it when the time budget does not bind)."""
    time_budget_s: float | None = None
    """Stop after this many seconds of search (checked between generations)."""
    max_evaluations: int | None = None
    """Stop after this many fitness evaluations (the initial population counts; the last generation is cut to
    what is left), None: no cap."""
    seeded: bool = True
    """Start the population with the priority-order seeds of :func:`soc_mapper.comb.seed_orders`; False: random
    topological orders only (the reference)."""
    window_work: int | None = 8000
    """Caps the window at max(1, window_work // layers) (≥ 1, ≤ max_window) so that one decode of a large
    workload stays within seconds (mixed3: 4,392 layers → single-layer windows); None: always max_window."""
    barriers: bool = False
    """The reference decoder: a barrier closes every DP window (dp[i] = dp[i−j] + window length) and the plan
    keeps the barriers. Off (default): the DP carries the accelerators' busy boxes and finish times along its
    chain instead, and the plan runs without barriers (see :func:`soc_mapper.decoder.decode`)."""
    energy_weight: float = 0.0
    """Fitness = latency + energy_weight × energy / (highest accelerator power): with the simulator's phase
    energy, a plan that overlaps its tasks (spatial sharing) and keeps high-power tasks together costs less
    energy at the same latency; 0 is latency only (the reference)."""
    energy_tie: float = 0.03
    """Latency ties are broken by energy: plans whose fitness is within this fraction of the best fitness found
    count as equal, and the one of least energy (the simulator's phase energy) is kept as the best individual and
    chosen between the decoder's runs of one chromosome. The GA's selection still ranks by fitness alone. 0: the
    reference (least latency; energy only breaks exact ties)."""
    fitness: str = "simulator"
    """``simulator`` (the judge's latency) or ``decoder`` (the DP's own estimate; faster)."""
    executor: str = "serial"
    """Fitness evaluation: ``serial``, ``process`` (local process pool) or ``ray``."""
    workers: int = 2
    """Processes for the ``process`` executor."""
    checkpoint: str | None = None
    """Path of the population checkpoint (written atomically after each generation; resumed if present)."""

    def __post_init__(self):
        p = "ga"
        _check_types(self, f"{p}.")
        _check(self.population >= 2, f"{p}.population", "must be >= 2", self.population)
        _check(self.generations >= 0, f"{p}.generations", "must be >= 0", self.generations)
        for f in ("mutation_rate", "crossover_rate", "freeze_fraction", "crossover_keep_fraction"):
            v = getattr(self, f)
            _check(0.0 <= v <= 1.0, f"{p}.{f}", "must be in [0, 1]", v)
        _check(1 <= self.max_window <= 200, f"{p}.max_window", "must be in [1, 200]", self.max_window)
        _check(self.window_work is None or self.window_work >= 1, f"{p}.window_work", "must be >= 1 or null",
               self.window_work)
        _check(self.max_streams is None or self.max_streams >= 1, f"{p}.max_streams", "must be >= 1 or null",
               self.max_streams)
        _check(self.time_budget_s is None or self.time_budget_s > 0, f"{p}.time_budget_s", "must be > 0 or null",
               self.time_budget_s)
        _check(self.max_evaluations is None or self.max_evaluations >= 1, f"{p}.max_evaluations",
               "must be >= 1 or null", self.max_evaluations)
        _check(self.energy_weight >= 0, f"{p}.energy_weight", "must be >= 0", self.energy_weight)
        _check(0.0 <= self.energy_tie <= 0.5, f"{p}.energy_tie", "must be in [0, 0.5]", self.energy_tie)
        _check(self.fitness in ("simulator", "decoder"), f"{p}.fitness", "must be 'simulator' or 'decoder'",
               self.fitness)
        _check(self.executor in EXECUTORS, f"{p}.executor", f"must be one of {list(EXECUTORS)}", self.executor)
        _check(self.workers >= 1, f"{p}.workers", "must be >= 1", self.workers)


@dataclass
class MagmaConfig:
    """MAGMA's GA as its authors' code runs it (``maestro-project/magma``, ``src/scheuler_GA.py``; defaults are
    that code's: ``SchedulerGA.run(num_pop=100, elite_ratio=0.05, parent_ratio=0.1)`` and the rates of its
    operators)."""

    population: int = 100
    """Individuals per generation (even: the crossovers fill children in pairs; the authors' ``main_ga.py``
    passes the number of jobs)."""
    generations: int = 1000
    """Generations (an evaluation or time budget may stop earlier)."""
    elite_ratio: float = 0.05
    """Share of the population kept as elite: max(1, int(population × elite_ratio))."""
    parent_ratio: float = 0.1
    """Parents: the fittest max(2, int(population × parent_ratio)), drawn in proportion to (worst latency among
    them − latency + one weight unit)."""
    crossover_rate: float = 0.9
    """Probability that a pair of children gets the one-row crossover (``crossover(0.9)``)."""
    range_crossover_rate: float = 0.1
    """Probability per pair of the two-row single-point crossover (``crossover_rg(0.1)``)."""
    accel_crossover_rate: float = 0.1
    """Probability per child of the accelerator crossover (``crossover_acc(0.1)``)."""
    mutation_rate: float = 0.05
    """Per-gene mutation probability, both rows (``mutate(0.05)``)."""
    seed: int = 0
    time_budget_s: float | None = None
    """Stop after this many seconds of search (checked between generations)."""
    max_evaluations: int | None = None
    """Stop after this many fitness evaluations (the last generation is cut to what is left), None: no cap."""
    fitness: str = "model"
    """``model``: MAGMA's own analytical makespan (per-core queues in priority order, progress slowed while the
    running jobs need more than ``system_bandwidth``) with the mesh transfers between producer and consumer that
    the simulator charges; ``simulator``: the judge's latency of the decoded plan (one stream per accelerator)."""
    system_bandwidth: float | None = None
    """Bandwidth the cores share in the model, bytes/s (None: unlimited: the SoC the simulator judges has no
    shared off-chip memory, its transfers go over the mesh and are charged separately)."""
    seeded: bool = True
    """Start the population with one genome per priority order of :func:`soc_mapper.comb.seed_orders` (the seeds
    COMB gets; placed by earliest finish), the rest random; False: random genomes only (the reference)."""
    weight_unit_s: float | None = None
    """The "+1" of the parent weights, s (the reference counts latency in cycles; None: one cycle of the SoC's
    fastest clock)."""

    def __post_init__(self):
        p = "magma"
        _check_types(self, f"{p}.")
        _check(self.population >= 4 and self.population % 2 == 0, f"{p}.population", "must be even and >= 4",
               self.population)
        _check(self.generations >= 0, f"{p}.generations", "must be >= 0", self.generations)
        for f in ("elite_ratio", "parent_ratio", "mutation_rate", "crossover_rate", "range_crossover_rate",
                  "accel_crossover_rate"):
            v = getattr(self, f)
            _check(0.0 <= v <= 1.0, f"{p}.{f}", "must be in [0, 1]", v)
        _check(self.time_budget_s is None or self.time_budget_s > 0, f"{p}.time_budget_s", "must be > 0 or null",
               self.time_budget_s)
        _check(self.max_evaluations is None or self.max_evaluations >= 1, f"{p}.max_evaluations",
               "must be >= 1 or null", self.max_evaluations)
        _check(self.fitness in ("model", "simulator"), f"{p}.fitness", "must be 'model' or 'simulator'",
               self.fitness)
        _check(self.system_bandwidth is None or self.system_bandwidth > 0, f"{p}.system_bandwidth",
               "must be > 0 or null", self.system_bandwidth)
        _check(self.weight_unit_s is None or self.weight_unit_s > 0, f"{p}.weight_unit_s", "must be > 0 or null",
               self.weight_unit_s)


@dataclass
class H2HConfig:
    """H2H (DAC 2022): its greedy start, then passes of its refinement steps until a pass improves nothing."""

    weight_pinning: bool = True
    """Knapsack pinning of weights in each accelerator's buffer."""
    transfer_removal: bool = True
    """Move consumers to their producer's accelerator when that removes a transfer and helps."""
    local_search: bool = True
    """Move single layers to a neighbouring accelerator while it helps."""
    max_passes: int = 100
    """Cap on refinement passes (transfer removal then local search); they stop earlier once one improves
    nothing (converged)."""
    local_search_rounds: int | None = None
    """Cap on the passes that run the local search (None: every pass)."""
    max_evaluations: int | None = None
    """Cap on moves judged by the simulator (the searches' shared evaluation budget), None: no cap."""
    time_budget_s: float | None = None
    """Wall-clock cap on the refinement, s (None: none; the bench uses evaluation budgets only)."""

    def __post_init__(self):
        _check_types(self, "h2h.")
        _check(self.max_passes >= 0, "h2h.max_passes", "must be >= 0", self.max_passes)
        _check(self.local_search_rounds is None or self.local_search_rounds >= 0, "h2h.local_search_rounds",
               "must be >= 0 or null", self.local_search_rounds)
        _check(self.max_evaluations is None or self.max_evaluations >= 1, "h2h.max_evaluations",
               "must be >= 1 or null", self.max_evaluations)
        _check(self.time_budget_s is None or self.time_budget_s > 0, "h2h.time_budget_s", "must be > 0 or null",
               self.time_budget_s)


@dataclass
class RunConfig:
    """One mapping run (experiment task / bench case)."""

    algorithms: list[str] = field(default_factory=lambda: ["comb", "magma", "h2h", "magma_comb_simplified",
                                                           "h2h_wave_greedy", "heft", "greedy", "fcfs",
                                                           "round_robin"])
    """Algorithms to run (names of soc_mapper.algorithms.ALGORITHMS)."""
    time_budget_s: float = 20.0
    """Search time budget of each searching algorithm, s (the same for all); unused when
    ``budget_evaluations`` is set."""
    budget_evaluations: int | None = None
    """Search budget in fitness evaluations, the same for every searching algorithm (COMB's GA, MAGMA, the
    simplified MAGMA, H2H's moves); set, it replaces the time budget and lifts the generation caps."""
    seed: int = 0
    """Seed shared by every algorithm."""
    bandwidth: float | None = None
    """Override of the mesh's nearest-neighbour bandwidth, bytes/s (0.8e9 low, 3.2e9 high)."""
    copies: int | None = None
    """Override of the mix's copies per model (smaller runs)."""
    ga: GAConfig = field(default_factory=GAConfig)
    magma: MagmaConfig = field(default_factory=MagmaConfig)
    h2h: H2HConfig = field(default_factory=H2HConfig)

    def __post_init__(self):
        _check_types(self, "")
        if isinstance(self.ga, dict):
            self.ga = GAConfig(**self.ga)
        if isinstance(self.magma, dict):
            self.magma = MagmaConfig(**self.magma)
        if isinstance(self.h2h, dict):
            self.h2h = H2HConfig(**self.h2h)
        self.algorithms = [ALGORITHM_ALIASES.get(a, a) for a in self.algorithms]
        for i, a in enumerate(self.algorithms):
            _check(a in ALGORITHM_NAMES, f"run.algorithms[{i}]", f"unknown algorithm; known: {sorted(ALGORITHM_NAMES)}",
                   a)
        _check(self.time_budget_s > 0, "run.time_budget_s", "must be > 0", self.time_budget_s)
        _check(self.budget_evaluations is None or self.budget_evaluations >= 1, "run.budget_evaluations",
               "must be >= 1 or null", self.budget_evaluations)
        _check(self.bandwidth is None or self.bandwidth > 0, "run.bandwidth", "must be > 0 or null", self.bandwidth)
        _check(self.copies is None or self.copies >= 1, "run.copies", "must be >= 1 or null", self.copies)
