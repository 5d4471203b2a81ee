"""guard.run side by side with the usual ways of bounding a call, in one run.

Run: .venv/bin/python benchmarks/bench_guard.py [--quick]

Two measurements per peer:

- per-call overhead on a trivial scorer, against a bare ``os.fork`` + ``os._exit`` +
  ``os.waitpid`` round trip, the floor for anything that forks per call;
- time from the deadline to the caller getting control back, for a hang inside one C call and
  for a Python loop that swallows ``BaseException``, and whether anything is left running.

Every hang measurement runs in a throwaway worker process: a thread cannot be stopped, and a
thread stuck in C never gives the GIL back, so only killing the worker ends those cases. The
worker's hangs are bounded by RLIMIT_CPU and die with the benchmark (PR_SET_PDEATHSIG), so even
a benchmark killed from outside leaves nothing burning for long.

Performance is measured here, not asserted in timed tests.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import math
import multiprocessing
import os
import platform
import resource
import select
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, NoReturn

from pytest_rewardhang.guard import Status, run

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _procs import die_with_parent

try:
    from pebble import concurrent as pebble_concurrent
except ImportError:  # the `bench` extra is not installed; the peer is reported as skipped
    HAVE_PEBBLE = False
else:
    HAVE_PEBBLE = True

#: Long enough that the trivial scorer never meets it: overhead calls must not time out.
OVERHEAD_BUDGET_S = 2.0
HANG_BUDGET_S = 0.5
#: pebble sends SIGTERM and waits its 3 s grace before SIGKILL; the window must outlast that,
#: or its real lateness would be reported as "never".
WINDOW_EXTRA_S = 4.0
TARGET_RATIO = 2.0
TARGET_LATE_MS = 50.0
#: A hang in a worker's descendant (which may have outlived a killed worker) dies of SIGXCPU
#: after this much CPU time; a real measurement needs at most budget + pebble's grace.
CPU_LIMIT_S = 12

_FORK = multiprocessing.get_context("fork")

Call = Callable[[Callable[..., Any], tuple[Any, ...], float], tuple[Any, bool]]
"""``call(fn, args, budget) -> (value or None, a thread of the call still runs)``."""


def scorer(solution: str, ground_truth: str) -> float:
    return float(solution.strip() == ground_truth)


def c_hang() -> int:
    # A peer's child must not outlive a worker killed from outside (the mp and pebble children
    # have no PR_SET_PDEATHSIG of their own); RLIMIT_CPU only stops it seconds later.
    die_with_parent()
    return sum(range(10**13))


def swallowing_loop() -> None:
    die_with_parent()
    n = 0
    while True:
        try:
            while True:
                n += 1
        except BaseException:  # noqa: S112 - the pathology under test
            continue


HANGS: dict[str, Callable[[], Any]] = {"c_hang": c_hang, "swallow": swallowing_loop}


# --- the peers -------------------------------------------------------------------------------


def call_unguarded(
    fn: Callable[..., Any], args: tuple[Any, ...], budget: float
) -> tuple[Any, bool]:
    return fn(*args), False


def call_guard(fn: Callable[..., Any], args: tuple[Any, ...], budget: float) -> tuple[Any, bool]:
    out = run(fn, args, budget=budget)
    return (out.value if out.status is Status.OK else None), False


def _send_result(writer: Connection, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    writer.send(fn(*args))


def call_mp_process(
    fn: Callable[..., Any], args: tuple[Any, ...], budget: float
) -> tuple[Any, bool]:
    reader, writer = _FORK.Pipe(duplex=False)
    proc = _FORK.Process(target=_send_result, args=(writer, fn, args), daemon=True)
    proc.start()
    writer.close()
    # The usual pattern; it only works because a small result fits in the pipe buffer (a large
    # one would block the child's send, and join would wait for the budget).
    proc.join(budget)
    if proc.is_alive():
        proc.kill()
        proc.join()
    value = None
    with contextlib.suppress(EOFError):  # killed before it sent anything
        value = reader.recv()
    reader.close()
    proc.close()
    return value, False


@functools.cache
def _pebble_decorated(fn: Callable[..., Any], budget: float) -> Callable[..., Any]:
    # Decorated once per function, as a scorer would be at its definition.
    # Typed through a variable: pebble is Any to mypy when the bench extra is not installed.
    wrapped: Callable[..., Any] = pebble_concurrent.process(timeout=budget, mp_context=_FORK)(fn)
    return wrapped


def call_pebble(fn: Callable[..., Any], args: tuple[Any, ...], budget: float) -> tuple[Any, bool]:
    future = _pebble_decorated(fn, budget)(*args)
    try:
        return future.result(), False
    except TimeoutError:
        return None, False


def call_thread(fn: Callable[..., Any], args: tuple[Any, ...], budget: float) -> tuple[Any, bool]:
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(fn(*args)), daemon=True)
    thread.start()
    thread.join(budget)
    return (box[0] if box else None), thread.is_alive()


def call_bare_fork(
    fn: Callable[..., Any], args: tuple[Any, ...], budget: float
) -> tuple[Any, bool]:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0)
    os.waitpid(pid, 0)
    return None, False


def call_bare_deadline(
    fn: Callable[..., Any], args: tuple[Any, ...], budget: float
) -> tuple[Any, bool]:
    """The least a fork-kill guard can do: one pidfd poll with the budget, then SIGKILL."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            fn(*args)
        finally:
            os._exit(0)
    pidfd = os.pidfd_open(pid)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        if not poller.poll(math.ceil(budget * 1000)):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    finally:
        os.close(pidfd)
    os.waitpid(pid, 0)
    return None, False


