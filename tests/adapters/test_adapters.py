"""The verl and TRL adapters, driven as the trainers' own source drives them, on real hangs.

Each trainer is reproduced from its call site, read at these commits (installing the trainers
is too heavy for CI):

- verl b178a3cd (2026-01-29): ``verl/trainer/ppo/reward.py:60-96`` (``get_custom_reward_fn``:
  ``load_extern_object``, then ``partial(_call_with_kwargs[_async], raw_fn, reward_kwargs)``,
  chosen by ``inspect.iscoroutinefunction(raw_fn)``), ``verl/utils/import_utils.py:118-123``
  (the file loaded as module ``custom_module_<hash>``),
  ``verl/experimental/reward_loop/reward_loop.py:104-108`` (one ``asyncio`` task per sample)
  and ``verl/experimental/reward_loop/reward_manager/naive.py:30,66-95`` (awaited when a
  coroutine function, else ``loop.run_in_executor(None, ...)``; a dict result's keys become
  ``reward_extra_info``).
- TRL f2cd5771: ``trl/trainer/grpo_trainer.py:1612-1681`` (``_calculate_rewards``: every
  column as a list plus ``trainer_state``, ``log_extra``, ``log_metric``, ``environments``;
  sync functions called with ``prompts=, completions=, completion_ids=``; those that
  ``inspect.iscoroutinefunction`` finds async gathered on ``self.async_loop``, a loop in
  another thread, through ``asyncio.run_coroutine_threadsafe``) and ``:704``.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import inspect
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import pytest_rewardhang.adapters.verl as verl_adapter
from pytest_rewardhang.adapters import _shared
from pytest_rewardhang.adapters._state import STATE
from pytest_rewardhang.adapters.trl import async_pooled_reward, pooled_reward
from tests.adapters._scorers import BUDGET, SLACK, spec

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("no_leaks", "closed_pools")]


# --- verl, as its reward loop calls a custom reward function ----------------------------------


def load_like_verl(path: Path, name: str, reward_kwargs: dict[str, Any]) -> Callable[..., Any]:
    """``get_custom_reward_fn``: load the file, wrap the function with the reward_kwargs."""
    module_spec = importlib.util.spec_from_file_location(f"custom_module_{hash(path)}", path)
    assert module_spec is not None
    assert module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    raw_fn = getattr(module, name)

    def call_with_kwargs(raw_fn: Any, extra: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        return raw_fn(*args, **{**kwargs, **extra})

    async def call_with_kwargs_async(
        raw_fn: Any, extra: dict[str, Any], *args: Any, **kwargs: Any
    ) -> Any:
        return await raw_fn(*args, **{**kwargs, **extra})

    if not inspect.iscoroutinefunction(raw_fn):
        return functools.partial(call_with_kwargs, raw_fn, reward_kwargs)
    return functools.partial(call_with_kwargs_async, raw_fn, reward_kwargs)


async def run_single(compute_score: Callable[..., Any], solution: str, truth: str) -> Any:
    """``NaiveRewardManager.run_single``'s call of the reward function, and what it keeps."""
    kwargs = {
        "data_source": "gsm8k",
        "solution_str": solution,
        "ground_truth": truth,
        "extra_info": {"num_turns": None, "rollout_reward_scores": {}},
    }
    if inspect.iscoroutinefunction(compute_score):
        result = await compute_score(**kwargs)
    else:
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(None, lambda: compute_score(**kwargs))
    if isinstance(result, dict):
        return {"reward_score": result["score"], "reward_extra_info": dict(result)}
    return {"reward_score": result, "reward_extra_info": {"acc": result}}


def reward_loop(compute_score: Callable[..., Any], solutions: list[str], truth: str = "42") -> Any:
    """``RewardLoopWorker.compute_score_batch``: one task per sample, gathered."""

    async def batch() -> list[Any]:
        tasks = [asyncio.create_task(run_single(compute_score, s, truth)) for s in solutions]
        return list(await asyncio.gather(*tasks))

    return asyncio.run(batch())


