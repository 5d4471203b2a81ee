"""pytest-rewardhang: stop reward functions from freezing reinforcement-learning runs."""

from .guard import CallFailed, Mechanism, Outcome, Status, guarded, run

__version__ = "0.1.0"

__all__ = ["CallFailed", "Mechanism", "Outcome", "Status", "__version__", "guarded", "run"]
