"""The AReaL adapter against AReaL 1.0.4's own code: its ``AsyncRewardWrapper``'s arguments,
and its ``stats_tracker`` and ``workflow_context``, where each sample's metrics land.

AReaL goes in with ``pip install --no-deps areal==1.0.4`` (.ci/run): its package ``__init__``
files import its training stack (engines, launchers, schedulers). The three modules are loaded
from the installed package under parent packages that run no ``__init__``, so the code that runs
is AReaL's own, unchanged. The workflow's call (``areal/workflow/rlvr.py``, which imports the
engines) is the cited copy ``areal_rlvr_rewards``.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.machinery
import importlib.util
import inspect
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_rewardhang.adapters import close_pools
from pytest_rewardhang.adapters.areal import GuardedRewardWrapper
from tests.adapters._scorers import spec
from tests.adapters.test_shapes_and_metrics import areal_rlvr_rewards

pytestmark = [
    pytest.mark.slow,
    pytest.mark.needs_extra("areal"),
    pytest.mark.needs_extra("trl"),  # torch, transformers
    pytest.mark.timeout(180),
]

BUDGET = 0.5
#: A hung sample scores its default within its budget plus this on a loaded two-core machine.
SLACK = 5.0
#: AReaL's modules this file loads, and the bare packages above them.
MODULES = ("areal.utils.stats_tracker", "areal.infra.workflow_context", "areal.api.reward_api")
PARENTS = ("areal", "areal.utils", "areal.infra", "areal.infra.utils", "areal.api")


@pytest.fixture
def areal() -> Iterator[types.SimpleNamespace]:
    """AReaL's tracker, workflow context and reward wrapper as installed; ``areal`` a bare
    package on the real folder, with ``workflow_context`` on it, as its ``__init__`` puts it."""
    found = importlib.util.find_spec("areal")
    assert found is not None
    assert found.submodule_search_locations is not None
    root = Path(next(iter(found.submodule_search_locations)))
    before = set(sys.modules)
    saved = {name: sys.modules.pop(name) for name in [*PARENTS, *MODULES] if name in sys.modules}
    for name in PARENTS:
        folder = str(root.joinpath(*name.split(".")[1:]))
        package = types.ModuleType(name)
        package.__path__ = [folder]
        package.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        package.__spec__.submodule_search_locations = [folder]
        sys.modules[name] = package
    try:
        tracker, context, rewards = map(importlib.import_module, MODULES)
        sys.modules["areal"].workflow_context = context  # type: ignore[attr-defined]
        yield types.SimpleNamespace(tracker=tracker, context=context, rewards=rewards)
    finally:
        close_pools()
        for name in set(sys.modules) - before:
            if name == "areal" or name.startswith("areal."):
                del sys.modules[name]
        sys.modules.update(saved)


def test_the_wrapper_takes_async_reward_wrappers_arguments(areal: types.SimpleNamespace) -> None:
    """Put in ``AsyncRewardWrapper``'s place, it is made with the same arguments and the same
    defaults (areal/api/reward_api.py)."""
    theirs = inspect.signature(areal.rewards.AsyncRewardWrapper.__init__).parameters
    ours = inspect.signature(GuardedRewardWrapper.__init__).parameters
    shared = [name for name in theirs if name != "self"]
    assert shared == ["reward_fn", "timeout_seconds", "max_workers", "max_retries"]
    assert [(ours[name].kind, ours[name].default) for name in shared] == [
        (theirs[name].kind, theirs[name].default) for name in shared
    ]


def test_each_samples_metrics_land_in_areals_own_tracker_in_the_workflows_scope(
    areal: types.SimpleNamespace,
) -> None:
    """``stats_tracker.get(workflow_context.stat_scope())``, as the RLVR workflow records its
    reward: ``rollout``, or ``eval-rollout`` in a context set as AReaL's executor sets it."""
    wrapper = GuardedRewardWrapper(
        spec("areal_gsm8k"), timeout_seconds=BUDGET, max_workers=2, slow_s=0.05
    )

    async def evaluate() -> list[object]:
        areal.context.set(areal.context.WorkflowContext(is_eval=True))
        return await areal_rlvr_rewards(wrapper, ["so 42"])

    started = time.monotonic()
    assert asyncio.run(areal_rlvr_rewards(wrapper, ["so 42", "hang", "nap"])) == [1.0, 0.0, 1.0]
    assert time.monotonic() - started < BUDGET + SLACK
    assert asyncio.run(evaluate()) == [1.0]
    rollout = areal.tracker.get("rollout").export()
    assert rollout["rollout/reward_hang"] == pytest.approx(1 / 3)
    assert rollout["rollout/reward_hang__count"] == 3
    assert rollout["rollout/reward_slow"] == pytest.approx(2 / 3)
    assert rollout["rollout/reward_seconds"] >= BUDGET / 3
    evaluated = areal.tracker.get("eval-rollout").export()
    assert evaluated["eval-rollout/reward_hang"] == 0.0
    assert evaluated["eval-rollout/reward_hang__count"] == 1
