"""The adapters' log lines are bounded, as ``serve``'s are: an outcome's description can be
megabytes (its output, its stack dump), and it was logged whole for every sample."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from pytest_rewardhang.adapters import _shared
from pytest_rewardhang.guard import NotStarted, Outcome, Status


@pytest.mark.parametrize("why", ["unpicklable", "pool ended"])
def test_a_defaulted_samples_log_line_and_record_are_bounded(
    why: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    error = "x" * (60 << 20)  # an answer's error: up to RESULT_LIMIT
    if why == "unpicklable":
        out = Outcome(Status.ERROR, error=error, budget=1.0, not_started=NotStarted.UNPICKLABLE)
    else:
        out = Outcome(Status.ERROR, error=error, budget=1.0, pool_ended=True)
    hang_log = tmp_path / "hangs.jsonl"
    with caplog.at_level(logging.WARNING, logger="pytest_rewardhang.adapters"):
        score = _shared.value_or_default(out, -1.0, {"response": "r"}, str(hang_log), "test")
    assert score == -1.0
    [line] = [record.getMessage() for record in caplog.records]
    assert len(line) < _shared.LOG_DETAIL + 500, len(line)
    assert "more characters]" in line
    record = json.loads(hang_log.read_text())
    assert len(record["describe"]) < _shared.LOG_DETAIL + 100
