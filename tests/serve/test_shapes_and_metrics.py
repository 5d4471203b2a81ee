"""The server's answers with a dict scorer, per-sample timing and NeMo Gym's reverify mode, on a
real pool with real hangs (the ASGI app called in process, as uvicorn calls it).

NeMo Gym's shapes read at 07d6b0d: ``BaseMultiRewardVerifyResponse.reward_components``, one key
set for every task, and its aggregate metrics reading top-level numbers only
(nemo_gym/base_resources_server.py:100-113), ``GET /reverify_mode`` answering a
``ReverifyMode`` (``stateless``, ``unsupported``, ``unknown``; :71-74,145,187).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_rewardhang.guard import Pool
from pytest_rewardhang.serve import GuardedScoring, RewardApp, contract
from tests.serve._scorers import DICT_SCORER, HANG, SCORER
from tests.serve.test_app import call

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("no_leaks")]

BUDGET = 0.5


@pytest.fixture
def dict_pool() -> Iterator[Pool]:
    with Pool(DICT_SCORER, workers=2, budget=BUDGET) as pool:
        yield pool


def post(app: RewardApp, path: str, body: Any) -> Any:
    code, answer = call(app, "POST", path, json.dumps(body).encode())
    assert code == 200, answer
    return answer


def test_openrlhf_gets_a_dict_scorers_components_lined_up_with_a_hang_before_any(
    dict_pool: Pool,
) -> None:
    app = RewardApp(contract("openrlhf"), GuardedScoring(dict_pool, -1.0))
    # The first request's hang comes before any answer: its own answer still has every key.
    first = post(app, "/get_reward", {"query": [f"{HANG}", "q 42"], "labels": ["1", "q 42"]})
    assert first["rewards"] == [-1.0, 1.0]
    assert first["extra_logs"] == {"acc": [0.0, 1.0], "reward_hang": [1.0, 0.0]}
    # Once learnt, a request of hangs only has the keys too.
    hung = post(app, "/get_reward", {"query": [HANG], "labels": ["1"]})
    assert hung["extra_logs"] == {"acc": [0.0], "reward_hang": [1.0]}


def test_declared_components_are_in_a_default_before_any_answer(dict_pool: Pool) -> None:
    # Every sample of the first request hangs: nothing was learnt, the declared keys hold.
    app = RewardApp(contract("openrlhf"), GuardedScoring(dict_pool, -1.0, ("acc",)))
    hung = post(app, "/get_reward", {"query": [HANG, HANG], "labels": ["1", "2"]})
    assert hung["rewards"] == [-1.0, -1.0]
    assert hung["extra_logs"] == {"acc": [0.0, 0.0], "reward_hang": [1.0, 1.0]}


def test_gym_gets_reward_components_and_top_level_metrics(dict_pool: Pool) -> None:
    app = RewardApp(contract("gym", slow_s=0.2), GuardedScoring(dict_pool, 0.0))
    assert call(app, "GET", "/reverify_mode") == (200, "stateless")
    assert call(app, "POST", "/close", b"{}") == (200, {})  # a session's close: none kept

    def body(text: str) -> dict[str, Any]:
        output = [{"type": "message", "content": [{"type": "output_text", "text": text}]}]
        return {
            "responses_create_params": {"input": "6*7?"},
            "response": {"output": output},
            "expected_answer": "42",
        }

    good = post(app, "/verify", body("42"))
    assert good["reward"] == 1.0
    assert good["reward_components"] == {"acc": 1.0}
    assert (good["reward_hang"], good["reward_slow"]) == (0.0, 0.0)
    hung = post(app, "/verify", body(HANG))
    assert (hung["reward"], hung["reward_status"]) == (0.0, "timeout")
    assert hung["reward_components"] == {"acc": 0.0}
    assert (hung["reward_hang"], hung["reward_slow"]) == (1.0, 1.0)
    assert hung["reward_seconds"] >= BUDGET
    text = call(app, "GET", "/metrics")[1]
    assert "rewardhang_serve_slow_samples_total 1" in text


def test_slime_and_json_report_time_and_the_slow_flag_only_when_asked() -> None:
    with Pool(SCORER, workers=1, budget=BUDGET) as pool:
        plain = RewardApp(contract("slime"), GuardedScoring(pool, 0.0))
        answer = post(plain, "/", {"prompt": "p", "response": "1", "label": "1"})
        assert answer == {"score": 1.0, "status": "ok", "reward_hang": 0.0}
        timed = RewardApp(contract("json", slow_s=0.2), GuardedScoring(pool, 0.0))
        answer = post(timed, "/score", {"samples": [["1", "1"], [HANG, "1"]]})
        metrics = answer["metrics"]
        assert metrics["reward_hang"] == [0.0, 1.0]
        assert metrics["reward_slow"] == [0.0, 1.0]
        assert metrics["reward_seconds"][1] >= BUDGET
