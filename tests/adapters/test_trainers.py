"""The OpenRLHF, slime, verifiers and generic adapters, called as each trainer's source calls
them, on real hangs; and every per-item adapter spreading concurrent calls over its workers.

Reproduced from these call sites (read at the commits named; the trainers are too heavy to
install in CI):

- OpenRLHF 3c3be623: ``openrlhf/utils/agent.py:193-200`` (``reward_func`` loaded from the file
  by ``spec_from_file_location("reward_func", path)``), ``:283-298`` (per sample:
  ``reward_func([query], [prompt], [label])``; ``rewards``, ``scores``, ``extra_logs`` read
  back) and ``:301-318`` (each call on ``asyncio.to_thread``, gathered); samples generated
  concurrently, one ``execute`` coroutine each.
- slime 624b824a: ``slime/rollout/rm_hub/__init__.py:55-62`` (``load_function`` of
  ``--custom-rm-path``, then ``await rm_function(args, sample, **kwargs)``) and ``:99-107``
  (``--group-rm``: ``await rm_function(args, samples, **kwargs)``); ``slime/utils/misc.py:39-47``
  (``importlib.import_module`` + ``getattr``); the ``Sample`` fields of
  ``slime/utils/types.py:94-118``.
- verifiers a60a606e: ``verifiers/legacy/rubrics/rubric.py:184-214``
  (``_call_individual_reward_func``: ``inspect.signature(func)``, everything to a ``**kwargs``
  function, else only the named keys, through ``maybe_await``; ``score_objects`` at
  ``:125-140``) and ``verifiers/v1/utils/decorators.py:29-38`` (``invoke``: only the named
  parameters).
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import inspect
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

import pytest_rewardhang.adapters.verl as verl_adapter
from pytest_rewardhang.adapters import close_pools
from pytest_rewardhang.adapters.generic import PooledScorer
from pytest_rewardhang.adapters.openrlhf import pooled_reward_func
from pytest_rewardhang.adapters.slime import pooled_group_rm, pooled_rm
from pytest_rewardhang.adapters.trl import async_pooled_reward, pooled_reward
from pytest_rewardhang.adapters.verifiers import pooled_rubric_func
from pytest_rewardhang.guard import PoolError
from tests.adapters._scorers import BUDGET, NAP_S, SLACK, spec

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("no_leaks", "closed_pools")]


# --- OpenRLHF ------------------------------------------------------------------------------


def openrlhf_load(tmp_path: Path, text: str) -> Callable[..., Any]:
    """SingleTurnAgentExecutor.__init__: the user's file, loaded as module "reward_func"."""
    path = tmp_path / "reward.py"
    path.write_text(text)
    module_spec = importlib.util.spec_from_file_location("reward_func", path)
    assert module_spec is not None
    assert module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.reward_func  # type: ignore[no-any-return]


def openrlhf_rollout(reward_func: Callable[..., Any], samples: list[tuple[str, str]]) -> list[Any]:
    """Concurrent ``execute`` coroutines, each scoring its sample on a thread."""

    async def execute(prompt: str, response: str, label: str) -> dict[str, Any]:
        query = prompt + response  # hf_tokenizer.decode(observation_tokens)
        infos = await asyncio.gather(asyncio.to_thread(reward_func, [query], [prompt], [label]))
        info = infos[0]
        score = info.get("scores")
        return {
            "reward": info.get("rewards"),
            "scores": info.get("rewards") if score is None else score,
            "extra_logs": info.get("extra_logs") or {},
        }

    async def rollout() -> list[Any]:
        return list(await asyncio.gather(*(execute("Q: ", r, t) for r, t in samples)))

    return asyncio.run(rollout())


