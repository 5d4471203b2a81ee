"""``run()`` and ``@guarded`` attacked as a hostile scorer would: real processes.

Each attack that could freeze or kill the test process runs in a subprocess with a timeout, so
a hang fails the test instead of the suite. Timing bounds are generous correctness bounds (a
hang must end); lateness is measured in ``benchmarks/bench_lateness.py``.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import pytest_rewardhang
from pytest_rewardhang.guard import CallFailed, Pool, Status, guarded, run
from pytest_rewardhang.guard._decode import DECODE_TIME_S, decode
from pytest_rewardhang.guard._wire import DUMP_SIGNAL, RESULT_LIMIT
from tests._procs import python_c
from tests.conftest import kill_everything_below, pipes, sigint_storm, state
from tests.guard._attacks import nested_status_frame
from tests.guard._bounds import BUDGET, GENEROUS
from tests.guard._forging import PAST_A_BOUND, crafted

#: Where the package under test is imported from, for the subprocesses.
ROOT = str(Path(pytest_rewardhang.__file__).resolve().parents[1])

pytestmark = [pytest.mark.timeout(60)]


def in_subprocess(body: str, timeout: float = 30) -> dict[str, Any]:
    """Run ``body`` in a fresh interpreter; it prints one JSON line last. A hang fails."""
    prelude = textwrap.dedent(
        """
        import json, os, signal, sys, time
        from pytest_rewardhang.guard import run, Status

        def descendants():
            found, frontier = [], [os.getpid()]
            while frontier:
                pid = frontier.pop()
                try:
                    tasks = os.listdir(f"/proc/{pid}/task")
                except OSError:
                    continue
                for tid in tasks:
                    try:
                        with open(f"/proc/{pid}/task/{tid}/children") as f:
                            kids = [int(p) for p in f.read().split()]
                    except OSError:
                        continue
                    found += kids
                    frontier += kids
            return found

        def fds():
            return sorted(os.listdir("/proc/self/fd"))
        """
    )
    code = prelude + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_everything_below(proc)
        pytest.fail(f"the caller hung for {timeout} s")
    assert proc.returncode == 0, err
    return dict(json.loads(out.strip().splitlines()[-1]))


# --- 1. control comes back -------------------------------------------------------------------


def test_a_vfork_wait_on_a_fifo_does_not_freeze_run() -> None:
    """A process in a vfork wait never stops: the kill must not wait for the stop."""
    result = in_subprocess(
        """
        import tempfile
        fifo = os.path.join(tempfile.mkdtemp(), "fifo")
        os.mkfifo(fifo)

        def spawn():
            os.posix_spawn(
                "/bin/true", ["true"], {},
                file_actions=[(os.POSIX_SPAWN_OPEN, 5, fifo, os.O_RDONLY, 0)],
            )

        before = fds()
        start = time.monotonic()
        out = run(spawn, budget=0.5)
        elapsed = time.monotonic() - start
        time.sleep(0.2)
        print(json.dumps({"status": out.status, "elapsed": elapsed,
                          "left": descendants(), "fds": fds() == before}))
        """
    )
    assert result["status"] == Status.TIMEOUT
    assert result["elapsed"] < 0.5 + GENEROUS
    assert result["left"] == []
    assert result["fds"]


@pytest.mark.parametrize(
    "attack",
    [
        "os.kill(os.getpid(), signal.SIGSTOP)\n    while True: pass",
        # Every catchable signal blocked and ignored, including the stack dump's.
        "for s in signal.valid_signals():\n"
        "        try: signal.signal(s, signal.SIG_IGN)\n"
        "        except (OSError, ValueError, RuntimeError): pass\n"
        "    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())\n"
        "    while True: pass",
    ],
    ids=["stops-itself", "blocks-and-ignores-all-signals"],
)
def test_a_call_that_stops_or_shuns_signals_still_times_out(attack: str) -> None:
    result = in_subprocess(
        f"""
def attack():
    {attack}

