"""The containment strategy: chosen once from the probe, and what each one hands its callers.

The attacks each mechanism holds against are in test_containment.py and test_cgroup_attacks.py;
these check the choice itself, and the fallbacks where a group or a namespace cannot be made.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_rewardhang.guard import Containment, _cgroup, _contain, _pidns
from pytest_rewardhang.guard._state import STATE

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def probed() -> Iterator[list[Containment]]:
    """The probe's answer, to set; restored after."""
    saved = STATE.containment[:]
    yield STATE.containment
    STATE.containment[:] = saved


@pytest.mark.parametrize("kind", list(Containment))
def test_the_strategy_is_the_probed_containments(
    probed: list[Containment], kind: Containment
) -> None:
    probed[:] = [kind]
    assert _contain.strategy().containment is kind
    assert _contain.strategy() is _contain.strategy()


def _is_the_subreapers(cage: _contain.Cage) -> None:
    assert type(cage) is _contain.Cage
    assert cage.spawn_actions(3) == []
    assert cage.enter()
    assert not cage.begin_freeze()
    assert cage.kill_others() == 0
    assert cage.close(0.0) == 0
    assert cage.kill_strays() == (0, True)


def test_a_group_that_cannot_be_made_leaves_the_subreaper(
    probed: list[Containment], monkeypatch: pytest.MonkeyPatch
) -> None:
    probed[:] = [Containment.CGROUP]
    monkeypatch.setattr(_cgroup.Group, "make", classmethod(lambda cls, *, capped=True: None))
    strategy = _contain.strategy()
    for cage in (strategy.call(), strategy.zygote(), strategy.worker()):
        assert cage.containment is Containment.SUBREAPER
        _is_the_subreapers(cage)


def test_a_namespace_that_cannot_be_started_leaves_the_subreaper(
    probed: list[Containment], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As before: the outcome still says pid-namespace (the probe's answer)."""
    probed[:] = [Containment.PID_NAMESPACE]
    monkeypatch.setattr(_pidns, "start", lambda watch=None: None)
    strategy = _contain.strategy()
    cage = strategy.call()
    assert cage.containment is Containment.PID_NAMESPACE
    _is_the_subreapers(cage)
    namespace = strategy.workers(-1)
    assert (namespace.init, namespace.orphans(), namespace.close()) == (0, 0, 0)


@pytest.mark.parametrize("kind", [Containment.SUBREAPER, Containment.NONE])
def test_the_subreaper_makes_nothing(probed: list[Containment], kind: Containment) -> None:
    probed[:] = [kind]
    strategy = _contain.strategy()
    for cage in (strategy.call(), strategy.zygote(), strategy.worker()):
        assert cage.containment is kind
        _is_the_subreapers(cage)
    namespace = strategy.workers(-1)
    assert (namespace.init, namespace.orphans(), namespace.close()) == (0, 0, 0)
    namespace.stay()
    namespace.restore()
