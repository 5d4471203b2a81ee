"""Defaults shaped like the scorer's answers, and the per-sample metrics, in every adapter.

verl's ``RewardLoopManager.compute_rm_score`` (verl/experimental/reward_loop/reward_loop.py:
281-313 at b178a3cd) gathers every reward worker's results and makes one column of each key of
the *first* sample's ``reward_extra_info``, indexing every other sample with it
(``np.array([info[key] for info in reward_extra_infos])``); ``NaiveRewardManager.run_single``
(reward_manager/naive.py:86-95) makes a dict result's keys that ``reward_extra_info`` and a
number's ``{"acc": number}``. A sample defaulted to a bare number beside dict answers is a
``KeyError: 'score'`` there. Each reward worker is a process of its own (a Ray actor), whose
first sample may crash before any answer: the shape must be known in each process, from a
declared dict ``default`` or the warm-up, so each case runs in a fresh interpreter.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import pytest_rewardhang.adapters.verl as verl_adapter
from pytest_rewardhang.adapters import _shared
from pytest_rewardhang.adapters._state import STATE
from tests.adapters._scorers import BUDGET, spec

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("no_leaks", "closed_pools")]

#: One verl reward worker's process: the adapter (or RewardActor) called as run_single calls it,
#: then compute_rm_score's columns; prints the columns, or the KeyError verl raises.
WORKER = textwrap.dedent(
    """
    import asyncio, json, sys
    from pytest_rewardhang.adapters import close_pools, verl
    from pytest_rewardhang.adapters.ray import RewardActor

    options = json.loads(sys.argv[1])
    path = options.pop("path")
    solutions = ["crash", "so 42", "so 7"]

    def run_single(result):  # naive.py:86-95
        if isinstance(result, dict):
            return {"reward_score": result["score"], "reward_extra_info": dict(result)}
        return {"reward_score": result, "reward_extra_info": {"acc": result}}

    def kwargs(solution):
        return {"data_source": "math_dapo", "solution_str": solution, "ground_truth": "42",
                "extra_info": {}}

    if path == "actor":
        actor = RewardActor(options.pop("scorer"), **options)
        results = [run_single(actor.compute_score(**kwargs(s))) for s in solutions]
        actor.pool.close()
    else:
        fn = verl.guarded_compute_score_async(options.pop("scorer"), **options)

        async def loop():  # one task per sample, in order: the crash is the first answer
            return [run_single(await fn(**kwargs(s))) for s in solutions]

        results = asyncio.run(loop())
    close_pools()
    # Another reward worker's answers come first in the gathered batch (reward_loop.py:290-296).
    other = {"score": 1.0, "acc": True, "pred": "it is 42"}
    infos = [other] + [r["reward_extra_info"] for r in results]  # reward_loop.py:303-306
    try:
        columns = {key: [info[key] for info in infos] for key in infos[0]}
    except KeyError as exc:
        print(json.dumps({"KeyError": str(exc)}))
    else:
        print(json.dumps({"scores": [r["reward_score"] for r in results], "columns": columns}))
    """
)

WARMUP = {"data_source": "math_dapo", "solution_str": "so 42", "ground_truth": "42"}


def in_a_fresh_worker(**options: Any) -> dict[str, Any]:
    options = {"scorer": spec("dapo_crash_first"), "budget": BUDGET, **options}
    done = subprocess.run(
        [sys.executable, "-c", WORKER, json.dumps(options)],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    answer["said"] = "got a bare default before its first dict answer" in done.stderr
    return answer


@pytest.mark.parametrize("path", ["verl", "actor"])
def test_a_crash_before_any_dict_answer_is_verls_key_error_unless_the_shape_is_known(
    path: str,
) -> None:
    # Nothing known: the first answer in the process is the crash, a bare number; the first
    # dict answer says so, naming what to give.
    bare = in_a_fresh_worker(path=path, default=-1.0)
    assert bare == {"KeyError": "'score'", "said": True}
    # Learnt from the warm-up, scored once more when the pool is up.
    learnt = in_a_fresh_worker(path=path, default=-1.0, warmup=WARMUP)
    assert not learnt["said"]
    assert learnt["scores"] == [-1.0, 1.0, 0.0]
    assert learnt["columns"] == {
        "score": [1.0, -1.0, 1.0, 0.0],
        "acc": [True, False, True, False],
        "pred": ["it is 42", "", "so 42", "so 7"],
    }
    # Declared: a dict default is the default as given.
    given = {"score": 0.0, "acc": False, "pred": "[crashed]"}
    declared = in_a_fresh_worker(path=path, default=given)
    assert declared["columns"]["pred"] == ["it is 42", "[crashed]", "so 42", "so 7"]


def test_verl_reports_each_samples_time_and_slow_flag_as_extra_info_columns() -> None:
    """With ``slow_s`` every sample, a number scorer's too, is a dict of one set of keys:
    verl's reward loop logs each as a reward_extra_info column."""
    fn = verl_adapter.guarded_compute_score(spec("compute_score"), budget=BUDGET, slow_s=0.05)
    rows = [fn("gsm8k", text, "42") for text in ("so 42", "nap", "hang")]
    assert [set(row) for row in rows] == [
        {"score", "acc", "reward_hang", "reward_seconds", "reward_slow"}
    ] * 3
    assert [row["score"] for row in rows] == [1.0, 1.0, 0.0]
    assert [row["reward_hang"] for row in rows] == [0.0, 0.0, 1.0]
    assert [row["reward_slow"] for row in rows] == [0.0, 1.0, 1.0]  # nap: 0.1 s, hang: budget
    assert rows[1]["reward_seconds"] >= 0.1
    assert rows[2]["reward_seconds"] >= BUDGET
    dicts = verl_adapter.guarded_compute_score(spec("dapo_score"), budget=BUDGET, slow_s=5.0)
    assert set(dicts("gsm8k", "so 42", "42")) == {
        "score",
        "acc",
        "pred",
        "reward_hang",
        "reward_seconds",
        "reward_slow",
    }
    with pytest.raises(ValueError, match="slow_s must be a positive number"):
        verl_adapter.guarded_compute_score(spec("compute_score"), slow_s=-1)


