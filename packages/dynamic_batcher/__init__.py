"""dynamic_batcher: automatic batching of dynamic DNNs (ED-Batch) in PyTorch.

A define-by-run API records each instance's computation lazily (:class:`Batcher`), merges a minibatch into one
DAG of typed nodes, schedules it with a policy (learned FSM, DyNet depth/agenda baselines, type-wise lower-bound
heuristic, no batching, exact search), plans block memory with PQ-trees and runs the batches with PyTorch.
Light to import: torch is imported inside functions.
"""
from .batcher import Batcher, format_report
from .errors import (
                     BatcherError,
                     ConfigError,
                     CycleError,
                     InstanceError,
                     PolicyFileError,
                     PQInfeasible,
                     ShapeMismatchError,
)
from .graph import DynGraph, GraphView, graph_from_spec
from .ir import Block, Eager, Model, Ops, Param, Value
from .policies import DYNET_BASELINES, POLICIES, Policy, make_policy
from .pqtree import PQTree, consecutive_ones_order
from .rl import FSMPolicy, QConfig, train_fsm

__all__ = ["Batcher", "format_report", "BatcherError", "ConfigError", "CycleError", "InstanceError", "PolicyFileError",
           "PQInfeasible", "ShapeMismatchError", "DynGraph", "GraphView", "graph_from_spec", "Block", "Eager",
           "Model", "Ops", "Param", "Value", "DYNET_BASELINES", "POLICIES", "Policy", "make_policy", "PQTree",
           "consecutive_ones_order", "FSMPolicy", "QConfig", "train_fsm"]
