"""Each trainer's request and response shapes: what a body holds and what the answer must be.

A contract turns a parsed JSON body into the scorer calls of its samples (a tuple of positional
or a dict of keyword arguments each, as :meth:`Pool.map` takes them) and the scores of those
samples into the body the trainer reads. A body the contract cannot read raises
:class:`BadRequest` with one sentence the client's log will show. The shapes are the trainers'
own (cited in ``tests/serve/test_server.py``, which calls the server as each trainer does):

- ``openrlhf``: ``POST /get_reward`` ``{"query": [...], "prompts": [...], "labels": [...]}`` ->
  ``{"rewards": [...], "scores": [...], "extra_logs": {...}}``; the scorer gets
  ``(response, label)``, the response being the query with its prompt cut off.
- ``slime``: ``POST /`` ``{"prompt", "response", "label"}`` -> ``{"score": ..., ...}`` (slime's
  ``--reward-key score`` reads it); the scorer gets ``(response, label)``.
- ``gym``: ``POST /verify`` with a NeMo Gym verify request -> the request with ``reward`` added;
  the scorer gets ``(response, label)``: the text of the response's output messages and the
  request's ``label_field`` (``expected_answer`` unless told).
- ``json``: ``POST /score`` ``{"samples": [...]}``, each sample a list of positional or an
  object of keyword arguments -> ``{"scores": [...], "statuses": [...]}``.

Every answer says which samples got the default score instead of the scorer's, and why (the
outcome's status, or ``overload`` for a sample still waiting at the request's deadline), as
``reward_hang`` (1.0 for a defaulted sample); with ``slow_s`` set, also each sample's scoring
time, ``reward_seconds``, and ``reward_slow`` (1.0 over ``slow_s``): the names the adapters
use. A scorer may answer a dict with ``score``: its other numbers (``acc``, a bool as 1.0 or
0.0) are the sample's components, 0.0 each for a sample that got the default, every sample of
an answer having the same keys: OpenRLHF's ``extra_logs``, keys of slime's answer, NeMo Gym's
``reward_components``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "HANG_METRIC",
    "SECONDS_METRIC",
    "SLOW_METRIC",
    "STYLES",
    "BadRequest",
    "Contract",
    "Scored",
    "contract",
]

#: The per-sample metrics, named as the adapters name them (``adapters/_shared.py``).
HANG_METRIC = "reward_hang"
SECONDS_METRIC = "reward_seconds"
SLOW_METRIC = "reward_slow"


class BadRequest(ValueError):
    """A body the contract cannot read; ``status`` is the HTTP code to answer it with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Scored:
    """One sample's score as the trainer gets it: the scorer's value, or the default and why."""

    score: float
    status: str  # "ok", an outcome's status ("timeout", "crashed", ...) or "overload"
    detail: str = ""  # for the log: the outcome's one-line description when not ok
    #: The scorer's other numbers when it answered a dict with ``score``.
    components: Mapping[str, float] = field(default_factory=dict)
    #: The sample's scoring time in its worker (0.0 for one that never reached it).
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


Call = tuple[Any, ...] | dict[str, Any]


class Contract:
    """The ``json`` style; the trainers' styles override :meth:`calls` and :meth:`answer`."""

    style = "json"
    path = "/score"
    #: Other POST paths the trainer calls on the same server, answered with an empty object.
    extra_paths: tuple[str, ...] = ()

    #: GET paths the trainer calls, and their constant answers.
    gets: Mapping[str, Any] = {}

    def __init__(self, label_field: str = "expected_answer", slow_s: float | None = None) -> None:
        self.label_field = label_field
        self.slow_s = slow_s

    def slow(self, one: Scored) -> bool:
        return self.slow_s is not None and one.seconds > self.slow_s

    def metrics(self, scored: Sequence[Scored]) -> dict[str, list[float]]:
        """Each per-sample metric's column, in the samples' order."""
        columns = {HANG_METRIC: [0.0 if s.ok else 1.0 for s in scored]}
        if self.slow_s is not None:
            columns[SECONDS_METRIC] = [s.seconds for s in scored]
            columns[SLOW_METRIC] = [1.0 if self.slow(s) else 0.0 for s in scored]
        return columns

    @staticmethod
    def components(scored: Sequence[Scored]) -> dict[str, list[float]]:
        """Each component's column, 0.0 for a sample without it (a defaulted one)."""
        keys = dict.fromkeys(key for s in scored for key in s.components)
        return {key: [s.components.get(key, 0.0) for s in scored] for key in keys}

    def calls(self, body: Any) -> list[Call]:
        samples = _field(body, "samples", list)
        calls: list[Call] = []
        for i, sample in enumerate(samples):
            if isinstance(sample, list):
                calls.append(tuple(sample))
            elif isinstance(sample, dict):
                calls.append(dict(sample))
            else:
                raise BadRequest(f"samples[{i}] must be a list or an object, not {_kind(sample)}")
        return calls

    def answer(self, body: Any, scored: Sequence[Scored]) -> Any:
        answer: dict[str, Any] = {
            "scores": [s.score for s in scored],
            "statuses": [s.status for s in scored],
            "metrics": self.metrics(scored),
        }
        components = self.components(scored)
        if components:
            answer["components"] = components
        return answer