before = fds()
start = time.monotonic()
out = run(attack, budget=0.5)
elapsed = time.monotonic() - start
print(json.dumps({{"status": out.status, "elapsed": elapsed, "left": descendants(),
                   "fds": fds() == before}}))
"""
    )
    assert result["status"] == Status.TIMEOUT
    assert result["elapsed"] < 0.5 + GENEROUS
    assert result["left"] == []
    assert result["fds"]


def forks_that_hold_memory(pidfile: str, forks: int, mib: int) -> None:
    """Fork ``forks`` children that each touch ``mib`` MiB and spin; log their pids; hang."""
    for _ in range(forks):
        pid = os.fork()
        if pid == 0:
            try:
                held = bytearray(mib << 20)
                held[::4096] = b"x" * len(held[::4096])
                while True:
                    pass
            finally:
                os._exit(0)
        with open(pidfile, "a") as f:
            f.write(f"{pid}\n")
    while True:
        pass


def test_what_a_kill_killed_has_finished_exiting_when_run_returns(tmp_path: Path) -> None:
    # A process with SIGKILL pending runs no code, but holds its memory and pid until the
    # kernel has torn it down: run() returned while such descendants were still exiting.
    # Now it waits for them, up to 0.09 s past the deadline: a busy machine may starve their
    # teardown (they are demoted to nice 19), and then run() must have waited that long.
    pidfile = tmp_path / "pids"
    start = time.monotonic()
    out = run(forks_that_hold_memory, (str(pidfile), 4, 64), budget=1.5)
    elapsed = time.monotonic() - start
    exiting = [
        pid for pid in map(int, pidfile.read_text().split()) if state(pid) not in (None, "Z")
    ]
    assert out.status is Status.TIMEOUT, out.describe()
    assert out.leaked == 4
    assert not exiting or elapsed >= 1.5 + 0.085, (exiting, elapsed)
    assert elapsed < 1.5 + GENEROUS


def scribble(length_only: bool, spare: frozenset[str]) -> int:
    """Write on every pipe this process holds, the guard's result pipe among them."""
    garbage = (1 << 60).to_bytes(8, "little") if length_only else b"\xff" * 64
    for fd in pipes(spare):
        try:  # noqa: SIM105 - a read end refuses
            os.write(fd, garbage)
        except OSError:
            pass
    time.sleep(0.1)
    return 1


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize("length_only", [False, True], ids=["garbage", "huge-length"])
def test_garbage_on_the_result_pipe_is_an_error_that_says_so(length_only: bool) -> None:
    start = time.monotonic()
    out = run(scribble, (length_only, frozenset(pipes().values())), budget=30)
    assert time.monotonic() - start < 20  # never waited on until the budget
    assert out.status is Status.ERROR, out.describe()
    assert "not a result frame" in (out.error or "")


@pytest.mark.usefixtures("no_leaks")
def test_any_finite_budget_works() -> None:
    out = run(int, ("7",), budget=3e6)
    assert out.status is Status.OK
    assert out.value == 7


# --- 2. nothing the call chooses runs in the caller ------------------------------------------


class SleepsWhenUnpickled:
    def __reduce__(self) -> tuple[Any, ...]:
        return (time.sleep, (8,))


class ExitsWhenUnpickled:
    def __reduce__(self) -> tuple[Any, ...]:
        return (sys.exit, (7,))


def _raise_keyboard_interrupt() -> None:
    raise KeyboardInterrupt


class InterruptsWhenUnpickled:
    def __reduce__(self) -> tuple[Any, ...]:
        return (_raise_keyboard_interrupt, ())


class SleepyError(Exception):
    def __reduce__(self) -> tuple[Any, ...]:
        return (time.sleep, (8,))


class ExitingError(Exception):
    def __reduce__(self) -> tuple[Any, ...]:
        return (sys.exit, (7,))


class InterruptingError(Exception):
    def __reduce__(self) -> tuple[Any, ...]:
        return (_raise_keyboard_interrupt, ())


def returns(value_type: type) -> Any:
    return value_type()