def test_metric_names_are_one_set_everywhere() -> None:
    from pytest_rewardhang.serve import _contracts

    assert (_shared.HANG_METRIC, _shared.SECONDS_METRIC, _shared.SLOW_METRIC) == (
        _contracts.HANG_METRIC,
        _contracts.SECONDS_METRIC,
        _contracts.SLOW_METRIC,
    )


# --- OpenRLHF: one name for the hang marker, and the timing in extra_logs ----------------------


def test_openrlhf_extra_logs_hold_each_samples_time_and_slow_flag() -> None:
    from pytest_rewardhang.adapters.openrlhf import pooled_reward_func

    reward_func = pooled_reward_func(spec("score"), budget=BUDGET, slow_s=0.05)
    result = reward_func(["nap", "= 42", "hang"], ["", "", ""], ["42"] * 3)
    logs = result["extra_logs"]
    assert set(logs) == {"reward_hang", "reward_seconds", "reward_slow"}
    assert logs["reward_hang"] == [0.0, 0.0, 1.0]
    assert logs["reward_slow"] == [1.0, 0.0, 1.0]
    assert logs["reward_seconds"][0] >= 0.1
    assert logs["reward_seconds"][2] >= BUDGET


# --- TRL: None as the default, metrics through log_metric, AsyncGRPOTrainer --------------------


def grpo_advantages(rewards_per_func: list[list[Any]], num_generations: int) -> list[float]:
    """GRPOTrainer's reward aggregation, with lists for tensors (trl f2cd5771,
    trl/trainer/grpo_trainer.py:1663 ``None`` to NaN; :2676-2690 and :2730 the unscorable mask,
    ``nansum`` over the functions, the group's ``nanmean`` baseline, NaN advantages to 0)."""
    import math

    rows = [[math.nan if r is None else float(r) for r in row] for row in rewards_per_func]
    rewards = [
        math.nan if all(map(math.isnan, row)) else sum(r for r in row if not math.isnan(r))
        for row in rows
    ]
    advantages = []
    for start in range(0, len(rewards), num_generations):
        group = rewards[start : start + num_generations]
        scored = [r for r in group if not math.isnan(r)]
        mean = sum(scored) / len(scored) if scored else math.nan
        advantages += [0.0 if math.isnan(r - mean) else r - mean for r in group]
    return advantages


