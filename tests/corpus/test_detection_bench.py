"""The detection benchmark still runs end to end (``--quick``). Its figures are never asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_detection.py"


@pytest.mark.timeout(300)
def test_quick_detection_benchmark_prints_the_table() -> None:
    # About 40 s on an idle 2-core machine: one seed, three planted scorers and a clean one.
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True,
        text=True,
        timeout=290,  # inside the pytest-timeout bound, so a hang fails with the output in hand
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert header[:3] == ["scorer", "shape", "found"], rows[0]
    assert "false timeouts" in header
    names = [row.split("|")[1].strip() for row in rows[2:]]
    assert names == ["poly2_claims", "poly3_plan", "sympy_extract", "clean_tags"], done.stdout
    assert "Found on every seed:" in done.stdout
    assert "CPUs" in done.stdout
