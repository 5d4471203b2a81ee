"""Call contexts: the check calls each scorer on the main thread, off it, and on an event loop.

Real pytest runs in subprocesses on scorers written the way reward code is written: a code
scorer that bounds ``exec`` with ``signal.alarm`` and catches ``BaseException`` (hangs on the
main thread, silently scores 0 off it), an ``async def`` scorer that hangs, a sync scorer
called inline on a loop; and ``repro`` running a saved case where the check ran it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_rewardhang.check import _calls, _options
from pytest_rewardhang.check._checker import contexts_for
from tests._projects import line_of, usage

pytestmark = pytest.mark.timeout(240)

#: The MBPP harness pattern (../shared/context/mbpp-fork-kill-pr.txt): no thread check, every
#: failure scores 0. On the main thread the alarm never fires inside one C call; off it,
#: ``signal.signal`` raises and the ``except`` turns that into a 0 for every program.
ALARM_EXEC = """\
import re
import signal


class _Timeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Timeout


def compute_score(solution_str, ground_truth):
    match = re.search(r"```python\\n(.*?)```", solution_str, re.DOTALL)
    code = match.group(1) if match else solution_str
    try:
        signal.signal(signal.SIGALRM, _on_alarm)
        signal.alarm(1)
        exec(code, {})
        signal.alarm(0)
        return 1.0
    except BaseException:
        signal.alarm(0)
        return 0.0
"""

SIGNAL_LINE = line_of(ALARM_EXEC, "signal.signal(")

#: Math-Verify's own check: it refuses to run its signal timeout off the main thread.
REFUSES_THREADS = """\
import threading


def compute_score(solution_str, ground_truth):
    if threading.current_thread() is not threading.main_thread():
        raise ValueError("Math-Verify 'parse' function doesn't support threaded environment")
    return float(solution_str.endswith(ground_truth))
"""

ASYNC_SCORERS = """\
import asyncio
import threading


async def async_hang(solution_str, ground_truth):
    await asyncio.sleep(0)
    if len(solution_str) > 3000:
        sum(range(10**13))  # one C call: the loop is blocked, nothing else runs
    return 0.0


def on_loop(solution_str, ground_truth):
    # slime and verifiers call sync scorers inline on their running loop.
    asyncio.get_running_loop()
    if len(solution_str) > 3000:
        while True:
            pass
    return 0.0


async def async_clean(solution_str, ground_truth):
    await asyncio.sleep(0)
    return float(solution_str.endswith(ground_truth))


class AsyncCall:
    async def __call__(self, completion, answer, state):
        return float(completion[-1]["content"].endswith(answer))