def test_trl_none_leaves_a_hung_sample_out_of_its_groups_baseline() -> None:
    from pytest_rewardhang.adapters.trl import pooled_reward

    logged: list[tuple[str, float]] = []
    accuracy = pooled_reward(spec("accuracy"), budget=BUDGET, default=None, slow_s=0.05)
    completions = ["so 42", "so 7", "hang", "nap"]
    rewards = accuracy(
        prompts=["6*7?"] * 4,
        completions=completions,
        ground_truth=["42"] * 4,
        log_metric=lambda name, value: logged.append((name, value)),  # GRPOTrainer._log_metric
    )
    assert rewards == [1.0, 0.0, None, 1.0]  # nap scores 1.0
    advantages = grpo_advantages([[r] for r in rewards], num_generations=4)
    # The baseline is the mean of the three scored samples; the hung one gets no advantage.
    assert advantages == pytest.approx([1 / 3, -2 / 3, 0.0, 1 / 3])
    # With 0.0 the hang would have counted as a wrong answer and moved the baseline.
    assert grpo_advantages([[1.0], [0.0], [0.0], [1.0]], 4)[0] == pytest.approx(0.5)
    by_name: dict[str, list[float]] = {}
    for name, value in logged:
        by_name.setdefault(name, []).append(value)
    assert by_name["reward_hang"] == [0.0, 0.0, 1.0, 0.0]
    assert by_name["reward_slow"] == [0.0, 0.0, 1.0, 1.0]
    assert len(by_name["reward_seconds"]) == 4


#: AsyncRolloutWorker's child (trl f2cd5771, trl/experimental/async_grpo/
#: async_rollout_worker.py:918-930,975-990: reward_funcs pickled into a spawned process;
#: :798-828 ``_score_group``: a sync function through ``asyncio.to_thread``, None to NaN).
ASYNC_GRPO_CHILD = textwrap.dedent(
    """
    import asyncio, json, pickle, sys
    from pytest_rewardhang.adapters import close_pools

    reward_func = pickle.loads(sys.stdin.buffer.read())
    kwargs = {
        "completions": ["so 42", "hang"],
        "prompts": ["6*7?"] * 2,
        "completion_ids": [[1], [2]],
        "ground_truth": ["42", "42"],
    }

    async def score_group():
        return list(await asyncio.gather(asyncio.to_thread(reward_func, **kwargs)))

    print(json.dumps(asyncio.run(score_group())))
    close_pools()
    """
)


def test_trl_async_grpo_trainer_pickles_the_reward_into_a_spawned_process() -> None:
    import pickle

    from pytest_rewardhang.adapters.trl import async_pooled_reward, pooled_reward

    accuracy = pooled_reward(spec("accuracy"), budget=BUDGET, default=None)
    done = subprocess.run(
        [sys.executable, "-c", ASYNC_GRPO_CHILD],
        input=pickle.dumps(accuracy),  # AsyncRolloutWorker.start checks that it pickles
        capture_output=True,
        timeout=90,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout.decode().splitlines()[-1]) == [[1.0, None]]
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        pickle.dumps(async_pooled_reward(spec("accuracy")))  # hence the docs' advice


# --- several reward functions, one pool ---------------------------------------------------------


def test_trl_reward_functions_share_one_pool_whose_zygote_imports_them_all() -> None:
    from pytest_rewardhang.adapters.trl import pooled_rewards
    from tests.conftest import children

    more = str(Path(__file__).parent / "_more_scorers.py") + ":length_ok"
    before = children()
    first, second, third = pooled_rewards(
        [spec("imported_by_another"), more, spec("accuracy")], budget=BUDGET, workers=2
    )
    assert [f.__name__ for f in (first, second, third)] == [
        "imported_by_another",
        "length_ok",
        "accuracy",
    ]
    batch = {
        "prompts": ["p"] * 3,
        "completions": ["so 42", "hang", "nap"],
        "ground_truth": ["42"] * 3,
    }
    # Both modules were imported by the zygote before it forked the workers.
    assert first(**batch) == [1.0, 0.0, 1.0]  # the hang defaulted, the others went on
    assert second(**batch) == [1.0, 1.0, 1.0]
    assert third(**batch) == [1.0, 0.0, 1.0]
    started = children() - before
    assert len(started) == 1, "one zygote for the three reward functions"
    zygote = next(iter(started))
    deadline = time.monotonic() + 30  # the hung worker's replacement may be on its way
    while len(children(zygote)) != 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(children(zygote)) == 2  # and its two workers, for all three functions
    assert first.scoring.pool() is third.scoring.pool()
    with pytest.raises(ValueError, match="warmup cannot be given to scorers that share a pool"):
        pooled_rewards([spec("accuracy")], warmup={"completion": "1", "ground_truth": "1"})