def test_openrlhf_reward_func_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    reward_func = openrlhf_load(
        tmp_path,
        "from pytest_rewardhang.adapters.openrlhf import pooled_reward_func\n"
        f"reward_func = pooled_reward_func({spec('score')!r}, budget={BUDGET}, default=-1.0)\n",
    )
    assert openrlhf_rollout(reward_func, [("= 42", "42")])[0]["reward"] == [1.0]
    start = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="pytest_rewardhang.adapters"):
        outs = openrlhf_rollout(reward_func, [("= 42", "42"), ("hang", "42"), ("= 7", "42")])
    assert time.perf_counter() - start <= BUDGET + SLACK
    assert [o["reward"] for o in outs] == [[1.0], [-1.0], [0.0]]
    assert [o["scores"] for o in outs] == [[1.0], [-1.0], [0.0]]
    assert [o["extra_logs"]["reward_hang"] for o in outs] == [[0.0], [1.0], [0.0]]
    assert "timeout" in caplog.text
    # The scorer gets the response, the query without its prompt: "42" does not end with the
    # label "Q: 42"; the whole query would.
    assert reward_func(["Q: 42"], ["Q: "], ["Q: 42"]) == {
        "rewards": [0.0],
        "scores": [0.0],
        "extra_logs": {"reward_hang": [0.0]},
    }


def test_openrlhf_dict_scorer_extra_logs() -> None:
    reward_func = pooled_reward_func(spec("score_dict"), budget=BUDGET, default=-1.0)
    first = reward_func(["Q: = 42", "Q: = 1"], ["Q: ", "Q: "], ["42", "42"])
    assert first == {
        "rewards": [1.0, 0.0],
        "scores": [1.0, 0.0],
        "extra_logs": {"reward_hang": [0.0, 0.0], "acc": [1.0, 0.0]},
    }
    hung = reward_func(["Q: hang"], ["Q: "], ["42"])  # the default, shaped like the others
    assert hung["rewards"] == [-1.0]
    assert hung["extra_logs"] == {"reward_hang": [1.0], "acc": [0.0]}


def test_openrlhf_extra_logs_line_up_with_rewards_and_a_non_number_is_named() -> None:
    reward_func = pooled_reward_func(spec("score_as_told"), budget=BUDGET, default=-1.0)
    # A hang before any dict was seen, and a key on one sample only: each list was shorter
    # than rewards, so a later sample's number sat under an earlier sample.
    queries = ["hang", "= 42", "only some keys", "true", "numeric text"]
    result = reward_func(queries, [""] * 5, ["42"] * 5)
    assert result["rewards"] == [-1.0, 1.0, 0.5, 1.0, 0.25]
    assert result["extra_logs"] == {
        "reward_hang": [1.0, 0.0, 0.0, 0.0, 0.0],
        "acc": [0.0, 1.0, 0.0, 0.0, 0.0],
        "rare": [0.0, 0.0, 3.0, 0.0, 0.0],
    }
    for told, shown in (("none", "None"), ("text", "'0.5x'")):
        with pytest.raises(TypeError, match=rf"^score_as_told returned {shown}, not a number"):
            reward_func([told], [""], ["42"])
    with pytest.raises(ValueError, match=r"^default must be a number for OpenRLHF's rewards"):
        pooled_reward_func(spec("score_as_told"), default=None)  # float(None) at the first hang


# --- slime ---------------------------------------------------------------------------------


@dataclass
class Sample:
    """The fields of slime's Sample that a reward model reads (slime/utils/types.py:94-118)."""

    prompt: str = ""
    tokens: list[int] = field(default_factory=list)
    response: str = ""
    label: str | None = None
    reward: float | dict[str, Any] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    lock: Any = field(default_factory=threading.Lock)  # a Sample need not pickle


@dataclass
class Args:
    custom_rm_path: str
    group_rm: bool = False


def slime_module(tmp_path: Path, text: str) -> str:
    (tmp_path / "my_slime_rm.py").write_text(text)
    sys.path.insert(0, str(tmp_path))
    return "my_slime_rm"


def slime_load(path: str) -> Any:
    module_path, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module_path), attr)


async def async_rm(args: Args, sample: Sample, **kwargs: Any) -> Any:
    return await slime_load(args.custom_rm_path)(args, sample, **kwargs)


async def batched_async_rm(args: Args, samples: list[Sample], **kwargs: Any) -> Any:
    return await slime_load(args.custom_rm_path)(args, samples, **kwargs)


@pytest.fixture
def slime_rm(tmp_path: Path) -> Iterator[str]:
    module = slime_module(
        tmp_path,
        "from pytest_rewardhang.adapters.slime import pooled_group_rm, pooled_rm\n"
        f"rm = pooled_rm({spec('score')!r}, budget={BUDGET}, default=0.0)\n"
        f"batched_rm = pooled_group_rm({spec('score')!r}, budget={BUDGET})\n"
        f"weighted = pooled_rm({spec('score_with_metadata')!r}, budget={BUDGET})\n",
    )
    yield module
    sys.path.remove(str(tmp_path))
    sys.modules.pop(module, None)


