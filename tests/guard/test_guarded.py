"""``@guarded`` and the visible fallbacks where ``os.fork`` is missing: real calls, real clocks."""

from __future__ import annotations

import inspect
import logging
import os
import threading
import time
from typing import Any

import pytest

from pytest_rewardhang.guard import CallFailed, Mechanism, Outcome, Status, guarded, run
from pytest_rewardhang.guard._state import STATE

pytestmark = [pytest.mark.usefixtures("no_leaks"), pytest.mark.timeout(30)]


def python_loop() -> int:
    total = 0
    for i in range(10**12):
        total = (total + i * i) % 1_000_003
    return total


def test_guarded_keeps_the_signature_and_returns_the_value() -> None:
    def compute_score(solution_str: str, ground_truth: str, extra_info: object = None) -> float:
        """Exact match."""
        return float(solution_str.strip() == ground_truth)

    wrapped = guarded(budget=1.0, default=0.0)(compute_score)
    assert inspect.signature(wrapped) == inspect.signature(compute_score)
    assert wrapped.__name__ == "compute_score"
    assert wrapped.__doc__ == "Exact match."
    assert wrapped(" 42 ", "42") == 1.0
    assert wrapped(solution_str="41", ground_truth="42") == 0.0


def test_guarded_returns_default_and_logs_one_line_naming_the_cause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @guarded(budget=0.5, default=-1.0)
    def compute_score(solution_str: str, ground_truth: str) -> float:
        return float(sum(range(10**13)))

    start = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="pytest_rewardhang.guard"):
        assert compute_score("x" * 10, "42") == -1.0
    assert time.perf_counter() - start < 10  # a correctness bound: the C hang was stopped
    lines = [r.getMessage() for r in caplog.records if r.name == "pytest_rewardhang.guard"]
    assert len(lines) == 1
    assert "\n" not in lines[0]
    assert "compute_score" in lines[0]
    assert "timeout" in lines[0]
    assert "returned -1.0" in lines[0]


def test_guarded_returns_default_on_crash_and_memory() -> None:
    crash = guarded(budget=1.0, default=0.0)(lambda: os._exit(3))
    bomb = guarded(budget=2.0, default=0.0, memory_mb=100)(lambda: len(bytearray(2 << 30)))
    assert crash() == 0.0
    assert bomb() == 0.0


def test_guarded_raises_the_scorers_own_exception_with_the_child_traceback() -> None:
    @guarded(budget=1.0)
    def compute_score() -> float:
        raise ValueError("malformed ground truth")

    with pytest.raises(ValueError, match="malformed ground truth") as info:
        compute_score()
    assert any("Traceback in the guarded child" in note for note in info.value.__notes__)


class Unpicklable(Exception):
    def __reduce__(self) -> Any:
        raise TypeError("stays in the child")


def test_guarded_raises_call_failed_when_the_exception_cannot_travel() -> None:
    @guarded(budget=1.0)
    def compute_score() -> float:
        raise Unpicklable("boom")

    with pytest.raises(CallFailed, match="Unpicklable: boom"):
        compute_score()


def test_guarded_refuses_nonsense_when_decorating() -> None:
    with pytest.raises(ValueError, match="budget must be a positive number"):
        guarded(budget=0)
    with pytest.raises(ValueError, match="memory_mb must be"):
        guarded(memory_mb=-5)


# --- where os.fork is missing ---------------------------------------------------------------


@pytest.fixture
def no_fork(monkeypatch: pytest.MonkeyPatch) -> None:
    """A platform without fork (Windows, WASI): the guard must degrade visibly."""
    monkeypatch.delattr(os, "fork")
    monkeypatch.setattr(STATE, "said", set())


@pytest.mark.usefixtures("no_fork")
def test_without_fork_the_main_thread_falls_back_to_sigalrm_and_says_so() -> None:
    with pytest.warns(RuntimeWarning, match="SIGALRM"):
        out = run(python_loop, budget=0.3)
    assert out.mechanism is Mechanism.ALARM
    assert out.status is Status.TIMEOUT
    assert out.stack is not None
    assert "python_loop" in out.stack
    assert 0.3 <= out.wall_s < 0.3 + 5  # a bound on a busy machine: the alarm came at all
    ok = run(lambda: 5, budget=1.0)
    assert (ok.status, ok.value, ok.mechanism) == (Status.OK, 5, Mechanism.ALARM)
    error = run(lambda: 1 / 0, budget=1.0)
    assert error.status is Status.ERROR
    assert error.error is not None
    assert error.error.startswith("ZeroDivisionError")


@pytest.mark.usefixtures("no_fork")
def test_without_fork_off_the_main_thread_the_call_runs_unbounded_with_a_warning() -> None:
    outs: list[Outcome] = []

    def off_the_main_thread() -> None:
        worker = threading.Thread(target=lambda: outs.append(run(lambda: 7, budget=1.0)))
        worker.start()
        worker.join()

    with pytest.warns(RuntimeWarning, match="WITHOUT a deadline"):
        off_the_main_thread()
    assert [(o.status, o.value, o.mechanism) for o in outs] == [(Status.OK, 7, Mechanism.UNBOUNDED)]
