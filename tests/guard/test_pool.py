"""The warm pool against real hangs, crashes and kills: real processes, real clocks, no mocks."""

from __future__ import annotations

import gc
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import pytest

from pytest_rewardhang.guard import NotStarted, Outcome, Pool, Status
from tests.conftest import assert_dead, children, state
from tests.guard._bounds import BUDGET, GENEROUS, SLACK
from tests.guard._scorers import (
    a_float,
    allocate,
    captured_by_dup2,
    chatty,
    chdir_by,
    lock,
    pid,
    python_loop,
    score,
    size,
    spawn_and_hang,
    undo_the_dump_and_hang,
    writes_to_fd_1,
)
from tests.guard.conftest import Launch

pytestmark = [pytest.mark.timeout(30)]


def calls(log: Path) -> list[str]:
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


def pids_in(log: Path) -> set[int]:
    return {int(line.split()[1]) for line in log.read_text().splitlines()}


# --- order, completeness, statuses ------------------------------------------------------------


@pytest.mark.usefixtures("no_leaks")
def test_every_item_once_in_order_with_its_own_status(tmp_path: Path, launch: Launch) -> None:
    log = str(tmp_path / "calls")
    actions = ["ok", "hang", "ok", "crash", "error", "ok", "swallow", "print", "segv"] * 2
    items = [(log, f"item{i}", action) for i, action in enumerate(actions)]
    with launch.pool(score, workers=2, budget=BUDGET) as pool:
        outs = pool.map(items)
    expected = {
        "ok": Status.OK,
        "print": Status.OK,
        "hang": Status.TIMEOUT,
        "swallow": Status.TIMEOUT,
        "sleep": Status.TIMEOUT,
        "crash": Status.CRASHED,
        "segv": Status.CRASHED,
        "error": Status.ERROR,
    }
    assert [o.status for o in outs] == [expected[a] for a in actions]
    for i, (action, out) in enumerate(zip(actions, outs, strict=True)):
        if out.ok:
            assert out.value == f"ITEM{i}"
        if action == "print":
            assert out.output == f"scoring item{i}\n"
        if action == "error":
            assert out.error is not None
            assert out.error.startswith(f"ValueError: malformed item{i}\n")
            assert isinstance(out.exception, ValueError)
        if action == "crash":
            assert out.exit_code == 3
        if action == "segv":
            assert out.signal == signal.SIGSEGV
            assert "Fatal Python error" in out.output
        if out.status is Status.TIMEOUT:
            assert BUDGET <= out.wall_s <= BUDGET + SLACK
            assert out.stuck_at is not None
            assert out.stuck_at[2] == "score"
    # Scored exactly once each: nothing lost, nothing run twice after a kill or a crash.
    assert sorted(calls(Path(log))) == sorted(f"item{i}" for i in range(len(actions)))


@pytest.mark.usefixtures("no_leaks")
def test_a_crash_the_caller_sees_only_after_the_deadline_is_still_a_crash(
    tmp_path: Path, launch: Launch
) -> None:
    # On a busy machine the caller's loop may not run between an item's death and its
    # deadline: it saw the death (the worker's pidfd) and the deadline in one turn, killed the
    # dead worker for its item, and reported the crash a timeout. Here the test's thread holds
    # the interpreter lock in one long C call (a backtracking regex) from just before the
    # crash until well past the deadline, so the pool's thread sees both at once.
    log = tmp_path / "calls"
    with launch.pool(score, workers=1, budget=BUDGET) as pool:
        future = pool.submit(str(log), "item0", "crash")
        until = time.monotonic() + GENEROUS
        while not calls(log) and time.monotonic() < until:
            time.sleep(0.001)
        assert calls(log) == ["item0"]  # it logs, then exits with 3
        held = time.monotonic()
        re.match(r"(a+)+$", "a" * 25 + "b")  # the lock, for seconds
        assert time.monotonic() - held > BUDGET
        out = future.result(timeout=GENEROUS)
    assert out.status is Status.CRASHED, out.describe()
    assert out.exit_code == 3


