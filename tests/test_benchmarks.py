"""The guard benchmark still runs end to end. Its timings are its output, never asserted here."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_guard.py"


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