# --- EasyR1 and AReaL ---------------------------------------------------------------------------


def easyr1_compute_reward_batch(reward_file: Path, name: str, **kwargs: Any) -> Any:
    """EasyR1's ``AutoRewardManager`` loading the file and ``compute_reward_batch`` (hiyouga/
    EasyR1 b44b311, verl/workers/reward/function.py:76-106,109-134): ``custom_reward_fn`` in
    sys.modules, ``partial(reward_fn, **reward_function_kwargs)``, ``REWARD_TYPE``; then each
    score's ``overall`` as the reward and every key appended to ``reward_metrics``."""
    import collections
    import functools
    import importlib.util

    module_spec = importlib.util.spec_from_file_location("custom_reward_fn", reward_file)
    assert module_spec is not None
    assert module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules["custom_reward_fn"] = module
    try:
        module_spec.loader.exec_module(module)
    finally:
        del sys.modules["custom_reward_fn"]
    assert getattr(module, "REWARD_TYPE", "batch") == "batch"
    reward_fn = functools.partial(getattr(module, name), **kwargs)

    def compute_reward_batch(responses: list[str], truth: str) -> tuple[list[float], Any]:
        inputs = [
            {"response": r, "response_length": len(r), "ground_truth": truth} for r in responses
        ]
        scores = reward_fn(inputs)
        rewards = [score["overall"] for score in scores]
        metrics: dict[str, list[Any]] = collections.defaultdict(list)
        for score in scores:
            for key, value in score.items():
                metrics[key].append(value)
        return rewards, dict(metrics)

    return compute_reward_batch


def test_easyr1_batch_reward_each_sample_guarded_overall_kept(tmp_path: Path) -> None:
    reward_file = tmp_path / "guarded_math.py"
    reward_file.write_text(
        "from pytest_rewardhang.adapters.easyr1 import guarded_batch_reward\n\n"
        'REWARD_NAME = "math"\nREWARD_TYPE = "batch"\n'
        f"compute_score = guarded_batch_reward({spec('easyr1_math')!r}, budget={BUDGET},"
        " workers=2, slow_s=5.0,"
        ' warmup={"response": "42", "response_length": 2, "ground_truth": "42"})\n'
    )
    compute = easyr1_compute_reward_batch(reward_file, "compute_score", format_weight=0.5)
    started = time.monotonic()
    # The hang is the first answer the adapter sees: its keys come from the warm-up.
    rewards, metrics = compute(["hang", "<think> so 42", "so 7", "hang again"], "42")
    assert time.monotonic() - started < BUDGET + 5.0  # two hangs side by side, not in turn
    assert rewards == [0.0, 1.0, 0.0, 0.0]  # format_weight went to the scorer
    assert metrics["accuracy"] == [0.0, 1.0, 0.0, 0.0]
    assert metrics["format"] == [0.0, 1.0, 0.0, 0.0]
    assert metrics["reward_hang"] == [1.0, 0.0, 0.0, 1.0]
    assert all(len(column) == 4 for column in metrics.values())
    assert set(metrics) == {
        "overall",
        "format",
        "accuracy",
        "reward_hang",
        "reward_seconds",
        "reward_slow",
    }
    with pytest.raises(ValueError, match="cannot parse"):
        compute(["raise"], "42")