def test_slime_rm_and_group_rm(slime_rm: str) -> None:
    args = Args(custom_rm_path=f"{slime_rm}.rm")

    async def rollout(samples: list[Sample]) -> list[Any]:
        return list(await asyncio.gather(*(async_rm(args, s) for s in samples)))

    assert asyncio.run(rollout([Sample(response="= 42", label="42")])) == [1.0]
    start = time.perf_counter()
    samples = [Sample(response=r, label="42") for r in ("= 42", "hang", "= 7")]
    assert asyncio.run(rollout(samples)) == [1.0, 0.0, 0.0]
    assert time.perf_counter() - start <= BUDGET + SLACK
    group = Args(custom_rm_path=f"{slime_rm}.batched_rm", group_rm=True)
    assert asyncio.run(batched_async_rm(group, samples)) == [1.0, 0.0, 0.0]
    weighted = Args(custom_rm_path=f"{slime_rm}.weighted")
    sample = Sample(response="= 42", label="42", metadata={"weight": 0.5})
    assert asyncio.run(async_rm(weighted, sample)) == 0.5


# --- verifiers -----------------------------------------------------------------------------


async def call_individual_reward_func(func: Callable[..., Any], state: dict[str, Any]) -> float:
    """Rubric._call_individual_reward_func, with score_objects' keys."""
    merged = {
        "prompt": state["prompt"],
        "completion": state["completion"],
        "answer": state.get("answer", ""),
        "state": state,
        "info": state.get("info", {}),
        "task": None,
    }
    sig = inspect.signature(func)
    if any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
        chosen = merged
    else:
        chosen = {k: v for k, v in merged.items() if k in sig.parameters}
    result = func(**chosen)
    if inspect.isawaitable(result):
        result = await result
    return float(result)


def v1_invoke(fn: Callable[..., Any], available: dict[str, Any]) -> Any:
    """verifiers v1's invoke: only the parameters the signature names."""
    params = inspect.signature(fn).parameters
    return fn(**{name: available[name] for name in params if name in available})


def rollout_state(text: str) -> dict[str, Any]:
    return {
        "prompt": [{"role": "user", "content": "What is 6 x 7?"}],
        "completion": [{"role": "assistant", "content": text}],
        "answer": "42",
        "client": threading.Lock(),  # the state holds clients: it would not pickle
    }


@pytest.mark.parametrize("name", ["correct_answer", "acorrect_answer"])
def test_verifiers_rubric_function(name: str) -> None:
    func = pooled_rubric_func(spec(name), budget=BUDGET, default=0.0)
    assert func.__name__ == name  # verifiers logs each reward function under its name
    assert list(inspect.signature(func).parameters)[:2] == ["completion", "answer"]
    assert asyncio.run(call_individual_reward_func(func, rollout_state("= 42"))) == 1.0

    async def rubric(texts: list[str]) -> list[float]:
        states = [rollout_state(t) for t in texts]
        return list(await asyncio.gather(*(call_individual_reward_func(func, s) for s in states)))

    start = time.perf_counter()
    assert asyncio.run(rubric(["= 42", "hang", "= 7"])) == [1.0, 0.0, 0.0]
    assert time.perf_counter() - start <= BUDGET + SLACK
    available = {**rollout_state("it is 42"), "state": {}}
    assert asyncio.run(v1_invoke(func, available)) == 1.0


# --- generic: SkyRL, rllm, NeMo Gym --------------------------------------------------------


def test_generic_scorer_awaited_and_from_threads() -> None:
    scorer = PooledScorer(spec("plain"), budget=BUDGET, default=-1.0)

    async def verify(texts: list[str]) -> list[Any]:  # a resources server's async verify
        return list(await asyncio.gather(*(scorer.score(t, "42") for t in texts)))

    assert asyncio.run(verify(["= 42"])) == [1.0]
    start = time.perf_counter()
    assert asyncio.run(verify(["= 42", "hang", "= 7"])) == [1.0, -1.0, 0.0]
    with ThreadPoolExecutor(4) as threads:  # an environment's step on a thread pool
        got = list(threads.map(lambda t: scorer.score_sync(text=t, truth="42"), ["hang", "= 42"]))
    assert got == [-1.0, 1.0]
    assert time.perf_counter() - start <= 2 * (BUDGET + SLACK)
    with pytest.raises(ValueError, match="cannot parse"):
        scorer.score_sync("raise", "42")


