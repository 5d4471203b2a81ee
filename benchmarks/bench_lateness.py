"""Control-back lateness of ``guard.run`` and ``guard.Pool`` per hang kind.

Run: .venv/bin/python benchmarks/bench_lateness.py [--quick]

Lateness is what the caller sees: the wall time of the call minus the budget, measured in the
caller. For ``run``: one call per repetition. For ``Pool(workers=2)``: one ``map`` per repetition
of several items hanging the same way followed by one fast item; each hang item's ``wall_s``
minus the budget is its lateness, and the map's wall time is compared with the ideal (one budget
per round of hangs, ``ceil(hangs / workers)`` rounds). The hangs are in ``lateness_scorers.py``
(C loop, Python loop, sleep, lock, blocked read, stopped self, all signals ignored, 8 busy
threads, 50 busy forks, setsid grandchildren, output flood, 1 GiB touch, and a vfork wait).

After every call the benchmark counts what the hang left behind: processes still alive when
control came back (and half a second later), and zombies. Then it kills them, so one repetition
never loads the next. Target: p99 within budget + 50 ms for every kind, nothing left running.

Every kind runs in a throwaway worker process, one for ``run`` and one for ``Pool``: some hangs
freeze the caller for good on today's guard, and only killing the worker ends that. A worker
that reports nothing for a repetition's window is killed with its process group and the kind is
reported as never giving control back. Workers die with the benchmark (PR_SET_PDEATHSIG) and
run under RLIMIT_CPU; the hangs lower their own RLIMIT_CPU and sleep for a bounded time, and
every process descending from a worker carries its tag in its environment, so the benchmark
finds and kills any that escaped (setsid, re-parented to init) once the worker is gone.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import resource
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _procs  # noqa: E402
import lateness_scorers  # noqa: E402 - found through the line above, as the pool's zygote finds it
from _procs import Proc, die_with_parent, machine  # noqa: E402

from pytest_rewardhang.guard import Pool, Status, run  # noqa: E402

BUDGET_S = 0.3
WORKERS = 2
TARGET_LATE_MS = 50.0
#: A worker's own CPU limit (the caller's side of 30 calls is far below it); its hangs lower
#: theirs to ``lateness_scorers.HANG_CPU_S``.
WORKER_CPU_S = 120
#: A worker gets this long to start (the pool's zygote imports the scorers) and report ready.
READY_WINDOW_S = 60.0
#: After a call with leftovers, they are counted again this much later.
RECHECK_S = 0.5
TAG_VAR = "BENCH_LATENESS_TAG"


@dataclass(frozen=True)
class Plan:
    run_reps: int
    pool_maps: int
    hangs_per_map: int
    #: How long past the ideal a repetition may take before the caller counts as stuck.
    stuck_after_s: float

    @property
    def rounds(self) -> int:
        return math.ceil(self.hangs_per_map / WORKERS)

    @property
    def ideal_map_s(self) -> float:
        return self.rounds * BUDGET_S


FULL = Plan(run_reps=30, pool_maps=20, hangs_per_map=4, stuck_after_s=10.0)
QUICK = Plan(run_reps=2, pool_maps=2, hangs_per_map=2, stuck_after_s=3.0)


# --- processes -------------------------------------------------------------------------------


#: ``/proc/PID/stat``'s flag for a process in ``do_exit()``: it never runs its own code again.
_PF_EXITING = 0x4


def fate(pid: int) -> str:
    """What became of ``pid``, a hang's process listed alive a moment ago: "killed" (SIGKILL
    sent but not yet acted on, or acted on and the kernel still tearing the process down: it
    has taken the signal off its pending set), "gone" (reaped since), or "running"."""
    bit = 1 << (signal.SIGKILL - 1)
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        pending = int(fields["SigPnd"], 16) | int(fields["ShdPnd"], 16)
    except FileNotFoundError:
        return "gone"
    except (OSError, KeyError, ValueError):
        return "running"
    now = _procs.stat(pid)  # read after the pending set: one taken since is exiting by now
    if now is None:
        return "gone"
    return "killed" if pending & bit or now.flags & _PF_EXITING else "running"


def tagged(tag: str) -> tuple[list[Proc], list[Proc]]:
    return _procs.tagged(TAG_VAR, tag)


def kill_tagged(tag: str, spare: frozenset[int] = frozenset(), *, hangs_only: bool) -> None:
    """SIGKILL the processes carrying ``tag`` (only the hangs' when ``hangs_only``), bounded."""
    _procs.kill_tagged(
        TAG_VAR,
        tag,
        lambda p: p.pid not in spare and (not hangs_only or p.comm == lateness_scorers.HANG_NAME),
    )


# --- the worker: one kind, one of run / Pool, in a throwaway process --------------------------


def _emit(**report: Any) -> None:
    print(json.dumps(report), flush=True)


def _leftovers(tag: str, *, hangs_only: bool) -> dict[str, int]:
    """What is left right after a call (and :data:`RECHECK_S` later, if anything was)."""
    me = os.getpid()

    def count() -> tuple[int, int, int]:
        live, zombies = tagged(tag)
        running = [
            p
            for p in live
            if p.pid != me and (not hangs_only or p.comm == lateness_scorers.HANG_NAME)
        ]
        if hangs_only:
            zombies = [p for p in zombies if p.comm == lateness_scorers.HANG_NAME]
        # Fifty killed forks are reaped by the dozen between the listing and these reads: a
        # process gone by now is neither running nor dying.
        fates = [fate(p.pid) for p in running]
        return len(running) - fates.count("gone"), fates.count("killed"), len(zombies)

    running, dying, zombies = count()
    later = (0, 0, 0)
    if running or zombies:
        time.sleep(RECHECK_S)
        later = count()
    kill_tagged(tag, frozenset({me}), hangs_only=hangs_only)
    return {
        "running": running,
        "killed": dying,
        "zombies": zombies,
        "running_later": later[0],
    }


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]