async def areal_rlvr_rewards(wrapper: Any, completions: list[str]) -> list[Any]:
    """AReaL's ``RLVRWorkflow._compute_rewards`` (inclusionAI/AReaL 4aef98d,
    areal/workflow/rlvr.py:84-109): ``await async_reward_fn(prompt_str, completions_str,
    input_tokens, output_tokens, **task_data)``, one per sample of a group, gathered."""
    import asyncio

    calls = [
        wrapper("6*7?", text, [1, 2], [3, 4], answer="42", query_id="q1") for text in completions
    ]
    return list(await asyncio.gather(*calls))


def test_areal_wrapper_call_shape_kills_a_hang_and_never_retries_it(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside AReaL (its own tracker: test_areal_own_code.py), ``slow_s`` has nowhere to
    record: said once, not per sample."""
    import asyncio

    from pytest_rewardhang.adapters.areal import GuardedRewardWrapper

    monkeypatch.setattr(STATE, "said", set())
    monkeypatch.delitem(sys.modules, "areal", raising=False)
    # AsyncRewardWrapper(reward_fn, timeout_seconds=15, max_workers=None, max_retries=3)
    # (areal/api/reward_api.py:64-100), awaited as areal's workflows await it.
    wrapper = GuardedRewardWrapper(
        _scorer_function("areal_gsm8k"),
        timeout_seconds=BUDGET,
        max_workers=2,
        max_retries=3,
        slow_s=0.05,
    )
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="pytest_rewardhang.adapters"):
        rewards = asyncio.run(areal_rlvr_rewards(wrapper, ["so 42", "hang", "so 7", "hang"]))
    # AReaL's own wrapper waits 4 x timeout for each hang and leaves it running; this one
    # kills it at its budget, once.
    assert time.monotonic() - started < BUDGET + 5.0
    assert rewards == [1.0, 0.0, 0.0, 0.0]
    unrecorded = [r for r in caplog.records if "AReaL is not loaded" in r.getMessage()]
    assert len(unrecorded) == 1, [r.getMessage() for r in caplog.records]


def _scorer_function(name: str) -> Any:
    """The scorer itself, as AReaL passes the function (not a spec)."""
    from tests.adapters import _scorers

    return getattr(_scorers, name)


# --- slime, verifiers, AReaL, the generic scorer and the Ray actor: each its trainer's channel ---


def test_slime_notes_each_samples_metrics_and_logs_their_means_with_the_rollout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """slime 624b824a: each ``Sample`` has a ``metadata`` dict (slime/utils/types.py:142), and
    ``log_rollout_data`` calls the custom rollout log function with the samples and the
    rollout's extra metrics, logs that dict with its own unless it returns True
    (slime/observability/rollout_metrics.py:256-271); the default rollout hands it a dict
    (slime/rollout/sglang_rollout.py:470), another may hand None (slime/ray/rollout.py:583-606)."""
    import asyncio
    import types

    from pytest_rewardhang.adapters.slime import log_reward_metrics, pooled_group_rm

    rm = pooled_group_rm(spec("score"), budget=BUDGET, slow_s=0.05)
    samples = [
        types.SimpleNamespace(response=text, label="42", metadata={"row": i})
        for i, text in enumerate(("= 42", "nap", "hang", "= 7"))
    ]
    assert asyncio.run(rm(None, samples)) == [1.0, 1.0, 0.0, 0.0]
    assert [s.metadata["reward_hang"] for s in samples] == [0.0, 0.0, 1.0, 0.0]
    assert [s.metadata["reward_slow"] for s in samples] == [0.0, 1.0, 1.0, 0.0]
    assert samples[1].metadata["row"] == 1  # the dataset's own metadata kept
    extra: dict[str, Any] = {"rollout/kept": 1}
    assert log_reward_metrics(3, None, samples, extra, 9.0) is False  # slime logs on
    assert extra["rollout/reward_hang"] == 0.25
    assert extra["rollout/reward_slow"] == 0.5
    assert extra["rollout/reward_seconds"] >= (BUDGET + 0.1) / 4
    assert extra["rollout/kept"] == 1
    assert log_reward_metrics(4, None, samples, None, 9.0) is False
    assert "returns no metrics dict, so the reward metrics are not logged" in caplog.text


async def verifiers_score_rollout(
    funcs: list[Any], weights: list[float], state: dict[str, Any]
) -> None:
    """verifiers a60a606e ``Rubric.score_rollout`` (verifiers/legacy/rubrics/rubric.py:319-356):
    each function in order, called with what its signature names of ``score_objects``
    (:184-214, :125-141); ``metrics`` by each function's ``__name__``, ``reward`` weighted.
    ``Rubric.add_metric`` (:74-76) appends a function with weight 0."""
    scores = []
    for func in funcs:
        merged = {"completion": state["completion"], "answer": state["answer"], "state": state}
        params = inspect.signature(func).parameters
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            merged = {k: v for k, v in merged.items() if k in params}
        scores.append(float(await func(**merged)))
    state["metrics"] = {func.__name__: score for func, score in zip(funcs, scores, strict=True)}
    state["reward"] = sum(s * w for s, w in zip(scores, weights, strict=True))


#: A rollout state holds clients: it would not pickle, and is never shipped.
LOCK = threading.Lock()


def test_verifiers_metrics_are_metric_only_rubric_functions_reading_the_rollouts_state() -> None:
    import asyncio

    from pytest_rewardhang.adapters.verifiers import pooled_rubric_func

    correct = pooled_rubric_func(spec("correct_answer"), budget=BUDGET, slow_s=0.05)
    kwargs_scorer = pooled_rubric_func(spec("acorrect_answer"), budget=BUDGET)
    assert [m.__name__ for m in kwargs_scorer.metrics] == ["reward_hang"]  # no slow_s, no timing
    funcs = [correct, kwargs_scorer, *correct.metrics]
    weights = [1.0, 1.0, 0.0, 0.0, 0.0]

    async def rollouts(texts: list[str]) -> list[dict[str, Any]]:
        states = [
            {"completion": [{"role": "assistant", "content": t}], "answer": "42", "lock": LOCK}
            for t in texts
        ]
        await asyncio.gather(*(verifiers_score_rollout(funcs, weights, s) for s in states))
        return states

    ok, nap, hang = asyncio.run(rollouts(["= 42", "nap", "hang"]))
    assert [s["reward"] for s in (ok, nap, hang)] == [2.0, 2.0, 0.0]
    assert [s["metrics"]["reward_hang"] for s in (ok, nap, hang)] == [0.0, 0.0, 1.0]
    assert [s["metrics"]["reward_slow"] for s in (ok, nap, hang)] == [0.0, 1.0, 1.0]
    # Seconds add up over the guarded functions of a rollout: the hang and its twin.
    assert hang["metrics"]["reward_seconds"] >= BUDGET
    assert set(hang["reward_hang_metrics"]) == {"correct_answer", "acorrect_answer"}


def test_the_generic_scorer_and_the_ray_actor_give_each_samples_metrics() -> None:
    import asyncio

    from pytest_rewardhang.adapters.generic import PooledScorer
    from pytest_rewardhang.adapters.ray import RewardActor

    scorer = PooledScorer(spec("plain"), budget=BUDGET, slow_s=0.05)
    value, metrics = scorer.score_sync_with_metrics("= 42", "42")
    assert (value, metrics["reward_hang"], metrics["reward_slow"]) == (1.0, 0.0, 0.0)
    assert set(metrics) == {"reward_hang", "reward_seconds", "reward_slow"}
    value, metrics = asyncio.run(scorer.score_with_metrics("hang", "42"))
    assert (value, metrics["reward_hang"], metrics["reward_slow"]) == (0.0, 1.0, 1.0)
    actor = RewardActor(spec("compute_score"), workers=2, budget=BUDGET, slow_s=0.05)
    try:
        kwargs = {"data_source": "gsm8k", "ground_truth": "42"}
        batch = [{"solution_str": text, **kwargs} for text in ("so 42", "nap", "hang")]
        scored = actor.score_with_metrics(batch)
        assert [value for value, _ in scored] == [1.0, 1.0, 0.0]
        assert [m["reward_slow"] for _, m in scored] == [0.0, 1.0, 1.0]
        assert [m["reward_hang"] for _, m in scored] == [0.0, 0.0, 1.0]
        row = actor.compute_score(solution_str="so 42", **kwargs)  # verl's worker call: a dict
        assert (row["score"], row["acc"], row["reward_hang"]) == (1.0, 1.0, 0.0)
    finally:
        actor.pool.close()
