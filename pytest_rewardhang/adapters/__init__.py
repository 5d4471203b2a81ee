"""Ready wrappers that score a trainer's reward function on a guarded ``Pool``.

- :mod:`pytest_rewardhang.adapters.verl`: verl's ``compute_score`` signatures (per item and batch).
- :mod:`pytest_rewardhang.adapters.trl`: TRL-style ``reward_func(completions, **kwargs)``.
"""

from pytest_rewardhang.adapters._shared import close_pools

__all__ = ["close_pools"]