@pytest.mark.usefixtures("no_leaks")
def test_a_float_comes_back_as_itself_whatever_comes_with_it(
    tmp_path: Path, launch: Launch
) -> None:
    # A plain float travels in the result frame itself; with output, leftovers or as anything
    # else, the outcome says the same as for any other value.
    pidfile = str(tmp_path / "pids")
    kinds = ["plain", "print", "leak", "nan", "inf", "zero", "subclass", "int", "plain"]
    with launch.pool(a_float, workers=1, budget=BUDGET, objects=True) as pool:
        outs = pool.map([(kind, pidfile) for kind in kinds])
    assert all(o.ok for o in outs), [o.describe() for o in outs]
    plain, printed, leaked, nan, inf, zero, subclass, integer, again = outs
    for out in (plain, printed, leaked, again):
        assert (out.value, type(out.value)) == (0.5, float)
    assert (printed.output, printed.leaked) == ("scored half\n", 0)
    assert (leaked.output, leaked.leaked) == ("", 1)
    assert (again.output, again.leaked) == ("", 0)
    assert nan.value != nan.value
    assert (inf.value, zero.value, str(zero.value)) == (float("-inf"), 0.0, "-0.0")
    assert (type(subclass.value).__name__, subclass.value) == ("Fraction", 0.25)
    assert (type(integer.value), integer.value) == (int, 1)
    for out in outs:
        assert (out.error, out.exception, out.stack, out.budget) == (None, None, None, BUDGET)
        assert 0 < out.wall_s < BUDGET
        assert out.cpu_s >= 0
        assert out.max_rss_mb > 0


@pytest.mark.usefixtures("no_leaks")
def test_the_next_item_starts_in_the_workers_directory(tmp_path: Path, launch: Launch) -> None:
    # The worker trusts the path of its directory only where Python's audited chdir did not
    # run; a chdir from C changes the path, and is undone all the same.
    elsewhere = str(tmp_path)
    stay = ("stay", "")
    items = [stay, ("c", elsewhere), stay, ("python", elsewhere), stay, ("c", elsewhere), stay]
    with launch.pool(chdir_by, workers=1, budget=BUDGET) as pool:
        outs = pool.map(items)
    assert all(o.ok for o in outs), [o.describe() for o in outs]
    start = outs[0].value
    assert start != elsewhere
    assert [o.value for o in outs] == [start, elsewhere] * 3 + [start]


def test_the_quick_outcome_is_an_outcome_like_any_other() -> None:
    # What the pool builds for an OK answer without its dataclass __init__ (see ok_outcome)
    # is the very object that __init__ builds: every field, equality, hash, repr, pickle.
    import dataclasses
    import pickle

    from pytest_rewardhang.guard._outcome import Containment, Mechanism, ok_outcome

    quick = ok_outcome(0.5, 0.001, 0.002, 12.5, 2.0, Mechanism.FORK, Containment.SUBREAPER)
    made = Outcome(
        Status.OK,
        0.5,
        wall_s=0.001,
        cpu_s=0.002,
        max_rss_mb=12.5,
        budget=2.0,
        containment=Containment.SUBREAPER,
    )
    assert type(quick) is Outcome
    for field in dataclasses.fields(Outcome):
        assert getattr(quick, field.name) == getattr(made, field.name), field.name
    assert (quick, hash(quick), repr(quick)) == (made, hash(made), repr(made))
    assert pickle.loads(pickle.dumps(quick)) == made
    with pytest.raises(dataclasses.FrozenInstanceError):
        quick.value = 1.0  # type: ignore[misc]


def test_an_answered_outcome_is_an_outcome_like_any_other() -> None:
    # The same of what run() and the pool build for any other answer (see answered), with
    # every field the answer and the common fields carry away from its default.
    import dataclasses
    import pickle

    from pytest_rewardhang.guard._outcome import (
        Answer,
        Confinement,
        Containment,
        NotStarted,
        answered,
        common_fields,
    )

    error = ValueError("no")
    common = common_fields(0.25, 0.125, 2048.0, "printed", 3, 2.0, Containment.CGROUP)
    common["confined"] = frozenset({Confinement.PRIVATE_TMP})
    for confined in (True, False):
        fields = dict(common) if confined else {k: v for k, v in common.items() if k != "confined"}
        answer = Answer(Status.ERROR, "v", "ValueError: no", error, NotStarted.UNREADABLE)
        quick = answered(answer, 2, fields)
        made = Outcome(
            Status.ERROR,
            "v",
            "ValueError: no",
            error,
            not_started=NotStarted.UNREADABLE,
            leaked=2,
            **fields,
        )
        assert type(quick) is Outcome
        for field in dataclasses.fields(Outcome):
            assert getattr(quick, field.name) == getattr(made, field.name), field.name
        assert (quick, repr(quick)) == (made, repr(made))
        assert pickle.loads(pickle.dumps(quick)).error == made.error
        with pytest.raises(dataclasses.FrozenInstanceError):
            quick.value = 1.0  # type: ignore[misc]