# --- concurrency: every per-item adapter uses every worker -----------------------------------

CONCURRENT = 8
WORKERS = 2
#: Eight 0.1 s calls on two workers take about 0.4 s; one at a time, 0.8 s. Generous, yet it
#: fails when the calls are serialized.
SERIAL_S = CONCURRENT * NAP_S


def in_threads(call: Callable[[], Any]) -> list[Any]:
    with ThreadPoolExecutor(CONCURRENT) as threads:
        return list(threads.map(lambda _: call(), range(CONCURRENT)))


def in_tasks(call: Callable[[], Any]) -> list[Any]:
    async def gather() -> list[Any]:
        return list(await asyncio.gather(*(call() for _ in range(CONCURRENT))))

    return asyncio.run(gather())


def verl_sync() -> Callable[[], list[Any]]:
    fn = verl_adapter.guarded_compute_score(spec("compute_score"), workers=WORKERS)
    return lambda: in_threads(lambda: fn("d", "nap", "1"))


def verl_async() -> Callable[[], list[Any]]:
    fn = verl_adapter.guarded_compute_score_async(spec("compute_score"), workers=WORKERS)
    return lambda: in_tasks(lambda: fn("d", "nap", "1"))


def trl_sync() -> Callable[[], list[Any]]:
    fn = pooled_reward(spec("accuracy"), workers=WORKERS)
    return lambda: fn(completions=["nap"] * CONCURRENT, ground_truth=["1"] * CONCURRENT)


def trl_async() -> Callable[[], list[Any]]:
    fn = async_pooled_reward(spec("accuracy"), workers=WORKERS)
    return lambda: asyncio.run(
        fn(completions=["nap"] * CONCURRENT, ground_truth=["1"] * CONCURRENT)
    )


def openrlhf() -> Callable[[], list[Any]]:
    fn = pooled_reward_func(spec("score"), workers=WORKERS)
    return lambda: in_threads(lambda: fn(["Q: nap"], ["Q: "], ["1"])["rewards"][0])


def slime() -> Callable[[], list[Any]]:
    rm = pooled_rm(spec("score"), workers=WORKERS)
    return lambda: in_tasks(lambda: rm(None, Sample(response="nap", label="1")))


def slime_group() -> Callable[[], list[Any]]:
    rm = pooled_group_rm(spec("score"), workers=WORKERS)
    group = [Sample(response="nap", label="1") for _ in range(CONCURRENT)]
    return lambda: asyncio.run(rm(None, group))


def verifiers() -> Callable[[], list[Any]]:
    func = pooled_rubric_func(spec("correct_answer"), workers=WORKERS)
    completion = [{"role": "assistant", "content": "nap"}]
    return lambda: in_tasks(lambda: func(completion=completion, answer="1"))


def generic_async() -> Callable[[], list[Any]]:
    scorer = PooledScorer(spec("plain"), workers=WORKERS)
    return lambda: in_tasks(lambda: scorer.score("nap", "1"))


def generic_threads() -> Callable[[], list[Any]]:
    scorer = PooledScorer(spec("plain"), workers=WORKERS)
    return lambda: in_threads(lambda: scorer.score_sync("nap", "1"))


@pytest.mark.parametrize(
    "adapter",
    [
        verl_sync,
        verl_async,
        trl_sync,
        trl_async,
        openrlhf,
        slime,
        slime_group,
        verifiers,
        generic_async,
        generic_threads,
    ],
)
def test_concurrent_calls_use_every_worker(adapter: Callable[[], Callable[[], list[Any]]]) -> None:
    run = adapter()
    assert run() == [1.0] * CONCURRENT  # starts the pool
    best = SERIAL_S
    for _ in range(3):  # up to three tries: a busy machine may stall one run
        start = time.perf_counter()
        assert run() == [1.0] * CONCURRENT
        best = min(best, time.perf_counter() - start)
        if best < SERIAL_S - 0.1:
            break
    assert best < SERIAL_S - 0.1, f"{best:.2f} s: the calls were scored one at a time"


