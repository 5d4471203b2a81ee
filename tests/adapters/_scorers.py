"""The scorers the adapter tests hand to the adapters, by spec (``path/to/this.py:name``).

Each has the shape one trainer's users write; on the marker ``hang`` in its response each gets
stuck in one C call that never returns (``sum(range(10**13))``), as a degenerate response makes
a real scorer. ``nap`` sleeps 0.1 s: concurrent calls of it show whether the adapter spreads
them over the pool's workers or scores them one at a time.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

from tests._lazy import WARM, imported_before

HERE = Path(__file__).resolve()
NAP_S = 0.1
#: The adapters' tests' budget, and how far past it a hang may end: a correctness bound for a
#: busy 2-core machine (a cold pool start is inside some of these), never a latency claim.
BUDGET = 0.5
SLACK = 5.0


def spec(name: str) -> str:
    return f"{HERE}:{name}"


def _check(text: str, truth: Any) -> float:
    if "hang" in text:
        return float(sum(range(10**13)))
    if text == "raise":
        raise ValueError("cannot parse")
    if text == "raise like the guard":  # reads like the guard's own "never reached the scorer"
        raise ValueError("the item could not be pickled")
    if text == "nap":
        time.sleep(NAP_S)
        return 1.0
    if text == "kill the zygote":  # the process that forked this worker, and answer
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(0.05)
        return 0.5
    if text == "damage":  # every descriptor past stdio: the worker's pipes, fence, /proc files
        os.closerange(3, 1 << 16)
        return 0.5
    return float(text.strip().endswith(str(truth)))


# verl: the per-item signature, sync and async, and math_dapo's dict result.
def compute_score(
    data_source: Any, solution_str: Any, ground_truth: Any, extra_info: Any = None, scale: Any = 1.0
) -> Any:
    if solution_str == "whose child":
        return float(os.getppid())
    return scale * _check(solution_str, ground_truth)


async def acompute_score(
    data_source: Any, solution_str: Any, ground_truth: Any, extra_info: Any = None
) -> Any:
    await asyncio.sleep(0)
    if solution_str == "await forever":
        await asyncio.sleep(3600)
    return _check(solution_str, ground_truth)


def dapo_score(
    data_source: Any, solution_str: Any, ground_truth: Any, extra_info: Any = None
) -> Any:
    score = _check(solution_str, ground_truth)
    return {"score": score, "acc": score > 0, "pred": solution_str[-8:]}


# TRL: per sample, keyword arguments by name; one without **kwargs, one with, one async.
def accuracy(completion: Any, ground_truth: Any) -> Any:
    if isinstance(completion, list):  # conversational: the last message is the answer
        completion = completion[-1]["content"]
    return _check(completion, ground_truth)


def everything(completion: Any, **kwargs: Any) -> Any:
    """Returns which keyword arguments it got, to show what was shipped."""
    if "hang" in completion:
        return _check(completion, "")
    return float(len(kwargs)) + 0.5 * ("prompt" in kwargs)


async def aaccuracy(completion: Any, ground_truth: Any) -> Any:
    await asyncio.sleep(0)
    return accuracy(completion, ground_truth)


# OpenRLHF and slime: the response and the label.
def score(response: Any, label: Any) -> Any:
    return _check(response, label)


class Weighted:
    """A scorer object as a plain ``@dataclass`` makes one: callable, picklable, compared by
    value, and so unhashable (``__eq__`` without ``__hash__``). Not a dataclass here: verl
    loads this file as a module of its own, outside ``sys.modules``, where one cannot be made."""

    def __init__(self, weight: float) -> None:
        self.weight = weight

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Weighted) and other.weight == self.weight

    def __call__(self, response: Any, label: Any) -> Any:
        return self.weight * _check(response, label)


def score_as_told(response: Any, label: Any) -> Any:
    """Returns what the response says to: OpenRLHF's adapter must make a number of it."""
    told: dict[str, Any] = {"none": None, "text": "0.5x", "true": True, "numeric text": "0.25"}
    if response in told:
        return told[response]
    if response == "only some keys":  # a dict with an extra key on this sample only
        return {"score": 0.5, "rare": 3.0}
    return {"score": _check(response, label), "acc": 1.0}


def score_with_metadata(response: Any, label: Any, metadata: Any) -> Any:
    return _check(response, label) * metadata.get("weight", 1.0)


# verifiers: a rubric function; ``completion`` is a list of messages.
def correct_answer(completion: Any, answer: Any) -> Any:
    return _check(completion[-1]["content"], answer)