def extra_columns(results: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The trainer's reward_extra_info columns: every sample must have sample 0's keys."""
    keys = results[0]["reward_extra_info"].keys()
    return {key: [r["reward_extra_info"][key] for r in results] for key in keys}


@pytest.mark.parametrize("name", ["compute_score", "compute_score_async"])
def test_verl_reward_loop_with_the_adapter_file(
    name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hang_log = tmp_path / "hangs.jsonl"
    kwargs = {
        "scorer": spec("compute_score"),
        "budget": BUDGET,
        "default": -1.0,
        "hang_log": str(hang_log),
        "scale": 2.0,  # not the guard's: goes on to the scorer
    }
    fn = load_like_verl(Path(verl_adapter.__file__), name, kwargs)
    assert inspect.iscoroutinefunction(fn) == (name == "compute_score_async")
    assert [r["reward_score"] for r in reward_loop(fn, ["it is 42", "it is 7"])] == [2.0, 0.0]
    response = "hang " + "x" * 5000
    start = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="pytest_rewardhang.adapters"):
        results = reward_loop(fn, ["so 42", response, "so 42"])
    assert time.perf_counter() - start <= BUDGET + SLACK
    assert [r["reward_score"] for r in results] == [2.0, -1.0, 2.0]
    assert "timeout" in caplog.text
    assert "gsm8k" in caplog.text
    assert "chars]..." in caplog.text  # the long response is shown cut, not in full
    record = json.loads(hang_log.read_text())
    assert record["status"] == "timeout"
    assert record["solution_str"] == response
    assert record["stuck_at"][2] == "_check"
    with pytest.raises(ValueError, match="cannot parse"):
        reward_loop(fn, ["raise"])


def test_verl_async_scorer_hangs_in_c_and_in_await() -> None:
    fn = verl_adapter.guarded_compute_score_async(
        spec("acompute_score"), budget=BUDGET, default=0.0
    )
    assert inspect.iscoroutinefunction(fn)  # what get_custom_reward_fn and naive.py:30 check
    wrapped = load_like_verl(Path(__file__).parent / "_scorers.py", "acompute_score", {})
    assert inspect.iscoroutinefunction(wrapped)
    assert [r["reward_score"] for r in reward_loop(fn, ["= 42"])] == [1.0]
    start = time.perf_counter()
    results = reward_loop(fn, ["hang", "await forever", "= 42"])
    assert time.perf_counter() - start <= BUDGET + SLACK
    assert [r["reward_score"] for r in results] == [0.0, 0.0, 1.0]


def test_verl_hung_sample_of_a_dict_scorer_keeps_the_keys(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fn = verl_adapter.guarded_compute_score(spec("dapo_score"), budget=BUDGET, default=-1.0)
    first = reward_loop(fn, ["the answer is 42"])
    assert first[0]["reward_extra_info"] == {"score": 1.0, "acc": True, "pred": "er is 42"}
    with caplog.at_level(logging.WARNING, logger="pytest_rewardhang.adapters"):
        results = reward_loop(fn, ["so 42", "hang", "so 7"])
    columns = extra_columns(results)  # verl's KeyError, before the fix
    assert columns["score"] == [1.0, -1.0, 0.0]
    assert columns["acc"] == [True, False, False]
    assert columns["pred"] == ["so 42", "", "so 7"]
    # A dict default is returned as given.
    given = {"score": 0.0, "acc": False, "pred": "[hung]"}
    fn = verl_adapter.guarded_compute_score(spec("dapo_score"), budget=BUDGET, default=given)
    assert extra_columns(reward_loop(fn, ["hang"]))["pred"] == ["[hung]"]


def test_verl_ships_only_what_the_scorer_takes() -> None:
    """naive.py:59-64 adds the reward model's tokenizer when a router is set: never shipped
    to a scorer that does not take it (a lock stands in for what would not even pickle)."""
    fn = verl_adapter.guarded_compute_score(spec("compute_score"), budget=BUDGET)
    assert (
        fn(
            "gsm8k",
            "= 42",
            "42",
            {},
            reward_router_address="h:1",
            reward_model_tokenizer=threading.Lock(),
        )
        == 1.0
    )


def test_verl_reward_kwargs_nothing_takes_is_said_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A misspelt guard keyword in reward_kwargs (reward.py:96 merges them into every call) is
    one warning naming it, not dropped in silence; verl's own extras are never reported."""
    monkeypatch.setattr(STATE, "said", set())  # said once per process: not yet, in this test
    fn = load_like_verl(
        Path(verl_adapter.__file__), "compute_score", {"scorer": spec("compute_score"), "budgte": 5}
    )
    with caplog.at_level(logging.WARNING, logger="pytest_rewardhang.adapters"):
        assert [r["reward_score"] for r in reward_loop(fn, ["so 42", "so 7", "so 42"])] == [
            1.0,
            0.0,
            1.0,
        ]
        assert fn("gsm8k", "= 42", "42", {}, reward_router_address="h:1") == 1.0
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1, warned
    assert "'budgte'" in warned[0]
    assert "compute_score" in warned[0]


def test_verl_guarded_compute_score_of_a_custom_module_function() -> None:
    raw = load_like_verl(Path(__file__).parent / "_scorers.py", "compute_score", {})
    fn = verl_adapter.guarded_compute_score(raw.args[0], budget=BUDGET, default=0.0)  # type: ignore[attr-defined]
    assert reward_loop(fn, ["it is 42", "hang"])[0]["reward_score"] == 1.0
    # Served from a zygote, not forked from this process.
    assert reward_loop(fn, ["whose child"])[0]["reward_score"] != float(os.getpid())


def test_verl_legacy_batch_helper_scores_in_order_and_hangs_overlap() -> None:
    # A budget long enough that side by side (about one budget) and one after the other (two)
    # stay apart on a busy machine, whatever the kills and the other items cost.
    budget = 2.0
    batch = verl_adapter.guarded_compute_score_batch(
        spec("compute_score"), budget=budget, default=0.0, workers=2
    )
    assert batch(["gsm8k"], ["= 42"], ["42"]) == [1.0]  # starts the pool
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
    assert elapsed < 2 * budget - 0.5  # the two hangs ran side by side, not one after the other


# --- TRL, as GRPOTrainer._calculate_rewards calls a reward function ----------------------------


class Unpicklable:
    """What TRL's environments are like: objects holding locks, sockets, subprocesses."""

    def __init__(self) -> None:
        self.lock = threading.Lock()


def trl_kwargs(count: int, **columns: list[Any]) -> dict[str, Any]:
    """``_calculate_rewards``'s keyword arguments besides prompts and completions."""
    return {
        **columns,
        "trainer_state": Unpicklable(),
        "log_extra": lambda *a, **k: None,
        "log_metric": lambda *a, **k: None,
        "environments": [Unpicklable() for _ in range(count)],
    }


def trl_call(reward_func: Any, completions: list[Any], **columns: list[Any]) -> list[Any]:
    """One reward function, sync or async, called the way _calculate_rewards calls it."""
    n = len(completions)
    prompts = [f"prompt {i}" for i in range(n)]
    kwargs = trl_kwargs(n, **columns)
    if not inspect.iscoroutinefunction(reward_func):
        return list(
            reward_func(
                prompts=prompts, completions=completions, completion_ids=[[1, 2]] * n, **kwargs
            )
        )
    # self.async_loop: an event loop running in a thread of its own.
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:

        async def run_async_funcs() -> list[Any]:
            coros = [
                reward_func(
                    prompts=prompts, completions=completions, completion_ids=[[1, 2]] * n, **kwargs
                )
            ]
            return list(await asyncio.gather(*coros))

        return list(asyncio.run_coroutine_threadsafe(run_async_funcs(), loop).result()[0])
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@pytest.fixture(params=["sync", "async"])
def make_reward(request: pytest.FixtureRequest) -> Callable[..., Any]:
    return pooled_reward if request.param == "sync" else async_pooled_reward


def test_a_group_whose_samples_kill_the_zygote_or_damage_their_worker_scores_every_sample(
    make_reward: Callable[..., Any],
) -> None:
    # Adjacent samples of one group killing the pool's zygote failed the pool, and the adapter
    # raised CallFailed into the trainer; an item that damaged its worker's descriptors and
    # returned left the pool waiting for ever. Each such sample scores the default, or its own
    # answer where that came first; every other sample scores its own.
    reward = make_reward(spec("accuracy"), budget=5.0, default=-1.0, workers=2)
    killing = ["kill the zygote"] * 4
    completions = [*killing, "= 42", "damage", "= 41", "kill the zygote", "= 42", "damage"]
    start = time.perf_counter()
    scores = trl_call(reward, completions, ground_truth=["42"] * len(completions))
    assert time.perf_counter() - start < 120
    for completion, score in zip(completions, scores, strict=True):
        if completion in ("kill the zygote", "damage"):
            assert score in (-1.0, 0.5), (completion, score)
        else:
            assert score == float(completion.endswith("42")), (completion, score)
    assert trl_call(reward, ["= 42"], ground_truth=["42"]) == [1.0]  # and it goes on


def test_trl_detects_the_async_form() -> None:
    """grpo_trainer.py:704 and :1654 sort reward functions with inspect.iscoroutinefunction."""
    assert inspect.iscoroutinefunction(async_pooled_reward(spec("accuracy")))
    assert not inspect.iscoroutinefunction(pooled_reward(spec("accuracy")))
    assert async_pooled_reward(spec("accuracy")).__name__ == "accuracy"  # TRL's log name


def test_trl_scores_per_sample_with_only_what_the_scorer_takes(
    make_reward: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    # accuracy(completion, ground_truth): no **kwargs, so prompts= would be a TypeError.
    reward = make_reward(spec("accuracy"), budget=BUDGET, default=None, workers=2)
    assert reward.__name__ == "accuracy"
    assert trl_call(reward, ["= 42"], ground_truth=["42"]) == [1.0]  # starts the pool
    start = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="pytest_rewardhang.adapters"):
        scores = trl_call(reward, ["x = 42", "hang", "y = 41", "z = 42"], ground_truth=["42"] * 4)
    assert time.perf_counter() - start <= BUDGET + SLACK
    assert scores == [1.0, None, 0.0, 1.0]
    assert "accuracy: timeout" in caplog.text
    chat = [[{"role": "assistant", "content": "it is 42"}]]
    assert trl_call(reward, chat, ground_truth=["42"]) == [1.0]


def test_isolate_passes_through_to_the_pool_and_a_hang_still_costs_only_its_sample(
    make_reward: Callable[..., Any],
) -> None:
    # The adapters know no kind of scorer: isolate=True is the caller's to ask for.
    reward = make_reward(spec("accuracy"), budget=BUDGET, default=None, workers=1, isolate=True)
    assert trl_call(reward, ["= 42"], ground_truth=["42"]) == [1.0]  # starts the pool
    [pool] = [p for key, p in STATE.pools.items() if key[0] == spec("accuracy")]
    assert pool._engine.processes.isolate
    start = time.perf_counter()
    scores = trl_call(reward, ["x = 42", "hang", "y = 41", "z = 42"], ground_truth=["42"] * 4)
    assert time.perf_counter() - start <= BUDGET + SLACK
    assert scores == [1.0, None, 0.0, 1.0]


def isolated_pools(scorer: str) -> list[bool]:
    """Whether each pool the adapters hold for ``scorer`` isolates its items, in start order."""
    return [p._engine.processes.isolate for key, p in STATE.pools.items() if key[0] == scorer]


def test_verl_isolates_the_samples_of_its_code_data_sources_by_default() -> None:
    # verl's own dispatcher runs the response of these as a program: each such sample gets a
    # process of its own, the others the warm worker; isolate= still decides when given.
    scorer = spec("compute_score")
    score = verl_adapter.guarded_compute_score(scorer, budget=BUDGET, workers=1)
    assert score("codecontests", "= 42", "42") == 1.0
    assert isolated_pools(scorer) == [True]
    assert score("openai/gsm8k", "= 42", "42") == 1.0
    assert isolated_pools(scorer) == [True, False]
    batch = verl_adapter.guarded_compute_score_batch(scorer, budget=BUDGET, workers=1)
    assert batch(["apps", "openai/gsm8k", "taco"], ["= 1", "= 2", "= 3"], ["1", "0", "3"]) == [
        1.0,
        0.0,
        1.0,
    ]
    assert isolated_pools(scorer) == [True, False]
    warm = verl_adapter.guarded_compute_score(scorer, budget=BUDGET, workers=2, isolate=False)
    assert warm("codecontests", "= 42", "42") == 1.0
    assert isolated_pools(scorer) == [True, False, False]


def test_trl_scorer_with_kwargs_gets_columns_never_batch_wide_objects(
    make_reward: Callable[..., Any],
) -> None:
    # everything(completion, **kwargs) counts what it got: prompt and the one column (2 keys,
    # +0.5 for prompt); completion_ids, trainer_state, log_*, environments never shipped.
    reward = make_reward(spec("everything"), budget=BUDGET)
    assert trl_call(reward, ["a", "b"], answer=["1", "2"]) == [2.5, 2.5]
    chosen = make_reward(spec("everything"), budget=BUDGET, columns=["answer"], name="n")
    assert chosen.__name__ == "n"
    assert trl_call(chosen, ["a"], answer=["1"], other=["x"]) == [1.0]


def test_trl_unpicklable_per_sample_column_scores_the_default(
    make_reward: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    reward = make_reward(spec("everything"), budget=BUDGET, default=0.0)
    start = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="pytest_rewardhang.adapters"):
        scores = trl_call(reward, ["a", "b"], tool=[Unpicklable(), "fine"])
    assert time.perf_counter() - start <= BUDGET + SLACK  # never waits for a worker
    assert scores == [0.0, 2.5]
    assert "could not be pickled" in caplog.text


class Unreadable:
    """Pickles in the caller; unpickling it in the worker raises (``int("not a number")``)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (int, ("not a number",))


def test_trl_column_the_worker_cannot_unpickle_scores_the_default(
    make_reward: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    reward = make_reward(spec("everything"), budget=BUDGET, default=0.0)
    with caplog.at_level(logging.WARNING, logger="pytest_rewardhang.adapters"):
        assert trl_call(reward, ["a"], tool=[Unreadable()]) == [0.0]
    assert "could not be unpickled in the worker" in caplog.text
    assert trl_call(reward, ["b"], tool=["fine"]) == [2.5]


def test_trl_scorer_error_worded_like_the_guard_is_raised_not_scored(
    make_reward: Callable[..., Any],
) -> None:
    # Whether a sample reached its scorer is Outcome.not_started, never the error's wording.
    reward = make_reward(spec("accuracy"), budget=BUDGET, default=0.0)
    with pytest.raises(ValueError, match="the item could not be pickled"):
        trl_call(reward, ["raise like the guard"], ground_truth=["42"])


@pytest.mark.timeout(180)
def test_samples_of_a_pool_that_ends_under_them_score_the_default_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A pool that ends before it answers (closed at shutdown, or failed) ended its items with
    # an ERROR, which the adapters raised into the trainer as CallFailed. Now each such sample
    # gets the default, one warning line says why, and the next sample starts a pool again.
    from pytest_rewardhang.adapters.generic import PooledScorer
    from pytest_rewardhang.adapters.ray import RewardActor

    scorer = PooledScorer(spec("sleeps"), budget=30.0, workers=1, default=-1.0)
    actor = RewardActor(spec("sleeps"), budget=30.0, default=-1.0)
    try:
        assert scorer.score_sync("0") == 1.0
        assert actor.score([("0",)]) == [1.0]
        scored: list[Any] = []
        samples = [{"response": "3"}] * 4
        both = [
            threading.Thread(target=lambda: scored.append(scorer.scoring.score_many(samples))),
            threading.Thread(target=lambda: scored.append(actor.score([("3",)] * 4))),
        ]
        with caplog.at_level(logging.WARNING, logger="pytest_rewardhang.adapters"):
            for thread in both:
                thread.start()
            time.sleep(0.5)
            _shared.close_pools()
            actor.pool.close()
            for thread in both:
                thread.join(60)
        assert scored == [[-1.0] * 4] * 2
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 1, said  # one line for the pool, not one per sample
        assert "closed" in said[0], said  # (the actor says so in its statuses)
        assert actor.stats()["statuses"]["error"] == 4
        assert scorer.score_sync("0") == 1.0
        assert actor.score([("0",)]) == [1.0]
    finally:
        _shared.close_pools()
        actor.pool.close()


@pytest.mark.needs_extra("ray")
def test_an_actor_asked_for_its_stats_outside_ray_starts_no_ray() -> None:
    # Ray's runtime context, asked outside Ray, starts a local cluster (its GCS, raylet and
    # dashboard, left running below the caller: no_leaks names them). stats() names no node.
    import ray

    from pytest_rewardhang.adapters.ray import RewardActor

    actor = RewardActor(spec("sleeps"), budget=30.0, default=-1.0)
    try:
        assert actor.score([("0",)]) == [1.0]
        stats = actor.stats()
    finally:
        actor.pool.close()
    assert (stats["node"], stats["statuses"]["ok"]) == (None, 1)
    assert not ray.is_initialized()


# --- what the adapters are given --------------------------------------------------------------


def test_a_hang_log_that_cannot_be_written_any_more_is_said_once_and_the_sample_scores(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from pytest_rewardhang.adapters.generic import PooledScorer

    folder = tmp_path / "logs"
    folder.mkdir()
    scorer = PooledScorer(
        spec("score"), budget=BUDGET, default=-1.0, workers=1, hang_log=str(folder / "h.jsonl")
    )
    assert (folder / "h.jsonl").exists()  # opened when made, as logging's FileHandler does
    (folder / "h.jsonl").unlink()
    folder.rmdir()  # gone in training: a cleaner, another run
    with caplog.at_level(logging.WARNING, logger="pytest_rewardhang.adapters"):
        # It raised FileNotFoundError into the trainer at each hang.
        assert [scorer.score_sync("hang", "1") for _ in range(2)] == [-1.0, -1.0]
    unwritten = [r.getMessage() for r in caplog.records if "not written" in r.getMessage()]
    assert len(unwritten) == 1, unwritten
    assert str(folder / "h.jsonl") in unwritten[0]
    assert scorer.score_sync("= 1", "1") == 1.0


def test_an_unhashable_scorer_object_is_scored_as_itself() -> None:
    # A plain @dataclass with __call__ has no hash: the adapters keyed their tables by the
    # scorer and raised a bare TypeError at the first sample.
    from pytest_rewardhang.adapters.generic import PooledScorer
    from tests.adapters._scorers import Weighted

    double, triple = PooledScorer(Weighted(2.0), budget=BUDGET), PooledScorer(Weighted(3.0))
    assert (double.score_sync("= 1", "1"), triple.score_sync("= 1", "1")) == (2.0, 3.0)
    assert double.score_sync("= 1", "1") == 2.0  # its own pool again, not the other's
    assert len(STATE.pools) == 2


def test_a_pool_that_cannot_start_for_want_of_descriptors_leaks_none_and_says_so_once() -> None:
    # With the descriptors nearly used up, each sample tried the start again (leaving pipes
    # open each time) and failed with an OSError that named no scorer.
    import resource

    from pytest_rewardhang.adapters.generic import PooledScorer

    scorer = PooledScorer(spec("score"), budget=BUDGET, workers=64)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (before + 40, hard))
    try:
        for _ in range(3):
            with pytest.raises(OSError, match=r"the pool of scorer '.*:score' did not start: "):
                scorer.score_sync("= 1", "1")
        assert len(os.listdir("/proc/self/fd")) == before
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