@pytest.mark.usefixtures("no_leaks")
def test_printing_more_than_the_pipe_holds_is_not_a_hang(launch: Launch) -> None:
    # Two MiB of prints into a 1 MiB pipe that is read only when the item ends.
    with launch.pool(chatty, workers=1, budget=BUDGET) as pool:
        flood, quiet = pool.map([(2,), (0,)])
    assert (flood.status, flood.value) == (Status.OK, "scored")
    written, kept = 2 * 2**20 + len("done\n"), 64 * 1024
    assert flood.output.startswith("x" * 1023 + "\n")
    assert flood.output.endswith(f"\n[... {written - kept} more bytes of output discarded]")
    assert (flood.output_dropped, quiet.output_dropped) == (written - kept, 0)
    assert quiet.output == "done\n"  # nothing of the flood is left for the next item


@pytest.mark.parametrize("how", ["os.write", "subprocess"])
@pytest.mark.usefixtures("no_leaks")
def test_writing_more_than_the_pipe_holds_to_fd_1_is_not_a_hang(how: str, launch: Launch) -> None:
    # fd 1 stays blocking for C code and subprocesses, and the worker reads the pipe only when
    # the item ends: past 1 MiB their write() waited for the deadline. The budget is long, so
    # that only a write that waits for it makes a timeout here, however busy the machine.
    with launch.pool(writes_to_fd_1, workers=1, budget=10.0) as pool:
        flood, quiet = pool.map([(3, how), (0, how)])
    assert (flood.status, flood.value) == (Status.OK, "scored"), flood.describe()
    kept = 64 * 1024
    first = "y" if how == "os.write" else "\0"
    assert flood.output.startswith(first * kept + "\n[... ")
    assert flood.output.endswith(f"[... {(3 << 20) - kept} more bytes of output discarded]")
    assert flood.output_dropped == (3 << 20) - kept
    assert quiet.output == ""  # nothing of the flood is left for the next item


@pytest.mark.usefixtures("no_leaks")
def test_prints_follow_a_redirected_fd_1(tmp_path: Path, launch: Launch) -> None:
    with launch.pool(captured_by_dup2, workers=1, budget=BUDGET) as pool:
        [out] = pool.map([(str(tmp_path / "captured"),)])
    assert (out.value, out.output) == ("into the file\n", "into the output\n")


@pytest.mark.usefixtures("no_leaks")
def test_keyword_items_and_an_empty_map(tmp_path: Path, launch: Launch) -> None:
    log = str(tmp_path / "calls")
    with launch.pool(score, workers=1, budget=BUDGET) as pool:
        assert pool.map([]) == []
        outs = pool.map([{"log": log, "item": "a"}, {"log": log, "item": "b", "action": "error"}])
        assert [o.status for o in outs] == [Status.OK, Status.ERROR]
        assert outs[0].value == "A"
        with pytest.raises(TypeError, match="tuple of positional arguments or a dict"):
            pool.map(["not a tuple"])  # type: ignore[list-item]


@pytest.mark.usefixtures("no_leaks")
def test_deadline_runs_from_item_start_not_submission(tmp_path: Path, launch: Launch) -> None:
    log = str(tmp_path / "calls")
    # Each worker meets two hangs in a row; quick items queue behind them.
    items = [(log, f"h{i}", "hang") for i in range(4)] + [(log, f"q{i}") for i in range(8)]
    with launch.pool(score, workers=2, budget=BUDGET) as pool:
        start = time.perf_counter()
        outs = pool.map(items)
        elapsed = time.perf_counter() - start
    assert [o.status for o in outs[:4]] == [Status.TIMEOUT] * 4
    for out in outs[:4]:
        assert BUDGET <= out.wall_s <= BUDGET + SLACK
        assert out.cpu_s > BUDGET * 0.2  # measured by wait4 for the killed worker
    assert [o.value for o in outs[4:]] == [f"Q{i}" for i in range(8)]
    assert all(o.wall_s < BUDGET for o in outs[4:])  # the quick calls themselves, not queued
    # Four hangs over two workers cost two budgets, not four (which would be 4 * BUDGET).
    assert 2 * BUDGET <= elapsed < 3.5 * BUDGET