def adapted(adapter: str, scorer: str, **limits: Any) -> Callable[[list[str]], list[Any]]:
    """``adapter`` scoring responses as its trainer calls it, built with ``limits``."""

    def tasks(call: Callable[[str], Any]) -> Callable[[list[str]], list[Any]]:
        async def gather(texts: list[str]) -> list[Any]:
            return list(await asyncio.gather(*(call(t) for t in texts)))

        return lambda texts: asyncio.run(gather(texts))

    if adapter == "verl_sync":
        fn = verl_adapter.guarded_compute_score(scorer, **limits)
        return lambda texts: [fn("d", t, "1") for t in texts]
    if adapter == "verl_async":
        afn = verl_adapter.guarded_compute_score_async(scorer, **limits)
        return tasks(lambda t: afn("d", t, "1"))
    if adapter == "verl_batch":
        batch = verl_adapter.guarded_compute_score_batch(scorer, **limits)
        return lambda texts: batch(["d"] * len(texts), texts, ["1"] * len(texts))
    if adapter == "trl_sync":
        reward = pooled_reward(scorer, **limits)
        return lambda texts: reward(prompts=["p"] * len(texts), completions=texts)
    if adapter == "trl_async":
        areward = async_pooled_reward(scorer, **limits)
        return lambda texts: asyncio.run(areward(prompts=["p"] * len(texts), completions=texts))
    if adapter == "openrlhf":
        func = pooled_reward_func(scorer, **limits)
        return lambda texts: [func([t], [""], ["1"])["rewards"][0] for t in texts]
    if adapter in ("slime", "slime_group"):
        if adapter == "slime":
            rm = pooled_rm(scorer, **limits)
            return tasks(lambda t: rm(None, Sample(response=t, label="1")))
        group = pooled_group_rm(scorer, **limits)
        return lambda texts: asyncio.run(group(None, [Sample(response=t) for t in texts]))
    if adapter == "verifiers":
        rubric = pooled_rubric_func(scorer, **limits)
        return tasks(lambda t: rubric(completion=[{"role": "assistant", "content": t}]))
    generic = PooledScorer(scorer, **limits)
    return tasks(generic.score)


#: Every adapter entry point, as :func:`adapted` builds it.
ADAPTERS = [
    "verl_sync",
    "verl_async",
    "verl_batch",
    "trl_sync",
    "trl_async",
    "openrlhf",
    "slime",
    "slime_group",
    "verifiers",
    "generic",
]


def warmed(adapter: str, warmup: Any) -> Callable[[list[str]], list[Any]]:
    """``adapter`` scoring responses as its trainer calls it, its pool warmed with ``warmup``."""
    return adapted(adapter, spec("imports_its_sample"), budget=BUDGET, default=-1.0, warmup=warmup)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_every_adapter_warms_its_pool_with_the_warmup_item(adapter: str, lazy: str) -> None:
    """The scorer imports a module nobody has imported: it scores 1.0 only where the warm-up,
    in the pool's zygote, imported it first. An adapter that dropped ``warmup`` scores 0.0."""
    warmup: Any = {"response": lazy}
    if adapter == "generic":
        warmup = (lazy,)
    elif adapter.startswith("verl"):  # mappings, not dicts, as verl's Hydra hands them over
        warmup = MappingProxyType({**warmup, "extra_info": MappingProxyType({"split": "train"})})
    score = warmed(adapter, warmup)
    assert score([lazy] * 4) == [1.0] * 4
    if adapter == "verl_async":  # a hung sample scores the default; the rest go on warm
        assert score(["hang", lazy, lazy]) == [-1.0, 1.0, 1.0]
        assert score([lazy] * 4) == [1.0] * 4


