"""Reading the check's JSON report, for the benchmarks that run the check on real scorers."""

from __future__ import annotations

from typing import Any


def case_kind(case: dict[str, Any], deadline: float) -> str:
    """What one case of the report came to: ``hang`` (its fresh worker still ran it at ten
    deadlines), ``slow`` (past the deadline, and its fresh worker finished it past the deadline
    too), ``false`` (a timeout its fresh worker finished under the deadline), else its status.
    """
    status = case["status"]
    if status != "timeout":
        return str(status)
    if case.get("hang", case.get("fresh_status") == "timeout"):  # reports before "hang" said it
        return "hang"
    if (case.get("fresh_wall_s") or 0) > deadline:
        return "slow"
    return "false"
