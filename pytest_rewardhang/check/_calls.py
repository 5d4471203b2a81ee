"""How to call a scorer: its call style, its benign example, and a case put in its place.

``describe`` runs in a throwaway child (it imports the scorer); everything else is plain data
work in the controller.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import inspect
import os
import re
import signal
import sys
import threading
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_rewardhang.corpus import _measure
from pytest_rewardhang.guard import _libc, _procfs
from pytest_rewardhang.guard._spec import (
    SpecError,
    is_file_target,
    load_callable,
    load_file,
    split_spec,
)

RESPONSE_NAMES = (
    "solution_str",
    "predict_str",
    "model_output",
    "response",
    "completion",
    "prediction",
    "output",
)
#: A batch function's response parameter (it takes lists and returns a list): verl's batched
#: ``compute_score(data_sources, solution_strs, ground_truths, extra_infos)`` and the like.
BATCH_RESPONSE_NAMES = (
    "solution_strs",
    "predict_strs",
    "model_outputs",
    "responses",
    "predictions",
    "outputs",
)
#: A batch function's ground-truth parameter.
_BATCH_TRUTHS = ("ground_truths", "answers", "labels", "references", "solutions")
_FENCE = re.compile(r"(```[^\n]*\n)(.*?)(```)", re.DOTALL)


#: What each call context stands for, in failure messages (``_options.CONTEXTS`` lists them).
CONTEXT_NAMES = {
    "main": "on the main thread",
    "thread": "off the main thread",
    "loop": "on an event loop",
}
#: Why a scorer that raises off the main thread matters, and what to do: said with the failure.
OFF_MAIN_WHY = (
    "\n  why: signal-based timeouts (signal.signal, Math-Verify's parse/verify timeouts) only "
    "work on the main thread, and verl's reward loop (run_in_executor), OpenRLHF "
    "(asyncio.to_thread), SkyRL and rllm thread pools and Ray async actors call scorers off it"
    "\n  fix: drop the in-process timeout and run the scorer under pytest_rewardhang.guard "
    "(run, guarded or Pool), which bounds it on any thread"
)


class OffMainThread(Exception):
    """``signal.signal`` raised off the main thread in the call, even if the scorer caught it."""


class _SignalFailures:
    """``signal.signal`` failures off the main thread during the current call, as
    "file:line" (one object: the patched ``signal.signal`` notes them, the call reads them)."""

    def __init__(self) -> None:
        self.where: list[str] = []


_SIGNAL_FAILURES = _SignalFailures()


def _watch_signal() -> None:
    """Record ``signal.signal`` refusing to run off the main thread, caught by the scorer or not.

    Real code wraps ``signal.signal`` and its ``exec`` in one ``try: ... except BaseException``,
    so off the main thread the ValueError never leaves the scorer: it scores 0 on everything.
    The wrapper only looks at the failure path, and is installed before the scorer is imported
    so ``from signal import signal`` binds it too.
    """
    if getattr(signal.signal, "__reward_hang__", False):
        return
    original = signal.signal

    def watched(signalnum: Any, handler: Any) -> Any:
        try:
            return original(signalnum, handler)
        except ValueError:
            if threading.current_thread() is not threading.main_thread():
                caller = sys._getframe(1)
                _SIGNAL_FAILURES.where.append(f"{caller.f_code.co_filename}:{caller.f_lineno}")
            raise

    watched.__reward_hang__ = True  # type: ignore[attr-defined]
    signal.signal = watched


#: A call's keyword that asks for what it ran (``_measure.measured``): the steered search's
#: probes, in the same warm worker as every other case. Taken out before the scorer sees them.
MEASURE = "__reward_hang_measure__"


class ScorerCall:
    """Calls a scorer in one context: as a trainer of that kind calls it.

    ``main``: on the guarded worker's main thread (TRL's GRPOTrainer, single-threaded Ray
    actors); ``thread``: on a worker thread, where ``signal`` refuses handlers and alarm guards
    are skipped (verl's reward loop, OpenRLHF, SkyRL, rllm); ``loop``: inside a running event
    loop on the main thread, a sync scorer called inline and an async one awaited there (slime,
    verifiers). An async scorer is always awaited: off the main thread, on a loop of that thread
    (Ray async actors). Pickled by spec: unpickling imports the scorer, so a pool's zygote holds
    it warm for every worker. ``materialize`` turns plain-data arguments into the objects the
    trainer passes (``(name, "sample" | "namespace" | "parser")``), so saved cases stay JSON.
    """

    def __init__(
        self,
        spec: str,
        rootdir: str,
        context: str = "thread",
        materialize: tuple[tuple[str, str], ...] = (),
        keep_value: bool = False,
        adopt: bool = False,
    ) -> None:
        self.spec = spec
        self.rootdir = rootdir
        self.context = context
        self.materialize = materialize
        self.keep_value = keep_value
        #: Each call runs in a process of its own (an isolating pool's item): it adopts what
        #: its children orphan. Not in a long-lived worker, a subreaper already, which a
        #: ``ctypes`` call in an item would retire.
        self.adopt = adopt
        self._fn: Callable[..., Any] | None = None

    def __getstate__(self) -> tuple[Any, ...]:
        return self.spec, self.rootdir, self.context, self.materialize, self.keep_value, self.adopt

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self.spec, self.rootdir, self.context, self.materialize, self.keep_value, self.adopt = state
        self._fn = None
        self.load()

    def load(self) -> Callable[..., Any]:
        if self._fn is None:
            _watch_signal()
            self._fn = load_callable(self.spec, Path(self.rootdir))
        return self._fn

    def __call__(self, **kwargs: Any) -> Any:
        fn = self.load()
        if kwargs.pop(MEASURE, False):
            called, ran = _measure.measured(lambda: self(**kwargs), fn)
            return {**called, "measured": ran} if isinstance(called, dict) else called
        kwargs = _materialized(kwargs, self.materialize)
        _SIGNAL_FAILURES.where = []
        threads = {thread.ident for thread in threading.enumerate()}
        if self.adopt:
            # What the call's children leave when they end comes to this process, so it can be
            # named (an isolating worker's item process is not a subreaper of its own).
            _libc.become_subreaper(None)
        processes = set(_procfs.walk(os.getpid()))
        try:
            if self.context == "thread":
                value = _in_thread(fn, kwargs)
            elif self.context == "loop":
                value = asyncio.run(_on_loop(fn, kwargs))
            else:
                value = fn(**kwargs)
                if inspect.isawaitable(value):
                    value = asyncio.run(_awaited(value))
        except Exception as exc:
            if _SIGNAL_FAILURES.where:
                raise OffMainThread(_off_main("it raised it")) from exc
            raise
        if _SIGNAL_FAILURES.where:
            raise OffMainThread(
                _off_main("the scorer caught it: a threaded trainer gets its fallback score")
            )
        # The pytest process would refuse to unpickle a value that is not plain data (a numpy
        # float, a sympy number), reporting a fine scorer as an error: the check gets the score
        # as a float, and what the call left behind. ``repro`` keeps the value: it prints it.
        if self.keep_value:
            return value
        return left_behind(score_of(value), threads, processes)


#: Processes named in a report of what a call left running; the rest are counted.
MAX_NAMED = 5


def left_behind(score: float | None, threads: set[int | None], processes: set[int]) -> Called:
    """What a call left running, read as it returns: the non-daemon threads it started (each
    keeps the process from exiting: the interpreter joins them; an executor's are told to end
    first), and the processes below this
    one that were not there before it, named, besides the standard library's once-per-process
    helpers (multiprocessing's resource tracker and forkserver, which live as long as the
    process by design): those are only counted, as ``helpers``, and are no leak of the call's.
    A helper is known by the pid its own module holds, never by its name, which any program can
    copy."""
    pooled = getattr(sys.modules.get("concurrent.futures.thread"), "_worker", None)
    lingering = [
        thread.name
        for thread in threading.enumerate()
        if thread.ident not in threads
        and not thread.daemon
        and thread.is_alive()
        # An executor's idle workers end at exit: its own exit hook tells them to.
        and (pooled is None or getattr(thread, "_target", None) is not pooled)
    ]
    helpers = _stdlib_helpers()
    left: list[str] = []
    quiet = 0
    for pid in _procfs.walk(os.getpid()):
        if pid in processes or _gone(pid):
            continue
        if pid in helpers:
            quiet += 1
        else:
            left.append(_named(pid))
    return {"score": score, "threads": lingering[:MAX_NAMED], "left": left, "helpers": quiet}


#: ``ScorerCall``'s answer in the check: plain data, what the call scored and left behind.
Called = dict[str, Any]


def _stdlib_helpers() -> set[int]:
    pids = set()
    tracker = sys.modules.get("multiprocessing.resource_tracker")
    pids.add(getattr(getattr(tracker, "_resource_tracker", None), "_pid", None))
    forkserver = sys.modules.get("multiprocessing.forkserver")
    pids.add(getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None))
    return {pid for pid in pids if isinstance(pid, int)}


def _gone(pid: int) -> bool:
    """A zombie, or already reaped: nothing left running."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return True


#: Looks at a command line that reads empty, 2 ms apart: a process caught in its exec has none
#: yet (on a busy machine the call's Popen child was named ``?``).
_CMDLINE_LOOKS = 10


def _named(pid: int) -> str:
    """``pid 123 (sleep 1000)``: its command line, cut short (the report makes it printable);
    ``[its name]`` when it has none."""
    words: list[bytes] = []
    for look in range(_CMDLINE_LOOKS):
        if look:
            time.sleep(0.002)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                words = cmdline.read(200).rstrip(b"\0").split(b"\0")
        except OSError:
            break
        if words != [b""]:
            break
    command = " ".join(w.decode("utf-8", "replace") for w in words)[:80]
    if not command:
        try:
            with open(f"/proc/{pid}/comm", "rb") as comm:
                command = f"[{comm.read(64).strip().decode('utf-8', 'replace')}]"
        except OSError:
            command = "?"
    return f"pid {pid} ({command})"


def score_of(value: Any) -> float | None:
    """The score a call returned as a float: a number (a numpy or sympy one too), a batch's
    first, a dict's ``score``; None for anything else."""
    if isinstance(value, list | tuple) and value:
        return score_of(value[0])
    if isinstance(value, dict):
        return score_of(value.get("score"))
    if isinstance(value, bool | int | float) or (
        hasattr(value, "__float__") and not isinstance(value, str | bytes)
    ):
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError, ArithmeticError):
            return None
        return number if number == number else None
    return None


