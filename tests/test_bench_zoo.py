"""The hang zoo benchmark still runs end to end: its plan always, its quick subset with the index.

The quick run installs four packages from the package index into a venv of its own and checks
five of their scorers at the defaults, one of which (verl's search_r1 ``compute_score``) hangs on
unclosed ``<answer>`` tags; the test skips, saying so, where the index cannot be reached.
"""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_zoo.py"
INDEX = "https://pypi.org/simple/verl/"


def table_rows(stdout: str) -> list[list[str]]:
    rows = [line for line in stdout.splitlines() if line.startswith("| ")]
    cells = [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows]
    return [row for row in cells if not all(set(cell) <= set("-: ") for cell in row)]


def index_reachable() -> bool:
    try:
        with urllib.request.urlopen(INDEX, timeout=20):
            return True
    except OSError:
        return False


@pytest.mark.timeout(120)
def test_zoo_benchmark_says_what_it_would_run() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--dry"],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    scorers, packages = int(first.split()[0]), int(first.split()[3])
    assert scorers >= 40, first
    assert packages >= 8, first
    assert "--no-deps" in done.stdout
    assert "torch" not in done.stdout.replace("site/", "")


@pytest.mark.timeout(1800)
def test_quick_zoo_finds_the_search_r1_hang_and_judges_it(tmp_path: Path) -> None:
    if not index_reachable():
        pytest.skip(f"the package index is not reachable ({INDEX})")
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=1750,  # inside the pytest-timeout bound, so a hang fails with the output in hand
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    header, *rows = table_rows(done.stdout)
    assert header[:5] == ["package", "scorer", "function", "call style", "verdict"], header
    verdicts = {row[1]: row for row in rows}
    assert set(verdicts) == {
        "verl.gsm8k",
        "verl.search_r1",
        "trl.think_format_reward",
        "skyrl.gsm8k",
        "lighteval.gsm8k_normalizer",
    }, rows
    search = verdicts.pop("verl.search_r1")
    # Its time grows as n^1.8 to about 50 s at 128 KiB on a quiet 2-core VM: a hang by the
    # check's 10x rule, but one a busy machine's fit can put under the line (16 s once, beside
    # the rest of the slow tier), and then the check says slow. Either way it is caught, at
    # its own line, and each hang is judged again outside the check (a replay or the fit).
    assert search[4] in ("hang", "slow"), search
    if search[4] == "slow":
        assert "tag-soup" in search[6] or "harvested" in search[6], search
    else:
        assert "search_r1_like_qa_em.py:" in search[5], search
        hangs = search[5].split("<br>")
        assert all(re.search(r"repro|fit", hang) for hang in hangs), search
    for row in verdicts.values():
        assert row[4] == "ok", row
        ok, cases = (int(n) for n in row[7].split(" / "))
        assert ok >= 10, row
        assert ok == cases, row
    assert verdicts["trl.think_format_reward"][3] == "trl"