verifiers_rubric = AsyncCall()
"""

#: Only the ``sum(range(10**13))`` program, shadowing the bundled c-call family.
SUM_RANGE = """\
# family: c-call
# attacks: signal.alarm guards: one C call that never returns to the interpreter
# expected: a correct harness kills the process at its deadline and scores 0
print(sum(range(10**13)))
"""


def run_check(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """The check, each hang confirmed at two deadlines (what is under test is where it is
    called, not that confirmation: ``test_confirm.py``)."""
    return pytester.runpytest_subprocess(
        "--reward-hang-check",
        "-p",
        "no:cacheprovider",
        "-v",
        "--reward-hang-json=r.json",
        "--reward-hang-confirm=2",
        *args,
    )


def cases(pytester: pytest.Pytester) -> list[dict[str, object]]:
    report = json.loads((pytester.path / "r.json").read_text())
    return [case for scorer in report["scorers"] for case in scorer["cases"]]


@pytest.fixture
def alarm_project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(alarm_exec=ALARM_EXEC)
    pytester.makeini("[pytest]\n")
    (pytester.path / "corpus").mkdir()
    (pytester.path / "corpus" / "sum_range.py").write_text(SUM_RANGE)
    return pytester


def test_alarm_exec_hangs_on_the_main_thread_and_raises_off_it(
    alarm_project: pytest.Pytester,
) -> None:
    result = run_check(
        alarm_project,
        "--reward-hang-scorer=alarm_exec.py:compute_score kind=code",
        "--reward-hang-corpus=corpus",
        "--reward-hang-family=c-call",
        "--reward-hang-deadline=1.5",
    )
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "Traceback" not in out
    # The main thread: the alarm never fires inside sum(), a real hang, named with its context.
    result.stdout.fnmatch_lines(
        [
            "HANG case c-call-sum-range (*",
            "  called on the main thread (context main)",
            "  hangs: a fresh worker still ran it at 3 s (2x the deadline)",
        ]
    )
    # Off it: what it raises, that it caught it, why that matters and what to do.
    result.stdout.fnmatch_lines(
        [
            "ERROR case example (*",
            "  called off the main thread (context thread)",
            "  works on the main thread but raises off it: signal.signal raised ValueError "
            f"('signal only works in main thread') at alarm_exec.py:{SIGNAL_LINE}; the scorer "
            "caught it*",
            "  why: signal-based timeouts*only work on the main thread, and verl's reward loop*",
            "  fix: *pytest_rewardhang.guard*",
        ]
    )
    found = {(case["id"], case["context"], case["status"]) for case in cases(alarm_project)}
    assert ("c-call-sum-range", "main", "timeout") in found
    assert ("example", "thread", "error") in found


def test_a_scorer_that_refuses_threads_says_so(pytester: pytest.Pytester) -> None:
    """Math-Verify's "doesn't support threaded environment": works on main, raises off it."""
    pytester.makepyfile(refuses=REFUSES_THREADS)
    pytester.makeini("[pytest]\n")
    result = run_check(
        pytester,
        "--reward-hang-scorer=refuses.py:compute_score",
        "--reward-hang-family=repetition,unclosed-boxed",
        "--reward-hang-max-chars=4096",
    )
    # Reported once, on the first item; the other family still runs on the main thread.
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(
        [
            "ERROR case example (*",
            "  called off the main thread (context thread)",
            "  works on the main thread but raises off the main thread: ValueError: Math-Verify "
            "'parse' function doesn't support threaded environment",
            "  why: signal-based timeouts*",
            "  fix: *",
        ]
    )
    # Asked to run on the main thread alone, it passes.
    alone = run_check(
        pytester,
        "--reward-hang-scorer=refuses.py:compute_score contexts=main",
        "--reward-hang-family=repetition",
        "--reward-hang-max-chars=4096",
    )
    alone.assert_outcomes(passed=1)
    assert {case["context"] for case in cases(pytester)} == {"main"}