class OpenRLHF(Contract):
    style = "openrlhf"
    path = "/get_reward"

    def calls(self, body: Any) -> list[Call]:
        queries = _field(body, "query", list)
        prompts = _optional_list(body, "prompts", len(queries))
        labels = _optional_list(body, "labels", len(queries))
        calls: list[Call] = []
        for i, (query, prompt) in enumerate(zip(queries, prompts, strict=True)):
            if not isinstance(query, str):
                raise BadRequest(f"query[{i}] must be a string, not {_kind(query)}")
            calls.append((_cut_prompt(query, prompt), labels[i]))
        return calls

    def answer(self, body: Any, scored: Sequence[Scored]) -> Any:
        rewards = [s.score for s in scored]
        # extra_logs values are logged as per-sample numbers, each list lined up with rewards.
        logs = {**self.components(scored), **self.metrics(scored)}
        return {"rewards": rewards, "scores": rewards, "extra_logs": logs}


class Slime(Contract):
    style = "slime"
    path = "/"

    def calls(self, body: Any) -> list[Call]:
        response = _field(body, "response", str)
        if "prompt" not in body:
            raise BadRequest('the body has no "prompt"')
        return [(response, body.get("label"))]

    def answer(self, body: Any, scored: Sequence[Scored]) -> Any:
        (one,) = scored
        columns = {**self.components(scored), **self.metrics(scored)}
        return {"score": one.score, "status": one.status, **{k: v[0] for k, v in columns.items()}}


class Gym(Contract):
    style = "gym"
    path = "/verify"
    # NeMo Gym's agents open each rollout with /seed_session on the resources server, and
    # those of session environments close it with /close (responses_api_agents/
    # gymnasium_agent/app.py:137-146): nothing is kept per session here, so both are {}.
    extra_paths = ("/seed_session", "/close")
    # Gym's ``gym eval reverify`` asks each resources server whether a stored rollout can be
    # verified again alone (nemo_gym/base_resources_server.py:145,187): here it can, nothing
    # is kept between requests.
    gets: Mapping[str, Any] = {"/reverify_mode": "stateless"}

    def calls(self, body: Any) -> list[Call]:
        _field(body, "responses_create_params", dict)
        response = _field(body, "response", dict)
        output = response.get("output")
        if not isinstance(output, list):
            raise BadRequest(f"response.output must be a list, not {_kind(output)}")
        if self.label_field not in body:
            raise BadRequest(f"the body has no {self.label_field!r} (the label field)")
        return [(_output_text(output), body[self.label_field])]

    def answer(self, body: Any, scored: Sequence[Scored]) -> Any:
        (one,) = scored
        answer = {**body, "reward": one.score, "reward_status": one.status}
        # Gym's aggregate metrics read top-level numbers only, never inside a mapping.
        answer.update({key: column[0] for key, column in self.metrics(scored).items()})
        components = self.components(scored)
        if components:  # BaseMultiRewardVerifyResponse's mapping: one key set for every task
            answer["reward_components"] = {key: column[0] for key, column in components.items()}
        return answer


STYLES: dict[str, type[Contract]] = {c.style: c for c in (OpenRLHF, Slime, Gym, Contract)}


def contract(
    style: str, label_field: str = "expected_answer", slow_s: float | None = None
) -> Contract:
    """The contract of ``style`` (one of :data:`STYLES`)."""
    try:
        return STYLES[style](label_field, slow_s)
    except KeyError:
        raise ValueError(f"unknown style {style!r}: one of {', '.join(STYLES)}") from None


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _field(body: Any, name: str, kind: type) -> Any:
    if not isinstance(body, Mapping):
        raise BadRequest(f"the body must be a JSON object, not {_kind(body)}")
    if name not in body:
        raise BadRequest(f"the body has no {name!r}")
    value = body[name]
    if not isinstance(value, kind):
        raise BadRequest(f"{name!r} must be a {kind.__name__}, not {_kind(value)}")
    return value


def _optional_list(body: Mapping[str, Any], name: str, length: int) -> list[Any]:
    value = body.get(name)
    if value is None:
        return [None] * length
    if not isinstance(value, list) or len(value) != length:
        got = f"{len(value)} items" if isinstance(value, list) else _kind(value)
        raise BadRequest(f"{name!r} must be a list as long as 'query' ({length}), not {got}")
    return value


def _cut_prompt(query: str, prompt: object) -> str:
    """The response: the query after its prompt, as OpenRLHF's own reward examples cut it."""
    if isinstance(prompt, str) and prompt:
        where = query.find(prompt)
        if where >= 0:
            return query[where + len(prompt) :]
    return query


def _output_text(output: list[Any]) -> str:
    """The text of a NeMo Gym response's output messages, as its resources servers join it."""
    parts = []
    for i, item in enumerate(output):
        if isinstance(item, dict) and item.get("type") == "message":
            contents = item.get("content") or []
            if not isinstance(contents, list):
                raise BadRequest(
                    f"response.output[{i}].content must be a list, not {_kind(contents)}"
                )
            for content in contents:
                if isinstance(content, dict) and content.get("type") == "output_text":
                    parts.append(str(content.get("text", "")))
    return "".join(parts)