def raises(exc_type: type[BaseException]) -> None:
    raise exc_type("from the scorer")


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize(
    ("evil", "names"),
    [
        (SleepsWhenUnpickled, "time.sleep"),
        (ExitsWhenUnpickled, "sys.exit"),
        (InterruptsWhenUnpickled, "_raise_keyboard_interrupt"),
    ],
)
def test_a_returned_object_runs_no_code_in_the_caller(evil: type, names: str) -> None:
    start = time.perf_counter()
    out = run(returns, (evil,), budget=BUDGET)
    assert time.perf_counter() - start < BUDGET + GENEROUS
    assert out.status is Status.ERROR
    assert out.value is None
    assert out.error is not None
    assert "objects=True" in out.error
    assert names in out.error  # what rebuilding it would have called


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize("evil", [SleepyError, ExitingError, InterruptingError])
def test_a_raised_object_runs_no_code_in_the_caller(evil: type[BaseException]) -> None:
    start = time.perf_counter()
    out = run(raises, (evil,), budget=BUDGET)
    assert time.perf_counter() - start < BUDGET + GENEROUS
    assert out.status is Status.ERROR
    assert out.exception is None
    assert out.error is not None
    assert out.error.startswith(f"{__name__}.{evil.__qualname__}: from the scorer")


class ScorerError(Exception):
    """An ordinary user exception: its class is Python code, so it comes back as text."""


@pytest.mark.usefixtures("no_leaks")
def test_user_exception_classes_come_back_as_text_builtin_ones_as_objects() -> None:
    out = run(raises, (ScorerError,), budget=BUDGET)
    assert out.status is Status.ERROR
    assert out.exception is None
    assert out.error is not None
    assert "ScorerError: from the scorer" in out.error
    assert "Traceback" in out.error
    builtin = run(raises, (ValueError,), budget=BUDGET)
    assert isinstance(builtin.exception, ValueError)
    assert builtin.exception.args == ("from the scorer",)
    opted = run(raises, (ScorerError,), budget=BUDGET, objects=True)
    assert isinstance(opted.exception, ScorerError)


@pytest.mark.usefixtures("no_leaks")
def test_a_sympy_tree_is_refused_not_rebuilt_in_the_caller() -> None:
    sympy = pytest.importorskip("sympy")

    def tree() -> Any:
        return sympy.parse_expr("3**10**7", evaluate=False)

    start = time.perf_counter()
    out = run(tree, budget=5.0)
    assert time.perf_counter() - start < 5.0 + GENEROUS
    assert out.status is Status.ERROR
    assert out.error is not None
    assert "sympy" in out.error
    assert "objects=True" in out.error


def colliding_keys(count: int) -> dict[int, int]:
    """Ints that all hash to 0 (multiples of the modulus of int hashing), as dict keys."""
    return {k * sys.hash_info.modulus: 0 for k in range(1, count + 1)}


def string_keys(count: int) -> dict[str, float]:
    return {f"key{k}": k / 2 for k in range(count)}


@pytest.mark.usefixtures("no_leaks")
def test_a_result_of_colliding_keys_is_refused_not_rebuilt_in_the_caller() -> None:
    # 20,000 keys that hash alike take about 1.5 s to build, in the call and then again in the
    # caller, holding its GIL past any deadline (64,000: about 15 s each).
    start = time.perf_counter()
    out = run(colliding_keys, (20_000,), budget=60.0)
    in_caller = time.perf_counter() - start - out.wall_s
    assert out.status is Status.ERROR, out.status
    assert out.error is not None
    assert "not strings" in out.error
    assert "objects=True" in out.error
    assert in_caller < 1.0  # reading it was linear, and the dict was never built here
    # A few such keys, and any number of string keys, come back as they are.
    assert run(colliding_keys, (1000,), budget=30.0).value == colliding_keys(1000)
    assert run(string_keys, (50_000,), budget=30.0).value == string_keys(50_000)
    opted = run(colliding_keys, (5000,), budget=30.0, objects=True)
    assert opted.ok
    assert len(opted.value) == 5000


