"""A timeout is a hang only once it is shown to be one: a fresh worker still running it at ten
deadlines (no growth projection makes one). A case that ends sooner is slow, and says so; a
formula a bound holds is not run size by size; an expected hang is re-run for one deadline
only. Real scorers, real check runs."""

from __future__ import annotations

from typing import Any

import pytest

from tests._projects import fast, reported

#: The default: a timed-out case is a hang when a fresh worker still runs it at ten deadlines.
CONFIRM_FACTOR = 10

pytestmark = pytest.mark.timeout(240)

SCORERS = """\
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

_EXECUTOR = []


def slow_past(solution_str):
    # Past a one-second deadline on long loops of one sentence, but it ends: slow, not hung.
    if len(solution_str) > 3000 and "recompute" in solution_str:
        time.sleep(1.5)
    return 0.0


def quadratic(solution_str):
    # Time grows as the square of the response: past a one-second deadline from 32 KiB.
    n = len(solution_str) // 64
    for _ in range(n * n * 700):
        pass
    return 0.0


def _alarm(signum, frame):
    raise TimeoutError


def quadratic_under_alarm(solution_str):
    # Math-Verify's way: the quadratic work above, on the response twice over (past the alarm
    # from 16 KiB, so two sizes are held at it before the largest), bounded by an alarm of 1.5 s.
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, 1.5)
    try:
        quadratic(solution_str * 2)
    except TimeoutError:
        pass
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return 0.0


def alarm_bounded(solution_str):
    # Math-Verify's way: a signal alarm bounds the work on the main thread; off it none can be
    # set, and the caller (TRL, verl) passes no timeout there: the same work has no bound.
    if len(solution_str) > 3000 and "recompute" in solution_str:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGALRM, _alarm)
            signal.setitimer(signal.ITIMER_REAL, 1.5)
            try:
                while True:
                    pass
            except TimeoutError:
                return 0.0
        while True:
            pass
    return 0.0


def slow_then_hung(solution_str):
    if "recompute" in solution_str and len(solution_str) > 3000:
        time.sleep(1.5 if len(solution_str) < 5000 else 3600)
    return 0.0


def slow_twice_then_hung(solution_str):
    # As slow at 4 KiB as at 8 KiB, which looks like a bound; hung from 16 KiB.
    if "recompute" in solution_str and len(solution_str) > 3000:
        time.sleep(1.5 if len(solution_str) < 10000 else 3600)
    return 0.0


def hangs_under_a_length_guard(solution_str):
    # The same, but a length guard returns at once past 100 kB.
    if len(solution_str) > 100_000:
        return 0.0
    return slow_twice_then_hung(solution_str)


def lazy_executor(solution_str):
    # Its first call makes an executor whose thread stays: no zygote can be warmed with it.
    if not _EXECUTOR:
        _EXECUTOR.append(ThreadPoolExecutor(1))
    if _EXECUTOR[0].submit(len, solution_str).result() > 3000 and "recompute" in solution_str:
        time.sleep(3600)
    return 0.0


def sleeps(solution_str):
    if "6 * 7" not in solution_str:  # every input but its own example
        time.sleep(3600)
    return 0.0


def slow_on_everything(solution_str):
    # Every case past 500 characters takes 1.3 s: slow everywhere, never hung.
    if len(solution_str) > 500 and "6 * 7" not in solution_str:
        time.sleep(1.3)
    return 0.0


def sleeps_on_long(solution_str):
    # Every case of every family, but not its example or a short response.
    if len(solution_str) > 8 and "6 * 7" not in solution_str:
        time.sleep(3600)
    return 0.0
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(scorers=SCORERS)
    pytester.makeini("[pytest]\n")
    return pytester


def check(
    pytester: pytest.Pytester,
    scorer: str,
    max_chars: int,
    *extra: str,
    confirm: float | None = None,
) -> tuple[pytest.RunResult, dict[str, Any]]:
    result = pytester.runpytest_subprocess(
        *fast(deadline=1, max_chars=max_chars, family="repetition", confirm=confirm),
        *extra,
        f"--reward-hang-scorer=scorers.py:{scorer}",
        "--reward-hang-json=r.json",
    )
    (entry,) = reported(pytester).values()
    return result, entry


@pytest.mark.slow  # waits out its re-run's deadlines, 13 s: the slow tier
def test_a_case_that_ends_under_ten_deadlines_is_slow_not_a_hang(project: pytest.Pytester) -> None:
    result, entry = check(project, "slow_past", 8192)
    assert result.ret == 1  # past the deadline still fails the run
    assert "Traceback" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "slow: case repetition-4096 (4096 chars) ran past the 1 s deadline, but is no hang: "
            f"a fresh worker finished it in * s, under {CONFIRM_FACTOR}x the deadline (*",
            "SLOW case repetition-4096 (*",
            "  called on the main thread (context main)",
            f"  a fresh worker finished it in * s, under {CONFIRM_FACTOR}x the deadline (*",
        ]
    )
    assert "HANG" not in result.stdout.str()
    result.stdout.re_match_lines([r"scorers\.slow_past +single .* slow +"])
    assert entry["status"] == "slow"
    timeouts = [case for case in entry["cases"] if case["status"] == "timeout"]
    # Each size past 3,000 characters, on the main thread and off it (a slow case is among
    # those a family runs again there); none of them is a hang.
    assert {case["chars"] for case in timeouts if case["context"] == "main"} == {4096, 8192}
    for case in timeouts:
        assert (case["hang"], case["confirmed"], case["fresh_status"]) == (False, None, "ok")
        assert 1.0 < case["fresh_wall_s"] < CONFIRM_FACTOR
    # A slow case whose time still grew (quick at 2 KiB) did not stop its family: the next
    # size might have been the hang. The largest, as slow, did: the cases after it (the other
    # formulas' 8 KiB, the framed response) would only say "slow" again.
    assert entry["skipped"] == 4
    result.stdout.fnmatch_lines(["stopped after a slow case: 4 case(s) skipped"])


@pytest.mark.slow  # a slow case and its re-run: the slow tier
def test_a_gate_on_hangs_alone_lets_a_slow_case_pass(project: pytest.Pytester) -> None:
    # A team whose trainer waits out a slow call, but not a hang, fails on hangs only.
    result, entry = check(
        project, "slow_past", 4096, "--reward-hang-fail-on=hang,error,crashed,memory,leak"
    )
    assert result.ret == 0, result.stdout.str()
    assert entry["status"] == "ok"
    assert any(case["status"] == "timeout" for case in entry["cases"])  # it was slow, though


@pytest.mark.slow  # a slow size, then a hang and its confirmation: the slow tier
def test_a_slow_size_does_not_hide_the_hang_at_the_next(project: pytest.Pytester) -> None:
    # A cubic regex's ladder: slow at one size, hung at the next.
    result, entry = check(project, "slow_then_hung", 8192, confirm=2)
    assert entry["status"] == "hang"
    by_chars = {
        c["chars"]: c
        for c in entry["cases"]
        if c["id"].startswith("repetition-") and c["context"] == "main" and c["status"] == "timeout"
    }
    assert by_chars[4096]["hang"] is False
    assert by_chars[8192]["hang"] is True
    result.stdout.fnmatch_lines(
        ["hangs: case repetition-8192 (8192 chars) ran past the 1 s deadline"]
    )


@pytest.mark.slow  # a slow case on each thread, then a hang confirmed: the slow tier
def test_a_case_slow_on_the_main_thread_is_run_off_it_where_it_hangs(
    project: pytest.Pytester,
) -> None:
    # Two deadlines to confirm: the alarm's 1.5 s on the main thread is under them.
    result, entry = check(project, "alarm_bounded", 4096, confirm=2)
    assert result.ret == 1
    assert entry["status"] == "hang"
    timeouts = {case["context"]: case for case in entry["cases"] if case["status"] == "timeout"}
    assert timeouts["main"]["hang"] is False  # its alarm ended it: slow
    assert timeouts["thread"]["hang"] is True, timeouts
    result.stdout.fnmatch_lines(
        [
            "HANG case repetition-4096 (*",
            "  called off the main thread (context thread)",
            "  hangs: a fresh worker still ran it at 2 s (2x the deadline)",
        ]
    )


@pytest.mark.slow  # a check run up to 64 KiB of a quadratic scorer: the slow tier
def test_a_hang_its_growth_foretells_is_shown_by_a_run(project: pytest.Pytester) -> None:
    result, entry = check(project, "quadratic", 131072)
    assert result.ret == 1
    assert entry["status"] == "hang"
    hang = next(case for case in entry["cases"] if case["hang"])
    # Still running at ten deadlines, however steep the sizes below it had grown.
    assert hang["confirmed"] == "a fresh worker still ran it at 10 s (10x the deadline)", hang
    result.stdout.fnmatch_lines(["HANG case repetition-*", "  hangs: a fresh worker still ran *"])


@pytest.mark.slow  # a quadratic scorer's ladder to 128 KiB, its timeouts re-run: the slow tier
def test_a_growth_the_scorers_own_alarm_bounds_is_slow_not_a_hang(
    project: pytest.Pytester,
) -> None:
    # Math-Verify's way on the main thread: the growth of the small sizes projects minutes at
    # 128 KiB, and the scorer's alarm ends every size at 1.5 s. A fit confirmed that as a hang.
    result, entry = check(project, "quadratic_under_alarm", 131072, "--reward-hang-contexts=main")
    assert entry["status"] == "slow", entry
    timeouts = [case for case in entry["cases"] if case["status"] == "timeout"]
    # On a loaded machine a small size may time out in the long-lived worker and finish in its
    # fresh one under the deadline: not slow, and no hang either.
    slow = [case for case in timeouts if case["fresh_wall_s"] > 1.0]
    assert max(case["chars"] for case in slow) == 131072  # the whole ladder ran, slow at the top
    for case in timeouts:
        assert (case["hang"], case["fresh_status"]) == (False, "ok"), case
        assert case["fresh_wall_s"] < CONFIRM_FACTOR
    assert "HANG" not in result.stdout.str()
    # Slow at 32 KiB as at 16 KiB, and as slow at 128 KiB, run next: the alarm holds it, and the
    # size between (its deadline and its re-run) is not run.
    assert 65536 not in {case["chars"] for case in entry["cases"]}
    result.stdout.fnmatch_lines(
        ["  * case(s) between * and 131072 chars and after not run: it took * s at 131072, about *"]
    )


@pytest.mark.slow  # two slow sizes, the largest, then a hang and its confirmation: the slow tier
def test_a_quick_largest_size_does_not_spare_the_hang_below_it(project: pytest.Pytester) -> None:
    # The largest size, run once 8 KiB was as slow as 4 KiB, returns at once (a length guard):
    # the sizes between still run, and the hang at 16 KiB is found.
    result, entry = check(
        project, "hangs_under_a_length_guard", 131072, "--reward-hang-contexts=main", confirm=2
    )
    assert entry["status"] == "hang", entry
    result.stdout.fnmatch_lines(["hangs: case repetition-16384 (16384 chars) ran past *"])
    runs = [case["chars"] for case in entry["cases"] if case["id"].startswith("repetition-")]
    assert runs.count(131072) == 1  # run ahead once, and not again in its turn
    assert 32768 not in runs  # past the hang


@pytest.mark.slow  # two slow sizes, the largest hung, then the smaller hang: the slow tier
def test_a_hang_at_the_largest_size_is_reported_at_the_smallest(project: pytest.Pytester) -> None:
    # The largest size, run ahead, hangs: the ladder goes on, so the reproduction is the
    # smallest size that hangs, not the largest (listed after it).
    result, entry = check(
        project, "slow_twice_then_hung", 65536, "--reward-hang-contexts=main", confirm=2
    )
    assert entry["status"] == "hang", entry
    result.stdout.fnmatch_lines(["hangs: case repetition-16384 (16384 chars) ran past *"])
    hangs = [case["chars"] for case in entry["cases"] if case["hang"]]
    assert hangs == [16384, 65536], hangs
    # After the hang: the other two formulas' 16 KiB, and 32 and 64 KiB of all three but the
    # first formula's 64 KiB, which ran; and the framed responses (the example's own frame,
    # and after "recompute", a string the scorers' source looks for).
    assert entry["skipped"] == 9


def test_a_scorer_slow_on_every_case_costs_a_few_deadlines_per_family_not_one_per_case(
    project: pytest.Pytester,
) -> None:
    """Its first slow case, then its formula's largest size, slow about as long: the family
    stops there. Each further case would have cost a deadline and its re-run to say "slow"."""
    result, entry = check(project, "slow_on_everything", 8192, "--reward-hang-contexts=main")
    assert entry["status"] == "slow"
    timeouts = [case for case in entry["cases"] if case["status"] == "timeout"]
    assert [case["chars"] for case in timeouts] == [1024, 8192], timeouts
    assert all(case["fresh_status"] == "ok" for case in timeouts)
    # Every other case of the family, its framed response among them.
    assert entry["skipped"] >= 10
    result.stdout.fnmatch_lines(
        [
            f"stopped after a slow case: {entry['skipped']} case(s) skipped",
            "  * case(s) between 1024 and 8192 chars and after not run: it took * s at 8192, *",
        ]
    )


def test_an_expected_hang_is_confirmed_within_one_deadline(project: pytest.Pytester) -> None:
    project.makeini("[pytest]\nreward_hang_known =\n    scorers.sleeps::repetition\n")
    result, entry = check(project, "sleeps", 4096)
    result.assert_outcomes(xfailed=1)
    (case,) = entry["cases"]
    assert case["confirmed"] == "a fresh worker timed out too (an expected hang)"
    assert case["fresh_status"] == "timeout"
    # Not taken to ten deadlines: that a listed hang still hangs is all the run asks.
    assert case["fresh_wall_s"] < CONFIRM_FACTOR


#: Three families, each of whose smallest case the two sleeping scorers hang on.
THREE_FAMILIES = "repetition,power-tower,deep-braces"


def check_families(pytester: pytest.Pytester, scorer: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        *fast(deadline=1, max_chars=4096, family=THREE_FAMILIES, confirm=2),
        f"--reward-hang-scorer=scorers.py:{scorer}",
        "-rs",
        "--reward-hang-json=r.json",
    )


@pytest.mark.slow  # three deadlines of one confirmed hang and a trivial response: the slow tier
def test_a_scorer_that_hangs_on_a_trivial_response_is_confirmed_once(
    project: pytest.Pytester,
) -> None:
    # Each further family would only say again, at its own ten deadlines, what the trivial
    # response says: the scorer hangs whatever it is given.
    result = check_families(project, "sleeps")
    result.assert_outcomes(failed=1, skipped=2)
    result.stdout.fnmatch_lines(
        [
            "hangs: case repetition-* ran past the 1 s deadline",
            "stopped after the confirmed hang: * case(s) skipped; it hangs on a trivial response "
            "too ('0': a fresh worker still ran it at 2 s), so its other families are not run",
        ]
    )
    result.stdout.fnmatch_lines(
        # At the scorer's line, as a skip mark's: not at the plugin's.
        ["SKIPPED [[]2[]] scorers.py:*: not run: scorers.sleeps::repetition failed: it hangs on*"]
    )
    # The JSON report lists the two families not run, and why.
    not_run = reported(project)["scorers.sleeps"]["not_run"]
    assert len(not_run) == 2, not_run
    assert "repetition" not in [entry["family"] for entry in not_run], not_run
    assert all("it hangs on a trivial response too" in entry["reason"] for entry in not_run)


@pytest.mark.slow  # three families' hangs, each confirmed: the slow tier
def test_a_scorer_that_answers_a_trivial_response_has_every_family_checked(
    project: pytest.Pytester,
) -> None:
    result = check_families(project, "sleeps_on_long")
    result.assert_outcomes(failed=3)
    assert "trivial response" not in result.stdout.str()


@pytest.mark.slow  # a hang and its confirmation: the slow tier
def test_a_scorer_whose_first_call_leaves_a_thread_is_confirmed_all_the_same(
    project: pytest.Pytester,
) -> None:
    # Its fresh re-run cannot come from a zygote its example warmed (the executor's thread
    # would be forked into every worker): a new pool's first worker runs the example, then it.
    _, entry = check(project, "lazy_executor", 8192, confirm=2)
    assert entry["status"] == "hang"
    (hang,) = (case for case in entry["cases"] if case["hang"])
    assert hang["chars"] == 4096
    assert hang["confirmed"] == "a fresh worker still ran it at 2 s (2x the deadline)"
