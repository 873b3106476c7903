"""Search budgets in fitness evaluations and the convergence curves every search records.

A budget counts fitness evaluations (one chromosome decoded and judged, one H2H move tried), not seconds, so that
every searching algorithm gets the same number of tries whatever one evaluation costs on the machine. A
:class:`Curve` keeps (evaluations so far, best fitness so far) each time the best improves; a search has
*converged* when its best no longer improved over the last :data:`CONVERGED_TAIL` of its budget (the same rule
for every search, also for one that stopped early by a test of its own, as H2H does at a whole pass without an
improving move); without an evaluation budget, over the last share of the evaluations it spent, or when its own
test stopped it.
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
    """True when the best did not improve over the last ``tail`` of the ``budget``: its last improvement came at or
    before (1 − ``tail``) × ``budget`` evaluations. A search that stops before spending its budget (H2H at a pass
    without an improving move) is judged against the same budget as the others, so the flag means the same for
    every search. Without a budget (time-budgeted runs): over the last ``tail`` of the evaluations spent, or when
    the search stopped by its own convergence test."""
    if curve.evaluations == 0:
        return False
    if budget is None:
        return stopped_by_test or curve.last_improvement <= (1.0 - tail) * curve.evaluations
    return curve.last_improvement <= (1.0 - tail) * budget


def remaining(budget: int | None, spent: int) -> int | None:
    """Evaluations left (None: no budget)."""
    return None if budget is None else max(0, budget - spent)