def many_small_int_dicts() -> list[dict[int, float]]:
    return [{1: 1.0, 2: 0.0} for _ in range(5000)]


@pytest.mark.usefixtures("no_leaks")
def test_the_key_limit_is_per_dict_and_the_scan_is_linear() -> None:
    # 10,000 int keys in all, 2 per dict: nothing to flood, and it comes back.
    out = run(many_small_int_dicts, budget=30.0)
    assert out.ok, out.error
    assert out.value == many_small_int_dicts()
    # A pickle a scan could be made quadratic on: 120,000 objects on the stack, then 60,000
    # marks closed on top of them (within OBJECTS_LIMIT). Read in linear time (a naive search
    # for each mark from the bottom of the stack would take minutes).
    forged = b"\x80\x05" + b"N" * 120_000 + b"(t" * 60_000 + b"."
    start = time.perf_counter()
    assert decode(forged) == ()
    assert time.perf_counter() - start < 10.0


def test_a_forged_pickle_cannot_slip_colliding_keys_past_the_scan() -> None:
    # What the call's process can write on its pipe by hand: 6,000 colliding keys, set into a
    # dict that DUP (which pickle never writes for plain data) keeps out of a scan's sight.
    keys = b"".join(
        b"\x8a\x0a" + (k * sys.hash_info.modulus).to_bytes(10, "little") + b"K\x00"
        for k in range(1, 6001)
    )
    for forged, named in (
        (b"\x80\x05}(" + keys + b"u.", "not strings"),
        (b"\x80\x05}2(" + keys + b"u0.", "DUP"),
        (b"\x80\x05(0}(" + keys + b"u.", "POP"),
    ):
        with pytest.raises(pickle.UnpicklingError, match=named):
            decode(forged)


def plain() -> Any:
    return {
        "none": None,
        "flags": [True, False],
        "numbers": (1, -(2**200), 0.5, float("inf"), 3 + 4j),
        "text": "été",
        "raw": (b"\x00\xff", bytearray(b"ab")),
        "sets": ({1, 2}, frozenset({"a"})),
        "nested": [[{"k": [1, [2, [3]]]}]],
    }


@pytest.mark.usefixtures("no_leaks")
def test_plain_data_comes_back_as_is() -> None:
    out = run(plain, budget=BUDGET)
    assert out.status is Status.OK
    assert out.value == plain()


def numpy() -> Any:
    """numpy, imported by name: it is in the bench extra only, and mypy runs without it."""
    return importlib.import_module("numpy")


def numpy_results() -> Any:
    np = numpy()

    return {"score": np.float64(0.5), "acc": np.bool_(True), "n": np.int64(3)}


def numpy_array() -> Any:
    np = numpy()

    return np.arange(3)


@pytest.mark.needs_extra("bench")
@pytest.mark.usefixtures("no_leaks")
def test_numpy_scalars_come_back_arrays_only_when_opted_in() -> None:
    # What scorers return (np.mean of per-step rewards, say): numpy is imported here, so the
    # caller rebuilds its scalars, in a run and in a pool alike.
    np = numpy()

    out = run(numpy_results, budget=30.0)
    assert out.status is Status.OK, out.error
    assert out.value == {"score": 0.5, "acc": True, "n": 3}
    assert type(out.value["score"]) is np.float64
    with Pool(numpy_results, workers=1, budget=30.0) as pool:
        (pooled,) = pool.map([()])
    assert pooled.value == out.value
    refused = run(numpy_array, budget=30.0)
    assert refused.status is Status.ERROR
    assert refused.error is not None
    assert "numpy" in refused.error
    assert "objects=True" in refused.error
    assert list(run(numpy_array, budget=30.0, objects=True).value) == [0, 1, 2]