@pytest.mark.usefixtures("no_leaks")
def test_a_worker_run_dry_takes_back_what_waits_behind_a_long_item(
    tmp_path: Path, launch: Launch
) -> None:
    log = tmp_path / "calls"
    # A budget long enough that side by side (about one) and one after the other (two) stay
    # apart on a busy machine.
    budget = 2.0
    with launch.pool(score, workers=2, budget=budget) as pool:
        # Timed at 10 ms an item: one item a batch and two in flight per worker, so the
        # second hang is queued behind the first on the same worker.
        assert pool.map([(str(log), "warm", "slow")])[0].ok
        actions = [("a", "slow"), ("h1", "hang"), ("b", "slow"), ("h2", "hang")]
        start = time.perf_counter()
        outs = pool.map([(str(log), item, action) for item, action in actions])
        elapsed = time.perf_counter() - start
    assert [o.status for o in outs] == [Status.OK, Status.TIMEOUT, Status.OK, Status.TIMEOUT]
    assert [o.value for o in outs[::2]] == ["A", "B"]
    # The worker that ran dry took h2 back: the two hangs ran side by side.
    assert elapsed < 1.75 * budget
    assert sorted(calls(log)) == ["a", "b", "h1", "h2", "warm"]  # each started once


@pytest.mark.usefixtures("no_leaks")
def test_killed_worker_is_replaced_and_dead(tmp_path: Path, launch: Launch) -> None:
    log = tmp_path / "calls"
    with launch.pool(score, workers=1, budget=BUDGET) as pool:
        first = pool.map([(str(log), "a")])
        hung = pool.map([(str(log), "b", "sleep"), (str(log), "c")])
        later = pool.map([(str(log), "d")])
    assert first[0].ok
    assert [o.status for o in hung] == [Status.TIMEOUT, Status.OK]
    assert hung[0].cpu_s < 0.1
    assert later[0].ok
    worker_pids = [int(line.split()[1]) for line in log.read_text().splitlines()]
    assert worker_pids[0] == worker_pids[1]  # warm: the same process served a and b
    assert worker_pids[1] != worker_pids[2]  # b's worker was killed; c ran on its replacement
    assert worker_pids[2] == worker_pids[3]
    assert_dead(worker_pids[:2])


@pytest.mark.usefixtures("no_leaks")
def test_workers_stay_warm_across_items(launch: Launch) -> None:
    with launch.pool(pid, workers=2, budget=BUDGET) as pool:
        outs = pool.map([()] * 200)
    assert all(o.ok for o in outs)
    first: dict[int, int] = {}  # each worker's first item, to tell why one was replaced
    for index, out in enumerate(outs):
        first.setdefault(out.value, index)
    assert len(first) == 2, (first, [(o.wall_s, o.cpu_s, o.leaked) for o in outs])


@pytest.mark.usefixtures("no_leaks")
def test_cpu_time_of_a_killed_python_loop(launch: Launch) -> None:
    with launch.pool(python_loop, workers=1, budget=BUDGET) as pool:
        out = pool.map([()])[0]
    assert out.status is Status.TIMEOUT
    assert BUDGET * 0.2 < out.cpu_s <= BUDGET + SLACK
    assert out.stuck_at is not None
    assert out.stuck_at[2] == "python_loop"


@pytest.mark.parametrize("hang", [False, True], ids=["returned", "timed-out"])
@pytest.mark.usefixtures("no_leaks")
def test_descendants_of_an_item_are_killed(tmp_path: Path, hang: bool, launch: Launch) -> None:
    pidfile = tmp_path / "pids"
    with launch.pool(spawn_and_hang, workers=1, budget=1.0) as pool:
        out = pool.map([(str(pidfile), hang)])[0]
        orphans = [int(p) for p in pidfile.read_text().split()]
        assert len(orphans) == 2
        assert out.leaked == 2
        assert out.status is (Status.TIMEOUT if hang else Status.OK)
        assert_dead(orphans)
        assert pool.map([(str(pidfile), False)])[0].ok  # the pool carries on


@pytest.mark.usefixtures("no_leaks")
def test_memory_limit_per_item(launch: Launch) -> None:
    with launch.pool(allocate, workers=1, budget=2.0, memory_mb=100) as pool:
        outs = pool.map([(10,), (400,), (10,)])
    assert [o.status for o in outs] == [Status.OK, Status.MEMORY, Status.OK]


@pytest.mark.usefixtures("no_leaks")
def test_a_call_that_undoes_the_stack_dump_still_times_out(launch: Launch) -> None:
    # The dump signal sent just before the deadline kills it: a timeout, as run() says too,
    # never a crash.
    with launch.pool(undo_the_dump_and_hang, workers=1, budget=BUDGET) as pool:
        hung, after = pool.map([(), ()])
    assert hung.status is Status.TIMEOUT, hung.describe()
    assert (hung.signal, hung.exit_code) == (None, None)
    assert BUDGET - 0.05 <= hung.wall_s <= BUDGET + SLACK
    assert hung.describe().startswith("timeout")
    assert after.status is Status.TIMEOUT  # the next item ran on a replacement, not lost


