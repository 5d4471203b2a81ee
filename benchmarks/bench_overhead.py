"""What guarding costs, each figure a ratio to its unguarded reference measured in the same run.

Run: .venv/bin/python benchmarks/bench_overhead.py [--quick [--steps] [--profile]] [--rounds N]
     [--only pool,run,timeline,isolate,spaced]

Three comparisons, each in rounds that take turns between the peers (the order reversed every
other round), so that the speed of a shared VM, which changes from minute to minute, is the same
for all of them; every ratio is the median of the rounds' own ratios:

- ``pool``: ``Pool(workers=2).map`` against an unguarded ``multiprocessing.Pool(2).starmap``
  (fork context, its own default chunk size, ``len / 8``), on the ``fast`` scorer of
  ``pool_scorers.py`` (~45 µs) and on ``medium`` (the same work 22 times, ~1 ms); both against
  two independent serial loops run at once in two forked processes, the most two cores give.
  Both pools are started and warmed before the first round. Each peer's CPU per item (its
  processes' ``schedstat``) is reported too: on a machine others load, it says what a peer
  costs where wall times say how the scheduler shared the cores.
- ``run``: ``guard.run`` of a trivial call against a bare fork of the same call (the child
  calls it, pickles the value into a pipe and ``_exit``\\ s; the parent reads it and
  ``waitpid``\\ s), containment on: what this process's calls get by default. The full run
  (or ``--quick --steps``) adds rows with one step of ``run()`` taken out at a time, then all
  of them (patched in this process, for the measurement only): what each step costs.
- ``timeline``: where the wall time of one trivial ``run()`` goes, each step stamped as it
  starts and ends in the caller and in the child (one clock for both), beside the bare fork's:
  which steps the caller waits through, and which overlap the child's own start.
- ``isolate``: ``Pool(workers=1, isolate=True).map``, a process per item, against the same bare
  fork per item, and a fork per call polled every 50 ms (NeMo Gym's way).
- ``spaced``: one call every 100 ms (a trainer scoring between its steps) of ``run()``, of a
  warm ``Pool(workers=1)`` and of the bare fork, taking turns: what a call costs when the one
  before it is not a moment ago (a move into a cgroup then waits for the kernel, see
  :func:`spaced_section`). ``PYTEST_REWARDHANG_CGROUP=0`` in the environment gives the same
  without cgroups.

The full run (or ``--quick --profile``) ends with a cProfile of the caller during a ``map`` of
a scorer that returns at once, and of its one worker (the profile is started by the scorer
itself in the worker, on a first item, and written out on a last one). ``--quick`` is a smoke
run of several seconds, for the test suite's slow tier, which asserts generous bounds on its
ratios (``tests/test_benchmarks.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import io
import multiprocessing
import os
import pickle
import platform
import pstats
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import _procs  # noqa: E402
import pool_scorers  # noqa: E402

from pytest_rewardhang.guard import Containment, Pool, run  # noqa: E402

_FORK = multiprocessing.get_context("fork")
#: The fork-per-call peer's poll interval: NeMo Gym's.
POLL_S = 0.05
WARMUP = ("warm up, the answer is 1", "1")


def trivial(x: int) -> int:
    return x + 1


def guarded_call(i: int) -> object:
    """``trivial`` under ``guard.run``, the value checked."""
    out = run(trivial, (i,), budget=5.0)
    assert out.ok, out.describe()
    return out.value


# --- the references ----------------------------------------------------------------------------


#: The references a guarded call is measured against: see _procs.forked.
bare_fork = _procs.forked
fork_polled = functools.partial(_procs.forked, poll_s=POLL_S)


def two_serial_loops(fn: Callable[..., Any], items: Sequence[tuple[Any, ...]]) -> float:
    """Seconds two independent serial loops take over half the items each, run at once in two
    forked processes: the slower one's loop, timed inside it (the forks not counted)."""
    halves = (items[::2], items[1::2])
    pipes = []
    pids = []
    for half in halves:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                start = time.perf_counter()
                for item in half:
                    fn(*item)
                os.write(write, pickle.dumps(time.perf_counter() - start))
            finally:
                os._exit(0)
        os.close(write)
        pipes.append(read)
        pids.append(pid)
    took: list[float] = []
    for read, pid in zip(pipes, pids, strict=True):
        with os.fdopen(read, "rb") as f:
            took.append(float(pickle.loads(f.read())))
        os.waitpid(pid, 0)
    return max(took)