@pytest.mark.needs_extra("bench")
def test_numpy_is_never_imported_into_the_caller_to_rebuild_a_result() -> None:
    result = in_subprocess(
        """
        def scalar():
            import numpy
            return numpy.float64(0.5)

        out = run(scalar, budget=30.0)
        print(json.dumps({"status": out.status.value, "error": out.error,
                          "numpy": "numpy" in sys.modules}))
        """
    )
    assert result["status"] == "error"
    assert "numpy" in result["error"]
    assert not result["numpy"]


def fraction() -> Any:
    from fractions import Fraction

    return Fraction(1, 3)


@pytest.mark.usefixtures("no_leaks")
def test_objects_come_back_only_when_the_caller_opts_in() -> None:
    from fractions import Fraction

    refused = run(fraction, budget=BUDGET)
    assert refused.status is Status.ERROR
    assert refused.error is not None
    assert "fractions.Fraction" in refused.error
    assert "objects=True" in refused.error
    accepted = run(fraction, budget=BUDGET, objects=True)
    assert accepted.status is Status.OK
    assert accepted.value == Fraction(1, 3)


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize("evil", [ExitsWhenUnpickled, InterruptsWhenUnpickled])
def test_even_opted_in_objects_bring_no_base_exception_out_of_run(evil: type) -> None:
    out = run(returns, (evil,), budget=BUDGET, objects=True)
    assert out.status is Status.ERROR


def forge_frame() -> int:
    """Make the child write a well-framed result with a status the guard does not know.

    The call runs in the child, so it can replace what writes the frame there.
    """
    import pickle

    from pytest_rewardhang.guard import _child

    def forged(frame: tuple[Any, ...]) -> bytes:
        return pickle.dumps(("pwned", None, None, None, 0))

    setattr(_child, "pickle_frame", forged)  # noqa: B010 - private name, not exported
    return 1


@pytest.mark.usefixtures("no_leaks")
def test_a_forged_result_frame_is_an_error_not_an_exception() -> None:
    out = run(forge_frame, budget=BUDGET)
    assert out.status is Status.ERROR
    assert out.error is not None
    assert "malformed" in out.error


def forge_status(frame: bytes) -> int:
    """Make the child write ``frame`` as its well-framed result."""
    from pytest_rewardhang.guard import _child

    setattr(_child, "pickle_frame", lambda _: frame)  # noqa: B010 - private name, not exported
    return 1


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize(
    "frame",
    [nested_status_frame(100_000, fields=5), pickle.dumps(("x" * (8 << 20), None, None, None, 0))],
    ids=["nested-past-any-repr", "8-MiB-string"],
)
def test_a_forged_status_is_named_in_a_short_line(frame: bytes) -> None:
    # The error named it by its repr: RecursionError raised out of run(), or 8 MiB of text.
    out = run(forge_status, (frame,), budget=5.0)
    assert out.status is Status.ERROR
    assert out.error is not None
    assert "malformed" in out.error
    assert len(out.error) < 200


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize("exc_type", [SystemExit, KeyboardInterrupt, GeneratorExit])
def test_guarded_never_reraises_exit_or_interrupt_from_the_child(
    exc_type: type[BaseException],
) -> None:
    scorer = guarded(BUDGET)(raises)
    with pytest.raises(CallFailed, match=exc_type.__name__):
        scorer(exc_type)


@pytest.mark.usefixtures("no_leaks")
def test_guarded_still_reraises_a_builtin_exception_as_itself() -> None:
    scorer = guarded(BUDGET)(raises)
    with pytest.raises(ValueError, match="from the scorer"):
        scorer(ValueError)


# --- 3. interrupts are safe ------------------------------------------------------------------