@pytest.mark.usefixtures("no_leaks")
def test_what_cannot_travel_is_that_items_error_alone(launch: Launch) -> None:
    big = "x" * 300_000  # a batch of these is far more than a pipe holds
    items: list[Any] = [(big,)] * 20 + [(threading.Lock(),)] + [(big,)] * 20 + [{"value": "ab"}]
    with launch.pool(size, workers=2, budget=5.0) as pool:
        for _ in range(2):  # the second map has timed items: batches of many items each
            outs = pool.map(items)
            assert [o.value for o in outs[:20] + outs[21:41]] == [len(big)] * 40
            assert outs[20].status is Status.ERROR
            assert outs[20].error is not None
            assert "could not be pickled" in outs[20].error
            assert outs[20].not_started is NotStarted.UNPICKLABLE
            assert {o.not_started for o in outs[:20] + outs[21:]} == {None}
            assert outs[41].value == 2
    with launch.pool(lock, workers=1, budget=BUDGET) as pool:
        out = pool.map([()])[0]
    assert out.status is Status.ERROR
    assert out.error is not None
    assert "cannot be pickled" in out.error
    assert out.not_started is None  # the scorer ran: its value would not travel back


class Unreadable:
    """Pickles in the caller; unpickling it in the worker raises (``int("not a number")``)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (int, ("not a number",))


@pytest.mark.usefixtures("no_leaks")
def test_an_item_the_worker_cannot_unpickle_never_reaches_the_scorer(launch: Launch) -> None:
    with launch.pool(size, workers=1, budget=5.0) as pool:
        (unread,) = pool.map([(Unreadable(),)])
        (read,) = pool.map([("ab",)])
    assert unread.status is Status.ERROR
    assert unread.error is not None
    assert "could not be unpickled in the worker" in unread.error
    assert (unread.not_started, unread.value) == (NotStarted.UNREADABLE, None)
    assert (read.value, read.not_started) == (2, None)


class Exits:
    """Pickling it calls ``sys.exit()``, in the thread that drives the pool."""

    def __reduce__(self) -> tuple[Any, ...]:
        sys.exit("exits as it is pickled")


@pytest.mark.usefixtures("no_leaks")
def test_an_item_whose_pickling_exits_fails_alone_not_the_pool(launch: Launch) -> None:
    # Submitted: pickled by the pool's driver thread, which SystemExit ended, and with it the
    # pool: every item in flight of every thread scored as its end.
    with launch.pool(size, workers=1, budget=5.0) as pool:
        exits, after = pool.submit(Exits()), pool.submit("ab")
        exited, scored = exits.result(timeout=60), after.result(timeout=60)
        (later,) = pool.map([("abc",)])
    assert exited.status is Status.ERROR, exited.describe()
    assert exited.not_started is NotStarted.UNPICKLABLE
    assert "exits as it is pickled" in (exited.error or "")
    assert (scored.value, later.value) == (2, 3)


# --- how the scorer is given --------------------------------------------------------------------


SCORER_FILE = """
import os

def compute_score(solution_str, ground_truth):
    if solution_str == "hang":
        return sum(range(10**13))
    return float(solution_str.strip() == ground_truth)
"""


@pytest.mark.usefixtures("no_leaks")
def test_string_specs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "myscorers"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "gsm.py").write_text(SCORER_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    items = [("42", "42"), ("hang", "1"), ("7", "42")]
    for spec in (
        "myscorers.gsm:compute_score",
        f"{pkg}/gsm.py:compute_score",
        "myscorers/gsm.py:compute_score",
    ):
        with Pool(spec, workers=2, budget=BUDGET) as pool:
            outs = pool.map(items)
        assert [o.status for o in outs] == [Status.OK, Status.TIMEOUT, Status.OK], spec
        assert [outs[0].value, outs[2].value] == [1.0, 0.0]
        assert outs[1].stuck_at is not None
        assert outs[1].stuck_at[0].endswith("gsm.py")


class ImportsOnUnpickle:
    """A callable object that loads what it wraps when unpickled, as the plugin's scorer call."""

    def __init__(self, log: str) -> None:
        self.log = log

    def __setstate__(self, state: dict[str, str]) -> None:
        self.__dict__.update(state)
        with open(self.log, "a") as f:
            f.write(f"loaded in {os.getpid()}\n")

    def __call__(self, x: int) -> tuple[int, int]:
        return x * 2, os.getpid()


