"""pytest-rewardhang: stop reward functions from freezing reinforcement-learning runs."""

from typing import TYPE_CHECKING, Any

from ._decorator import scorer
from .guard import CallFailed, Mechanism, Outcome, Pool, PoolError, SpecError, Status, guarded, run

if TYPE_CHECKING:
    from .check._scorers import ScorerSpec

__version__ = "0.1.0"

__all__ = [
    "CallFailed",
    "Mechanism",
    "Outcome",
    "Pool",
    "PoolError",
    "ScorerSpec",
    "SpecError",
    "Status",
    "__version__",
    "guarded",
    "run",
    "scorer",
]


def __getattr__(name: str) -> Any:
    # ScorerSpec's module imports pytest; trainers importing the guard should not pay for it.
    if name == "ScorerSpec":
        from .check._scorers import ScorerSpec

        return ScorerSpec
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