def worker(mode: str, kind: str, plan: Plan, tag: str, scratch: str) -> NoReturn:
    die_with_parent()
    resource.setrlimit(resource.RLIMIT_CPU, (WORKER_CPU_S, WORKER_CPU_S + 2))
    score = lateness_scorers.score
    if mode == "run":
        run(score, ("fast", scratch), budget=BUDGET_S)  # warm-up, not recorded
        _emit(type="ready")
        for _ in range(plan.run_reps):
            start = time.perf_counter()
            try:
                out = run(score, (kind, scratch), budget=BUDGET_S)
            except BaseException as exc:
                _emit(type="rep", raised=_describe(exc), **_leftovers(tag, hangs_only=False))
                continue
            late = (time.perf_counter() - start - BUDGET_S) * 1000
            _emit(
                type="rep",
                late_ms=[late],
                statuses=[str(out.status)],
                **_leftovers(tag, hangs_only=False),
            )
    else:
        pool = Pool(f"{HERE / 'lateness_scorers.py'}:score", workers=WORKERS, budget=BUDGET_S)
        pool.map([("fast", scratch)] * 4)  # warm-up, not recorded
        _emit(type="ready")
        items = [(kind, scratch)] * plan.hangs_per_map + [("fast", scratch)]
        for _ in range(plan.pool_maps):
            start = time.perf_counter()
            try:
                outs = pool.map(items)
            except BaseException as exc:
                _emit(type="rep", raised=_describe(exc), **_leftovers(tag, hangs_only=True))
                with contextlib.suppress(BaseException):
                    pool.close()
                pool = Pool(
                    f"{HERE / 'lateness_scorers.py'}:score", workers=WORKERS, budget=BUDGET_S
                )
                continue
            map_s = time.perf_counter() - start
            _emit(
                type="rep",
                late_ms=[(o.wall_s - BUDGET_S) * 1000 for o in outs[:-1]],
                map_over_ideal_ms=(map_s - plan.ideal_map_s) * 1000,
                statuses=[str(o.status) for o in outs[:-1]],
                fast_status=str(outs[-1].status),
                **_leftovers(tag, hangs_only=True),
            )
        start = time.perf_counter()
        pool.close()
        close_ms = (time.perf_counter() - start) * 1000
        _emit(type="close", close_ms=close_ms, **_leftovers(tag, hangs_only=False))
    _emit(type="done")
    sys.stdout.flush()
    os._exit(0)