@pytest.mark.usefixtures("no_leaks")
def test_a_callable_object_is_pickled_to_the_zygote_once(tmp_path: Path) -> None:
    log = tmp_path / "loads"
    with Pool(ImportsOnUnpickle(str(log)), workers=2, budget=BUDGET) as pool:
        outs = pool.map([(i,) for i in range(6)])
    assert [o.value[0] for o in outs] == [0, 2, 4, 6, 8, 10]
    loads = log.read_text().splitlines()
    assert len(loads) == 1  # in the zygote only: every worker inherits it warm
    workers = {o.value[1] for o in outs}
    assert os.getpid() not in workers
    assert f"loaded in {os.getpid()}" not in loads


@pytest.mark.usefixtures("no_leaks")
def test_a_spec_that_does_not_import_fails_at_construction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_rewardhang.guard._spec import SpecError

    bad = tmp_path / "bad.py"
    bad.write_text("raise ImportError('no sympy here')\n")
    with pytest.raises(SpecError, match="no sympy here"):
        Pool(f"{bad}:compute_score", workers=1)
    with pytest.raises(SpecError, match="has no attribute"):
        Pool(f"{__name__}:no_such_scorer", workers=1)
    # Said once, naming the spec as it was given (it read "SpecError: '/abs/path...'").
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError) as raised:
        Pool("missing.py:compute_score", workers=1)
    assert str(raised.value) == f"'missing.py:compute_score': no such file '{tmp_path}/missing.py'"


@pytest.mark.timeout(60)
# Python 3.12+ warns of any fork from a process with threads (pytest-xdist's worker has one);
# pytest.warns records it, and gives back what did not match when it exits.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
@pytest.mark.usefixtures("no_leaks")
def test_lambda_from_a_large_caller_warns() -> None:
    ballast = b"\x01" * (1100 << 20)  # resident, not just reserved
    with (
        pytest.warns(RuntimeWarning, match="forked from this 1.[0-9] GiB process"),
        Pool(lambda: len(ballast), workers=1, budget=5.0) as pool,
    ):
        assert pool.map([()])[0].value == len(ballast)


# --- callers --------------------------------------------------------------------------------


@pytest.mark.usefixtures("no_leaks")
def test_from_a_non_main_thread(tmp_path: Path, launch: Launch) -> None:
    log = str(tmp_path / "calls")
    results: list[list[Outcome]] = []

    def job() -> None:
        with launch.pool(score, workers=2, budget=BUDGET) as pool:
            results.append(pool.map([(log, "a"), (log, "b", "hang"), (log, "c")]))

    worker = threading.Thread(target=job)
    worker.start()
    worker.join()
    assert [o.status for o in results[0]] == [Status.OK, Status.TIMEOUT, Status.OK]


