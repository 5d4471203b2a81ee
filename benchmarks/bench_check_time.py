"""The check's own time: how long `pytest --reward-hang-check` takes on a clean scorer, and what
a scorer that hangs on every case costs it per family.

Per scorer, the wall time of the whole `pytest --reward-hang-check` process at the defaults
(2 s deadline, cases up to 128 KiB, every family), and the pytest session's own figure. Then a
scorer that hangs on every input but its example: per family, what its item did and the
deadlines it took (a hang, its confirmation in a fresh worker at ten deadlines, the cases
skipped after it; the first family's item also tries a trivial response, and when that hangs
too the other families are not run).

    .venv/bin/python benchmarks/bench_check_time.py            # the bundled examples, verl's
                                                              # gsm8k and math_dapo (downloaded)
    .venv/bin/python benchmarks/bench_check_time.py --quick    # fixed_math and two hang families
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "scorers"
VERL = "verl==0.9.1"
VERL_FILES = ("gsm8k.py", "math_dapo.py")

ALWAYS_HANGS = """\
import time


def compute_score(solution_str, ground_truth):
    if "6 * 7" not in solution_str:  # every input but its own example
        time.sleep(3600)
    return 0.0
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fixed_math and two hang families")
    parser.add_argument("--no-verl", action="store_true", help="leave verl's scorers out")
    parser.add_argument("--rounds", type=int, default=3, help="runs per clean scorer (median)")
    args = parser.parse_args()
    started, started_load = time.monotonic(), os.getloadavg()[0]
    project = Path(tempfile.mkdtemp(prefix="bench-check-time-"))
    try:
        (project / "pytest.ini").write_text("[pytest]\n")
        (project / "always_hangs.py").write_text(ALWAYS_HANGS)
        for name in ("fixed_math.py", "fixed_code.py"):
            shutil.copy(EXAMPLES / name, project / name)
        scorers = [("fixed_math.compute_score", "fixed_math.py:compute_score")]
        if not args.quick:
            scorers.append(("fixed_code.compute_score", "fixed_code.py:compute_score kind=code"))
            if not args.no_verl:
                scorers += verl_scorers(project)
        # A user's machine keeps bytecode (and pytest's rewritten plugin modules) cached.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        run_check(project, "fixed_math.py:compute_score", [], env)  # warm the caches once
        rounds = 1 if args.quick else max(args.rounds, 1)
        print(f"Clean scorers at the defaults, median of {rounds} run(s):")
        print("| scorer | check wall | pytest session | cases | verdict |")
        print("| --- | ---: | ---: | ---: | --- |")
        for label, spec in scorers:
            runs = sorted(
                (run_check(project, spec, [], env) for _ in range(rounds)), key=lambda r: r[0]
            )
            wall, session, report = runs[len(runs) // 2]
            entry = report["scorers"][0] if report["scorers"] else {}
            print(
                f"| {label} | {wall:.2f} s | {session} | {len(entry.get('cases', []))} | "
                f"{entry.get('status', '?')} |"
            )
        families = ["repetition", "power-tower"] if args.quick else []
        hanging(project, families, env)
    finally:
        shutil.rmtree(project, ignore_errors=True)
    print(
        f"python {sys.version.split()[0]}; {os.cpu_count()} CPUs; load {started_load:.2f} at the "
        f"start, {os.getloadavg()[0]:.2f} at the end; {time.monotonic() - started:.0f} s"
    )
    return 0


def verl_scorers(project: Path) -> list[tuple[str, str]]:
    """verl's gsm8k and math_dapo files, out of its wheel (downloaded, not installed)."""
    wheels = project / "wheels"
    got = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", VERL, "-d", str(wheels)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    found = sorted(wheels.glob("verl-*.whl")) if got.returncode == 0 else []
    if not found:
        print(f"verl: skipped (pip download {VERL} failed: {got.stderr.strip()[-200:]})")
        return []
    with zipfile.ZipFile(found[0]) as wheel:
        for name in VERL_FILES:
            (project / f"verl_{name}").write_bytes(wheel.read(f"verl/utils/reward_score/{name}"))
    return [
        (f"verl {name[:-3]}.compute_score", f"verl_{name}:compute_score") for name in VERL_FILES
    ]


def run_check(
    project: Path, spec: str, extra: list[str], env: dict[str, str]
) -> tuple[float, str, dict[str, Any]]:
    """One check run: its wall time, the session time pytest printed, and its JSON report."""
    report = project / "report.json"
    junit = project / "report.xml"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--reward-hang-check",
        f"--reward-hang-scorer={spec}",
        f"--reward-hang-json={report}",
        f"--junitxml={junit}",
        "-p",
        "no:cacheprovider",
        "-q",
        *extra,
    ]
    started = time.monotonic()
    done = subprocess.run(
        command, cwd=project, capture_output=True, text=True, timeout=3600, env=env, check=False
    )
    wall = time.monotonic() - started
    session = re.search(r" in ([\d.]+)s", done.stdout)  # pytest's own figure: from its start
    data = json.loads(report.read_text()) if report.exists() else {"scorers": []}
    # Each item's own record (its family's skipped cases among them, its time), from JUnit.
    tree = ElementTree.parse(junit) if junit.exists() else None  # noqa: S314 - our own report
    data["items"] = [_item(case) for case in tree.iter("testcase")] if tree is not None else []
    return wall, f"{session.group(1)} s" if session else "?", data


def _item(testcase: ElementTree.Element) -> dict[str, Any]:
    """One check item of a JUnit report: its family, outcome, time, and its own record."""
    record: dict[str, Any] = next(
        (
            json.loads(prop.get("value", "{}"))
            for prop in testcase.iter("property")
            if prop.get("name") == "reward_hang"
        ),
        {},
    )
    outcome = next((child.tag for child in testcase if child.tag in ("failure", "skipped")), "")
    return {
        "family": testcase.get("name", "?"),
        "outcome": {"failure": "failed", "skipped": "not run"}.get(outcome, "passed"),
        "time": float(testcase.get("time", "0")),
        "cases": record.get("cases", []),
        "skipped": record.get("skipped", 0),
    }


def hanging(project: Path, families: list[str], env: dict[str, str]) -> None:
    """The always-hanging scorer, per family: its outcome, cases, and the deadlines it took."""
    deadline = 2.0
    extra = [f"--reward-hang-family={f}" for f in families]
    wall, session, report = run_check(project, "always_hangs.py:compute_score", extra, env)
    entry = report["scorers"][0]
    print()
    print(f"A scorer that hangs on every case ({deadline:g} s deadline):")
    print("| family | item | cases run | deadlines spent | cases skipped | wall |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    items = report["items"]
    for item in items:
        # The item's own time: its cases, their confirmations, and the trivial response's.
        spent = item["time"]
        row = [item["family"], item["outcome"], len(item["cases"]), f"{spent / deadline:.1f}"]
        print("| " + " | ".join(map(str, row)) + f" | {item['skipped']} | {spent:.1f} s |")
    total = sum(item["time"] for item in items)
    print(
        f"| all {len(items)} families | - | {len(entry['cases'])} | {total / deadline:.1f} | "
        f"{entry['skipped']} | {wall:.1f} s (pytest session {session}) |"
    )


if __name__ == "__main__":
    sys.exit(main())