@pytest.mark.slow  # a storm or a race, repeated: seconds of real processes
def test_a_sigint_storm_leaves_no_process_zombie_or_descriptor() -> None:
    """A 1 kHz SIGINT storm at a caller calling run() in a loop; then nothing is left."""
    script = textwrap.dedent(
        f"""
        import os, sys, time, json, signal
        sys.path.insert(0, {ROOT!r})
        from pytest_rewardhang.guard import run
        from tests.conftest import children

        armed = False

        def on_sigint(signum, frame):
            if armed:  # anywhere inside run(), never in this loop's bookkeeping
                raise KeyboardInterrupt

        signal.signal(signal.SIGINT, on_sigint)

        def quick():
            return 1

        def slow():
            time.sleep(0.02)
            return 2

        run(quick)  # warm: imports, caches
        before = len(os.listdir("/proc/self/fd"))
        print("ready", flush=True)
        calls = interrupted = 0
        while not os.path.exists(sys.argv[1]):
            try:
                armed = True
                run(slow if calls % 2 else quick, budget=0.5)
                armed = False
                calls += 1
            except KeyboardInterrupt:
                armed = False
                interrupted += 1
        time.sleep(0.3)  # what a killed call left is slow to exit, not left behind
        # A killed child slower to exit than the bound run() gives it is reaped by the next
        # call's sweep (_reap.REAP_WAIT_S): that, not the storm's last call, is the bound.
        run(quick)
        print(json.dumps({{"calls": calls, "interrupted": interrupted, "kids": sorted(children()),
                           "fds_before": before,
                           "fds_after": len(os.listdir("/proc/self/fd"))}}), flush=True)
        """
    )
    stop = Path(tempfile.gettempdir()) / f"stop-{os.getpid()}-{time.monotonic_ns()}"
    try:
        returncode, out, err = sigint_storm([script, str(stop)], stop, timeout=30)
    finally:
        stop.unlink(missing_ok=True)
    assert returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["interrupted"] > 0, result
    assert result["kids"] == [], result
    assert result["fds_after"] == result["fds_before"], result


# --- 4. honest statuses and portability ------------------------------------------------------


def test_a_crash_report_survives_a_caller_whose_sigsegv_handler_was_replaced() -> None:
    """Ray's core, in a driver, installs its own SIGSEGV handler over the faulthandler pytest
    enabled; enable() on an enabled faulthandler keeps the handler, and a guarded crash said
    nothing."""
    result = in_subprocess(
        """
import ctypes, faulthandler
faulthandler.enable()
signal.signal(signal.SIGSEGV, signal.SIG_DFL)  # what a C library's sigaction does to it

def crash():
    ctypes.string_at(0)

out = run(crash, budget=30)
print(json.dumps({"status": str(out.status), "output": out.output}))
"""
    )
    assert result["status"] == "crashed", result
    assert "Fatal Python error" in result["output"], result


def dies_of_segv_at_the_dump() -> None:
    """What deep C recursion does at the deadline: the dump handler overflows the stack."""
    import faulthandler

    faulthandler.disable()

    def on_dump(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGSEGV, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGSEGV)

    signal.signal(DUMP_SIGNAL, on_dump)
    while True:
        pass


@pytest.mark.usefixtures("no_leaks")
def test_a_segfault_caused_by_the_stack_dump_is_a_timeout() -> None:
    out = run(dies_of_segv_at_the_dump, budget=BUDGET)
    assert out.status is Status.TIMEOUT, out.describe()


@pytest.mark.usefixtures("no_leaks")
def test_a_segfault_well_before_the_deadline_is_still_a_crash() -> None:
    out = run(os.kill, (0, 0), budget=BUDGET)  # warm
    out = run(_segfault, budget=BUDGET)
    assert out.status is Status.CRASHED
    assert out.signal == signal.SIGSEGV


def _segfault() -> None:
    signal.signal(signal.SIGSEGV, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGSEGV)


