"""Search budgets in fitness evaluations and the convergence curves every search records.

A budget counts fitness evaluations (one chromosome decoded and judged, one H2H move tried), not seconds, so that
every searching algorithm gets the same number of tries whatever one evaluation costs on the machine. A
:class:`Curve` keeps (evaluations so far, best fitness so far) each time the best improves; a search has
*converged* when its best no longer improved over the last :data:`CONVERGED_TAIL` of its budget; a search with
a convergence test of its own (H2H: a whole pass without an improving move) has converged when that test
stopped it, not when a budget cut it off in the middle of a pass.
"""
from __future__ import annotations

from dataclasses import dataclass, field

CONVERGED_TAIL = 0.2
"""Share of the budget at its end over which the best must not improve for a search to count as converged."""


@dataclass
class Curve:
    """Best fitness against evaluations: ``points`` holds (evaluations, best) at each strict improvement."""

    points: list[tuple[int, float]] = field(default_factory=list)
    evaluations: int = 0
    """Evaluations spent so far."""

    def add(self, value: float) -> None:
        """One more evaluation, of fitness ``value``."""
        self.evaluations += 1
        if not self.points or value < self.points[-1][1]:
            self.points.append((self.evaluations, float(value)))

    @property
    def best(self) -> float:
        return self.points[-1][1] if self.points else float("inf")

    @property
    def last_improvement(self) -> int:
        """Evaluations spent when the best last improved (0: nothing evaluated)."""
        return self.points[-1][0] if self.points else 0

    def as_list(self) -> list[list[float]]:
        """[[evaluations, best], ...] ending at the evaluations spent (JSON-friendly, monotone)."""
        out = [[e, v] for e, v in self.points]
        if out and out[-1][0] < self.evaluations:
            out.append([self.evaluations, out[-1][1]])
        return out


def converged(curve: Curve, budget: int | None, stopped_by_test: bool = False,
              tail: float = CONVERGED_TAIL) -> bool:
    """True when the best did not improve over the last ``tail`` of the ``budget`` (of the evaluations spent, when
    the search stopped before spending its budget or has none), or when it stopped by its own convergence test."""
    if stopped_by_test:
        return True
    total = curve.evaluations if budget is None else min(budget, curve.evaluations)
    return total > 0 and curve.last_improvement <= (1.0 - tail) * total


def remaining(budget: int | None, spent: int) -> int | None:
    """Evaluations left (None: no budget)."""
    return None if budget is None else max(0, budget - spent)