@pytest.mark.usefixtures("no_leaks")
def test_two_threads_share_one_pool(tmp_path: Path, launch: Launch) -> None:
    log = str(tmp_path / "calls")
    results: dict[int, list[Outcome]] = {}
    with launch.pool(score, workers=2, budget=BUDGET) as pool:

        def job(n: int) -> None:
            results[n] = pool.map([(log, f"{n}-{i}") for i in range(50)])

        threads = [threading.Thread(target=job, args=(n,)) for n in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for n in range(2):
        assert [o.value for o in results[n]] == [f"{n}-{i}".upper() for i in range(50)]


@pytest.mark.usefixtures("no_leaks")
def test_keyboard_interrupt_while_waiting_leaves_nothing(tmp_path: Path, launch: Launch) -> None:
    log = tmp_path / "calls"
    shm = set(os.listdir("/dev/shm"))  # noqa: S108 - where POSIX semaphores would be left
    pool = launch.pool(score, workers=2, budget=20.0)
    launched = children()  # the zygote, or the workers
    main = threading.main_thread().ident
    assert main is not None
    done = threading.Event()

    def interrupt() -> None:
        # Ctrl-C again until map() gives up, as an impatient user does: in the full suite's
        # order one SIGINT at 0.5 s went unanswered (not reproduced alone; see the closing note).
        while not done.wait(0.5):
            signal.pthread_kill(main, signal.SIGINT)

    def on_sigint(signum: int, frame: object) -> None:
        if not done.is_set():  # a last one, sent as map() gave up, is not the test's business
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    timer = threading.Thread(target=interrupt)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            pool.map([(str(log), f"i{i}", "swallow") for i in range(6)])
    finally:
        done.set()
        timer.join()
        signal.signal(signal.SIGINT, previous)
    assert pool.closed
    worker_pids = list(pids_in(log))
    assert len(worker_pids) == 2
    assert_dead(worker_pids + list(launched))
    assert set(os.listdir("/dev/shm")) == shm  # noqa: S108
    with pytest.raises(ValueError, match="closed"):
        pool.map([(str(log), "x")])
    pool.close()  # idempotent


@pytest.mark.usefixtures("no_leaks")
def test_garbage_collection_closes_the_pool(launch: Launch) -> None:
    pool = launch.pool(pid, workers=2, budget=BUDGET)
    worker_pids = [o.value for o in pool.map([()] * 20)]
    processes = list(set(worker_pids)) + list(children())
    del pool
    gc.collect()
    assert_dead(processes)


@pytest.mark.usefixtures("no_leaks")
def test_a_worker_killed_at_its_deadline_is_replaced_once(tmp_path: Path, launch: Launch) -> None:
    # Its replacement is asked for at the kill; its death, reported later, asks for none.
    log = str(tmp_path / "calls")
    with launch.pool(score, workers=2, budget=BUDGET) as pool:
        outs = pool.map([(log, "a", "hang"), (log, "b", "hang")])
        assert [out.status for out in outs] == [Status.TIMEOUT] * 2
        engine = pool._engine
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (
            engine.processes.to_spawn or any(not w.serving for w in engine.workers.values())
        ):
            assert pool.map([(log, "c")])[0].status is Status.OK
        assert len(engine.workers) == 2, [w.phase for w in engine.workers.values()]


@pytest.mark.usefixtures("no_leaks")
def test_a_dropped_pool_lets_go_of_its_scorer_without_the_cycle_collector() -> None:
    # Nothing the pool's parts hold refers back to them: with its last reference gone the pool
    # closes and its scorer (with whatever a closure keeps) is freed at once, not at a cyclic
    # collection that a large caller may not run for a long time.
    class Scorer:  # a local class: served by workers forked from the caller, which keeps it
        def __call__(self) -> int:
            return os.getpid()

    scorer = Scorer()
    alive = weakref.ref(scorer)
    gc.disable()
    try:
        pool = Pool(scorer, workers=2, budget=BUDGET)
        del scorer
        worker_pids = [o.value for o in pool.map([()] * 4)]
        processes = list(set(worker_pids)) + list(children())
        del pool
        assert alive() is None
    finally:
        gc.enable()
    assert_dead(processes)


EXIT_SCRIPT = """
import os, sys
from pytest_rewardhang.guard import Pool
from pytest_rewardhang.guard._spec import load_callable

spec = {spec!r}
if {from_caller!r}:
    whoami = load_callable(spec)
    pool = Pool(lambda *args: whoami(*args), workers=2, budget=30.0)
else:
    pool = Pool(spec, workers=2, budget=30.0)
workers = {{out.value for out in pool.map([()] * 20)}}
zygote = [pool._engine.zygote.pid] if pool._engine.zygote is not None else []
print(*zygote, *workers, flush=True)
{ending}
"""


@pytest.mark.parametrize(
    "ending",
    ["pass", "os.kill(os.getpid(), 9)", "pool.map([(True,)])"],
    ids=["interpreter-exit", "caller-sigkilled", "sigkilled-mid-map"],
)
@pytest.mark.usefixtures("no_leaks")
def test_the_pool_dies_with_its_caller(tmp_path: Path, ending: str, launch: Launch) -> None:
    scorer = tmp_path / "whoami.py"
    scorer.write_text(
        "import os, signal, time\n"
        "def whoami(kill_caller=False):\n"
        "    if kill_caller:  # mid-map: the caller dies while this worker is busy\n"
        "        os.kill(int(os.environ['CALLER']), signal.SIGKILL)\n"
        "        time.sleep(3600)\n"
        "    return os.getpid()\n"
    )
    from_caller = launch.name == "caller"
    script = EXIT_SCRIPT.format(spec=f"{scorer}:whoami", from_caller=from_caller, ending=ending)
    caller = subprocess.Popen(
        [sys.executable, "-c", f"import os; os.environ['CALLER'] = str(os.getpid())\n{script}"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert caller.stdout is not None
    pids = [int(p) for p in caller.stdout.readline().split()]
    caller.wait(timeout=20)
    caller.stdout.close()
    assert len(pids) == 3  # the zygote (spawned, or forked from the caller) and two workers
    # They notice the caller's death (a pidfd, PDEATHSIG) in milliseconds; bounded here.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(state(p) not in (None, "Z", "X") for p in pids):
        time.sleep(0.01)
    assert_dead(pids)


@pytest.mark.usefixtures("no_leaks")
def test_callers_signal_handlers_and_threads_are_left_alone(tmp_path: Path, launch: Launch) -> None:
    watched = (signal.SIGCHLD, signal.SIGINT, signal.SIGALRM, signal.SIGTERM, signal.SIGPIPE)
    handlers = {s: signal.getsignal(s) for s in watched}
    threads = threading.active_count()
    with launch.pool(score, workers=2, budget=BUDGET) as pool:
        outs = pool.map([(str(tmp_path / "log"), "a"), (str(tmp_path / "log"), "b", "hang")])
        # The one thread a pool starts, to decode answers beside its loop, ends once idle (a
        # live one has every fork of the caller's warned of deadlocks).
        until = time.monotonic() + GENEROUS
        while threading.active_count() != threads and time.monotonic() < until:
            time.sleep(0.01)
        assert threading.active_count() == threads
    assert [o.status for o in outs] == [Status.OK, Status.TIMEOUT]
    assert {s: signal.getsignal(s) for s in watched} == handlers


RAY_SCORER = """
def score(x):
    if x == "hang":
        return sum(range(10**13))
    return x * 2
"""

#: Run in its own interpreter: ray.init() leaves threads, signal handlers and helper processes
#: in the process that calls it, which the other tests here must not inherit.
RAY_SCRIPT = """
import json, os, sys, threading

import ray

from pytest_rewardhang.guard import Pool


def open_files():
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return found


@ray.remote(max_concurrency=4)
class Scorer:
    def __init__(self, spec):
        before = open_files()
        self.pool = Pool(spec, workers=2, budget=0.5)
        # Ray opens its own sockets as it goes: check only what the pool opened.
        self.owned = open_files() - before

    def score(self, items):
        outs = self.pool.map(items)
        on_main = threading.current_thread() is threading.main_thread()
        return [(o.status.value, o.value) for o in outs], on_main

    def close(self):
        self.pool.close()
        kids = []
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as f:
                kids += [int(p) for p in f.read().split()]
        zygotes = []
        for kid in kids:
            with open(f"/proc/{kid}/cmdline", "rb") as f:
                if b"_zygote" in f.read():
                    zygotes.append(kid)
        return len(self.owned), sorted(self.owned & open_files()), zygotes


ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
try:
    actor = Scorer.remote(sys.argv[1])
    calls = [actor.score.remote([(1,), ("hang",), (3,)]) for _ in range(3)]
    scored = ray.get(calls, timeout=60)
    owned, leftover, zygotes = ray.get(actor.close.remote(), timeout=30)
    print(json.dumps({"scored": scored, "owned": owned, "leftover": leftover, "zygotes": zygotes}))
finally:
    ray.shutdown()
"""


@pytest.mark.needs_extra("ray")
@pytest.mark.timeout(180)
def test_inside_a_threaded_ray_actor(tmp_path: Path) -> None:
    scorer = tmp_path / "ray_scorer.py"
    scorer.write_text(RAY_SCORER)
    done = subprocess.run(
        [sys.executable, "-c", RAY_SCRIPT, f"{scorer}:score"],
        capture_output=True,
        text=True,
        timeout=170,  # inside the pytest-timeout bound, so a hang fails with the output in hand
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    for outs, on_main in report["scored"]:
        assert outs == [["ok", 2], ["timeout", None], ["ok", 6]]
        assert not on_main  # a threaded actor calls from its pool of threads
    assert report["owned"] > 0, "the pool opened nothing, so this checked nothing"
    assert report["leftover"] == []
    assert report["zygotes"] == []


def test_a_pool_out_of_descriptors_as_it_starts_leaves_none_open() -> None:
    # Each start made some of a worker's pipes before the kernel refused one, and left them.
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before = sorted(os.listdir("/proc/self/fd"))
    try:
        for spare in range(30, 42):  # the kernel refuses each descriptor of a worker's once
            resource.setrlimit(resource.RLIMIT_NOFILE, (len(before) + spare, hard))
            with pytest.raises(OSError, match="Too many open files"):
                Pool(size, workers=64, budget=BUDGET)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert sorted(os.listdir("/proc/self/fd")) == before


def test_pool_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="budget must be"):
        Pool(pid, budget=0)
    with pytest.raises(ValueError, match="workers must be"):
        Pool(pid, workers=0)
    assert sys.executable  # the zygote is started from it