@pytest.mark.parametrize(
    "setup",
    [
        "signal.signal(signal.SIGCHLD, signal.SIG_IGN)",
        # In the caller only: this is run()'s caller side on a kernel before 5.3.
        "CALLER = os.getpid()\nreal = os.pidfd_open\n"
        "def no_pidfd(pid, flags=0):\n"
        "    if os.getpid() == CALLER:\n"
        "        raise OSError(38, 'Function not implemented')\n"
        "    return real(pid, flags)\n"
        "os.pidfd_open = no_pidfd",
    ],
    ids=["caller-ignores-SIGCHLD", "no-pidfd_open"],
)
def test_run_works_without_a_pidfd_or_a_wait_status(setup: str) -> None:
    result = in_subprocess(
        f"""
import warnings
warnings.simplefilter("ignore")
{setup}

def hang():
    while True:
        pass

def quick():
    return 5

before = fds()
outcomes = []
for fn in (quick, os._exit, hang, quick):
    start = time.monotonic()
    try:
        out = run(fn, (3,) if fn is os._exit else (), budget=0.5)
        outcomes.append([out.status, out.value, time.monotonic() - start])
    except BaseException as exc:
        outcomes.append(["raised", repr(exc), time.monotonic() - start])
time.sleep(0.2)
print(json.dumps({{"outcomes": outcomes, "left": descendants(), "fds": fds() == before}}))
"""
    )
    statuses = [o[0] for o in result["outcomes"]]
    assert statuses == ["ok", "crashed", "timeout", "ok"], result
    assert result["outcomes"][0][1] == 5
    assert all(o[2] < 0.5 + GENEROUS for o in result["outcomes"]), result
    assert result["left"] == []
    assert result["fds"]


def test_pidfd_failing_after_the_fork_kills_the_child_and_leaks_nothing() -> None:
    """pidfd_open fails after the fork (ESRCH): the call still gets its deadline and its kill."""
    result = in_subprocess(
        """
        import warnings
        warnings.simplefilter("ignore")
        real = os.pidfd_open
        CALLER = os.getpid()
        def flaky(pid, flags=0):
            if os.getpid() == CALLER and pid != CALLER:
                raise ProcessLookupError(3, "No such process")
            return real(pid, flags)
        os.pidfd_open = flaky

        def hang():
            time.sleep(60)

        before = fds()
        start = time.monotonic()
        out = run(hang, budget=0.5)
        elapsed = time.monotonic() - start
        time.sleep(0.2)
        print(json.dumps({"status": out.status, "elapsed": elapsed, "left": descendants(),
                          "fds": fds() == before}))
        """
    )
    assert result["status"] == Status.TIMEOUT
    assert result["elapsed"] < 0.5 + GENEROUS
    assert result["left"] == []
    assert result["fds"]


def write_a_crafted_dump() -> None:
    """Fill the stack pipe, made as large as the caller keeps, with what made the dump's parse
    quadratic (a run of lines of blanks), and hang until the kill."""
    import fcntl

    frame = sys._getframe()
    while "stack_w" not in frame.f_locals:  # the child's setup holds the dump's write end
        frame = frame.f_back  # type: ignore[assignment]
    fd = frame.f_locals["stack_w"]
    fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 1 << 20)
    os.set_blocking(fd, False)
    line = b" " * 63 + b"\n"
    try:
        while True:
            os.write(fd, line * 1024)
    except BlockingIOError:
        pass
    while True:
        pass


@pytest.mark.usefixtures("no_leaks")
def test_a_crafted_stack_dump_is_read_in_linear_time() -> None:
    # A MiB of blank lines on the stack pipe: the dump's frames were found by a pattern whose
    # leading whitespace crossed lines, quadratic in them: describe() took about a minute.
    out = run(write_a_crafted_dump, budget=BUDGET)
    assert out.status is Status.TIMEOUT, out.describe()
    assert out.stack is not None
    assert len(out.stack) > 512 * 1024, "the call did not fill the pipe: nothing was tried"
    start = time.monotonic()
    out.describe()
    assert out.stuck_at is None or isinstance(out.stuck_at, tuple)
    assert time.monotonic() - start < GENEROUS


FLOOD = """
import os, resource, sys
from pytest_rewardhang.guard import run
from pytest_rewardhang.guard._wire import HEADER, MAGIC

def flood(header):
    frame = sys._getframe()
    while "result_w" not in frame.f_locals:  # run's child holds the result pipe's write end
        frame = frame.f_back
    fd = frame.f_locals["result_w"]
    if header:  # a frame that claims a TiB, then the bytes
        os.write(fd, HEADER.pack(MAGIC, 1 << 40))
    block = b"x" * (1 << 20)
    while True:
        os.write(fd, block)

before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = run(flood, (sys.argv[1] == "header",), budget=2.0)
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) >> 10
print(out.status, grown, out.error, flush=True)
"""


