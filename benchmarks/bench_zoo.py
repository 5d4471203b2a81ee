"""The hang zoo: the check at its defaults on reward functions that registry packages ship.

Run: .venv/bin/python benchmarks/bench_zoo.py [--quick] [--workdir DIR] [--no-install]
     [--only ID] [--jobs N] [--json PATH] [--reuse] [--dry] [-- PYTEST_ARGS]

Optional, needs the network to the package index, and is never run by the default test suite.
It makes a virtual environment of its own (``WORKDIR/venv``, kept and reused; ``WORKDIR`` is
``.zoo/`` in the checkout unless ``--workdir`` says otherwise), installs each package of
``benchmarks/zoo/scorers.toml`` at its pinned version with ``--no-deps``, the small packages
their scoring paths import (never torch) and this checkout, then runs ``pytest
--reward-hang-check`` at the default settings once per registered scorer, with the JSON report.

The check tells a hang (still running at ten deadlines in its fresh worker) from a slow case
(past the deadline, ended sooner); the table lists both. Every hang it reports is confirmed
again outside the check: its saved input is replayed in a fresh process (``python -m
pytest_rewardhang repro FILE --deadline 10x``) and counts as confirmed when it is still running
at ten times the deadline. A timeout that replays under the deadline is a false timeout, and the
table says so.

The table: package and version, scorer, the call style the check chose (from its JSON report,
else from the signature as the check reads it), verdict, each hang (case, size, where it was
called, the stuck line, how it was confirmed), ok cases / cases run, the scorer's wall time.
``--quick`` checks the few scorers marked ``quick`` (installing only their packages); ``--dry``
prints the plan and the commands.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import _procs
from _checked import case_kind

REPO = Path(__file__).resolve().parent.parent
ZOO = REPO / "benchmarks" / "zoo"
SPEC_FILE = ZOO / "scorers.toml"
#: One scorer's check never takes longer than this; one that does is reported as such.
SCORER_BOUND_S = 1800
#: A hang is real when its input still runs at this many deadlines, replayed on its own.
CONFIRM_FACTOR = 10
#: The light packages ``--quick`` installs: what its scorers' files import.
QUICK_LIGHT = ("packaging",)
#: A clean verdict needs at least this many cases that ran to the end.
MIN_OK_CASES = 10


@dataclass
class Scorer:
    package: str
    version: str
    line: str  # the ``SPEC key=value ...`` line, as the check takes it
    quick: bool

    @property
    def spec(self) -> str:
        return self.line.split()[0]

    @property
    def keys(self) -> dict[str, str]:
        pairs = (word.partition("=") for word in self.line.split()[1:])
        return {key: value for key, _, value in pairs}

    @property
    def id(self) -> str:
        return self.keys.get("id", self.spec)

    @property
    def function(self) -> str:
        target, _, attr = self.spec.rpartition(":")
        return f"{target.removeprefix('site/').removeprefix('zoo/')}:{attr}"


@dataclass
class Hang:
    case: str
    family: str
    chars: int
    status: str
    context: str
    stuck: str
    saved: str | None
    confirmed: str = ""
    real: bool | None = None


@dataclass
class Row:
    scorer: Scorer
    style: str = "?"
    verdict: str = ""
    problem: str = ""
    hangs: list[Hang] = field(default_factory=list)
    #: The cases the check itself judged slow, not hung: ``case [context] N s`` (its re-run).
    slow: list[str] = field(default_factory=list)
    false_timeouts: list[str] = field(default_factory=list)
    errors: int = 0
    leaks: int = 0
    ok_cases: int = 0
    cases: int = 0
    wall_s: float = 0.0
    growth: list[dict[str, Any]] = field(default_factory=list)
    #: Every case's ``(formula stem, context) -> [(chars, status, wall)]``.
    sizes: dict[str, list[tuple[int, str, float]]] = field(default_factory=dict)


def load_zoo(quick: bool, only: list[str]) -> tuple[list[str], dict[str, str], list[Scorer]]:
    """The light packages, the packages to install and the scorers to check."""
    data = tomllib.loads(SPEC_FILE.read_text(encoding="utf-8"))
    scorers = []
    for name, package in data["package"].items():
        marked = set(package.get("quick", []))
        for line in package["scorers"]:
            scorer = Scorer(name, package["version"], line, quick=False)
            scorer.quick = scorer.id in marked
            scorers.append(scorer)
    if quick:
        scorers = [s for s in scorers if s.quick]
    if only:
        scorers = [s for s in scorers if any(word in s.id for word in only)]
    versions = {s.package: s.version for s in scorers}
    light = list(QUICK_LIGHT) if quick else list(data["light"])
    return light, versions, scorers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=REPO / ".zoo", help="venv and project")
    parser.add_argument("--quick", action="store_true", help="only the scorers marked quick")
    parser.add_argument("--only", action="append", default=[], help="scorers whose id has this")
    parser.add_argument("--no-install", action="store_true", help="use the venv as it is")
    parser.add_argument("--jobs", type=int, default=1, help="scorers checked at once")
    parser.add_argument("--json", type=Path, help="also write every row as JSON here")
    parser.add_argument(
        "--reuse", action="store_true", help="keep the rows of an earlier run of the same lines"
    )
    parser.add_argument("--dry", action="store_true", help="print the plan, run nothing")
    parser.add_argument("pytest_args", nargs="*", help="more arguments for each check (after --)")
    args = parser.parse_args()
    light, versions, scorers = load_zoo(args.quick, args.only)
    workdir = args.workdir.resolve()
    venv, project = workdir / "venv", workdir / "project"
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    pinned = [f"{name}=={version}" for name, version in versions.items()]
    installs = [
        [sys.executable, "-m", "venv", str(venv)],
        [*pip, "--no-deps", *pinned],
        [*pip, "--no-warn-conflicts", *light, "-e", str(REPO)],
    ]
    packages = len(versions)
    print(f"{len(scorers)} scorers from {packages} packages ({SPEC_FILE.relative_to(REPO)})")
    if args.dry:
        print("would run:")
        for command in installs:
            print("  " + shlex.join(command))
        print("then, in WORKDIR/project, per scorer: python -m pytest --reward-hang-check ")
        print("  --reward-hang-scorer='SPEC key=value ...' --reward-hang-json=... (defaults)")
        for scorer in scorers:
            print(f"  {scorer.package} {scorer.version}: {scorer.line}")
        return 0
    started = time.monotonic()
    if not args.no_install:
        if python.exists():
            installs = installs[1:]
        for command in installs:
            print("$ " + shlex.join(command), flush=True)
            subprocess.run(command, check=True, timeout=3600)
    make_project(python, project)
    settings: dict[str, Any] = {}

    def one(scorer: Scorer) -> Row:
        saved = project / f"{scorer.id}.row.json"
        if args.reuse and saved.exists():
            row = load_row(saved)
            if row.scorer.line == scorer.line:
                settings.update(json.loads(saved.read_text())["settings"])
                if any(not hang.confirmed for hang in row.hangs):
                    confirm(python, project, row, settings)
                    saved.write_text(json.dumps({**asdict(row), "settings": settings}))
                return row
        report, log = project / f"{scorer.id}.json", project / f"{scorer.id}.log"
        took = _session_seconds(log) if args.reuse and report.exists() else None
        if took is not None:  # an earlier run's report, not yet confirmed
            row = read_report(python, project, Row(scorer, wall_s=took), report, settings)
        else:
            print(f"checking {scorer.id} ...", flush=True)
            row = check(python, project, scorer, args.pytest_args, settings)
        if row.hangs:
            confirm(python, project, row, settings)
        saved.write_text(json.dumps({**asdict(row), "settings": settings}))
        print(f"  {scorer.id}: {summary(row)}", flush=True)
        return row

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = list(pool.map(one, scorers))
    print()
    print(table(rows))
    print()
    details = hang_details(rows, float(settings.get("deadline", 2.0)))
    if details:
        print(details)
        print()
    print(totals(rows, packages, time.monotonic() - started))
    print(
        f"settings: {json.dumps(settings)}; jobs {args.jobs}; extra pytest args: "
        f"{shlex.join(args.pytest_args) or 'none'}"
    )
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{installed(python)}; {_procs.machine()}, load average {load}")
    print(f"workdir: {workdir}")
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(row) for row in rows], indent=1))
    return 0


def _session_seconds(log: Path) -> float | None:
    """The pytest session's seconds, from the last line of a check's log."""
    found = re.findall(r" in ([\d.]+)s", log.read_text()) if log.exists() else []
    return float(found[-1]) if found else None


def load_row(path: Path) -> Row:
    """A row an earlier run saved (``--reuse``)."""
    data = json.loads(path.read_text())
    data.pop("settings")
    data["scorer"] = Scorer(**data["scorer"])
    data["hangs"] = [Hang(**hang) for hang in data["hangs"]]
    return Row(**data)


def make_project(python: Path, project: Path) -> None:
    """A rootdir where ``site/`` is the venv's site-packages and ``zoo/`` the spec folder."""
    project.mkdir(parents=True, exist_ok=True)
    # The links must not be collected: site-packages holds the packages' own tests.
    (project / "pytest.ini").write_text("[pytest]\nnorecursedirs = site zoo cases\n")
    found = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    for name, target in (("site", Path(found.stdout.strip())), ("zoo", ZOO)):
        link = project / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)


