"""Detection: does ``--reward-hang-search`` find planted hangs on every seed?

Run: .venv/bin/python benchmarks/bench_detection.py [--quick] [--seeds 5] [--examples 100]

Every scorer of ``detection_scorers.py`` (planted slow ones of ten shapes, and clean ones) is
written to a file of its own in a throwaway project, so the check harvests one scorer's
vocabulary at a time. For each seed, one real check runs over all of them in a subprocess, at
the default settings (2 s deadline, 131072 max chars, 4096 MiB), with only the search family:

    python -m pytest --reward-hang-check --reward-hang-family=search \\
        --reward-hang-search=N --reward-hang-seed=SEED --reward-hang-scorer=FILE:NAME ...

Each seed gets a fresh project, so no run resumes from another's finds. Per scorer the table
gives: found (planted: the item failed with a HANG on that many seeds), the median number of
probes and seconds into the search at the confirmed hang (from the found case's description),
the median seconds of the whole item (import, harvest, search, the fresh-worker re-run), and
false timeouts (a clean scorer reported past its deadline). Target: every planted hang found on
every seed, no false timeouts.
"""

from __future__ import annotations

import argparse
import inspect
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import detection_scorers  # noqa: E402 - found through the line above

SEEDS = 5
EXAMPLES = 100
QUICK_PLANTED = ("poly3_plan", "poly2_claims", "sympy_extract")
QUICK_CLEAN = ("clean_tags",)
_HEADER = (
    '"""One scorer of benchmarks/detection_scorers.py, alone in its file."""\n\n'
    "from __future__ import annotations\n\nimport asyncio\nimport re\nimport sys\n\n"
)
#: Helpers a scorer calls, copied into its file with it.
_HELPERS = {"recursive_blocks": ["_block"]}
_PROBE = re.compile(r"probe (\d+), ([\d.]+) s into the search")


@dataclass
class Row:
    name: str
    shape: str
    planted: bool
    found: int = 0
    runs: int = 0
    probes: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    item_seconds: list[float] = field(default_factory=list)
    false_timeouts: int = 0
    other: list[str] = field(default_factory=list)


def scorer_source(name: str) -> str:
    parts = [_HEADER]
    if name in _HELPERS:
        parts.append("sys.setrecursionlimit(max(sys.getrecursionlimit(), 100_000))\n\n\n")
        for helper in _HELPERS[name]:
            parts.append(inspect.getsource(getattr(detection_scorers, helper)) + "\n\n")
    parts.append(inspect.getsource(getattr(detection_scorers, name)))
    return "".join(parts)


def run_seed(names: list[str], seed: int, examples: int) -> tuple[dict[str, dict[str, str]], float]:
    """One check over every scorer: per scorer, its item's outcome, time and failure text."""
    with tempfile.TemporaryDirectory(prefix="bench-detection-") as tmp:
        project = Path(tmp)
        (project / "pytest.ini").write_text("[pytest]\n")
        args = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--reward-hang-check",
            "--reward-hang-family=search",
            f"--reward-hang-search={examples}",
            f"--reward-hang-seed={seed}",
            "--junitxml=report.xml",
        ]
        for name in names:
            (project / f"{name}.py").write_text(scorer_source(name))
            args.append(f"--reward-hang-scorer={name}.py:{name}")
        start = time.monotonic()
        done = subprocess.run(
            args, cwd=project, capture_output=True, text=True, timeout=3600, check=False
        )
        took = time.monotonic() - start
        report = project / "report.xml"
        if not report.exists():
            sys.exit(f"seed {seed}: the check wrote no report:\n{done.stdout}\n{done.stderr}")
        items: dict[str, dict[str, str]] = {}
        # Our own check's report, written a moment ago in our own temporary directory.
        for case in ET.parse(report).iter("testcase"):  # noqa: S314
            scorer = case.get("classname", "").split(".")[0]  # "<file stem>.<attr>"
            failure = case.find("failure")
            error = case.find("error")
            problem = failure if failure is not None else error
            items[scorer] = {
                "time": case.get("time", "0"),
                "outcome": "passed" if problem is None else "failed",
                "text": ""
                if problem is None
                else (problem.get("message", "") + (problem.text or "")),
            }
        return items, took


def tally(rows: dict[str, Row], items: dict[str, dict[str, str]]) -> None:
    for name, row in rows.items():
        item = items.get(name)
        row.runs += 1
        if item is None:
            row.other.append("no item")
            continue
        row.item_seconds.append(float(item["time"]))
        text = item["text"]
        hang = item["outcome"] == "failed" and "HANG case search-" in text
        if row.planted and hang:
            row.found += 1
            probe = _PROBE.search(text)
            if probe:
                row.probes.append(int(probe.group(1)))
                row.seconds.append(float(probe.group(2)))
        elif not row.planted and hang:
            row.false_timeouts += 1
        elif item["outcome"] == "failed":
            row.other.append(text.strip().splitlines()[0][:120] if text.strip() else "failed")


def median(values: list[float] | list[int], fmt: str) -> str:
    return format(statistics.median(values), fmt) if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed, four scorers")
    parser.add_argument("--seeds", type=int, default=SEEDS)
    parser.add_argument("--examples", type=int, default=EXAMPLES)
    options = parser.parse_args()
    planted = dict(detection_scorers.PLANTED)
    clean = dict(detection_scorers.CLEAN)
    seeds = options.seeds
    if options.quick:
        planted = {k: v for k, v in planted.items() if k in QUICK_PLANTED}
        clean = {k: v for k, v in clean.items() if k in QUICK_CLEAN}
        seeds = 1
    rows = {name: Row(name, shape, True) for name, shape in planted.items()}
    rows |= {name: Row(name, shape, False) for name, shape in clean.items()}
    load = os.getloadavg()[0]
    total = 0.0
    for seed in range(seeds):
        items, took = run_seed(list(rows), seed, options.examples)
        total += took
        tally(rows, items)
        print(f"seed {seed}: {took:.0f} s", file=sys.stderr, flush=True)
    print(
        f"Detection by `--reward-hang-search {options.examples}` (search family only, default "
        f"deadline and sizes), seeds 0-{seeds - 1}:\n"
    )
    print(
        "| scorer | shape | found | median probes to find | median s to find "
        "| median s per item | false timeouts |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in rows.values():
        found = f"{row.found}/{row.runs}" if row.planted else "clean"
        false = "-" if row.planted else str(row.false_timeouts)
        print(
            f"| {row.name} | {row.shape.replace('|', '/')} | {found} | {median(row.probes, 'g')} "
            f"| {median(row.seconds, '.1f')} | {median(row.item_seconds, '.1f')} | {false} |"
        )
    planted_rows = [r for r in rows.values() if r.planted]
    every = all(r.found == r.runs for r in planted_rows)
    falses = sum(r.false_timeouts for r in rows.values())
    print(
        f"\nFound on every seed: {'yes' if every else '**no**'} "
        f"({sum(r.found for r in planted_rows)}/{sum(r.runs for r in planted_rows)} planted runs); "
        f"false timeouts: {falses}; other failures: {sum(len(r.other) for r in rows.values())}"
    )
    for row in rows.values():
        for what in dict.fromkeys(row.other):
            print(f"- {row.name}: {what}")
    print(
        f"\n{total:.0f} s in all; Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"load average {load:.2f} at start"
    )


if __name__ == "__main__":
    main()