@pytest.mark.parametrize("how", ["garbage", "header"])
def test_a_flooded_result_pipe_holds_the_caller_to_the_result_bound(how: str) -> None:
    # The caller kept all of it: about a GiB a second of budget, until it was OOM-killed.
    done = python_c(FLOOD, how, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    status, grown, error = done.stdout.split(maxsplit=2)
    assert status == "error", done.stdout
    assert int(grown) < 2 * (RESULT_LIMIT >> 20) + 64, f"the caller grew by {grown} MiB"
    assert "the call wrote on the guard's own descriptor" in error
    if how == "header":
        assert f"frame of {1 << 40} bytes, past the 64 MiB it reads (RESULT_LIMIT)" in error


def test_a_result_past_the_bound_is_an_error_that_says_so() -> None:
    out = run(bytes, (RESULT_LIMIT + 1,), budget=GENEROUS)
    assert out.status is Status.ERROR
    assert out.error is not None
    assert "past the 64 MiB the guard brings back (RESULT_LIMIT)" in out.error
    with Pool(bytes, workers=1, budget=GENEROUS) as pool:
        big, small = pool.map([(RESULT_LIMIT + 1,), (3,)])
    assert big.status is Status.ERROR, big.describe()
    assert "(RESULT_LIMIT)" in (big.error or ""), big.describe()
    assert small.value == b"\0\0\0"


@pytest.mark.parametrize(("kind", "count", "bound"), PAST_A_BOUND)
@pytest.mark.usefixtures("no_leaks")
def test_an_answer_that_builds_past_a_bound_is_an_error_naming_it(
    kind: str, count: int, bound: str
) -> None:
    # 200,000 empty sets are 200 KB of pickle and 45 MB built (a 4 MiB answer grew the caller
    # by 1 GiB); a memo index of 2^32 had the unpickler allocate its memo up to it.
    start = time.monotonic()
    out = run(forge_status, (crafted(kind, count, fields=5),), budget=BUDGET)
    took = time.monotonic() - start
    assert out.status is Status.ERROR, out.describe()
    assert bound in (out.error or ""), out.describe()
    assert took < BUDGET + DECODE_TIME_S + GENEROUS


@pytest.mark.usefixtures("no_leaks")
def test_a_crafted_answer_costs_the_caller_no_more_than_the_decode_bound() -> None:
    # One-byte opcodes, each read by the caller's check in Python: about 1.7 s a megabyte,
    # so run() returned 26 s after a 1 s budget. Every opcode now counts as an object made.
    protocols = b"\x80\x05" * (8 << 20)
    forged = b"\x80\x05(\x8c\x02ok](" + protocols + b"eNNK\x00t."
    start = time.monotonic()
    out = run(forge_status, (forged,), budget=BUDGET)
    took = time.monotonic() - start
    assert out.status is Status.ERROR, out.describe()
    assert "OBJECTS_LIMIT" in (out.error or ""), out.describe()
    assert took < BUDGET + DECODE_TIME_S + GENEROUS


@pytest.mark.parametrize("leaked", [-1, 1 << 70, 2.5, "3"])
@pytest.mark.usefixtures("no_leaks")
def test_a_forged_leaked_count_is_an_error_not_a_number_believed(leaked: Any) -> None:
    # The count of processes the child found left running, from its own frame: a forged one
    # went into the outcome as is.
    frame = pickle.dumps(("ok", 1.0, None, None, leaked), protocol=pickle.HIGHEST_PROTOCOL)
    out = run(forge_status, (frame,), budget=BUDGET)
    assert out.status is Status.ERROR, out.describe()
    assert "leaked" in (out.error or ""), out.describe()
