"""``Pool(warmup=...)``: one call in the zygote, before any worker is forked, that every worker
(a replacement after a hang too) inherits; and a warm-up that fails stops the start in one line.

Real zygotes and workers, real hangs; the lazily imported module is written for each test, so no
process has imported it before the pool does.
"""

from __future__ import annotations

import importlib
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from pytest_rewardhang.guard import Pool, PoolError, Status, _launch
from tests._lazy import COLD, WARM, imported_before
from tests.conftest import join_a_lingering_thread
from tests.guard._bounds import BUDGET
from tests.guard.conftest import Launch

pytestmark = [pytest.mark.timeout(60)]


# --- scorers: module level, so the zygote imports them by name --------------------------------


def first_import(name: str, action: str = "ok") -> str:
    if action == "hang":
        return str(sum(range(10**13)))
    return imported_before(name)


async def first_import_async(name: str, action: str = "ok") -> str:
    return first_import(name, action)


def opens(box: Any) -> Any:
    return box.content


def warmup_attack(kind: str) -> float:
    if kind == "raise":
        raise ZeroDivisionError("the warm-up item was bad")
    if kind == "thread":
        threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
    if kind == "hang":
        return float(sum(range(10**13)))
    if kind == "joined":
        join_a_lingering_thread(0.2)
    if kind == "alarm":
        signal.alarm(1)
    return 1.0


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize("scorer", [first_import, first_import_async])
def test_every_worker_starts_with_what_the_warmup_imported(
    lazy: str, launch: Launch, scorer: Any
) -> None:
    items = [(lazy,)] * 20
    # Without a warm-up, each worker imports the module on its first item: the check can fail.
    with launch.pool(scorer, workers=2, budget=BUDGET) as pool:
        assert COLD in [out.value for out in pool.map(items)]
    with launch.pool(scorer, workers=2, budget=BUDGET, warmup=(lazy,)) as pool:
        assert [out.value for out in pool.map(items)] == [WARM] * 20
        # A hang's replacement is forked from the same zygote: it starts warm too.
        outs = pool.map([(lazy, "hang"), *items])
        assert outs[0].status is Status.TIMEOUT
        assert [out.value for out in outs[1:]] == [WARM] * 20


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize(
    ("kind", "text"),
    [
        (
            "raise",
            "the warm-up call failed in the zygote: ZeroDivisionError: the warm-up item was bad",
        ),
        (
            "thread",
            "the warm-up call left a thread running in the zygote, which forks the workers and "
            "so must have none",
        ),
    ],
)
def test_a_warmup_that_fails_stops_the_start_in_one_line(
    kind: str, text: str, launch: Launch
) -> None:
    with pytest.raises(PoolError) as raised:
        launch.pool(warmup_attack, workers=2, budget=BUDGET, warmup=(kind,))
    assert str(raised.value) == text


@pytest.mark.usefixtures("no_leaks")
def test_a_warmup_of_a_class_found_through_the_callers_sys_path(
    launch: Launch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The class is importable only through a folder put on sys.path at run time: the zygote
    # unpickled the warm-up before it took the caller's sys.path, and exited without a word.
    name = f"boxes_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(
        "class Box:\n    def __init__(self, content):\n        self.content = content\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    box = importlib.import_module(name).Box("warm")
    with launch.pool(opens, workers=2, budget=BUDGET, warmup=(box,)) as pool:
        assert [out.value for out in pool.map([(box,)] * 2)] == ["warm"] * 2


@pytest.mark.usefixtures("no_leaks")
def test_a_thread_the_warmup_joined_is_not_one_left_running(launch: Launch) -> None:
    # Joined, the thread is still exiting in the kernel for 0.2 s: the zygote's count of its
    # threads saw it, and 3 starts in 40 failed on a thread that only started and joined one.
    with launch.pool(warmup_attack, workers=2, budget=BUDGET, warmup=("joined",)) as pool:
        assert [out.value for out in pool.map([("ok",)] * 4)] == [1.0] * 4


@pytest.mark.usefixtures("no_leaks")
def test_an_alarm_the_warmup_left_never_ends_the_zygote(launch: Launch) -> None:
    with launch.pool(warmup_attack, workers=2, budget=BUDGET, warmup=("alarm",)) as pool:
        zygote = pool._engine.zygote
        time.sleep(1.5)  # past the alarm
        assert [out.value for out in pool.map([("ok",)] * 4)] == [1.0] * 4
        assert pool._engine.zygote is zygote, "the zygote died and was replaced"


@pytest.mark.usefixtures("no_leaks")
def test_a_warmup_that_hangs_in_c_stops_the_start_and_leaves_nothing(
    launch: Launch, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A shorter start bound than the 120 s a large scorer's import may need; a real one still.
    monkeypatch.setattr(_launch, "START_TIMEOUT_S", 1.0)
    started = time.monotonic()
    with pytest.raises(PoolError) as raised:
        launch.pool(warmup_attack, workers=2, budget=BUDGET, warmup=("hang",))
    assert str(raised.value) == (
        "the pool's zygote did not start within 1 s "
        "(importing the scorer and scoring its warm-up item)"
    )
    assert time.monotonic() - started < 30


@pytest.mark.usefixtures("no_leaks")
def test_a_good_warmup_by_keyword_starts_the_pool(launch: Launch) -> None:
    with launch.pool(warmup_attack, workers=1, budget=BUDGET, warmup={"kind": "ok"}) as pool:
        assert pool.map([("ok",)])[0].value == 1.0


@pytest.mark.parametrize(
    ("warmup", "text"),
    [
        (["ok"], "warmup must be a tuple of positional arguments or a dict of keyword arguments"),
        ((lambda: None,), "warmup cannot be pickled: "),
    ],
)
def test_a_nonsense_warmup_is_one_clear_line(warmup: Any, text: str) -> None:
    with pytest.raises(ValueError, match=r"^warmup ") as raised:
        Pool(warmup_attack, workers=1, warmup=warmup)
    assert str(raised.value).startswith(text)
    assert "\n" not in str(raised.value)
