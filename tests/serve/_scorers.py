"""The scorer the server tests serve: exact match, and a hang in one C call on ``HANG``."""

from __future__ import annotations

from pathlib import Path

HANG = "HANG"


def compute_score(response: str, label: object) -> float:
    """1.0 when the response is the label; on ``HANG``, stuck in C for hours (the GIL held),
    as a degenerate response makes a real scorer."""
    if HANG in response:
        return float(sum(range(10**13)))
    return float(response.strip() == str(label).strip())


SCORER = f"{Path(__file__).resolve()}:compute_score"


def score_dict(response: str, label: object) -> object:
    """math_dapo's shape: a dict with ``score``, a bool and a string beside it."""
    value = compute_score(response, label)
    return {"score": value, "acc": value > 0, "pred": response[-4:]}


DICT_SCORER = f"{Path(__file__).resolve()}:score_dict"
