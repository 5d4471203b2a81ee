"""A scorer with verl's signature, for the reward actor's ``compute_score`` (see
tests/adapters/test_ray_actor.py); it hangs in C on the same marker as ``_ray_scorers``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.adapters._ray_scorers import compute_score as exact_match


def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None
) -> float:
    return exact_match(solution_str, ground_truth)


VERL_SCORER = f"{Path(__file__).resolve()}:compute_score"
