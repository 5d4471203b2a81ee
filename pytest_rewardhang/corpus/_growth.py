"""How a scorer's time grows with the response: the exponent of a power law fit on a size ladder.

A quadratic scorer can pass every size a CI run tries and still freeze training on the longest
response a policy emits. Fitting ``t = c * n**k`` over the ladder and projecting to ``max_chars``
catches it before the sizes that hang are ever run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

#: Above this exponent a scorer is super-linear (quadratic code measures ~2, sorting ~1.1).
SUPERLINEAR = 1.5
#: Times below this (after the smallest size's time is taken off) are process noise, not growth:
#: a linear scorer spends microseconds on 128 KiB, and one scheduling hiccup must not read as n^3.
FLOOR_S = 0.02


@dataclass(frozen=True)
class Growth:
    formula_id: str
    exponent: float
    #: ``(chars, seconds)`` the fit used, smallest first.
    points: tuple[tuple[int, float], ...]
    projected_s: float
    max_chars: int

    @property
    def superlinear(self) -> bool:
        return self.exponent > SUPERLINEAR

    def projects_past(self, deadline: float) -> bool:
        return self.superlinear and self.projected_s > deadline

    def describe(self) -> str:
        sizes = ", ".join(f"{n}: {t:.3f} s" for n, t in self.points)
        return (
            f"{self.formula_id}: time grows as n^{self.exponent:.2f} ({sizes}); "
            f"projected {self.projected_s:.3g} s at {self.max_chars} chars"
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "formula": self.formula_id,
            "exponent": round(self.exponent, 3),
            "projected_s": round(self.projected_s, 4),
            "points": [[n, round(t, 4)] for n, t in self.points],
        }


def fit(formula_id: str, points: Iterable[tuple[int, float]], max_chars: int) -> Growth | None:
    """The power-law fit of ``(chars, seconds)``, or None when the times are all noise.

    The smallest size's time is taken off every point first: it is the fixed cost of a call
    (pickling, the worker round trip), which would flatten the exponent of real growth.
    """
    measured = sorted((n, t) for n, t in points if n > 0 and math.isfinite(t) and t >= 0)
    if len(measured) < 2:
        return None
    base = measured[0][1]
    usable = [(n, t - base) for n, t in measured[1:] if t - base >= FLOOR_S]
    if len(usable) < 2 or usable[-1][0] < 2 * usable[0][0]:
        return None
    xs = [math.log(n) for n, _ in usable]
    ys = [math.log(t) for _, t in usable]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    exponent = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
    last_n, last_t = usable[-1]
    projected = base + last_t * (max_chars / last_n) ** max(exponent, 0.0)
    return Growth(formula_id, exponent, tuple(usable), projected, max_chars)
