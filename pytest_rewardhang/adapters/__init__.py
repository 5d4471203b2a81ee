"""Ready wrappers that score a trainer's reward function on a guarded ``Pool``.

Each fits one trainer's real call; all of them submit every sample to one warm pool per scorer,
limits, warm-up and process, shared by every thread and coroutine (see ``docs/trainers.md``):

- :mod:`pytest_rewardhang.adapters.verl`: verl's per-item ``compute_score``, sync and
  ``async def`` (the reward loop), and the legacy batch form.
- :mod:`pytest_rewardhang.adapters.trl`: TRL's ``reward_func(prompts, completions, **kwargs)``,
  sync and ``async def``.
- :mod:`pytest_rewardhang.adapters.openrlhf`: OpenRLHF's ``reward_func(queries, prompts, labels)``.
- :mod:`pytest_rewardhang.adapters.slime`: slime's ``async def rm(args, sample)`` and group form.
- :mod:`pytest_rewardhang.adapters.verifiers`: a verifiers rubric function.
- :mod:`pytest_rewardhang.adapters.areal`: AReaL's ``AsyncRewardWrapper``, with its call shape.
- :mod:`pytest_rewardhang.adapters.easyr1`: EasyR1's batch reward function.
- :mod:`pytest_rewardhang.adapters.generic`: ``await score(...)`` / ``score_sync(...)`` for the
  rest (SkyRL, rllm, NeMo Gym).
"""

from pytest_rewardhang.adapters._shared import close_pools

__all__ = ["close_pools"]