def check(
    python: Path, project: Path, scorer: Scorer, extra: list[str], settings: dict[str, Any]
) -> Row:
    row = Row(scorer)
    slug = scorer.id
    report = project / f"{slug}.json"
    report.unlink(missing_ok=True)
    command = [
        str(python),
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "--reward-hang-check",
        f"--reward-hang-scorer={scorer.line}",
        f"--reward-hang-json={report}",
        f"--reward-hang-save-dir={project / 'cases'}",
        *extra,
    ]
    start = time.monotonic()
    try:
        done = subprocess.run(
            command, cwd=project, capture_output=True, text=True, timeout=SCORER_BOUND_S
        )
    except subprocess.TimeoutExpired:
        row.verdict = f"check over {SCORER_BOUND_S} s"
        return row
    row.wall_s = time.monotonic() - start
    (project / f"{slug}.log").write_text(done.stdout + done.stderr)
    if not report.exists():
        row.verdict = f"no report (exit {done.returncode})"
        row.problem = _last_line(done.stdout + done.stderr)
        return row
    return read_report(python, project, row, report, settings)


def read_report(
    python: Path, project: Path, row: Row, report: Path, settings: dict[str, Any]
) -> Row:
    scorer = row.scorer
    data = json.loads(report.read_text())
    settings.update(data.get("settings", {}))
    (entry,) = data["scorers"]
    row.verdict = entry["status"]
    row.problem = " ".join(str(entry.get("problem") or "").split())
    row.style = entry.get("style") or call_style(python, project, scorer)
    row.growth = entry.get("growth") or []
    row.cases = len(entry["cases"])
    deadline = float(settings["deadline"])
    for case in entry["cases"]:
        status, kind = case["status"], case_kind(case, deadline)
        row.sizes.setdefault(f"{_stem(case['id'])}|{case.get('context') or ''}", []).append(
            (case["chars"], status, case["wall_s"])
        )
        if kind == "ok":
            row.ok_cases += 1
            row.leaks += bool(case.get("leaked"))
        elif kind == "slow":
            row.slow.append(f"{case['id']} [{case.get('context')}] {case['fresh_wall_s']:.1f} s")
        elif kind == "false":
            row.false_timeouts.append(f"{case['id']} (fresh worker: {case.get('fresh_status')})")
        elif kind in ("hang", "memory", "crashed"):
            row.hangs.append(
                Hang(
                    case["id"],
                    case["family"],
                    case["chars"],
                    status,
                    case.get("context") or "",
                    _where(case),
                    case.get("saved"),
                )
            )
        elif kind == "error":
            row.errors += 1
    return row