def test_async_scorer_hang_is_caught_on_its_loop(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(scorers=ASYNC_SCORERS)
    pytester.makeini("[pytest]\n")
    result = run_check(
        pytester,
        "--reward-hang-scorer=scorers.py:async_hang",
        "--reward-hang-scorer=scorers.py:async_clean",
        "--reward-hang-family=repetition",
        "--reward-hang-max-chars=8192",
        "--reward-hang-deadline=1",
    )
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(
        [
            "HANG case repetition-4096 (*",
            "  called on an event loop (context loop)",
            "  hangs: a fresh worker *",
            "  stuck in the scorer at (innermost first):",
            "    scorers.py:8 in async_hang",
        ]
    )
    found = cases(pytester)
    # Awaited on a loop (main thread), then on a worker thread's loop for the slowest cases.
    assert {case["context"] for case in found} == {"loop", "thread"}
    assert any(case["status"] == "ok" for case in found)


def test_sync_scorer_on_a_running_loop(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(scorers=ASYNC_SCORERS)
    pytester.makeini("[pytest]\nreward_hang_contexts = loop\n")
    result = run_check(
        pytester,
        "--reward-hang-scorer=scorers.py:on_loop",
        "--reward-hang-family=repetition",
        "--reward-hang-max-chars=8192",
        "--reward-hang-deadline=1",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["HANG case repetition-4096 (*", "  called on an event loop (context loop)"]
    )
    # Off a loop, asyncio.get_running_loop() raises: the scorer only works where it is called.
    main = run_check(
        pytester,
        "--reward-hang-scorer=scorers.py:on_loop contexts=main",
        "--reward-hang-family=repetition",
        "--reward-hang-max-chars=2048",
    )
    main.assert_outcomes(failed=1)
    main.stdout.fnmatch_lines(["*fails on its own example*on the main thread*no running event*"])


def test_async_call_object_in_verifiers_style(pytester: pytest.Pytester) -> None:
    """An object with ``async def __call__(completion, answer, state)``: verifiers' rubric call,
    the completion a message list, only the arguments it names."""
    pytester.makepyfile(scorers=ASYNC_SCORERS)
    pytester.makeini("[pytest]\n")
    result = run_check(
        pytester,
        "--reward-hang-scorer=scorers.py:verifiers_rubric",
        "--reward-hang-family=repetition",
        "--reward-hang-max-chars=2048",
    )
    result.assert_outcomes(passed=1)
    assert {case["context"] for case in cases(pytester)} == {"loop", "thread"}


@pytest.mark.slow  # a check run, then repro in each context: the slow tier
def test_repro_runs_where_the_check_ran_and_prints_the_real_length(
    alarm_project: pytest.Pytester,
) -> None:
    run_check(
        alarm_project,
        "--reward-hang-scorer=alarm_exec.py:compute_score kind=code",
        "--reward-hang-corpus=corpus",
        "--reward-hang-family=c-call",
        "--reward-hang-deadline=1",
    )
    saved = alarm_project.path / ".reward-hang" / "cases" / "alarm_exec.compute_score"
    example = saved / "example.json"
    assert json.loads(example.read_text())["context"] == "thread"

    def repro(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest_rewardhang", "repro", *args],
            cwd=alarm_project.path,
            capture_output=True,
            text=True,
            timeout=60,
        )

    off_main = repro(str(example))
    assert off_main.returncode == 1, off_main.stdout + off_main.stderr
    assert "called off the main thread (thread)" in off_main.stdout
    assert "raises off the main thread" in off_main.stdout
    on_main = repro(str(example), "--context", "main")
    assert on_main.returncode == 0, on_main.stdout + on_main.stderr
    assert "called on the main thread (main)" in on_main.stdout
    hang = repro(str(saved / "c-call-sum-range.json"))
    assert hang.returncode == 1
    assert "called on the main thread (main)" in hang.stdout
    assert "timeout" in hang.stdout
    bad = repro(str(example), "--context", "nowhere")
    assert bad.returncode == 2
    assert "invalid choice" in bad.stderr


def test_repro_prints_the_length_of_a_batch_response(pytester: pytest.Pytester) -> None:
    """A TRL-style case (``completions=[[{"content": ...}]]``) is as long as its message."""
    pytester.makepyfile(trl="def reward(completions, **kwargs):\n    return [0.0]\n")
    case = {
        "spec": "trl.py:reward",
        "deadline": 5,
        "kwargs": {"completions": [[{"role": "assistant", "content": "x" * 5000}]]},
    }
    (pytester.path / "case.json").write_text(json.dumps(case))
    ran = subprocess.run(
        [sys.executable, "-m", "pytest_rewardhang", "repro", "case.json"],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "5000 chars" in ran.stdout
    assert "called off the main thread (thread)" in ran.stdout  # saved before contexts


@pytest.mark.parametrize(
    ("args", "ini", "message"),
    [
        (["--reward-hang-contexts=main,nowhere"], "", "--reward-hang-contexts: unknown context"),
        ([], "reward_hang_contexts = ,", "reward_hang_contexts (ini): name at least one context"),
        (
            ["--reward-hang-scorer=s.py:f contexts=gpu"],
            "",
            "--reward-hang-scorer: 's.py:f': unknown context gpu; choose from main, thread, loop",
        ),
        (
            ["--reward-hang-scorer=s.py:f style=ray"],
            "",
            "--reward-hang-scorer: 's.py:f': style='ray'; choose from verl, single, trl",
        ),
    ],
)
def test_bad_contexts_and_styles_are_one_line(
    pytester: pytest.Pytester, args: list[str], ini: str, message: str
) -> None:
    pytester.makeini(f"[pytest]\n{ini}\n")
    result = usage(pytester, "--reward-hang-check", "-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert message in err, err
    assert "Traceback" not in err


def test_contexts_and_styles_are_listed_once() -> None:
    assert set(_calls.CONTEXT_NAMES) == set(_options.CONTEXTS)
    assert _calls.STYLES == _options.STYLES


def _info(params: tuple[str, ...], is_async: bool = False) -> _calls.ScorerInfo:
    style, arg = _calls.call_style(params, None)
    return _calls.ScorerInfo(style, arg, params, None, None, is_async)


def test_default_contexts() -> None:
    sync, coroutine = _info(("solution_str",)), _info(("solution_str",), is_async=True)
    assert contexts_for(sync, None) == ("main", "thread")
    assert contexts_for(coroutine, None) == ("loop", "thread")
    assert contexts_for(coroutine, ("main", "loop", "thread")) == ("loop", "thread")
    assert contexts_for(sync, ("thread", "main")) == ("thread", "main")


@pytest.mark.parametrize(
    ("params", "style", "arg"),
    [
        # AReaL: completions is one string (areal/reward/gsm8k.py), not TRL's batch.
        (
            ("prompt", "completions", "prompt_ids", "completion_ids", "answer", "kwargs"),
            "areal",
            "completions",
        ),
        (("prompts", "completions", "kwargs"), "trl", "completions"),
        (("completions", "kwargs"), "trl", "completions"),
        # verifiers' rubric functions: keyword arguments filtered by the signature.
        (("parser", "completion", "answer", "kwargs"), "verifiers", "completion"),
        (("completion", "answer", "state"), "verifiers", "completion"),
        (("completion", "ground_truth"), "single", "completion"),
        (("args", "sample"), "slime", "sample"),
        (("args", "sample", "kwargs"), "slime", "sample"),
        (("task_info", "action"), "rllm", "action"),
        (("queries", "prompts", "labels", "kwargs"), "openrlhf", "queries"),
        (("data_source", "solution_str", "ground_truth", "extra_info"), "verl", "solution_str"),
    ],
)
def test_call_styles(params: tuple[str, ...], style: str, arg: str) -> None:
    assert _calls.call_style(params, None) == (style, arg)


def test_areal_by_annotation_and_forced_style() -> None:
    assert _calls.call_style(("completions", "answer"), None, None, {"completions": "str"}) == (
        "areal",
        "completions",
    )
    assert _calls.call_style(("completions", "answer"), None, "trl") == ("trl", "completions")
    assert _calls.call_style(("text", "label"), "text", "single") == ("single", "text")


def test_each_style_gets_its_arguments_and_the_case_in_place() -> None:
    def case_of(params: tuple[str, ...]) -> dict[str, object]:
        info = _calls.ScorerInfo(*_calls.call_style(params, None), params, None, None)
        example = _calls.default_example(info, "math")
        return _calls.with_case(info, example, "math", "RESPONSE")

    assert case_of(("prompt", "completions", "prompt_ids", "completion_ids", "answer")) == {
        "prompt": "What is 6 * 7?",
        "completions": "RESPONSE",
        "prompt_ids": [1, 2, 3],
        "completion_ids": [4, 5, 6],
        "answer": "42",
    }
    assert case_of(("completion", "answer", "state")) == {
        "completion": [{"role": "assistant", "content": "RESPONSE"}],
        "answer": "42",
        "state": {},
    }
    slime = case_of(("args", "sample"))
    assert slime["sample"]["response"] == "RESPONSE"  # type: ignore[index]
    assert slime["args"] == {}
    assert case_of(("task_info", "action"))["action"] == "RESPONSE"


def test_a_case_keeps_a_ground_truth_of_another_shape() -> None:
    """verl's search_r1 takes ``{"target": [...]}``: a string truth would make it raise."""
    info = _calls.ScorerInfo("single", "solution_str", ("solution_str", "ground_truth"), None, None)
    as_dict = {"solution_str": "x", "ground_truth": {"target": ["Paris"]}}
    assert _calls.with_truth(info, as_dict, "7")["ground_truth"] == {"target": ["Paris"]}
    assert _calls.with_truth(info, {"solution_str": "x", "ground_truth": "42"}, "7") == {
        "solution_str": "x",
        "ground_truth": "7",
    }
    trl = _calls.ScorerInfo("trl", "completions", ("completions", "solution"), None, None)
    assert _calls.with_truth(trl, {"completions": ["x"], "solution": ["42"]}, "7")["solution"] == [
        "7"
    ]
    assert _calls.with_truth(trl, {"completions": ["x"], "solution": [3]}, "7")["solution"] == [3]
    rllm = _calls.ScorerInfo("rllm", "action", ("task_info", "action"), None, None)
    task = {"task_info": {"ground_truth": "42"}, "action": "x"}
    assert _calls.with_truth(rllm, task, "7")["task_info"] == {"ground_truth": "7"}
    assert task["task_info"] == {"ground_truth": "42"}  # the example is never changed


def test_response_length() -> None:
    assert _calls.response_length([[{"role": "assistant", "content": "x" * 7}]]) == 7
    assert _calls.response_length({"response": "abc", "label": "1"}) == 3
    assert _calls.response_length(["ab", "abcd"]) == 4


def test_materialized_arguments_are_the_trainers_objects(tmp_path: Path) -> None:
    (tmp_path / "slime_rm.py").write_text(
        "async def rm(args, sample):\n"
        "    return float(sample.response.endswith(sample.label)) + args.bonus\n"
    )
    call = _calls.ScorerCall(
        "slime_rm.py:rm",
        str(tmp_path),
        "loop",
        (("sample", "sample"), ("args", "namespace")),
        keep_value=True,
    )
    sample = {"prompt": "q", "response": "so 42", "label": "42"}
    assert call(args={"bonus": 1.0}, sample=sample) == 2.0


STATEFUL = """\
import os

import pytest_rewardhang

CALLS = [0]


@pytest_rewardhang.scorer(contexts=["main"], style="single")
def worn_out(solution_str, ground_truth):
    # Dies once a long-lived worker has made a few calls: state, not this input.
    CALLS[0] += 1
    if CALLS[0] > 4:
        os._exit(3)
    return 0.0


@pytest_rewardhang.scorer(contexts="main")
def crashes(solution_str, ground_truth):
    if len(solution_str) > 3000:
        os._exit(3)
    return 0.0
"""


def test_crashes_are_confirmed_in_a_fresh_worker(pytester: pytest.Pytester) -> None:
    """Only a crash a fresh worker repeats is the case's own; the decorator's keys apply."""
    pytester.makepyfile(stateful=STATEFUL)
    pytester.makeini("[pytest]\n")
    result = run_check(pytester, "--reward-hang-family=repetition", "--reward-hang-max-chars=8192")
    result.assert_outcomes(failed=1, passed=1)
    report = json.loads((pytester.path / "r.json").read_text())
    by_id = {scorer["id"]: scorer for scorer in report["scorers"]}
    worn = by_id["stateful.worn_out"]
    assert worn["status"] == "ok"
    # The long-lived worker died from the fifth call on; each fresh worker finished the case.
    assert {case["fresh_status"] for case in worn["cases"]} >= {"ok"}
    assert {case["context"] for case in worn["cases"]} == {"main"}
    crashed = [c for c in by_id["stateful.crashes"]["cases"] if c["status"] == "crashed"]
    assert crashed
    assert {case["fresh_status"] for case in crashed} == {"crashed"}
    result.stdout.fnmatch_lines(["CRASHED case repetition-4096 (*", "  called on the main thread*"])


#: A scorer whose first call in a process does a second of its own work (an import inside the
#: call, as lm-eval's ``drop`` does), and whose first long response meets a stalled machine
#: (it sleeps past the deadline, once); that response takes a second from then on.
FIRST_CALL_WORK = """\
import os
import time

_warm = False


def compute_score(solution_str, ground_truth):
    global _warm
    if not _warm:
        time.sleep(1.2)
        _warm = True
    if len(solution_str) > 1000:
        if not os.path.exists({mark!r}):
            with open({mark!r}, "w") as f:
                f.write(solution_str)
            time.sleep(60)
        with open({mark!r}) as f:
            if f.read() == solution_str:
                time.sleep(1.0)
    return 0.0
"""


@pytest.mark.slow  # a check run whose stalled case is confirmed and replayed: the slow tier
def test_a_fresh_worker_is_warmed_by_the_example_before_it_confirms_a_hang(
    pytester: pytest.Pytester,
) -> None:
    # Cold, the fresh worker took 1.2 s + 1.0 s past the 2 s deadline, and "confirmed" a case
    # that takes a second as a hang of its own. Warm, it finishes it in time; the replay in a
    # new long-lived worker does too: the stall was the machine's, and the case passes.
    pytester.makepyfile(first_call=FIRST_CALL_WORK.format(mark=str(pytester.path / "stalled")))
    pytester.makeini("[pytest]\n")
    result = run_check(
        pytester,
        "--reward-hang-scorer=first_call.py:compute_score deadline=2 contexts=main",
        "--reward-hang-family=digits-line",
    )
    assert result.ret == 0, result.stdout.str()
    stalled = [case for case in cases(pytester) if case["first_status"] is not None]
    assert [(c["first_status"], c["fresh_status"], c["status"]) for c in stalled] == [
        ("timeout", "ok", "ok")
    ]


#: A scorer that earlier calls slow down: once a process has scored one long response, every
#: later long response it is given takes 30 s (a cache that grows, a leak).
WORN_BY_EARLIER_CALLS = """\
import time

_seen_long = False


def compute_score(solution_str, ground_truth):
    global _seen_long
    if len(solution_str) > 1000:
        if _seen_long:
            time.sleep(30)
        _seen_long = True
    return 0.0
"""


@pytest.mark.slow  # a check run whose slow cases are confirmed and replayed: the slow tier
def test_a_timeout_the_replay_of_earlier_calls_repeats_is_slow(pytester: pytest.Pytester) -> None:
    # A fresh worker finishes each such case at once (its one long response); replayed after
    # the cases that ran before it, in a new long-lived worker, it times out again.
    pytester.makepyfile(worn=WORN_BY_EARLIER_CALLS)
    pytester.makeini("[pytest]\n")
    result = run_check(
        pytester,
        "--reward-hang-scorer=worn.py:compute_score deadline=1 contexts=main",
        "--reward-hang-family=digits-line",
        "--reward-hang-max-chars=2048",
    )
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "SLOW case digits-line-*, deadline 1 s",
            "  called on the main thread (context main)",
            "  *",
            "  only in a long-lived worker: a fresh worker finished it in *, and it timed out "
            "again in a new one after the calls that ran before it there (earlier calls slow it)",
        ]
    )
    slow = [case for case in cases(pytester) if case["status"] == "timeout"]
    assert slow
    assert all(c["fresh_status"] == "ok" and not c["hang"] for c in slow)
