"""soc_mapper: multi-DNN mapping on heterogeneous SoCs (COMB, DAC 2023) against MAGMA and H2H.

Pipeline: ``workload`` (compute layers of several zoo models with copies, one DAG) → ``soc`` (accelerators and
mesh bandwidths from a ``shared_ir.hardware`` System) → ``cost`` (per-(layer, accelerator) latency, PEs, power
from MAESTRO's model, ported in ``maestro_model`` and checked against the tool in ``maestro_check``) → an
algorithm from ``algorithms.ALGORITHMS`` (``comb``; ``magma`` as its authors' code runs it and ``h2h`` as
published; ``magma_comb_simplified`` and ``h2h_wave_greedy``, ablations: the simplified versions COMB's
experiments used; ``heft``, ``greedy``, ``fcfs``, ``round_robin``; ``exact`` with CP-SAT for small instances)
→ a ``Plan`` judged by the one ``simulator`` → ``report`` (CSV, Gantt PNG). Entry points: ``tasks.run_mix``
(Hydra experiments ``experiment=soc_mapper/<mix>``) and ``python -m soc_mapper.bench``.

Light to import: torch (tracing), matplotlib and OR-Tools load only where needed.
"""
from .config import GAConfig, H2HConfig, MagmaConfig, RunConfig
from .cost import CostTable, cost_table
from .errors import CheckpointError, MapperError, SoCError, UnsupportedLayerError
from .simulator import Plan, Result, simulate
from .soc import SoC, soc_from_system
from .workload import MIXES, Workload, build_workload, load_mix, workload_from_graph

__all__ = ["GAConfig", "H2HConfig", "MagmaConfig", "RunConfig", "CostTable", "cost_table", "CheckpointError",
           "MapperError", "SoCError", "UnsupportedLayerError", "Plan", "Result", "simulate", "SoC",
           "soc_from_system", "MIXES", "Workload", "build_workload", "load_mix", "workload_from_graph"]