# --- the benchmark's side --------------------------------------------------------------------


@dataclass
class Measured:
    late_ms: list[float] = field(default_factory=list)
    map_over_ideal_ms: list[float] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)
    fast_statuses: dict[str, int] = field(default_factory=dict)
    reps: int = 0
    running: int = 0
    #: Of the most ``running`` seen: how many were killed, not yet dead (see :func:`fate`).
    killed: int = 0
    zombies: int = 0
    running_later: int = 0
    #: The most processes of a hang left able to run code (not :func:`killed`) in one rep.
    alive: int = 0
    raised: list[str] = field(default_factory=list)
    close: dict[str, float] | None = None
    #: Seconds the caller was stuck before it was killed, when it was.
    stuck_s: float | None = None
    #: It was stuck in ``Pool.close()``, after every map had come back.
    stuck_in_close: bool = False
    failure: str | None = None


def _lines(proc: subprocess.Popen[bytes], windows: Iterator[float]) -> Iterator[str | None]:
    """The worker's lines; None when the next one did not come within its window."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buffer = b""
    window = next(windows)
    deadline = time.monotonic() + window
    while True:
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line.decode("utf-8", "replace")
            window = next(windows)
            deadline = time.monotonic() + window
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            yield None
            return
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return
        buffer += chunk


def measure(mode: str, kind: str, plan: Plan) -> Measured:
    result = Measured()
    tag = uuid.uuid4().hex
    scratch = tempfile.mkdtemp(prefix="bench-lateness-")
    rep_window = (BUDGET_S if mode == "run" else plan.ideal_map_s) + plan.stuck_after_s

    def windows() -> Iterator[float]:
        yield READY_WINDOW_S
        while True:
            yield rep_window

    command = [sys.executable, __file__, "--worker", mode, kind, "--tag", tag, "--scratch"]
    # stderr to a file, not a pipe: a pipe's write end would be held open by whatever of the
    # worker's processes outlived it, and reading it to EOF would wait for them.
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [*command, scratch, *(["--quick"] if plan is QUICK else [])],
            stdout=subprocess.PIPE,
            stderr=err,
            env={**os.environ, TAG_VAR: tag},
            start_new_session=True,
        )
        ready_at = 0.0
        try:
            for line in _lines(proc, windows()):
                if line is None:
                    if ready_at:
                        result.stuck_s = rep_window
                        result.stuck_in_close = mode == "pool" and result.reps == plan.pool_maps
                    else:
                        result.failure = f"no ready line within {READY_WINDOW_S:g} s"
                    break
                report = json.loads(line)
                if report["type"] == "ready":
                    ready_at = time.monotonic()
                elif report["type"] == "rep":
                    _add(result, report)
                elif report["type"] == "close":
                    result.close = report
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            # The pool's zygote and the guard's children run in sessions of their own: the
            # tag finds them, and whatever they left.
            kill_tagged(tag, hangs_only=False)
            assert proc.stdout is not None
            proc.stdout.close()
            proc.wait()
            shutil.rmtree(scratch, ignore_errors=True)
        err.seek(0)
        tail = err.read().decode("utf-8", "replace").strip().splitlines()[-1:]
    if result.stuck_s is None and result.failure is None and proc.returncode != 0:
        result.failure = f"worker exited {proc.returncode}: {(tail or ['(no stderr)'])[0][:200]}"
    return result


def _add(result: Measured, report: dict[str, Any]) -> None:
    result.reps += 1
    if report["running"] >= result.running:
        result.running, result.killed = report["running"], report["killed"]
    result.alive = max(result.alive, report["running"] - report["killed"])
    result.zombies = max(result.zombies, report["zombies"])
    result.running_later = max(result.running_later, report["running_later"])
    if "raised" in report:
        result.raised.append(report["raised"])
        return
    result.late_ms += report["late_ms"]
    if "map_over_ideal_ms" in report:
        result.map_over_ideal_ms.append(report["map_over_ideal_ms"])
    for status in report["statuses"]:
        result.statuses[status] = result.statuses.get(status, 0) + 1
    if "fast_status" in report:
        fast = report["fast_status"]
        result.fast_statuses[fast] = result.fast_statuses.get(fast, 0) + 1


def p99(values: list[float]) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def late_cell(result: Measured, plan: Plan) -> str:
    if result.failure:
        return f"**failed**: {result.failure}"
    if result.stuck_s is not None and not result.stuck_in_close:
        text = f"**never** (caller stuck > {result.stuck_s:.1f} s)"
        if result.late_ms:
            text += f" after {len(result.late_ms)} answered"
        return text
    if not result.late_ms:
        return "-"
    values = result.late_ms
    return f"{statistics.median(values):.0f} / {p99(values):.0f} / {max(values):.0f}"


def map_cell(result: Measured) -> str:
    if result.failure or not result.map_over_ideal_ms:
        return "-"
    values = result.map_over_ideal_ms
    return f"{statistics.median(values):.0f} / {p99(values):.0f} / {max(values):.0f}"


def left_cell(run_result: Measured, pool_result: Measured) -> str:
    def part(label: str, r: Measured) -> str:
        if not r.reps:
            return f"{label} -"
        text = f"{label} {r.running}"
        if r.running:
            text += (
                f" ({r.killed} killed, not yet dead; {r.running_later} alive {RECHECK_S:g} s later)"
            )
        if r.zombies:
            text += f", {r.zombies} zombie(s)"
        return text

    cells = [part("run", run_result), part("Pool", pool_result)]
    if pool_result.close is not None:
        closed = pool_result.close
        cells.append(
            f"close {int(closed['running'])}"
            + (f", {int(closed['zombies'])} zombie(s)" if closed["zombies"] else "")
        )
    return "; ".join(cells)


def verdict(run_result: Measured, pool_result: Measured, plan: Plan) -> str:
    misses = []
    for label, r in (("run", run_result), ("Pool", pool_result)):
        if r.failure:
            misses.append(f"{label} failed")
        elif r.stuck_in_close:
            misses.append("close() never returned")
        elif r.stuck_s is not None:
            misses.append(f"{label} never")
        elif r.raised:
            misses.append(f"{label} raised")
        elif r.late_ms and p99(r.late_ms) > TARGET_LATE_MS:
            misses.append(f"{label} p99 +{p99(r.late_ms):.0f} ms")
        # Killed (SIGKILL pending, or exiting) is not running: such a process runs no code of
        # its own, and the kernel may still be tearing it down; it must be gone soon after.
        if r.alive or r.running_later:
            misses.append(f"{label} left {max(r.alive, r.running_later)} running")
    if pool_result.map_over_ideal_ms:
        over = p99(pool_result.map_over_ideal_ms)
        if over > TARGET_LATE_MS * plan.rounds:
            misses.append(f"map p99 +{over:.0f} ms over ideal")
    if pool_result.close is not None and pool_result.close["running"]:
        misses.append("close left processes")
    return "yes" if not misses else "**no**: " + ", ".join(misses)


def notes(run_result: Measured, pool_result: Measured) -> str:
    found = []
    for label, r in (("run", run_result), ("Pool", pool_result)):
        odd = {s: n for s, n in r.statuses.items() if s != str(Status.TIMEOUT)}
        if odd:
            found.append(f"{label}: " + ", ".join(f"{n} {s}" for s, n in sorted(odd.items())))
        if r.raised:
            found.append(f"{label} raised {len(r.raised)}x: {r.raised[0]}")
    fast_odd = {s: n for s, n in pool_result.fast_statuses.items() if s != str(Status.OK)}
    if fast_odd:
        found.append(
            "fast item after the hangs: " + ", ".join(f"{n} {s}" for s, n in fast_odd.items())
        )
    if pool_result.stuck_in_close:
        found.append(f"`close()` stuck > {pool_result.stuck_s:.1f} s")
    if pool_result.close is not None and pool_result.close["close_ms"] > 100:
        found.append(f"close took {pool_result.close['close_ms']:.0f} ms")
    if not run_result.statuses and not pool_result.statuses:
        return "; ".join(found) or "no hang call came back"
    return "; ".join(found) or "all hang items timeout"


def table(results: dict[tuple[str, str], Measured], plan: Plan, kinds: list[str]) -> str:
    lines = [
        "| kind | run p50 / p99 / max late (ms) | Pool p50 / p99 / max late (ms) "
        "| Pool map over ideal p50 / p99 / max (ms) | left running | meets target | notes |",
        "| --- | ---: | ---: | ---: | --- | --- | --- |",
    ]
    for kind in kinds:
        label = lateness_scorers.KINDS[kind][0]
        r, p = results[kind, "run"], results[kind, "pool"]
        cells = [
            label,
            late_cell(r, plan),
            late_cell(p, plan),
            map_cell(p),
            left_cell(r, p),
            verdict(r, p, plan),
            notes(r, p),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def teardown_floor_ms(reps: int) -> list[float]:
    """How long the kernel takes from SIGKILL to the reap of a process holding 1 GiB."""
    took = []
    for _ in range(reps):
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                ballast = bytearray(2**30)
                ballast[:: resource.getpagesize()] = b"\x01" * (2**30 // resource.getpagesize())
                os.write(ready_w, b"x")
                time.sleep(60)
            finally:
                os._exit(0)
        os.close(ready_w)
        os.read(ready_r, 1)
        os.close(ready_r)
        start = time.perf_counter()
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        took.append((time.perf_counter() - start) * 1000)
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smoke run: a few repetitions")
    parser.add_argument(
        "--kinds", nargs="+", choices=list(lateness_scorers.KINDS), help="only these"
    )
    parser.add_argument("--worker", nargs=2, metavar=("MODE", "KIND"), help=argparse.SUPPRESS)
    parser.add_argument("--tag", help=argparse.SUPPRESS)
    parser.add_argument("--scratch", help=argparse.SUPPRESS)
    options = parser.parse_args()
    plan = QUICK if options.quick else FULL
    if options.worker:
        mode, kind = options.worker
        worker(mode, kind, plan, options.tag, options.scratch)

    load_start = os.getloadavg()
    started = time.perf_counter()
    results: dict[tuple[str, str], Measured] = {}
    kinds = options.kinds or list(lateness_scorers.KINDS)
    for kind in kinds:
        for mode in ("run", "pool"):
            results[kind, mode] = measure(mode, kind, plan)
    print(table(results, plan, kinds))
    print()
    if "touch_gib" in kinds:
        floor = teardown_floor_ms(plan.run_reps)
        print(
            f"The kernel's own floor for the 1 GiB row, unguarded: from `SIGKILL` to the reap of "
            f"a plain forked process that touched 1 GiB, p50 / p99 / max "
            f"{statistics.median(floor):.0f} / {p99(floor):.0f} / {max(floor):.0f} ms over "
            f"{len(floor)} processes (`run` waits for that reap, so that no zombie is left)."
        )
        print()
    print(
        f"Budget {BUDGET_S:g} s. run: {plan.run_reps} calls per kind; Pool(workers={WORKERS}): "
        f"{plan.pool_maps} maps per kind of {plan.hangs_per_map} hang items and one fast item "
        f"(ideal map time {plan.ideal_map_s:g} s = {plan.rounds} round(s) of the budget). "
        f"Late = wall time minus the budget: measured in the caller for run, the item's "
        f"`wall_s` for Pool. Target: p99 late <= {TARGET_LATE_MS:g} ms for run and Pool items, "
        f"map p99 over ideal <= {TARGET_LATE_MS:g} ms per round, nothing left running. "
        f"Left running: the most processes of the hang still alive when control came back, in "
        f"any one repetition (for Pool: the hang's processes, not the pool's own workers), how "
        f"many of them were killed but not yet dead (SIGKILL pending, or taken and the kernel "
        f"tearing the process down: `PF_EXITING`), the most alive "
        f"{RECHECK_S:g} s later, zombies; close: everything left after `Pool.close()`. The "
        f"target counts a killed process as killed, not running (it runs no code "
        f"of its own while the kernel tears it down), and none may be alive {RECHECK_S:g} s "
        f"later."
    )
    print()
    print(
        f"{machine()}; {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}; "
        f"load average {load_start[0]:.2f} / {load_start[1]:.2f} (1 / 5 min) at start, "
        f"{os.getloadavg()[0]:.2f} / {os.getloadavg()[1]:.2f} at end; "
        f"took {time.perf_counter() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
