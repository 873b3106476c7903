"""Typed errors of the dynamic batcher. Every message names the node, field or file at fault."""
from __future__ import annotations


class BatcherError(ValueError):
    """Base class of every error raised by dynamic_batcher."""


class CycleError(BatcherError):
    """A user graph has a cycle. ``node`` is one node on the cycle, ``cycle`` the nodes around it."""

    def __init__(self, node: str, cycle: list[str]):
        self.node = node
        self.cycle = list(cycle)
        super().__init__(f"graph has a cycle through node {node!r}: {' -> '.join(self.cycle)} -> {node}")


class ShapeMismatchError(BatcherError):
    """An op got arguments whose shapes do not fit (named: the node and the argument)."""

    def __init__(self, node: str, message: str):
        self.node = node
        self.message = message
        super().__init__(f"node {node}: {message}")


class InstanceError(BatcherError):
    """One instance of a minibatch failed: ``instance`` (its index, in recording order), ``node`` (the node that
    raised) and ``op`` (its op); ``__cause__`` is the original error. The other instances are unaffected."""

    def __init__(self, instance: int, node: str, op: str, message: str):
        self.instance = instance
        self.node = node
        self.op = op
        super().__init__(f"instance {instance}: node {node} ({op}) failed: {message}")


class PolicyFileError(BatcherError):
    """A saved policy cannot be used: wrong model, wrong format, unreadable. ``path`` names the file."""

    def __init__(self, path: str, message: str):
        self.path = str(path)
        super().__init__(f"policy file {self.path}: {message}")


class ConfigError(BatcherError):
    """A config field is invalid; ``path`` is the dotted field path."""

    def __init__(self, path: str, message: str):
        self.path = path
        super().__init__(f"{path}: {message}")


class PQInfeasible(BatcherError):
    """A consecutive-ones constraint cannot be added to a PQ-tree (the reduction fails)."""