@dataclass(frozen=True)
class Peer:
    key: str
    label: str
    overhead: Call
    hang: Call
    expected: float | None = 1.0  # what the trivial scorer call returns through this peer


PEERS = [
    Peer("unguarded", "unguarded call", call_unguarded, call_unguarded),
    Peer("guard", "`guard.run`", call_guard, call_guard),
    Peer("mp", "`multiprocessing.Process` (fork, join + kill)", call_mp_process, call_mp_process),
    Peer("pebble", "pebble `concurrent.process(timeout=)`", call_pebble, call_pebble),
    Peer("thread", "thread + `join(timeout)`", call_thread, call_thread),
    Peer(
        "bare",
        "bare `os.fork` + `os._exit` + `os.waitpid` (reference)",
        call_bare_fork,
        call_bare_deadline,
        expected=None,
    ),
]
BY_KEY = {peer.key: peer for peer in PEERS}


# --- per-call overhead -----------------------------------------------------------------------


def measure_overhead(peers: list[Peer], rounds: int, block: int) -> dict[str, list[float]]:
    """Microseconds per call, from ``rounds`` blocks of ``block`` calls per peer, after one
    unrecorded warm-up block each.

    Peers take turns block by block, so load drift hits all alike. Not call by call, and the
    first call of each block is not recorded: after a fork the parent pays copy-on-write faults
    on its next writes, and a call right after another peer's fork would be charged for them.
    """
    args = ("  42 ", "42")
    samples: dict[str, list[float]] = {peer.key: [] for peer in peers}
    for round_ in range(1 + rounds):
        for peer in peers:
            for i in range(1 + block):
                start = time.perf_counter_ns()
                value, _ = peer.overhead(scorer, args, OVERHEAD_BUDGET_S)
                elapsed = time.perf_counter_ns() - start
                if peer.expected is not None and value != peer.expected:
                    raise RuntimeError(f"{peer.key} returned {value!r}, not {peer.expected!r}")
                if round_ and i:
                    samples[peer.key].append(elapsed / 1000)
    return samples


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[-1]


# --- control back after the deadline ---------------------------------------------------------


@dataclass
class HangResult:
    late_ms: list[float] = field(default_factory=list)
    never: bool = False
    thread_alive: bool = False
    thread_cpu_share: float = 0.0
    children_alive: int = 0


def _descendants(root: int) -> list[int]:
    found: list[int] = []
    frontier = [root]
    while frontier:
        pid = frontier.pop()
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    kids = [int(word) for word in f.read().split()]
                found += kids
                frontier += kids
    return found


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] not in (b"Z", b"X")