def _off_main(then: str) -> str:
    """One line (``OFF_MAIN_WHY`` adds the why and the fix on lines of their own)."""
    where = ", ".join(dict.fromkeys(_SIGNAL_FAILURES.where))
    return (
        "raises off the main thread: signal.signal raised ValueError ('signal only works in "
        f"main thread') at {where}; {then}" + OFF_MAIN_WHY
    )


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


async def _on_loop(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    value = fn(**kwargs)  # a sync scorer blocks the loop, as slime and verifiers call it
    if inspect.isawaitable(value):
        value = await value
    return value


def _in_thread(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    box: list[tuple[bool, Any]] = []

    def call() -> None:
        try:
            value = fn(**kwargs)
            if inspect.isawaitable(value):  # a loop of this thread's own, as Ray async actors
                value = asyncio.run(_awaited(value))
            box.append((True, value))
        except BaseException as exc:  # noqa: BLE001 - raised again on the caller's thread
            box.append((False, exc))

    thread = threading.Thread(target=call, name="reward-hang-scorer", daemon=True)
    thread.start()
    thread.join()
    ok, value = box[0]
    if not ok:
        raise value
    return value


class Parser:
    """A stand-in for verifiers' ``Parser``: the answer is the last message's text."""

    def parse(self, text: str) -> str:
        return text

    def parse_answer(self, completion: Any) -> str:
        return _last_text(completion)

    def get_format_reward_func(self) -> Callable[..., float]:
        return lambda *args, **kwargs: 1.0


def _last_text(completion: Any) -> str:
    if isinstance(completion, list) and completion:
        last = completion[-1]
        return str(last.get("content", "")) if isinstance(last, dict) else str(last)
    return str(completion)


def _materialized(kwargs: dict[str, Any], how: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    if not how:
        return kwargs
    kwargs = dict(kwargs)
    for name, what in how:
        if what == "parser":
            kwargs[name] = Parser()
        elif what == "sample" and isinstance(kwargs.get(name), dict):
            kwargs[name] = types.SimpleNamespace(**kwargs[name])
        elif what == "namespace" and isinstance(kwargs.get(name), dict):
            kwargs[name] = argparse.Namespace(**kwargs[name])
    return kwargs


class CallStyleError(Exception):
    """The scorer's signature does not say where a response goes."""


#: Call styles, by the trainer whose call they copy; ``style=NAME`` forces one.
STYLES = ("verl", "single", "trl", "openrlhf", "areal", "verifiers", "slime", "rllm", "batch")
#: What verifiers' rubric passes a reward function (filtered by its signature).
_VERIFIERS = ("prompt", "completion", "answer", "state", "task", "info", "parser")
#: What AReaL passes its reward functions, ``completions`` being one string.
_AREAL = ("prompt", "completions", "prompt_ids", "completion_ids", "answer")
_PROMPT = "What is 6 * 7?"


@dataclass(frozen=True)
class ScorerInfo:
    style: str  # one of STYLES
    response_arg: str
    params: tuple[str, ...]
    file: str | None
    line: int | None  # 1-based line of the ``def``
    #: ``async def``, or an object with an ``async def __call__``: awaited on a loop.
    is_async: bool = False
    #: Takes ``**kwargs``: every argument of its style is passed, not only the named ones.
    var_kwargs: bool = False
    #: ``(parameter, annotation)`` pairs, as text: AReaL's ``completions: str`` says its style.
    annotations: tuple[tuple[str, str], ...] = ()

    @property
    def materialize(self) -> tuple[tuple[str, str], ...]:
        """Arguments that travel as plain data and are rebuilt as the trainer's objects."""
        if self.style == "slime":
            args = [p for p in self.params if p not in (self.response_arg, "kwargs")][:1]
            return ((self.response_arg, "sample"), *((a, "namespace") for a in args))
        if self.style == "verifiers" and "parser" in self.params:
            return (("parser", "parser"),)
        return ()


def describe(spec: str, rootdir: str, response: str | None, style: str | None = None) -> ScorerInfo:
    """Import the scorer and read its signature (run in a child process)."""
    try:
        fn = load_callable(spec, Path(rootdir))
    except SpecError:
        _refuse_rubric(spec, Path(rootdir))
        raise
    target = inspect.unwrap(fn)
    try:
        file: str | None = inspect.getsourcefile(target)
        line: int | None = inspect.getsourcelines(target)[1]
    except (TypeError, OSError):
        file, line = None, None
    var_kwargs = False
    annotations: list[tuple[str, str]] = []
    try:
        parameters = inspect.signature(fn).parameters
        params = tuple(parameters)
        var_kwargs = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
        for name, p in parameters.items():
            if p.annotation is not p.empty:
                shown = getattr(p.annotation, "__name__", p.annotation)
                annotations.append((name, str(shown)))
    except (TypeError, ValueError):
        params = ()
    is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - an object's async __call__
    )
    style_name, arg = call_style(params, response, style, dict(annotations))
    return ScorerInfo(style_name, arg, params, file, line, is_async, var_kwargs, tuple(annotations))


def _refuse_rubric(spec: str, rootdir: Path) -> None:
    """One line for a rubric object (verifiers' ``Rubric``: reward functions and weights, not
    itself callable): which functions to register instead."""
    target, attr = split_spec(spec)
    try:
        obj: Any = load_file(rootdir / target) if is_file_target(target) else sys.modules[target]
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (SpecError, KeyError, AttributeError):
        return
    funcs = getattr(obj, "funcs", None) or getattr(obj, "reward_funcs", None)
    if not isinstance(funcs, list | tuple) or not funcs or not all(map(callable, funcs)):
        return
    names = [getattr(f, "__name__", "?") for f in funcs]
    raise CallStyleError(
        f"{spec!r} is a rubric ({type(obj).__name__} of {', '.join(names)}), not a function: "
        f"register each reward function as a scorer, e.g. {target}:{names[0]} style=verifiers"
    )


def call_style(
    params: tuple[str, ...],
    response: str | None,
    style: str | None = None,
    annotations: dict[str, str] | None = None,
) -> tuple[str, str]:
    """``(style, the argument that receives the response)`` from the parameter names.

    ``style`` (the spec's ``style=`` key) wins over the names; ``response`` names the argument.
    """
    names = set(params)
    annotations = annotations or {}
    if response is not None and params and response not in names and "kwargs" not in names:
        raise CallStyleError(f"response={response!r} is not a parameter of {params}")
    if style is not None:
        if style == "batch":
            return style, response or _single_arg(params, BATCH_RESPONSE_NAMES)
        return style, response or _STYLE_RESPONSE.get(style) or _single_arg(params)
    if response is not None:
        return ("trl" if response == "completions" else "single"), response
    if {"data_source", "solution_str"} <= names:
        return "verl", "solution_str"
    if "completions" in names:
        # AReaL's completions is one string: (prompt, completions, prompt_ids, ...). TRL passes
        # completion_ids too (its length-scaled rewards take them), so they say nothing.
        areal = "prompts" not in names and (
            names & {"prompt", "prompt_ids"} or annotations.get("completions") == "str"
        )
        return ("areal" if areal else "trl"), "completions"
    if {"queries", "prompts", "labels"} <= names:
        return "openrlhf", "queries"
    if {"task_info", "action"} <= names:
        return "rllm", "action"
    if "sample" in names and not names & set(RESPONSE_NAMES):
        return "slime", "sample"
    if "completion" in names and names & {"state", "info", "task", "parser", "prompt"}:
        return "verifiers", "completion"
    if names & set(BATCH_RESPONSE_NAMES) and not names & set(RESPONSE_NAMES):
        return "batch", _single_arg(params, BATCH_RESPONSE_NAMES)
    return "single", _single_arg(params)


_STYLE_RESPONSE = {
    "verl": "solution_str",
    "trl": "completions",
    "openrlhf": "queries",
    "areal": "completions",
    "verifiers": "completion",
    "slime": "sample",
    "rllm": "action",
}


def _single_arg(params: tuple[str, ...], names: tuple[str, ...] = RESPONSE_NAMES) -> str:
    for name in params:
        if name in names:
            return name
    raise CallStyleError(
        f"cannot tell which parameter of {params} receives the response; "
        "name it with response=ARGNAME (and style=batch if it takes lists)"
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
        return {
            "queries": [_PROMPT + " " + response],
            "prompts": [_PROMPT + " "],
            "labels": [truth],
        }
    full: dict[str, Any]
    if info.style == "areal":
        full = {
            "prompt": _PROMPT,
            "completions": response,
            "prompt_ids": [1, 2, 3],
            "completion_ids": [4, 5, 6],
            "answer": truth,
        }
        return _filtered(info, full)
    if info.style == "verifiers":
        full = {
            "prompt": [{"role": "user", "content": _PROMPT}],
            "completion": [{"role": "assistant", "content": response}],
            "answer": truth,
            "state": {},
            "task": "default",
            "info": {},
        }
        return _filtered(info, full)
    if info.style == "slime":
        args = [p for p in info.params if p not in (info.response_arg, "kwargs")][:1]
        sample: dict[str, Any] = {"prompt": _PROMPT, "response": response, "label": truth}
        sample["metadata"] = {}
        sample.update(tokens=[], response_length=len(response), reward=None, index=0)
        return {info.response_arg: sample, **{a: {} for a in args}}
    if info.style == "rllm":
        task = {"question": _PROMPT, "ground_truth": truth, "data_source": "math"}
        return {"task_info": task, info.response_arg: response}
    if info.style == "batch":  # a batch of one
        source = "lighteval/MATH" if kind != "text" else "openai/gsm8k"
        batch: dict[str, Any] = {info.response_arg: [response]}
        for name in info.params:
            if name in _BATCH_TRUTHS:
                batch[name] = [truth]
            elif name == "data_sources":
                batch[name] = [source]
            elif name == "extra_infos":
                batch[name] = [{}]
        return batch
    example = {info.response_arg: response}
    for name in ("ground_truth", "answer", "label", "reference"):
        if name in info.params:
            example[name] = truth
            break
    return example


def _filtered(info: ScorerInfo, full: dict[str, Any]) -> dict[str, Any]:
    """The arguments the scorer's signature names (all of them when it takes ``**kwargs``)."""
    if info.var_kwargs:
        return full
    return {name: value for name, value in full.items() if name in info.params}


def with_case(info: ScorerInfo, example: dict[str, Any], kind: str, text: str) -> dict[str, Any]:
    """The example's keyword arguments with the generated response (or program) in place."""
    kwargs = copy.deepcopy(example)
    arg = info.response_arg
    if info.style in ("trl", "batch"):
        for name, value in kwargs.items():  # one-element batch: the other columns follow
            if name != arg and isinstance(value, list) and value:
                kwargs[name] = value[:1]
        first = (kwargs.get(arg) or [""])[0]
        kwargs[arg] = [_in_message(first, kind, text)]
        return kwargs
    if info.style == "openrlhf":
        prompt = (kwargs.get("prompts") or [""])[0]
        query = (kwargs.get("queries") or [prompt])[0]
        old_response = str(query)[len(str(prompt)) :]
        kwargs["queries"] = [str(prompt) + _inject(old_response, kind, text)]
        kwargs["prompts"] = [prompt]
        kwargs["labels"] = (kwargs.get("labels") or [""])[:1]
        return kwargs
    if info.style == "slime" and isinstance(kwargs.get(arg), dict):
        sample = kwargs[arg]
        sample["response"] = _inject(str(sample.get("response", "")), kind, text)
        sample["response_length"] = len(sample["response"])
        return kwargs
    if info.style == "verifiers":
        kwargs[arg] = _in_message(kwargs.get(arg, ""), kind, text)
        return kwargs
    old = kwargs.get(arg, "")
    if isinstance(old, list) and old and all(isinstance(v, str) for v in old):
        # A list of generations (lm-eval's process_results(doc, results)): the scorer reads
        # results[0]; a bare string there would score its first character only.
        kwargs[arg] = [_inject(old[0], kind, text)]
        return kwargs
    kwargs[arg] = _inject(str(old), kind, text)
    return kwargs


def _in_message(old: Any, kind: str, text: str) -> Any:
    """A response in place of ``old``: a string, or chat messages whose last turn it becomes."""
    if isinstance(old, list):
        turn = old[-1] if old and isinstance(old[-1], dict) else {"role": "assistant"}
        return [{**turn, "content": _inject(str(turn.get("content", "")), kind, text)}]
    return _inject(str(old), kind, text)


def with_truth(info: ScorerInfo, kwargs: dict[str, Any], truth: str) -> dict[str, Any]:
    """The case's ground truth in place of the example's, only where it fits.

    It fits when the example's own truth there is a string (per-item styles) or a list of
    strings (batch styles): a scorer given a dict or a number (verl's search_r1 takes
    ``{"target": [...]}``) keeps the example's, so every case calls it the way it works.
    """
    kwargs = copy.deepcopy(kwargs)
    slot = truth_slot(info, kwargs)
    if slot is None:
        return kwargs
    holder, key = slot
    old = holder[key]
    if isinstance(old, str):
        holder[key] = truth
    elif isinstance(old, list) and old and all(isinstance(v, str) for v in old):
        holder[key] = [truth]
    return kwargs


def takes_truth(info: ScorerInfo, example: dict[str, Any]) -> bool:
    """Whether a case's ground truth can go in the example's place (see :func:`with_truth`)."""
    slot = truth_slot(info, example)
    if slot is None:
        return False
    old = slot[0][slot[1]]
    return isinstance(old, str) or (
        isinstance(old, list) and bool(old) and all(isinstance(v, str) for v in old)
    )


def truth_slot(info: ScorerInfo, kwargs: dict[str, Any]) -> tuple[dict[str, Any], str] | None:
    """Where the ground truth sits in a call's arguments: ``(the dict holding it, its key)``."""
    if info.style == "openrlhf":
        return (kwargs, "labels") if "labels" in kwargs else None
    if info.style == "slime":
        sample = kwargs.get(info.response_arg)
        return (sample, "label") if isinstance(sample, dict) and "label" in sample else None
    if info.style == "rllm":
        task = kwargs.get("task_info")
        return (task, "ground_truth") if isinstance(task, dict) and "ground_truth" in task else None
    names = (
        ("solution", "answer", "ground_truth")
        if info.style == "trl"
        else _BATCH_TRUTHS
        if info.style == "batch"
        else ("ground_truth", "answer", "label", "reference")
    )
    for name in names:
        # reasoning-gym's score_answer(answer, entry): there ``answer`` is the response itself.
        if name in kwargs and name != info.response_arg:
            return kwargs, name
    return None


def response_text(info: ScorerInfo, example: dict[str, Any]) -> str:
    """The example's response as text: inside its batch, its messages or its sample."""
    value = example.get(info.response_arg, "")
    if info.style == "openrlhf":
        prompt = str((example.get("prompts") or [""])[0])
        return str((example.get("queries") or [prompt])[0])[len(prompt) :]
    if info.style == "slime" and isinstance(value, dict):
        return str(value.get("response", ""))
    if isinstance(value, list) and value and info.style in ("trl", "batch"):
        value = value[0]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return str(value[0])
    return _last_text(value) if isinstance(value, list) else str(value)


def truth_text(info: ScorerInfo, example: dict[str, Any]) -> str | None:
    """The example's ground truth as text, where it has one that a case's can replace."""
    if not takes_truth(info, example):
        return None
    slot = truth_slot(info, example)
    assert slot is not None
    old = slot[0][slot[1]]
    return old if isinstance(old, str) else str(old[0])


def response_length(value: Any) -> int:
    """The response's length in characters, inside lists, messages and samples too."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        inner = value.get("content", value.get("response"))
        return response_length(inner) if inner is not None else 0
    if isinstance(value, list | tuple):
        return max((response_length(v) for v in value), default=0)
    return 0


def _inject(response: str, kind: str, text: str) -> str:
    """For code, the program replaces the first fenced block's body (or the whole response)."""
    if kind != "code":
        return text
    match = _FENCE.search(response)
    if match is None:
        return text
    return response[: match.start(2)] + text + response[match.end(2) :]
