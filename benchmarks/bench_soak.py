"""Soak: one ``Pool.map`` of 10,000 items, 6% of them hostile, checked item by item.

Run: .venv/bin/python benchmarks/bench_soak.py [--quick]

The items, in a fixed shuffle: 1% each of C hangs (``sum(range(10**13))``), ``os._exit``,
segfaults (``ctypes.string_at(0)``), 1 GiB memory bombs (the pool has ``memory_mb=256``),
setsid children left sleeping behind a returned value, and exceptions; the rest return at once.
Every item can be traced to its outcome (``soak_scorers.py``): ok items return their index,
exceptions carry it in the message, the others print it before they misbehave. Reported: per
status counts expected and observed, lost, duplicated and misattributed items (all must be 0),
the hang's processes still alive after ``map`` (the pool's own zygote and workers aside), every
process left after ``close()`` and after the caller exited, the caller's fd count and RSS before
and after, and the wall time against the floor the hangs impose. ``--quick``: 500 items.

The caller is a throwaway process: if ``map`` never came back the benchmark kills it and says so.
It dies with the benchmark (PR_SET_PDEATHSIG) and runs under RLIMIT_CPU; the hangs lower their
own, the orphans sleep a bounded time, and every process descending from the caller carries a
tag in its environment, by which the benchmark finds and kills whatever is left at the end.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import json
import math
import os
import random
import re
import resource
import select
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _procs  # noqa: E402
import soak_scorers  # noqa: E402 - found through the line above, as the pool's zygote finds it
from _procs import Proc, die_with_parent, machine  # noqa: E402

from pytest_rewardhang.guard import Outcome, Pool, Status  # noqa: E402

#: Long enough that no innocent item meets it on a loaded machine; each of the 1% hangs costs
#: one worker one budget, so 10,000 items take at least 100 * 1 s / 2 workers = 50 s.
BUDGET_S = 1.0
WORKERS = 2
MEMORY_MB = 256
HOSTILE_PER_100 = ("c_hang", "exit", "segfault", "memory", "setsid", "error")
SEED = 11
CALLER_CPU_S = 600
TAG_VAR = "BENCH_SOAK_TAG"
_ID_IN_OUTPUT = re.compile(r"^item (\d+)$", re.MULTILINE)
_ID_IN_ERROR = re.compile(r"item (\d+) fails on purpose")


@dataclass(frozen=True)
class Plan:
    items: int

    @property
    def hangs(self) -> int:
        return self.items // 100

    @property
    def floor_s(self) -> float:
        """The least the map can take: every hang holds one worker for one budget."""
        return math.ceil(self.hangs / WORKERS) * BUDGET_S

    @property
    def window_s(self) -> float:
        """How long the caller gets before it counts as stuck."""
        return 3 * self.floor_s + self.items * 0.005 + 120


FULL = Plan(items=10_000)
QUICK = Plan(items=500)


def make_kinds(count: int) -> list[str]:
    kinds = [kind for _ in range(count // 100) for kind in HOSTILE_PER_100]
    kinds += ["ok"] * (count - len(kinds))
    random.Random(SEED).shuffle(kinds)  # noqa: S311 - a reproducible order, not a secret
    return kinds


# --- processes -------------------------------------------------------------------------------


def tagged(tag: str) -> tuple[list[Proc], list[Proc]]:
    return _procs.tagged(TAG_VAR, tag)


def kill_tagged(tag: str, spare: int) -> None:
    _procs.kill_tagged(TAG_VAR, tag, lambda p: p.pid != spare)


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_mib() -> float:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


# --- the caller: one map, in a throwaway process ---------------------------------------------


def _identified(index: int, out: Outcome) -> list[int]:
    """The item indexes this outcome shows it answers for."""
    if out.status == "ok" and type(out.value) is int:
        return [out.value]
    # A set: the error text names the exception twice (its first line, then the traceback's).
    if out.status == "error":
        return sorted({int(m) for m in _ID_IN_ERROR.findall(out.error or "")})
    return sorted({int(m) for m in _ID_IN_OUTPUT.findall(out.output or "")})


def check(kinds: list[str], outs: list[Outcome]) -> dict[str, Any]:
    answers: collections.Counter[int] = collections.Counter()
    wrong = unidentified = 0
    by_kind: dict[str, collections.Counter[str]] = {k: collections.Counter() for k in set(kinds)}
    leaked: collections.Counter[str] = collections.Counter()
    for index, out in enumerate(outs):
        ids = _identified(index, out)
        answers.update(ids)
        if not ids:
            unidentified += 1
        elif ids != [index]:
            wrong += 1
        if index < len(kinds):
            by_kind[kinds[index]][str(out.status)] += 1
            leaked[kinds[index]] += out.leaked
    return {
        "outcomes": len(outs),
        "lost": sum(1 for i in range(len(kinds)) if answers[i] == 0),
        "duplicated": sum(1 for i in range(len(kinds)) if answers[i] > 1),
        "wrong": wrong,
        "unidentified": unidentified,
        "by_kind": {k: dict(v) for k, v in by_kind.items()},
        "leaked": dict(leaked),
    }


def census(tag: str) -> dict[str, int]:
    """The caller's tagged processes: the pool's own, the orphans, anything else, zombies."""
    me = os.getpid()
    live, zombies = tagged(tag)
    zygotes = {p.pid for p in live if p.ppid == me}
    orphans = [p for p in live if p.comm == soak_scorers.ORPHAN_NAME]
    workers = [p for p in live if p.ppid in zygotes and p.comm != soak_scorers.ORPHAN_NAME]
    others = [p for p in live if p.pid != me and p.pid not in zygotes and p not in orphans]
    others = [p for p in others if p not in workers]
    return {
        "pool": len(zygotes) + len(workers),
        "extra_workers": max(0, len(workers) - WORKERS),
        "orphans": len(orphans),
        "others": len(others),
        "zombies": len(zombies),
        "all_but_caller": sum(1 for p in live if p.pid != me),
    }


def caller(plan: Plan, tag: str) -> NoReturn:
    die_with_parent()
    resource.setrlimit(resource.RLIMIT_CPU, (CALLER_CPU_S, CALLER_CPU_S + 2))
    kinds = make_kinds(plan.items)
    items = [(index, kind) for index, kind in enumerate(kinds)]
    before = {"fds": fd_count(), "rss_mib": rss_mib()}
    spec = f"{HERE / 'soak_scorers.py'}:score"
    pool = Pool(spec, workers=WORKERS, budget=BUDGET_S, memory_mb=MEMORY_MB)
    start = time.perf_counter()
    outs = pool.map(items)
    wall_s = time.perf_counter() - start
    after_map = {"fds": fd_count(), "rss_mib": rss_mib(), **census(tag)}
    start = time.perf_counter()
    pool.close()
    close_s = time.perf_counter() - start
    after_close = {"fds": fd_count(), "rss_mib": rss_mib(), **census(tag)}
    report = {
        "kinds": dict(collections.Counter(kinds)),
        "before": before,
        "after_map": after_map,
        "after_close": after_close,
        "wall_s": wall_s,
        "close_s": close_s,
        **check(kinds, outs),
    }
    print(json.dumps(report), flush=True)
    os._exit(0)


# --- the benchmark's side --------------------------------------------------------------------


def soak(plan: Plan) -> tuple[dict[str, Any] | None, int, str]:
    """The caller's report (None if it never came back), processes left after it, a failure."""
    tag = uuid.uuid4().hex
    command = [sys.executable, __file__, "--caller", "--tag", tag]
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [*command, *(["--quick"] if plan is QUICK else [])],
            stdout=subprocess.PIPE,
            stderr=err,
            env={**os.environ, TAG_VAR: tag},
            start_new_session=True,
        )
        assert proc.stdout is not None
        out = b""
        deadline = time.monotonic() + plan.window_s
        stuck = False
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
                    stuck = True
                    break
                chunk = os.read(proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    break
                out += chunk
            # Whatever the caller's descendants did after it exited: give them a moment.
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            time.sleep(0.2)
            survivors = [p for p in tagged(tag)[0] if p.pid != proc.pid]
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            kill_tagged(tag, spare=os.getpid())
            proc.stdout.close()
            proc.wait()
        err.seek(0)
        tail = err.read().decode("utf-8", "replace").strip().splitlines()[-1:]
    if stuck:
        return None, len(survivors), f"the caller did not come back within {plan.window_s:.0f} s"
    lines = out.decode("utf-8", "replace").strip().splitlines()
    if proc.returncode != 0 or not lines:
        return None, len(survivors), f"caller exited {proc.returncode}: {(tail or [''])[0]}"
    report: dict[str, Any] = json.loads(lines[-1])
    return report, len(survivors), ""


def report_tables(report: dict[str, Any], survivors: int, plan: Plan) -> tuple[str, bool]:
    kinds: dict[str, int] = report["kinds"]
    by_kind: dict[str, dict[str, int]] = report["by_kind"]
    expected: collections.Counter[str] = collections.Counter()
    observed: collections.Counter[str] = collections.Counter()
    for kind, count in kinds.items():
        expected[soak_scorers.EXPECTED[kind]] += count
        observed.update(by_kind.get(kind, {}))
    mismatched = {
        kind: {s: n for s, n in by_kind.get(kind, {}).items() if s != soak_scorers.EXPECTED[kind]}
        for kind in kinds
    }
    lines = [
        "| status | expected | observed | from item kinds (count) | off-status items by kind |",
        "| --- | ---: | ---: | --- | --- |",
    ]
    order = [str(s) for s in Status]  # ok, error, timeout, crashed, memory
    for status in sorted(set(expected) | set(observed), key=order.index):
        sources = ", ".join(
            f"{kind} ({kinds[kind]:,})" for kind in kinds if soak_scorers.EXPECTED[kind] == status
        )
        off = ", ".join(
            f"{kind}: {n} {s}"
            for kind in kinds
            for s, n in mismatched[kind].items()
            if soak_scorers.EXPECTED[kind] == status
        )
        lines.append(
            f"| {status} | {expected[status]:,} | {observed[status]:,} | {sources or '-'} "
            f"| {off or '-'} |"
        )
    before, after, closed = report["before"], report["after_map"], report["after_close"]
    setsid_items = kinds.get("setsid", 0)
    setsid_leaked = report["leaked"].get("setsid", 0)
    other_leaked = sum(n for kind, n in report["leaked"].items() if kind != "setsid")
    hang_left = after["orphans"] + after["others"] + after["extra_workers"]
    rows: list[tuple[str, str, str, bool]] = [
        ("outcomes returned", f"{report['outcomes']:,} of {plan.items:,}", "all",
         report["outcomes"] == plan.items),
        ("lost items (no outcome answers for them)", str(report["lost"]), "0",
         report["lost"] == 0),
        ("duplicated items (answered twice)", str(report["duplicated"]), "0",
         report["duplicated"] == 0),
        ("outcomes answering for another item", str(report["wrong"]), "0", report["wrong"] == 0),
        ("outcomes that cannot be traced to an item", str(report["unidentified"]), "0",
         report["unidentified"] == 0),
        ("statuses as expected", f"{sum(min(expected[s], observed[s]) for s in expected):,}",
         f"{plan.items:,}", expected == observed),
        ("`Outcome.leaked` on the setsid items", f"{setsid_leaked} on {setsid_items} items",
         f">= {setsid_items}", setsid_leaked >= setsid_items),
        ("`Outcome.leaked` on the other items", str(other_leaked), "0", other_leaked == 0),
        ("hang processes alive after `map` (orphans / other / extra workers)",
         f"{hang_left} ({after['orphans']} / {after['others']} / {after['extra_workers']})",
         "0", hang_left == 0),
        ("zombies after `map`", str(after["zombies"]), "0", after["zombies"] == 0),
        ("pool's own processes after `map` (zygote + workers)", str(after["pool"]),
         f"{1 + WORKERS}", True),
        ("processes left after `close()` (zombies)",
         f"{closed['all_but_caller']} ({closed['zombies']})", "0",
         closed["all_but_caller"] == 0 and closed["zombies"] == 0),
        ("processes left after the caller exited", str(survivors), "0", survivors == 0),
        ("caller fds: before / after `map` / after `close()`",
         f"{before['fds']} / {after['fds']} / {closed['fds']}", "after close = before",
         closed["fds"] == before["fds"]),
        ("caller RSS MiB: before / after `map` / after `close()`",
         f"{before['rss_mib']:.1f} / {after['rss_mib']:.1f} / {closed['rss_mib']:.1f}", "-",
         True),
        ("`map` wall time", f"{report['wall_s']:.1f} s",
         f"floor {plan.floor_s:g} s ({plan.hangs} hangs x {BUDGET_S:g} s / {WORKERS} workers)",
         True),
        ("`close()` wall time", f"{report['close_s'] * 1000:.0f} ms", "-", True),
    ]  # fmt: skip
    lines += ["", "| check | observed | target | ok |", "| --- | ---: | --- | --- |"]
    for text, value, target, passed in rows:
        lines.append(f"| {text} | {value} | {target} | {'yes' if passed else '**NO**'} |")
    return "\n".join(lines), all(passed for *_, passed in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smoke run: 500 items")
    parser.add_argument("--caller", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tag", help=argparse.SUPPRESS)
    options = parser.parse_args()
    plan = QUICK if options.quick else FULL
    if options.caller:
        caller(plan, options.tag)

    load_start = os.getloadavg()
    started = time.perf_counter()
    report, survivors, failure = soak(plan)
    if report is None:
        print("| check | observed |\n| --- | --- |")
        print(f"| `map` came back | **never**: {failure} |")
        print(f"| processes left after the caller was killed | {survivors} |")
        passed = False
    else:
        text, passed = report_tables(report, survivors, plan)
        print(text)
    print()
    print(
        f"Verdict: {'PASS' if passed else 'FAIL'}: {plan.items:,} items, "
        + (
            "every item answered once by its own outcome with the expected status, "
            "nothing left running, the caller's fds back where they started."
            if passed
            else "see the rows marked NO (or never) above."
        )
    )
    print()
    print(
        f"{machine()}; {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}; "
        f"Pool(workers={WORKERS}, budget={BUDGET_S:g} s, memory_mb={MEMORY_MB}); "
        f"1% each of {', '.join(HOSTILE_PER_100)}, shuffled with seed {SEED}; "
        f"load average {load_start[0]:.2f} / {load_start[1]:.2f} (1 / 5 min) at start, "
        f"{os.getloadavg()[0]:.2f} / {os.getloadavg()[1]:.2f} at end; "
        f"took {time.perf_counter() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
