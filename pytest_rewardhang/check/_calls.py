"""How to call a scorer: its call style, its benign example, and a case put in its place.

``describe`` runs in a throwaway child (it imports the scorer); everything else is plain data
work in the controller.
"""

from __future__ import annotations

import copy
import inspect
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_rewardhang.guard._spec import load_callable

RESPONSE_NAMES = (
    "solution_str",
    "predict_str",
    "model_output",
    "response",
    "completion",
    "prediction",
    "output",
)
_FENCE = re.compile(r"(```[^\n]*\n)(.*?)(```)", re.DOTALL)


class ScorerCall:
    """Calls a scorer off the main thread, as threaded trainers and Ray actors do.

    That is where alarm-based guards are skipped (``signal`` only works on the main thread), so
    a scorer that is safe only on the main thread's signal path is caught hanging. Pickled by
    spec: unpickling imports the scorer, so a pool's zygote holds it warm for every worker.
    """

    def __init__(self, spec: str, rootdir: str) -> None:
        self.spec = spec
        self.rootdir = rootdir
        self._fn: Callable[..., Any] | None = None

    def __getstate__(self) -> tuple[str, str]:
        return self.spec, self.rootdir

    def __setstate__(self, state: tuple[str, str]) -> None:
        self.spec, self.rootdir = state
        self._fn = load_callable(self.spec, Path(self.rootdir))

    def __call__(self, **kwargs: Any) -> Any:
        if self._fn is None:
            self._fn = load_callable(self.spec, Path(self.rootdir))
        fn = self._fn
        box: list[tuple[bool, Any]] = []

        def call() -> None:
            try:
                box.append((True, fn(**kwargs)))
            except BaseException as exc:  # noqa: BLE001 - raised again on the caller's thread
                box.append((False, exc))

        thread = threading.Thread(target=call, name="reward-hang-scorer", daemon=True)
        thread.start()
        thread.join()
        ok, value = box[0]
        if not ok:
            raise value
        # The check judges how the call ended, never what it returned; and the pytest process
        # would refuse to unpickle a value that is not plain data (a numpy float, a sympy
        # number), reporting a fine scorer as an error.
        return None


class CallStyleError(Exception):
    """The scorer's signature does not say where a response goes."""


@dataclass(frozen=True)
class ScorerInfo:
    style: str  # "verl" | "single" | "trl" | "openrlhf"
    response_arg: str
    params: tuple[str, ...]
    file: str | None
    line: int | None  # 1-based line of the ``def``


def describe(spec: str, rootdir: str, response: str | None) -> ScorerInfo:
    """Import the scorer and read its signature (run in a child process)."""
    fn = load_callable(spec, Path(rootdir))
    target = inspect.unwrap(fn)
    try:
        file: str | None = inspect.getsourcefile(target)
        line: int | None = inspect.getsourcelines(target)[1]
    except (TypeError, OSError):
        file, line = None, None
    try:
        params = tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = ()
    style, arg = call_style(params, response)
    return ScorerInfo(style, arg, params, file, line)


def call_style(params: tuple[str, ...], response: str | None) -> tuple[str, str]:
    names = set(params)
    if response is not None:
        if params and response not in names and "kwargs" not in names:
            raise CallStyleError(f"response={response!r} is not a parameter of {params}")
        return ("trl" if response == "completions" else "single"), response
    if {"data_source", "solution_str"} <= names:
        return "verl", "solution_str"
    if "completions" in names:
        return "trl", "completions"
    if {"queries", "prompts", "labels"} <= names:
        return "openrlhf", "queries"
    for name in params:
        if name in RESPONSE_NAMES:
            return "single", name
    raise CallStyleError(
        f"cannot tell which parameter of {params} receives the response; "
        "name it with response=ARGNAME"
    )


def default_example(info: ScorerInfo, kind: str) -> dict[str, Any]:
    if kind == "code":
        response, truth = "Here is my solution.\n```python\nprint(42)\n```\n", "42"
    else:
        response, truth = "6 * 7 = 42, so the answer is \\boxed{42}.", "42"
    if info.style == "verl":
        source = "lighteval/MATH" if kind != "text" else "openai/gsm8k"
        return {"data_source": source, "solution_str": response, "ground_truth": truth}
    if info.style == "trl":
        example: dict[str, Any] = {"completions": [response]}
        for name in ("solution", "answer", "ground_truth"):
            if name in info.params:
                example[name] = [truth]
        return example
    if info.style == "openrlhf":
        prompt = "What is 6 * 7? "
        return {"queries": [prompt + response], "prompts": [prompt], "labels": [truth]}
    example = {info.response_arg: response}
    for name in ("ground_truth", "answer", "label", "reference"):
        if name in info.params:
            example[name] = truth
            break
    return example


def with_case(info: ScorerInfo, example: dict[str, Any], kind: str, text: str) -> dict[str, Any]:
    """The example's keyword arguments with the generated response (or program) in place."""
    kwargs = copy.deepcopy(example)
    arg = info.response_arg
    if info.style == "trl":
        for name, value in kwargs.items():  # one-element batch: the other columns follow
            if name != arg and isinstance(value, list) and value:
                kwargs[name] = value[:1]
        first = (kwargs.get(arg) or [""])[0]
        if isinstance(first, list):  # chat messages: the assistant's last turn is the response
            turn = first[-1] if first and isinstance(first[-1], dict) else {"role": "assistant"}
            response = _inject(str(turn.get("content", "")), kind, text)
            kwargs[arg] = [[{**turn, "content": response}]]
        else:
            kwargs[arg] = [_inject(str(first), kind, text)]
        return kwargs
    if info.style == "openrlhf":
        prompt = (kwargs.get("prompts") or [""])[0]
        query = (kwargs.get("queries") or [prompt])[0]
        old_response = str(query)[len(str(prompt)) :]
        kwargs["queries"] = [str(prompt) + _inject(old_response, kind, text)]
        kwargs["prompts"] = [prompt]
        kwargs["labels"] = (kwargs.get("labels") or [""])[:1]
        return kwargs
    kwargs[arg] = _inject(str(kwargs.get(arg, "")), kind, text)
    return kwargs


def _inject(response: str, kind: str, text: str) -> str:
    """For code, the program replaces the first fenced block's body (or the whole response)."""
    if kind != "code":
        return text
    match = _FENCE.search(response)
    if match is None:
        return text
    return response[: match.start(2)] + text + response[match.end(2) :]