def test_adapters_share_a_pool_only_with_the_same_warmup(lazy: str) -> None:
    """The pools are keyed by the warm-up item too (a dict, by its content), and a bad one is a
    one-line ValueError from the pool's own check."""
    scorer = spec("imports_its_sample")
    same = [
        PooledScorer(scorer, warmup=warmup).scoring
        for warmup in ({"response": lazy, "label": "1"}, {"label": "1", "response": lazy})
    ]
    assert same[0].pool() is same[1].pool()
    assert PooledScorer(scorer).scoring.pool() is not same[0].pool()
    assert asyncio.run(PooledScorer(scorer).score(lazy)) == 0.0  # no warm-up: cold
    with pytest.raises(ValueError, match=r"^warmup cannot be pickled: ") as info:
        PooledScorer(scorer, warmup={"response": threading.Lock()})
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=r"^warmup must be a tuple"):
        verl_adapter.compute_score("d", lazy, "1", scorer=scorer, warmup=lazy)  # type: ignore[arg-type]


def test_a_pool_that_cannot_start_is_tried_once_and_each_sample_says_why(tmp_path: Path) -> None:
    """256 samples of a verl step used to try the start again one after another (each up to
    the 120 s start bound, for a warm-up that hangs): now the first failure is every sample's,
    at once, until close_pools()."""
    log = tmp_path / "starts"
    scorer = spec("logs_and_raises")
    fn = verl_adapter.guarded_compute_score_async(
        scorer, budget=BUDGET, warmup={"solution_str": str(log)}
    )

    async def step() -> list[Any]:
        return list(
            await asyncio.gather(*(fn("d", "x", "1") for _ in range(6)), return_exceptions=True)
        )

    errors = asyncio.run(step())
    assert {str(error) for error in errors} == {
        f"the pool of scorer {scorer!r} did not start: the warm-up call failed in the zygote: "
        "ValueError: the warm-up sample is bad"
    }
    assert all(isinstance(error, PoolError) for error in errors)
    assert log.read_text() == "started\n"
    again = verl_adapter.guarded_compute_score(
        scorer, budget=BUDGET, warmup={"solution_str": str(log)}
    )
    with pytest.raises(PoolError, match="did not start"):
        again("d", "x", "1")
    assert log.read_text() == "started\n"
    close_pools()  # a fixed scorer may start again
    assert len(asyncio.run(step())) == 6
    assert log.read_text() == "started\n" * 2


@pytest.mark.parametrize("cold", [True, False])
def test_async_adapters_never_block_the_event_loop(cold: bool) -> None:
    """While a sample hangs, and while the pool starts and the spec's signature is read, the
    trainer's event loop runs on: a ticker every 10 ms never waits much longer."""
    fn = verl_adapter.guarded_compute_score_async(spec("compute_score"), budget=BUDGET)
    if not cold:
        assert asyncio.run(fn("d", "= 1", "1")) == 1.0

    async def scored_while_ticking() -> tuple[list[Any], float]:
        gaps: list[float] = []
        done = asyncio.Event()

        async def ticker() -> None:
            last = time.perf_counter()
            while not done.is_set():
                await asyncio.sleep(0.01)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        ticking = asyncio.create_task(ticker())
        scores = await asyncio.gather(fn("d", "hang", "1"), fn("d", "= 1", "1"))
        done.set()
        await ticking
        return list(scores), max(gaps)

    scores, worst_gap = asyncio.run(scored_while_ticking())
    assert scores == [0.0, 1.0]
    # A blocked loop would stall for the whole budget of the hang; the bound leaves a busy
    # machine all the rest.
    assert worst_gap < 0.8 * BUDGET, f"the event loop stalled for {worst_gap:.2f} s"


def test_a_scorer_that_cannot_be_imported_is_one_line() -> None:
    with pytest.raises(ValueError, match=r"cannot read the signature of scorer .*nowhere") as info:
        pooled_rubric_func("my_missing_module_nowhere:score")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("adapter", "called"),
    [
        (pooled_reward, "PooledReward"),
        (pooled_reward_func, "PooledRewardFunc"),
        (pooled_rm, "PooledRM"),
        (pooled_group_rm, "PooledGroupRM"),
        (PooledScorer, "PooledScorer"),
    ],
)
def test_a_misspelt_keyword_names_the_adapter_and_the_right_ones(
    adapter: Callable[..., Any], called: str
) -> None:
    with pytest.raises(TypeError) as info:
        adapter(spec("score"), budgt=BUDGET)
    assert str(info.value).startswith(f"{called}() got an unexpected keyword argument 'budgt'")
    assert "budget" in str(info.value)
    assert "Scoring" not in str(info.value)