def hang_worker(peer_key: str, scenario: str, budget: float) -> NoReturn:
    """In a throwaway process: one hang through one peer; prints a JSON line, then exits."""
    die_with_parent()
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT_S, CPU_LIMIT_S + 2))
    # One quick call first: what is measured is a trainer's steady state, not what a process's
    # first call sets up once (the guard's cgroup probe and keeper, about 50 ms).
    BY_KEY[peer_key].hang(int, (), budget)
    start = time.perf_counter()
    _, thread_alive = BY_KEY[peer_key].hang(HANGS[scenario], (), budget)
    elapsed = time.perf_counter() - start
    alive = [pid for pid in _descendants(os.getpid()) if _running(pid)]
    share = 0.0
    if thread_alive:  # is it merely alive, or still burning a core?
        cpu = time.process_time()
        time.sleep(0.2)
        share = (time.process_time() - cpu) / 0.2
    report = {
        "late_ms": (elapsed - budget) * 1000,
        "thread_alive": thread_alive,
        "thread_cpu_share": share,
        "children_alive": len(alive),
    }
    print(json.dumps(report), flush=True)
    for pid in _descendants(os.getpid()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    # A daemon thread still running the hang must not get a say in how this process ends.
    os._exit(0)


def measure_hang(peer: Peer, scenario: str, budget: float, reps: int) -> HangResult:
    result = HangResult()
    window = budget + WINDOW_EXTRA_S
    command = [sys.executable, os.path.abspath(__file__), "--hang-worker", peer.key, scenario]
    for _ in range(reps):
        proc = subprocess.Popen(
            [*command, str(budget)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # so the whole worker group can be killed at once
        )
        try:
            out, err = proc.communicate(timeout=window)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            result.never = True
            break  # never coming back is not a timing that more repetitions would refine
        finally:
            with contextlib.suppress(ProcessLookupError):  # orphans left in the worker's group
                os.killpg(proc.pid, signal.SIGKILL)
        if proc.returncode != 0 or not out.strip():
            raise RuntimeError(f"hang worker {peer.key}/{scenario} failed:\n{err}")
        report = json.loads(out.strip().splitlines()[-1])
        result.late_ms.append(report["late_ms"])
        result.thread_alive |= report["thread_alive"]
        result.thread_cpu_share = max(result.thread_cpu_share, report["thread_cpu_share"])
        result.children_alive = max(result.children_alive, report["children_alive"])
    return result


def describe_hang(result: HangResult, budget: float) -> str:
    if result.never:
        return f"**never**: no control back within {budget + WINDOW_EXTRA_S:.1f} s"
    text = f"+{statistics.median(result.late_ms):.1f} ms (max +{max(result.late_ms):.1f})"
    if result.thread_alive:
        text += f", **but the thread still runs** ({result.thread_cpu_share:.0%} of a core)"
    if result.children_alive:
        text += f", **{result.children_alive} child process(es) still alive**"
    return text


# --- the report ------------------------------------------------------------------------------


def table(
    peers: list[Peer],
    samples: dict[str, list[float]],
    hangs: dict[tuple[str, str], HangResult],
    budget: float,
) -> str:
    bare = statistics.median(samples["bare"])
    guard = statistics.median(samples["guard"])
    lines = [
        "| peer | median µs/call | p95 µs/call | x bare fork | x `guard.run` "
        "| C hang `sum(range(10**13))`: control back after the deadline "
        "| `BaseException`-swallowing loop: control back after the deadline |",
        "| --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for peer in peers:
        median = statistics.median(samples[peer.key])
        cells = [
            peer.label,
            f"{median:,.1f}",
            f"{p95(samples[peer.key]):,.1f}",
            f"{median / bare:.2f}",
            f"{median / guard:.2f}",
            *(describe_hang(hangs[peer.key, scenario], budget) for scenario in HANGS),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdicts(
    samples: dict[str, list[float]], hangs: dict[tuple[str, str], HangResult]
) -> list[str]:
    ratio = statistics.median(samples["guard"]) / statistics.median(samples["bare"])
    guard_hangs = [hangs["guard", scenario] for scenario in HANGS]
    never = any(result.never for result in guard_hangs)
    worst = max(late for result in guard_hangs for late in result.late_ms) if not never else 0.0
    late_ok = not never and worst <= TARGET_LATE_MS
    late_text = "never" if never else f"worst +{worst:.1f} ms"
    return [
        f"- `guard.run` overhead: {ratio:.2f}x the bare fork round trip "
        f"(target ≤ {TARGET_RATIO:g}x): {'met' if ratio <= TARGET_RATIO else 'MISSED'}",
        f"- `guard.run` control back after the deadline: {late_text} "
        f"(target ≤ {TARGET_LATE_MS:g} ms): {'met' if late_ok else 'MISSED'}",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smoke run: a few iterations")
    parser.add_argument("--hang-worker", nargs=3, metavar=("PEER", "SCENARIO", "BUDGET"))
    options = parser.parse_args()
    if options.hang_worker:
        peer_key, scenario, budget = options.hang_worker
        hang_worker(peer_key, scenario, float(budget))

    rounds, block, reps = (3, 10, 1) if options.quick else (30, 20, 5)
    calls = rounds * block
    peers = [peer for peer in PEERS if peer.key != "pebble" or HAVE_PEBBLE]
    load_start = os.getloadavg()[0]
    started = time.perf_counter()

    samples = measure_overhead(peers, rounds, block)
    hangs = {
        (peer.key, scenario): measure_hang(peer, scenario, HANG_BUDGET_S, reps)
        for peer in peers
        for scenario in HANGS
    }

    print(table(peers, samples, hangs, HANG_BUDGET_S))
    print()
    if not HAVE_PEBBLE:
        print("pebble: skipped (not installed; `.venv/bin/pip install -e '.[bench]'` adds it)\n")
    print("\n".join(verdicts(samples, hangs)))
    print()
    print(
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"{datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}; "
        f"{calls} calls per peer, {reps} hang repetition(s) at a {HANG_BUDGET_S:g} s budget; "
        f"1-min load average {load_start:.2f} at start, {os.getloadavg()[0]:.2f} at end; "
        f"took {time.perf_counter() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
