"""Pool(isolate=True): each item in a process forked from its warm worker, attacked by its items.

Real processes, real clocks: each attack aims at the items after it (see ``_attacks.reach``),
which must score exactly as they do in a fresh pool; an isolated item that dies costs only
itself.
"""

from __future__ import annotations

import signal
import time

import pytest

from pytest_rewardhang.guard import Pool, Status
from tests.guard._attacks import REACHING, attack, crash, probe, quick
from tests.guard._bounds import ANSWER_BUDGET, STRIKE_S

pytestmark = [pytest.mark.timeout(60)]


#: Of the attacks in REACHING, those the warm worker undoes: it puts back limits, the
#: environment, the directory and the umask, and retires after a thread left running. The
#: others reach the next item in the warm mode, and are not asserted on there: patched builtins
#: (that item then hangs), a patched guard function (it scores 1.0), a replaced module, a quick
#: item's signal handlers (put back only at the next full check), an armed watchdog (it kills
#: the next item's worker: a crash).
WARM_UNDOES = ("thread-patches", "nofile-cpu", "env-cwd-umask")


def fresh_probe() -> object:
    with Pool(probe, workers=1, budget=ANSWER_BUDGET) as pool:
        [out] = pool.map([(STRIKE_S,)])
    assert out.ok, out.describe()
    return out.value


@pytest.mark.parametrize("kind", REACHING)
@pytest.mark.usefixtures("no_leaks")
def test_an_isolated_item_reaches_no_later_item(kind: str) -> None:
    expected = fresh_probe()
    with Pool(attack, workers=1, budget=ANSWER_BUDGET, isolate=True) as pool:
        start = time.monotonic()
        outs = pool.map([(kind,), ("probe-later",), (kind,), ("probe-later",)])
        took = time.monotonic() - start
    assert took < 4 * ANSWER_BUDGET
    if kind != "patch-builtins":  # that one breaks its own answer: len is the child's too
        assert [o.value for o in outs[::2]] == [kind, kind], [o.describe() for o in outs]
    for out in outs[1::2]:
        assert out.ok, out.describe()
        assert out.value == expected


@pytest.mark.parametrize("kind", WARM_UNDOES)
@pytest.mark.usefixtures("no_leaks")
def test_what_the_warm_worker_puts_back_of_the_same_attacks(kind: str) -> None:
    expected = fresh_probe()
    with Pool(attack, workers=1, budget=ANSWER_BUDGET) as pool:
        outs = pool.map([(kind,), ("probe-later",)])
    assert outs[0].value == kind, outs[0].describe()
    assert outs[1].ok, outs[1].describe()
    assert outs[1].value == expected


@pytest.mark.parametrize(
    ("how", "status"),
    [("exit", Status.CRASHED), ("segv", Status.CRASHED), ("memory", Status.MEMORY)],
)
@pytest.mark.usefixtures("no_leaks")
def test_an_isolated_item_that_dies_costs_only_itself(how: str, status: Status) -> None:
    with Pool(crash, workers=1, budget=ANSWER_BUDGET, memory_mb=200, isolate=True) as pool:
        outs = pool.map([("none",), (how, 400), ("none",), ("none",)])
    assert outs[1].status is status, outs[1].describe()
    if how == "exit":
        assert outs[1].exit_code == 3, outs[1].describe()
    if how == "segv":
        assert outs[1].signal == signal.SIGSEGV, outs[1].describe()
    assert [o.value for o in (outs[0], *outs[2:])] == [0, 0, 0], [o.describe() for o in outs]


@pytest.mark.usefixtures("no_leaks")
def test_an_isolated_hang_is_killed_at_its_deadline_and_the_pool_goes_on() -> None:
    budget = 0.5
    with Pool(crash, workers=1, budget=budget, isolate=True) as pool:
        start = time.monotonic()
        outs = pool.map([("hang",), ("none",), ("none",)])
        took = time.monotonic() - start
        assert pool.map([("none",)])[0].value == 0
    assert outs[0].status is Status.TIMEOUT, outs[0].describe()
    assert [o.value for o in outs[1:]] == [0, 0], [o.describe() for o in outs]
    assert took < budget + 5


@pytest.mark.usefixtures("no_leaks")
def test_what_an_isolated_item_leaves_running_is_killed_and_counted() -> None:
    budget = 2.0
    with Pool(crash, workers=1, budget=budget, isolate=True) as pool:
        start = time.monotonic()
        outs = pool.map([("fork-sleep",), ("none",)])
        took = time.monotonic() - start
    assert [o.value for o in outs] == [1, 0], [o.describe() for o in outs]
    assert outs[0].leaked >= 1, outs[0].describe()
    assert took < budget  # answered at once, not held until the deadline by its child


@pytest.mark.usefixtures("no_leaks")
def test_an_isolated_map_of_many_quick_items_answers_each_in_order() -> None:
    with Pool(quick, workers=2, budget=ANSWER_BUDGET, isolate=True) as pool:
        outs = pool.map([(i,) for i in range(200)])
    assert [o.status for o in outs] == [Status.OK] * 200
    assert [o.value for o in outs] == [2 * i for i in range(200)]
