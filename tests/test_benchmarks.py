"""The benchmarks still run end to end. Their timings are their output, never asserted here."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_rewardhang.guard import Status

# Each runs a benchmark's --quick or --dry mode end to end: seconds to a minute apiece.
pytestmark = pytest.mark.slow

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
BENCH = BENCHMARKS / "bench_guard.py"


def importable(name: str) -> bool:
    # As the benchmark decides: a module that is found but fails to import counts as missing.
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


@pytest.mark.timeout(120)
def test_quick_benchmark_prints_the_table() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True,
        text=True,
        timeout=110,  # inside the pytest-timeout bound, so a hang fails with the output in hand
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    labels = [row.split("|")[1].strip() for row in rows]
    assert labels[0] == "peer"
    for peer in ("unguarded call", "`guard.run`", "`multiprocessing.Process`", "thread + "):
        assert any(label.startswith(peer) for label in labels), (peer, done.stdout)
    assert any(label.startswith("bare `os.fork`") for label in labels), done.stdout
    if importable("pebble"):
        assert any(label.startswith("pebble") for label in labels), done.stdout
    else:
        assert "pebble: skipped" in done.stdout
    assert "`guard.run` overhead:" in done.stdout
    assert "CPUs" in done.stdout


def table_rows(stdout: str) -> list[list[str]]:
    """The cells of every Markdown table row printed, separator rows left out."""
    rows = [line for line in stdout.splitlines() if line.startswith("| ")]
    cells = [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows]
    return [row for row in cells if not all(set(cell) <= set("-: ") for cell in row)]


def run_quick(script: str, bound: float, *more: str) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--quick", *more],
        capture_output=True,
        text=True,
        timeout=bound,  # inside the pytest-timeout bound, so a hang fails with the output in hand
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


LATENESS_KINDS = (
    "C loop",
    "Python loop",
    "sleep",
    "lock",
    "blocked read",
    "stopped self",
    "all catchable signals",
    "8 busy threads",
    "50 busy forks",
    "4 busy setsid grandchildren",
    "output flood",
    "1 GiB touched",
    "vfork wait",
)


@pytest.mark.timeout(180)
def test_quick_lateness_benchmark_prints_the_table() -> None:
    # ~30 s on an idle 2-core machine; a kind that freezes its caller costs a few seconds more.
    stdout = run_quick("bench_lateness.py", bound=170)
    header, *rows = table_rows(stdout)
    assert header[0] == "kind"
    assert header[1].startswith("run p50 / p99 / max")
    assert header[2].startswith("Pool p50 / p99 / max")
    assert header[4:6] == ["left running", "meets target"], header
    assert len(rows) == len(LATENESS_KINDS), stdout
    for row, kind in zip(rows, LATENESS_KINDS, strict=True):
        assert row[0].startswith(kind), (row, kind)
        assert len(row) == len(header), row
        for cell in row[1:3]:  # three numbers, or the caller never got control back
            assert re.fullmatch(r"-?\d+ / -?\d+ / -?\d+", cell) or cell.startswith("**never**"), row
        assert row[5] == "yes" or row[5].startswith("**no**"), row
    assert "CPUs" in stdout
    assert "load average" in stdout


@pytest.mark.timeout(120)
def test_quick_soak_benchmark_prints_the_tables() -> None:
    stdout = run_quick("bench_soak.py", bound=110)
    rows = table_rows(stdout)
    assert rows[0][:3] == ["status", "expected", "observed"], rows[0]
    statuses = {row[0] for row in rows[1:] if row[0] in {s.value for s in Status}}
    assert {"ok", "error", "timeout", "crashed", "memory"} <= statuses, stdout
    checks = {row[0]: row for row in rows if len(row) == 4}
    for check in ("lost items", "duplicated items", "processes left after `close()`", "caller fds"):
        assert any(text.startswith(check) for text in checks), (check, stdout)
    assert all(row[3] in ("yes", "**NO**") for row in checks.values() if row[0] != "check")
    assert re.search(r"^Verdict: (PASS|FAIL): 500 items", stdout, re.MULTILINE), stdout
    assert "CPUs" in stdout


@pytest.mark.timeout(120)
def test_quick_redos_benchmark_prints_the_table() -> None:
    rows = table_rows(run_quick("bench_redos.py", 110))
    assert rows[0][:3] == ["regex", "source", "call"]
    assert len(rows) == 4, rows


def test_real_code_benchmark_says_what_it_would_run() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_real_code.py"), "--dry"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "would run:" in done.stdout


@pytest.mark.timeout(300)
def test_quick_detection_benchmark_prints_the_table() -> None:
    # About 40 s on an idle 2-core machine: one seed, three planted scorers and a clean one.
    stdout = run_quick("bench_detection.py", bound=290)
    rows = table_rows(stdout)
    assert rows[0][:3] == ["scorer", "shape", "found"], rows[0]
    assert "false timeouts" in rows[0]
    names = [row[0] for row in rows[1:]]
    assert names == ["poly2_claims", "poly3_plan", "sympy_extract", "clean_tags"], stdout
    assert "Found on every seed:" in stdout
    assert "CPUs" in stdout


@pytest.mark.timeout(300)
def test_quick_gates_benchmark_finds_the_marker_gates_hang_and_passes_the_clean_one() -> None:
    # Four real check runs: the marker gate and the clean one, each by framed cases and search.
    rows = table_rows(run_quick("bench_gates.py", bound=290))
    assert rows[0] == ["scorer", "gate", "run", "verdict", "case that hung", "wall"], rows[0]
    verdicts = {(row[0], row[2].split(" ")[0]): row[3] for row in rows[1:]}
    assert verdicts[("marker_gate", "framed")] == "hang", rows
    assert verdicts[("clean_gate", "framed")] == "ok", rows
    assert verdicts[("clean_gate", "search")] == "ok", rows


@pytest.mark.timeout(300)
def test_quick_steer_benchmark_finds_the_marker_gates_hang_steered_passes_the_clean_one() -> None:
    # Four real searches: the marker gate and the clean one, each steered and unsteered.
    stdout = run_quick("bench_steer.py", bound=290)
    rows = table_rows(stdout)
    assert rows[0][:4] == ["scorer", "gate", "search", "found"], rows[0]
    found = {(row[0], row[2].split(" ")[0]): row[3] for row in rows[1:]}
    assert found[("marker_gate", "steered")] == "1/1", rows
    assert found[("clean_gate", "steered")] == "0/1", rows
    assert found[("clean_gate", "unsteered")] == "0/1", rows
    assert "steered by: line events + CPU" in stdout or "steered by: instructions" in stdout


@pytest.mark.needs_extra("bench")
@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", [[], ["--isolate"]], ids=["warm", "isolated"])
def test_pool_ab_benchmark_prints_a_median_per_root(mode: list[str]) -> None:
    root = BENCHMARKS.parent
    command = [sys.executable, str(BENCHMARKS / "bench_pool_ab.py"), str(root), *mode]
    done = subprocess.run(
        [*command, "--rounds", "2", "--items", "200"],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = table_rows(done.stdout)
    assert rows[0] == [
        "root",
        "median",
        "rounds",
        "map's wall per item",
        "caller's CPU per item",
    ]
    assert rows[1][0] == f"`{root}`"
    assert len(rows[1][2].split()) == 2
    assert rows[1][3].endswith(" µs")
    assert rows[1][4].endswith(" µs")


@pytest.mark.needs_extra("serve")
@pytest.mark.needs_extra("bench")
@pytest.mark.timeout(170)
def test_quick_serve_benchmark_prints_the_table() -> None:
    # Against this checkout itself: the other package's server is started and loaded too.
    root = BENCHMARKS.parent
    rows = table_rows(run_quick("bench_serve.py", 160, "--against", str(root)))
    assert rows[0][0] == "server"
    labels = [row[0] for row in rows[1:]]
    assert labels == [
        "`pytest-rewardhang serve` (guarded `Pool`)",
        "same app, unguarded (`asyncio.to_thread`)",
        "same app, thread pool + `wait_for` timeout",
        f"the same, the package in `{root}`",
    ]
    for guarded in (rows[1], rows[4]):
        assert guarded[5] == "0", f"the guarded server let a client give up: {guarded}"
        assert not guarded[6].startswith("∞"), guarded


@pytest.mark.timeout(120)
def test_quick_isolate_benchmark_prints_the_table() -> None:
    stdout = run_quick("bench_isolate.py", bound=110)
    header, *rows = table_rows(stdout)
    assert header[0] == "peer"
    assert [row[0] for row in rows] == [
        "warm worker (`Pool`)",
        "isolated (`Pool(isolate=True)`)",
        "fork per call, polled every 50 ms",
    ], stdout
    for row in rows:
        assert re.fullmatch(r"[\d,]+", row[1]), row
    assert "CPUs" in stdout
    assert "load average" in stdout


@pytest.mark.timeout(420)
def test_check_time_benchmark_quick() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_check_time.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = table_rows(done.stdout)
    assert rows[0] == ["scorer", "check wall", "pytest session", "cases", "verdict"], done.stdout
    assert rows[1][0] == "fixed_math.compute_score"
    assert rows[1][-1] == "ok", done.stdout
    families = {row[0]: row for row in rows if row[0] in ("repetition", "power-tower")}
    assert set(families) == {"repetition", "power-tower"}, done.stdout
    # The first family: one case, its deadline, a fresh worker still running it at ten
    # deadlines, and a trivial response hanging too; the other family is then not run.
    assert families["repetition"][1:3] == ["failed", "1"], done.stdout
    assert float(families["repetition"][3]) >= 20, done.stdout
    assert families["power-tower"][1:3] == ["not run", "0"], done.stdout
    total = next(row for row in rows if row[0].startswith("all "))
    assert int(total[4]) > 0, total  # the cases the confirmed hang spared


#: Bounds on the ratios of bench_overhead.py's quick run: a regression catch, not a latency
#: claim. Each is a median over rounds that take turns, on a 2-core machine others may load.
POOL_AT_LEAST_X_MULTIPROCESSING = 0.5
RUN_AT_MOST_X_BARE_FORK = 4.0
ISOLATE_AT_MOST_X_BARE_FORK = 4.0


@pytest.mark.needs_extra("bench")
@pytest.mark.timeout(300)
def test_quick_overhead_benchmark_keeps_guarding_near_its_unguarded_references() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_overhead.py"), "--quick", "--steps", "--profile"],
        capture_output=True,
        text=True,
        timeout=280,  # inside the pytest-timeout bound, so a hang fails with the output in hand
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = dict(re.findall(r"^- (.+): ([\d.]+)x$", done.stdout, re.MULTILINE))
    ratios = {name: float(x) for name, x in found.items()}
    assert set(ratios) == {
        "pool/multiprocessing, fast",
        "pool/multiprocessing, medium",
        "run/bare fork",
        "isolate/bare fork",
        "isolate/fork polled at 50 ms",
        "run/bare fork, calls 100 ms apart",
        "warm pool/bare fork, calls 100 ms apart",
    }, done.stdout
    for scorer in ("fast", "medium"):
        assert ratios[f"pool/multiprocessing, {scorer}"] >= POOL_AT_LEAST_X_MULTIPROCESSING, (
            done.stdout
        )
    assert ratios["run/bare fork"] <= RUN_AT_MOST_X_BARE_FORK, done.stdout
    assert ratios["isolate/bare fork"] <= ISOLATE_AT_MOST_X_BARE_FORK, done.stdout
    assert ratios["isolate/fork polled at 50 ms"] < 1.0, done.stdout
    # A warm worker forks nothing per call: it stays ahead of a fork per call, paused or not.
    assert ratios["warm pool/bare fork, calls 100 ms apart"] < 1.0, done.stdout
    assert "without all five" in done.stdout
    # The page faults of a call, the caller's and its child's, their CPU and the caller's
    # sleeps, counted for each of three peers.
    _, _, after = done.stdout.partition("| peer | caller's page faults per call |")
    faults = table_rows(after.partition("\n\n")[0])
    assert [row[0] for row in faults] == [
        "bare fork + pipe + `waitpid` (reference)",
        "`guard.run`, containment on",
        "`guard.run` without all five",
    ], done.stdout
    numbers = [cell.replace(",", "").replace(".", "", 1) for row in faults for cell in row[1:]]
    assert all(number.isdigit() for number in numbers), faults
    assert "caller (µs an item" in done.stdout
    assert "worker (µs an item" in done.stdout, done.stdout
