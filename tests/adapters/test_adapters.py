"""The verl and TRL adapters, driven the way the trainers drive them, against real hangs."""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import pytest_rewardhang.adapters.verl as verl_adapter
from pytest_rewardhang.adapters import close_pools
from pytest_rewardhang.adapters.trl import pooled_reward

BUDGET = 0.5
SLACK = 0.1

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("no_leaks", "closed_pools")]

REWARD_FILE = """
import os

def compute_score(data_source, solution_str, ground_truth, extra_info=None, scale=1.0):
    if "hang" in solution_str:
        return sum(range(10**13))
    if solution_str == "raise":
        raise ValueError("cannot parse")
    if solution_str == "whose child":
        return float(os.getppid())
    return scale * float(solution_str.strip().split()[-1] == ground_truth)


def accuracy(completion, ground_truth, **kwargs):
    if isinstance(completion, list):  # conversational: the last message is the answer
        completion = completion[-1]["content"]
    if "hang" in completion:
        return float(sum(range(10**13)))
    return float(completion.strip().endswith(ground_truth))
"""


@pytest.fixture
def closed_pools() -> Iterator[None]:
    yield
    close_pools()  # before no_leaks looks for leftover processes


@pytest.fixture
def reward_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_reward.py"
    path.write_text(REWARD_FILE)
    return path


def load_like_verl(path: Path, name: str, reward_kwargs: dict[str, Any]) -> Callable[..., Any]:
    """What verl's get_custom_reward_fn does with custom_reward_function.path/name/kwargs."""
    spec = importlib.util.spec_from_file_location("custom_module", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return functools.partial(getattr(module, name), **reward_kwargs)


def verl_call(fn: Callable[..., Any], solution: str, truth: str = "42") -> Any:
    """One call the way verl's naive reward manager makes it."""
    return fn(data_source="gsm8k", solution_str=solution, ground_truth=truth, extra_info={"i": 1})


def test_verl_compute_score_from_the_adapter_file(
    reward_file: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hang_log = tmp_path / "hangs.jsonl"
    kwargs = {
        "scorer": f"{reward_file}:compute_score",
        "budget": BUDGET,
        "default": -1.0,
        "hang_log": str(hang_log),
        "scale": 2.0,  # not the guard's: goes on to the scorer
    }
    fn = load_like_verl(Path(verl_adapter.__file__), "compute_score", kwargs)
    assert verl_call(fn, "so the answer is 42") == 2.0
    assert verl_call(fn, "so the answer is 7") == 0.0
    response = "hang " + "x" * 5000
    start = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="pytest_rewardhang.adapters"):
        assert verl_call(fn, response) == -1.0
    assert time.perf_counter() - start <= BUDGET + SLACK
    assert "timeout" in caplog.text
    assert "gsm8k" in caplog.text
    assert "chars]..." in caplog.text  # the long response is shown cut, not in full
    record = json.loads(hang_log.read_text())
    assert record["status"] == "timeout"
    assert record["solution_str"] == response
    assert record["ground_truth"] == "42"
    assert record["stuck_at"][2] == "compute_score"
    assert verl_call(fn, "the answer is 42") == 2.0  # the next call runs on a fresh worker
    with pytest.raises(ValueError, match="cannot parse"):
        verl_call(fn, "raise")


def test_verl_guarded_compute_score_of_a_custom_module_function(reward_file: Path) -> None:
    raw = load_like_verl(reward_file, "compute_score", {}).func  # type: ignore[attr-defined]
    assert raw.__module__ == "custom_module"  # not importable by that name elsewhere
    fn = verl_adapter.guarded_compute_score(raw, budget=BUDGET, default=0.0)
    assert verl_call(fn, "it is 42") == 1.0
    assert verl_call(fn, "hang") == 0.0
    # Served from the zygote (found by its file), not forked from this process.
    assert verl_call(fn, "whose child") != float(os.getpid())


def test_verl_batch_helper_scores_in_order_and_hangs_overlap(reward_file: Path) -> None:
    batch = verl_adapter.guarded_compute_score_batch(
        f"{reward_file}:compute_score", budget=BUDGET, default=0.0, workers=2
    )
    solutions = ["a 42", "hang 1", "b 42", "hang 2", "c 7", "d 42"]
    start = time.perf_counter()
    scores = batch(
        data_sources=["gsm8k"] * 6,
        solution_strs=solutions,
        ground_truths=["42"] * 6,
        extra_infos=[{"i": i} for i in range(6)],
    )
    elapsed = time.perf_counter() - start
    assert scores == [1.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    assert elapsed <= BUDGET + 2 * SLACK  # the two hangs ran side by side


def module_of(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("rewards_for_trl", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_trl_reward_function(reward_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    reward = pooled_reward(f"{reward_file}:accuracy", budget=BUDGET, default=None, workers=2)
    assert reward.__name__ == "accuracy"  # TRL logs each reward under its __name__
    completions = ["x = 42", "hang", "y = 41", "z = 42"]
    assert reward(["42"], ground_truth=["42"]) == [1.0]  # starts the pool
    start = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="pytest_rewardhang.adapters"):
        scores = reward(
            completions,
            prompts=["p"] * 4,
            ground_truth=["42", "42", "42", "42"],
            completion_ids=[[1, 2]] * 4,  # TRL passes these; not shipped to the scorer
            trainer_state=object(),  # nor this, which would not even pickle
        )
    assert time.perf_counter() - start <= BUDGET + SLACK
    assert scores == [1.0, None, 0.0, 1.0]
    assert "accuracy: timeout" in caplog.text
    chat = [[{"role": "assistant", "content": "it is 42"}]]
    assert reward(chat, ground_truth=["42"]) == [1.0]


def test_trl_reward_with_chosen_columns(reward_file: Path) -> None:
    reward = pooled_reward(
        f"{reward_file}:accuracy", budget=BUDGET, columns=["ground_truth"], name="acc"
    )
    assert reward.__name__ == "acc"
    assert reward(["= 3"], ground_truth=["3"], prompts=["unused"]) == [1.0]