def call_style(python: Path, project: Path, scorer: Scorer) -> str:
    """The call style as the check reads it from the signature (its ``describe``)."""
    keys = scorer.keys
    code = (
        "import sys; from pytest_rewardhang.check._calls import describe; "
        "print(describe(sys.argv[1], '.', sys.argv[2] or None, sys.argv[3] or None).style)"
    )
    done = subprocess.run(
        [str(python), "-c", code, scorer.spec, keys.get("response", ""), keys.get("style", "")],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return done.stdout.strip() or "-"  # not importable: the verdict's problem says why


def confirm(python: Path, project: Path, row: Row, settings: dict[str, Any]) -> None:
    """Each hang, replayed from its saved input in a fresh process for up to 10x the deadline.

    Still running then, it is a hang; a replay that ends under the deadline makes it a false
    timeout, and one that ends sooner than 10x a slow case, unless it ran on the main thread
    and runs past 10x off it (the scorer's own signal alarm bounds it only there). No growth
    fit confirms anything: a scorer's alarm holds every size at its own bound where the fit of
    the smaller sizes projects minutes.
    """
    deadline = float(settings["deadline"])
    bound = CONFIRM_FACTOR * deadline
    for hang in row.hangs:
        if hang.confirmed:
            continue  # decided by an earlier run (``--reuse``)
        if hang.saved is None:
            hang.real, hang.confirmed = None, "no saved input"
            continue
        took = replay(python, project, hang.saved, bound)
        if took is None:
            hang.real, hang.confirmed = True, f"repro > {bound:g} s"
            continue
        if isinstance(took, str):
            hang.real, hang.confirmed = None, took
            continue
        shown = f"repro {took:.1f} s"
        if took <= deadline:  # the check's timeout did not come back: a check bug
            hang.real = False
            hang.confirmed = f"FALSE TIMEOUT: {shown}"
        elif (
            hang.context == "main" and replay(python, project, hang.saved, bound, "thread") is None
        ):
            # Bounded on the main thread by the scorer's own signal alarm, which cannot be
            # set on the worker threads verl, OpenRLHF, SkyRL and AReaL score on.
            hang.real = True
            hang.confirmed = f"{shown} on the main thread (its alarm); off it > {bound:g} s"
        else:
            hang.real = None
            hang.confirmed = f"slow, not 10x: {shown}"


def _sizes_of(row: Row, hang: Hang) -> list[tuple[int, str, float]]:
    """Every case of the hang's formula in its context: ``(chars, status, wall)``."""
    return row.sizes.get(f"{_stem(hang.case)}|{hang.context}", [])


def _fit_of(row: Row, hang: Hang) -> dict[str, Any] | None:
    """The growth fit of the formula the case was expanded from (its id is FORMULA-SIZE)."""
    fits = [g for g in row.growth if hang.case.startswith(f"{g['formula']}-")]
    return max(fits, key=lambda g: len(g["formula"])) if fits else None


def replay(
    python: Path, project: Path, saved: str, bound: float, context: str | None = None
) -> float | str | None:
    """Seconds the saved case took in a fresh process; None past ``bound``; else what happened."""
    command = [str(python), "-m", "pytest_rewardhang", "repro", saved, "--deadline", f"{bound:g}"]
    command += ["--context", context] if context else []
    try:
        done = subprocess.run(
            command, cwd=project, capture_output=True, text=True, timeout=bound + 300
        )
    except subprocess.TimeoutExpired:
        return f"repro did not return within {bound + 300:.0f} s"
    text = done.stdout
    if "timeout: still running" in text:
        return None
    took = re.search(r"^ok in ([\d.]+) s", text, re.MULTILINE)
    if took is not None:
        return float(took.group(1))
    return "repro: " + _last_line(text or done.stderr)[:60]


def summary(row: Row) -> str:
    real = sum(h.real is True for h in row.hangs)
    return (
        f"{row.verdict}, style {row.style}, {row.ok_cases}/{row.cases} ok, {len(row.hangs)} "
        f"hangs ({real} confirmed), {len(row.slow)} slow, {len(row.false_timeouts)} retracted, "
        f"{row.wall_s:.0f} s"
    )


def _stem(case_id: str) -> str:
    """The formula a case was expanded from: its id without the ``-SIZE`` at the end."""
    head, _, tail = case_id.rpartition("-")
    return head if tail.isdigit() and head else case_id


def _where(case: dict[str, Any]) -> str:
    own, innermost = case.get("stuck_at"), case.get("innermost")
    if own:
        return f"{Path(own[0]).name}:{own[1]} {own[2]}"
    if innermost:
        return f"(innermost {Path(innermost[0]).name}:{innermost[1]} {innermost[2]})"
    return "(no stack)"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _hang_cell(row: Row) -> str:
    if not row.hangs:
        return "-"
    # One entry per family and stuck line: the smallest case, with how many more there were.
    groups: dict[tuple[str, str], list[Hang]] = {}
    for hang in row.hangs:
        groups.setdefault((hang.family, hang.stuck), []).append(hang)
    parts = []
    for hangs in groups.values():
        first = min(hangs, key=lambda h: h.chars)
        real = "" if all(h.real for h in hangs) else " **not all confirmed**"
        more = f" (+{len(hangs) - 1})" if len(hangs) > 1 else ""
        parts.append(
            f"{first.case} [{first.context}] {first.status} at {first.stuck}; "
            f"{first.confirmed}{real}{more}"
        )
    return "<br>".join(parts)


def table(rows: list[Row]) -> str:
    lines = [
        "| package | scorer | function | call style | verdict | hangs: case [context], stuck "
        "line; confirmed by (+ more cases of that family) | slow, not hung: case [context], "
        "time on its own | ok / cases | retracted | wall |",
        "| --- | --- | --- | --- | --- | --- | --- | ---: | ---: | ---: |",
    ]
    for row in rows:
        verdict = row.verdict
        if row.verdict == "problem":
            verdict += ": " + row.problem[:90]
        elif row.verdict == "ok" and row.ok_cases < MIN_OK_CASES:
            verdict += f" (**only {row.ok_cases} ok cases**)"
        lines.append(
            f"| {row.scorer.package} {row.scorer.version} | {row.scorer.id} | "
            f"`{row.scorer.function}` | {row.style} | {verdict} | {_hang_cell(row)} | "
            f"{'<br>'.join(row.slow) or '-'} | {row.ok_cases} / {row.cases} | "
            f"{len(row.false_timeouts)} | {row.wall_s:.0f} s |"
        )
    return "\n".join(lines)


def hang_details(rows: list[Row], deadline: float) -> str:
    """Per hanging formula: the wall time at each size, and the growth fit's projection."""
    out = []
    for row in rows:
        seen = set()
        for hang in row.hangs:
            key = f"{_stem(hang.case)}|{hang.context}"
            if key in seen:
                continue
            seen.add(key)
            walls = ", ".join(
                f"{_size(chars)}: "
                + (f">{deadline:g} s" if status == "timeout" else f"{wall:.2f} s")
                + ("" if status in ("ok", "timeout") else f" {status}")
                for chars, status, wall in sorted(_sizes_of(row, hang))
            )
            fit = _fit_of(row, hang)
            projected = (
                f"; fit n^{fit.get('exponent')}: {fit.get('projected_s')} s at the largest size"
                if fit
                else ""
            )
            out.append(
                f"- {row.scorer.id} {_stem(hang.case)} [{hang.context}] at {hang.stuck}: "
                f"{walls}{projected}; {hang.confirmed}"
            )
    return "\n".join(out)


def _size(chars: int) -> str:
    return f"{chars // 1024}k" if chars >= 1024 else str(chars)


def totals(rows: list[Row], packages: int, elapsed: float) -> str:
    callable_ = [r for r in rows if r.verdict not in ("problem",) and r.cases]
    hangs = [h for r in rows for h in r.hangs]
    clean = [r for r in rows if r.verdict == "ok"]
    return (
        f"{len(rows)} scorers from {packages} packages; the check called "
        f"{len(callable_)} ({100 * len(callable_) / max(1, len(rows)):.0f}%); "
        f"{sum(bool(r.hangs) for r in rows)} with hangs ({len(hangs)} hanging cases, "
        f"{sum(h.real is True for h in hangs)} confirmed past {CONFIRM_FACTOR}x, "
        f"{sum(h.real is None for h in hangs)} slow but not {CONFIRM_FACTOR}x, "
        f"{sum(h.real is False for h in hangs)} false); "
        f"{sum(bool(r.slow) for r in rows)} slow but not hung ({sum(len(r.slow) for r in rows)} "
        "cases the check judged slow); "
        f"{len(clean)} clean, {sum(r.ok_cases >= MIN_OK_CASES for r in clean)} of them on "
        f">= {MIN_OK_CASES} ok cases; {sum(len(r.false_timeouts) for r in rows)} timeouts "
        f"the check retracted itself (its fresh worker finished); {elapsed:.0f} s in all"
    )


def installed(python: Path) -> str:
    done = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.metadata as m, sys; print(f'Python {sys.version.split()[0]}, ' + "
            "', '.join(f'{p} {m.version(p)}' for p in ('sympy', 'math-verify', "
            "'latex2sympy2_extended', 'pytest-rewardhang')))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout.strip() or "versions unknown"


if __name__ == "__main__":
    sys.exit(main())