# --- rounds ------------------------------------------------------------------------------------


def alternate(
    peers: dict[str, Callable[[], float]], rounds: int, cpu: dict[str, list[float]] | None = None
) -> dict[str, list[float]]:
    """Each peer's seconds per round; the order reversed every other round. ``cpu``, if given,
    gets each peer's CPU seconds per round (:func:`tree_cpu`)."""
    names = list(peers)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            before = tree_cpu() if cpu is not None else 0.0
            times[name].append(peers[name]())
            if cpu is not None:
                cpu.setdefault(name, []).append(tree_cpu() - before)
    return times


def ratios(times: dict[str, list[float]], peer: str, reference: str) -> list[float]:
    """Per round, the peer's seconds over the reference's (above 1: the peer is slower)."""
    return [p / r for p, r in zip(times[peer], times[reference], strict=True)]


def _task_cpu(pid: int) -> tuple[float, list[int]]:
    """Seconds on a CPU of every thread of ``pid`` (``schedstat``: nanoseconds), and its
    children."""
    cpu, children = 0.0, []
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                    cpu += int(f.read().split()[0]) / 1e9
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                    children += [int(word) for word in f.read().split()]
    return cpu, children


def tree_cpu() -> float:
    """Seconds on a CPU of this process and all below it, living or reaped by it: what a peer
    costs the machine, which a machine shared with other work does not change much (unlike
    its wall time, which depends on how many of its threads compete for the cores)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    todo = [os.getpid()]
    while todo:
        cpu, children = _task_cpu(todo.pop())
        total += cpu
        todo += children
    return total


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def spread(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(min(values))} / {fmt.format(max(values))}"


# --- pool ------------------------------------------------------------------------------------


def pool_peers(
    fn: Callable[..., Any],
    items: list[tuple[str, str]],
    chunk: int,
    reference: Any,
    guarded: Pool,
) -> dict[str, Callable[[], float]]:
    return {
        "two serial loops (the machine's limit)": lambda: two_serial_loops(fn, items),
        f"`multiprocessing.Pool(2).starmap`, chunks of {chunk}, unguarded": lambda: timed(
            lambda: reference.starmap(fn, items, chunksize=chunk)
        ),
        "`guard.Pool(workers=2).map`": lambda: timed(lambda: guarded.map(items)),
    }


def pool_section(rounds: int, quick: bool) -> dict[str, float]:
    """Throughput ratios of the guarded pool to multiprocessing, per scorer."""
    cases = [
        ("fast", pool_scorers.fast, 2_000 if quick else 10_000),
        ("medium", pool_scorers.medium, 200 if quick else 1_000),
    ]
    print("### Pool vs multiprocessing\n")
    print(
        "| scorer | items | peer | items/s, median | min / max | x multiprocessing, median |"
        " min / max | x two serial loops | CPU µs per item, median |"
    )
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    found: dict[str, float] = {}
    for name, fn, count in cases:
        items = pool_scorers.fast_items(count)
        chunk = max(count // 8, 1)  # multiprocessing's own default for two processes
        spec = f"{HERE / 'pool_scorers.py'}:{name}"
        with (
            _FORK.Pool(2) as reference,
            Pool(spec, workers=2, budget=5.0, warmup=WARMUP) as guarded,
        ):
            reference.starmap(fn, items[:100], chunksize=10)  # both warm
            assert all(out.ok for out in guarded.map(items[:100]))
            peers = pool_peers(fn, items, chunk, reference, guarded)
            cpu: dict[str, list[float]] = {}
            times = alternate(peers, rounds, cpu)
        serial, mp, pool = list(peers)
        for peer in peers:
            rates = [count / t for t in times[peer]]
            vs_mp = [1 / r for r in ratios(times, peer, mp)]
            vs_serial = [1 / r for r in ratios(times, peer, serial)]
            cpu_us = statistics.median(c / count * 1e6 for c in cpu[peer])
            print(
                f"| {name} | {count:,} | {peer} | {statistics.median(rates):,.0f} |"
                f" {spread(rates, '{:,.0f}')} | {statistics.median(vs_mp):.3f}x |"
                f" {spread(vs_mp, '{:.3f}')} | {statistics.median(vs_serial):.3f}x |"
                f" {cpu_us:,.1f} |"
            )
        found[name] = statistics.median(1 / r for r in ratios(times, pool, mp))
    print()
    return found


# --- run -------------------------------------------------------------------------------------


@contextlib.contextmanager
def without(steps: Sequence[str]) -> Iterator[None]:
    """Steps of ``run()`` taken out, for a measurement: patched here (the child is forked from
    this process, so it sees the patches too), undone after."""
    from pytest_rewardhang.guard import _child, _confine, _contain, _quota, _walkkill

    saved: list[tuple[object, str, object]] = []

    def patch(owner: object, attr: str, value: object) -> None:
        saved.append((owner, attr, getattr(owner, attr)))
        setattr(owner, attr, value)

    for step in steps:
        if step == CGROUP:
            patch(_contain, "strategy", functools.partial(_contain.Strategy, SUBREAPER))
        elif step == PIDS:
            patch(_quota.Quota, "make", staticmethod(lambda *args: _quota.Quota()))
        elif step == SHM:
            patch(_confine.Plan, "make", staticmethod(lambda *a: _confine.Plan(frozenset(), None)))
        elif step == STDIO:
            patch(_child, "setup_child", lambda output_w, stack_w, memory_mb: None)
        elif step == SWEEP:
            patch(_walkkill, "kill_descendants", lambda pid: 0)
        else:
            raise ValueError(step)
    try:
        yield
    finally:
        for owner, attr, value in reversed(saved):
            setattr(owner, attr, value)


SUBREAPER = Containment.SUBREAPER
CGROUP = "its cgroup (made, joined, removed)"
PIDS = "its process limit (a pids group; v1 here)"
SHM = "its private /dev/shm and TMPDIR (a mount namespace)"
STDIO = "stdio redirected, stack dump armed (faulthandler)"
SWEEP = "the child's sweep of its descendants (/proc walk)"
STEPS = (CGROUP, PIDS, SHM, STDIO, SWEEP)


def system_calls(count: int = 2_000) -> dict[str, float]:
    """Microseconds of the pieces of ``run()`` that are single system calls, in a loop."""

    def pipes() -> None:
        for _ in range(count):
            made = [os.pipe2(os.O_CLOEXEC) for _ in range(3)]
            for read, write in made:
                os.close(read)
                os.close(write)

    def pidfd() -> None:
        me = os.getpid()
        for _ in range(count):
            os.close(os.pidfd_open(me))

    return {
        "three pipes made and closed": timed(pipes) / count,
        "a pidfd opened and closed": timed(pidfd) / count,
    }


def faults(call: Callable[[int], object], count: int) -> tuple[float, ...]:
    """Per call: minor page faults of the caller and of its (reaped) children, then their CPU
    µs, then the caller's sleeps (voluntary context switches). After a fork, each page a
    process writes first is a fault of its own (a copy while the other still shares it): what
    the Python run around the fork costs beyond its own work."""
    before = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    for i in range(count):
        call(i)
    after = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    pairs = list(zip(before, after, strict=True))
    flt = [(a.ru_minflt - b.ru_minflt) / count for b, a in pairs]
    cpu = [(a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime) / count * 1e6 for b, a in pairs]
    sleeps = (after[0].ru_nvcsw - before[0].ru_nvcsw) / count
    return (*flt, *cpu, sleeps)


def run_section(rounds: int, quick: bool, steps: bool) -> float:
    """``run()``'s seconds per call over the bare fork's, median of the rounds."""
    calls = 10 if quick else 40

    def block(call: Callable[[int], object]) -> Callable[[], float]:
        return lambda: timed(lambda: [call(i) for i in range(calls)]) / calls

    def stepless(steps: Sequence[str]) -> Callable[[], float]:
        def measure() -> float:
            with without(steps):
                return block(guarded_call)()

        return measure

    peers: dict[str, Callable[[], float]] = {
        "bare fork + pipe + `waitpid` (reference)": block(lambda i: bare_fork(trivial, (i,))),
        "`guard.run`, containment on": block(guarded_call),
    }
    if steps:
        for step in STEPS:
            peers[f"`guard.run` without {step}"] = stepless([step])
        peers["`guard.run` without all five"] = stepless(STEPS)
    guarded_call(0)  # the process's first call pays the probes once
    times = alternate(peers, rounds)
    bare = next(iter(peers))
    print("### `guard.run` vs a bare fork\n")
    print("| peer | µs per call, median | min / max | x bare fork, median | min / max |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for peer in peers:
        us = [t * 1e6 for t in times[peer]]
        x = ratios(times, peer, bare)
        print(
            f"| {peer} | {statistics.median(us):,.0f} | {spread(us, '{:,.0f}')} |"
            f" {statistics.median(x):.2f}x | {spread(x)} |"
        )
    if steps:
        print()
        print("| single system calls, in a loop | µs |")
        print("| --- | ---: |")
        for name, took in system_calls().items():
            print(f"| {name} | {took * 1e6:.1f} |")
        print()
        print(
            "| peer | caller's page faults per call | child's | caller's CPU µs | child's |"
            " caller's sleeps |"
        )
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        counted: list[tuple[str, Callable[[int], object], Sequence[str]]] = [
            (bare, lambda i: bare_fork(trivial, (i,)), ()),
            ("`guard.run`, containment on", guarded_call, ()),
            ("`guard.run` without all five", guarded_call, STEPS),
        ]
        for peer, call, out in counted:
            with without(out):
                found = faults(call, calls * 5)
            caller, child, caller_cpu, child_cpu, sleeps = found
            print(
                f"| {peer} | {caller:.0f} | {child:.0f} | {caller_cpu:,.0f} | {child_cpu:,.0f} |"
                f" {sleeps:.1f} |"
            )
    print()
    return statistics.median(ratios(times, "`guard.run`, containment on", bare))


# --- timeline --------------------------------------------------------------------------------

#: run()'s steps stamped by :func:`stamped`: (module, owner's name or "", attribute, label).
#: In the order they run; the child's rows are those whose label starts "child:".
TIMELINE = (
    ("_contain", "_Cgroups", "call", "caller: its cgroup made (`mkdir`, its caps)"),
    ("_quota", "Quota", "make", "caller: its pids group made (v1 here)"),
    ("os", "", "fork", "caller: `os.fork()` (until it returns in the caller)"),
    ("_fork", "_Call", "_wait_until", "caller: waits for the answer and the exit (`poll`)"),
    ("_contain", "_GroupCage", "enter", "child: joins its cgroup"),
    ("_quota", "Quota", "join", "child: joins its pids group"),
    ("_box", "", "close_all_but", "child: every descriptor but its channel's closed"),
    ("_confine", "Plan", "enter", "child: its mount and IPC namespaces (`/dev/shm`, TMPDIR)"),
    ("_child", "", "_redirect_stdio", "child: stdio onto the output pipe (three file objects)"),
    ("_child", "", "setup_child", "child: stdio and the stack dump armed (faulthandler)"),
    ("_child", "", "call", "child: the call"),
    ("_child", "", "childless", "child: anything left below it? (`/proc`)"),
    ("_child", "", "write_all", "child: the answer written"),
    ("_reap", "", "reap_within", "caller: reaps it"),
    ("_fork", "_Call", "_outcome", "caller: the `Outcome` built"),
    ("_contain", "_GroupCage", "close", "caller: its cgroup removed"),
    ("_quota", "Quota", "close", "caller: its pids group removed"),
)


@contextlib.contextmanager
def stamped(folder: str) -> Iterator[list[tuple[str, float, float]]]:
    """run()'s steps of :data:`TIMELINE` stamped (label, start, end; ``perf_counter``, one
    clock for all processes) into the list yielded, in the caller; each child writes its own
    to ``folder`` as it writes its answer (its last step before ``_exit``). Patched here, for
    the measurement only: each stamp costs a few µs of its own."""
    from pytest_rewardhang.guard import _box, _child, _confine, _contain, _fork, _quota, _reap

    guard = (_box, _child, _confine, _contain, _fork, _quota, _reap)
    modules = {module.__name__.rpartition(".")[2]: module for module in guard}
    modules["os"] = os
    stamps: list[tuple[str, float, float]] = []
    saved: list[tuple[object, str, Any]] = []
    for module, owner_name, attr, label in TIMELINE:
        owner = getattr(modules[module], owner_name) if owner_name else modules[module]
        original = getattr(owner, attr)

        def stamp(*args: Any, _f: Any = original, _label: str = label, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return _f(*args, **kwargs)
            finally:
                stamps.append((_label, start, time.perf_counter()))
                if _label.endswith("the answer written"):  # the child's last step
                    with open(os.path.join(folder, str(os.getpid())), "wb") as f:
                        pickle.dump(stamps, f)

        saved.append((owner, attr, original))
        setattr(owner, attr, stamp)
    try:
        yield stamps
    finally:
        for owner, attr, original in reversed(saved):
            setattr(owner, attr, original)


def bare_stamped(fn: Callable[..., Any], args: tuple[Any, ...]) -> list[tuple[str, float, float]]:
    """:func:`_procs.forked`, stamped as :func:`stamped` stamps run()."""
    read, write = os.pipe()
    answer_r, answer_w = os.pipe()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            began = time.perf_counter()
            os.write(write, pickle.dumps(fn(*args)))
            os.write(answer_w, pickle.dumps((began, time.perf_counter())))
        finally:
            os._exit(0)
    forked = time.perf_counter()
    os.close(write)
    os.close(answer_w)
    data = b""
    while chunk := os.read(read, 1 << 16):
        data += chunk
    closed = time.perf_counter()
    os.waitpid(pid, 0)
    reaped = time.perf_counter()
    began, wrote = pickle.loads(os.read(answer_r, 1 << 16))
    os.close(read)
    os.close(answer_r)
    pickle.loads(data)
    return [
        ("caller: `os.fork()` (until it returns in the caller)", start, forked),
        ("child: the call and its answer written", began, wrote),
        ("caller: reads the pipe to its end (the child's exit closes it)", forked, closed),
        ("caller: reaps it", closed, reaped),
    ]


def timeline_section(calls: int) -> None:
    """Where the wall time of one trivial ``run()`` goes, step by step in the caller and in the
    child, beside the bare fork's: each step's start (from the call's) and length, medians."""

    def table(title: str, per_call: list[list[tuple[str, float, float]]]) -> None:
        rows: dict[str, list[tuple[float, float]]] = {}
        for stamps in per_call:
            for label, start, end in stamps[1:]:
                since = (start - stamps[0][1]) * 1e6
                rows.setdefault(label, []).append((since, (end - start) * 1e6))
        print(f"{title}\n")
        print("| step | starts at µs, median | takes µs, median |")
        print("| --- | ---: | ---: |")
        ordered = sorted(rows.items(), key=lambda row: statistics.median(s for s, _ in row[1]))
        for label, pairs in ordered:
            starts = statistics.median(s for s, _ in pairs)
            print(f"| {label} | {starts:,.0f} | {statistics.median(t for _, t in pairs):,.0f} |")
        print()

    print(f"### Where a trivial call's wall time goes: {calls} calls each\n")
    for i in range(10):
        bare_stamped(trivial, (i,))
    bare = []
    for i in range(calls):
        start = time.perf_counter()
        stamps = bare_stamped(trivial, (i,))
        end = time.perf_counter()
        bare.append([("call", start, start), *stamps, ("returns", end, end)])
    table("bare fork + pipe + `waitpid`:", bare)
    guarded = []
    with tempfile.TemporaryDirectory() as folder, stamped(folder) as stamps:
        for i in range(10 + calls):
            stamps.clear()
            start = time.perf_counter()
            out = run(trivial, (i,), budget=5.0)
            end = time.perf_counter()
            assert out.ok, out.describe()
            (child,) = os.listdir(folder)
            with open(os.path.join(folder, child), "rb") as f:
                theirs = [s for s in pickle.load(f) if s[0].startswith("child:")]
            os.unlink(os.path.join(folder, child))
            if i >= 10:  # the first ones warm up
                guarded.append([("call", start, start), *stamps, *theirs, ("returns", end, end)])
    table("`guard.run`, containment on (each stamp costs a few µs of its own):", guarded)


# --- isolate ---------------------------------------------------------------------------------


def isolate_section(rounds: int, quick: bool) -> tuple[float, float]:
    """The isolated pool's seconds per item over the bare fork's, and over the polled fork's."""
    count = 40 if quick else 200
    polled = 4 if quick else 20
    items = [(i,) for i in range(count)]
    spec = f"{Path(__file__).resolve()}:trivial"
    with Pool(spec, workers=1, budget=5.0, isolate=True) as isolated:
        assert all(out.ok for out in isolated.map(items[:20]))
        peers = {
            "bare fork + pipe + `waitpid` per item (reference)": lambda: (
                timed(lambda: [bare_fork(trivial, item) for item in items]) / count
            ),
            "`Pool(workers=1, isolate=True).map`": lambda: (
                timed(lambda: isolated.map(items)) / count
            ),
            "a fork per call, polled every 50 ms": lambda: (
                timed(lambda: [fork_polled(trivial, item) for item in items[:polled]]) / polled
            ),
        }
        times = alternate(peers, rounds)
    bare, pool, nemo = list(peers)
    print("### `Pool(isolate=True)` vs a fork per item\n")
    print("| peer | µs per item, median | min / max | x bare fork, median | min / max |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for peer in peers:
        us = [t * 1e6 for t in times[peer]]
        x = ratios(times, peer, bare)
        print(
            f"| {peer} | {statistics.median(us):,.0f} | {spread(us, '{:,.0f}')} |"
            f" {statistics.median(x):.2f}x | {spread(x)} |"
        )
    print()
    return statistics.median(ratios(times, pool, bare)), statistics.median(
        ratios(times, pool, nemo)
    )


# --- spaced calls ----------------------------------------------------------------------------

#: The pause before each call of the spaced section: a trainer scoring between its steps.
GAP_S = 0.1


def spaced_section(quick: bool) -> tuple[float, float]:
    """Calls ``GAP_S`` apart: ``run()``'s and a warm pool's median over the bare fork's.

    The rounds of the ``run`` section come back to back, so each call's move into its cgroup
    finds the kernel's lock for moves still fast from the call before; a call that comes after
    a pause waits for a grace period of RCU first (``cgroup.procs`` write:
    ``percpu_down_write(&cgroup_threadgroup_rwsem)``, then ``rcu_sync_enter``). The peers take
    turns call by call, so a pause precedes every call of each.
    """
    calls = 6 if quick else 30
    spec = f"{Path(__file__).resolve()}:trivial"
    with Pool(spec, workers=1, budget=5.0) as pool:
        assert pool.submit(0).result().ok

        def pooled(i: int) -> object:
            out = pool.submit(i).result()
            assert out.ok, out.describe()
            return out.value

        first = run(trivial, (0,), budget=5.0)  # the process's first call pays the probes once
        peers: dict[str, Callable[[int], object]] = {
            "bare fork + pipe + `waitpid` (reference)": lambda i: bare_fork(trivial, (i,)),
            f"`guard.run` (contained by its {first.containment})": guarded_call,
            "`Pool(workers=1).submit(...).result()`, warm": pooled,
        }
        times: dict[str, list[float]] = {peer: [] for peer in peers}
        for i in range(calls):
            for peer in peers if i % 2 else reversed(peers):
                time.sleep(GAP_S)
                times[peer].append(timed(functools.partial(peers[peer], i)))
    bare, guard, warm = list(peers)
    print(f"### One call every {GAP_S * 1000:.0f} ms: {calls} calls each, taking turns\n")
    print("| peer | µs per call, median | min / max | x bare fork |")
    print("| --- | ---: | ---: | ---: |")
    medians = {peer: statistics.median(times[peer]) for peer in peers}
    for peer in peers:
        us = [t * 1e6 for t in times[peer]]
        print(
            f"| {peer} | {statistics.median(us):,.0f} | {spread(us, '{:,.0f}')} |"
            f" {medians[peer] / medians[bare]:.2f}x |"
        )
    print()
    return medians[guard] / medians[bare], medians[warm] / medians[bare]


# --- profile ---------------------------------------------------------------------------------

_profile: list[cProfile.Profile] = []


def profiled_trivial(x: int, first: int, last: int, path: str) -> int:
    """A scorer that returns at once; in the worker it profiles from item ``first`` to
    ``last`` (its own time included: negligible) and writes the stats to ``path``."""
    if x == first:
        _profile.append(cProfile.Profile())
        _profile[0].enable()
    elif x == last and _profile:
        _profile[0].disable()
        _profile[0].dump_stats(f"{path}.{os.getpid()}")
        _profile.clear()
    return x + 1


def profile_section(count: int = 20_000) -> None:
    """Where the time of a pool item goes that is not the scorer's, in the caller and in one
    worker: the top functions by own time, per item, for a scorer that returns at once."""
    spec = f"{Path(__file__).resolve()}:profiled_trivial"
    with tempfile.TemporaryDirectory() as folder, Pool(spec, workers=1, budget=5.0) as pool:
        path = os.path.join(folder, "worker")
        items = [(i, 0, count - 1, path) for i in range(count)]
        pool.map(items[:10])
        caller = cProfile.Profile()
        start = time.perf_counter()
        caller.enable()
        pool.map(items)
        caller.disable()
        wall = time.perf_counter() - start
        deadline = time.monotonic() + 5
        while not (dumped := [f for f in os.listdir(folder) if f.startswith("worker.")]):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        print(f"### Profile: one worker, {count:,} items of a scorer that returns at once\n")
        print(f"{wall / count * 1e6:.1f} µs an item, wall (profiled: cProfile slows Python code)\n")
        for who, stats in [("caller", pstats.Stats(caller))] + [
            ("worker", pstats.Stats(os.path.join(folder, f))) for f in dumped[:1]
        ]:
            out = io.StringIO()
            stats.stream = out  # type: ignore[attr-defined]
            stats.sort_stats("tottime").print_stats(14)
            print(f"{who} (µs an item = tottime / {count:,}):\n")
            print("```text")
            print("\n".join(line for line in out.getvalue().splitlines()[6:] if line.strip()))
            print("```\n")


# --- main ------------------------------------------------------------------------------------


def resident_mib() -> float:
    """This process's resident memory: what every bare fork of it copies the page tables of."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / (1 << 20)


SECTIONS = ("pool", "run", "timeline", "isolate", "spaced")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--rounds", type=int, help="rounds per comparison (default 9; 5 quick)")
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    parser.add_argument("--steps", action="store_true", help="run()'s steps out (--quick: off)")
    parser.add_argument("--profile", action="store_true", help="the profile (--quick: off)")
    args = parser.parse_args()
    rounds = args.rounds or (5 if args.quick else 9)
    sections = set(args.only.split(","))
    if not sections <= set(SECTIONS):
        parser.error(f"--only: unknown section(s) {sorted(sections - set(SECTIONS))}")
    started = time.monotonic()
    print(
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, uid {os.getuid()},"
        f" this process resident {resident_mib():.0f} MiB,"
        f" {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())};"
        f" load average {os.getloadavg()[0]:.2f} at the start; {rounds} rounds\n"
    )
    summary = []
    if "pool" in sections:
        found = pool_section(rounds, args.quick)
        summary += [f"pool/multiprocessing, {name}: {x:.3f}x" for name, x in found.items()]
    if "run" in sections:
        steps = args.steps or not args.quick
        summary.append(f"run/bare fork: {run_section(rounds, args.quick, steps):.2f}x")
    if "timeline" in sections:
        timeline_section(20 if args.quick else 200)
    if "isolate" in sections:
        x_bare, x_polled = isolate_section(rounds, args.quick)
        summary.append(f"isolate/bare fork: {x_bare:.2f}x")
        summary.append(f"isolate/fork polled at 50 ms: {x_polled:.3f}x")
    if "spaced" in sections:
        x_run, x_warm = spaced_section(args.quick)
        summary.append(f"run/bare fork, calls {GAP_S * 1000:.0f} ms apart: {x_run:.2f}x")
        summary.append(f"warm pool/bare fork, calls {GAP_S * 1000:.0f} ms apart: {x_warm:.3f}x")
    if args.profile or not args.quick:
        profile_section(2_000 if args.quick else 20_000)
    for line in summary:
        print(f"- {line}")
    print(
        f"\nload average {os.getloadavg()[0]:.2f} at the end;"
        f" took {time.monotonic() - started:.0f} s"
    )


if __name__ == "__main__":
    main()