async def acorrect_answer(completion: Any, answer: Any, **kwargs: Any) -> Any:
    await asyncio.sleep(0)
    assert "state" not in kwargs, "the rollout state was shipped"
    return correct_answer(completion, answer)


# The rest: positional arguments as the trainer's code passes them.
def plain(text: Any, truth: Any) -> Any:
    return _check(text, truth)


def score_dict(response: Any, label: Any) -> Any:
    value = _check(response, label)
    return {"score": value, "acc": value > 0, "pred": response[-4:]}


# Every adapter's shape, for the warm-up: imports the module its response names (tests/_lazy.py),
# and scores 1.0 when a warm-up in the pool's zygote imported it first.
def imports_its_sample(*args: Any, **sample: Any) -> Any:
    text = _response(args, sample)
    if "hang" in text:
        return _check(text, "")
    return float(imported_before(text) == WARM)


def confined(*args: Any, **sample: Any) -> Any:
    """What confines it, as its response asks: ``forks`` forks children that sleep until a fork
    fails, at most 100, and scores how many it made; ``fork bomb`` forks for ever, in
    every process; ``uid`` scores its effective uid; ``only loopback`` scores 1.0 when its only
    network interface is ``lo``; ``connect PORT`` scores 1.0 when it reaches the caller's
    listener on 127.0.0.1; anything else scores 1.0."""
    text = _response(args, sample)
    if text == "forks":
        made = 0
        try:
            for _ in range(100):
                if os.fork() == 0:
                    time.sleep(60)  # killed with the sample's processes after it answers
                    os._exit(0)
                made += 1
        except OSError:
            pass
        return float(made)
    if text == "fork bomb":
        while True:
            try:
                os.fork()
            except OSError:
                time.sleep(0.001)
    if text == "uid":
        return float(os.geteuid())
    if text == "only loopback":
        return float([name for _, name in socket.if_nameindex()] == ["lo"])
    if text.startswith("connect "):
        with socket.socket() as client:
            client.settimeout(5)
            try:
                client.connect(("127.0.0.1", int(text.split()[1])))
            except OSError:
                return 0.0
        return 1.0
    return 1.0


def logs_and_raises(*args: Any, **sample: Any) -> Any:
    """A warm-up that fails: appends a line to the file its response names, then raises."""
    with open(_response(args, sample), "a") as log:
        log.write("started\n")
    raise ValueError("the warm-up sample is bad")


def _response(args: tuple[Any, ...], sample: dict[str, Any]) -> Any:
    text = args[0] if args else next(sample[k] for k in _RESPONSE if k in sample)
    if isinstance(text, list):  # verifiers: the completion is a list of messages
        text = text[-1]["content"]
    return text


#: What each trainer calls the response: verl, TRL and verifiers, OpenRLHF and slime.
_RESPONSE = ("solution_str", "completion", "response")


def sleeps(response: Any) -> Any:
    """Sleeps ``response`` seconds: samples still running or queued when a pool closes."""
    time.sleep(float(response))
    return 1.0


def dapo_crash_first(
    data_source: Any, solution_str: Any, ground_truth: Any, extra_info: Any = None
) -> Any:
    """math_dapo's dict result; ``crash`` kills its own process (a segfault's way), before
    any answer of this scorer in a fresh process."""
    if solution_str == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    return dapo_score(data_source, solution_str, ground_truth, extra_info)


#: Which process imported this module: a pool's zygote, or (lazily) a worker itself.
IMPORTED_BY = os.getpid()


def imported_by_another(completion: Any, **kwargs: Any) -> Any:
    """1.0 in a worker forked after this module was imported (in its zygote); hangs on
    ``hang``."""
    if "hang" in completion:
        return _check(completion, "")
    return float(os.getpid() != IMPORTED_BY)


# EasyR1: a batch of RewardInput dicts in, RewardScore dicts out (examples/reward_function).
def easyr1_math(reward_inputs: list[dict[str, Any]], format_weight: float = 0.1) -> Any:
    scores = []
    for reward_input in reward_inputs:
        response = reward_input["response"]
        accuracy = _check(response, reward_input["ground_truth"])
        formatted = float(response.startswith("<think>"))
        overall = (1 - format_weight) * accuracy + format_weight * formatted
        scores.append({"overall": overall, "format": formatted, "accuracy": accuracy})
    return scores


# AReaL: reward_fn(prompt, completions, prompt_ids, completion_ids, **task_data).
def areal_gsm8k(
    prompt: Any, completions: Any, prompt_ids: Any, completion_ids: Any, **data: Any
) -> Any:
    return _check(completions, data["answer"])
