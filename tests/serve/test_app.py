"""The server's application, called in-process through ASGI: no uvicorn, no network, no pool.

A fake scoring backend stands in for the pool, so each contract's shapes, the bad requests'
messages, the request deadline and the metrics are checked in milliseconds (the real server,
pool and clients are tests/serve/test_server.py's).
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import sys
import time
from collections.abc import MutableMapping
from typing import Any

import pytest

from pytest_rewardhang.guard import Outcome, Status
from pytest_rewardhang.serve import STYLES, BadRequest, Limits, RewardApp, Scored, contract
from pytest_rewardhang.serve._app import AT_ONCE, scored
from pytest_rewardhang.serve._contracts import Contract


class Fake:
    """Scores ``(response, label)`` by exact match; ``"slow"`` never answers, ``"boom"`` raises."""

    default = -1.0

    def __init__(self) -> None:
        self.calls: list[Any] = []

    async def score(self, call: tuple[Any, ...] | dict[str, Any]) -> Scored:
        self.calls.append(call)
        response, label = call if isinstance(call, tuple) else (call["response"], call["label"])
        if response == "slow":
            await asyncio.sleep(3600)
        if response == "boom":
            raise RuntimeError("the backend broke")
        return Scored(float(response == label), "ok")


def call(app: RewardApp, method: str, path: str, body: bytes = b"") -> tuple[int, Any]:
    async def go() -> tuple[int, Any]:
        sent: list[dict[str, Any]] = []
        parts = [body[i : i + 7] for i in range(0, len(body), 7)] or [b""]

        async def receive() -> dict[str, Any]:
            chunk = parts.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(parts)}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(dict(message))

        scope = {"type": "http", "method": method, "path": path, "headers": []}
        await asyncio.wait_for(app(scope, receive, send), 10)
        start, content = sent
        text = content["body"].decode()
        is_json = dict(start["headers"])[b"content-type"] == b"application/json"
        return start["status"], json.loads(text) if is_json else text

    return asyncio.run(go())


def app_for(style: str, **limits: Any) -> tuple[RewardApp, Fake]:
    fake = Fake()
    return RewardApp(contract(style), fake, Limits(**limits)), fake


def test_openrlhf_cuts_the_prompt_off_the_query_and_marks_defaults() -> None:
    app, fake = app_for("openrlhf")
    body = {"query": ["P1 yes", "P2 boom"], "prompts": ["P1 ", "P2 "], "labels": ["yes", "x"]}
    code, answer = call(app, "POST", "/get_reward", json.dumps(body).encode())
    assert fake.calls == [("yes", "yes"), ("boom", "x")]
    assert (code, answer) == (
        200,
        {"rewards": [1.0, -1.0], "scores": [1.0, -1.0], "extra_logs": {"reward_hang": [0.0, 1.0]}},
    )


def test_json_style_takes_positional_and_keyword_samples() -> None:
    app, fake = app_for("json")
    body = {"samples": [["a", "a"], {"response": "b", "label": "c"}]}
    code, answer = call(app, "POST", "/score", json.dumps(body).encode())
    assert fake.calls == [("a", "a"), {"response": "b", "label": "c"}]
    assert (code, answer) == (
        200,
        {"scores": [1.0, 0.0], "statuses": ["ok", "ok"], "metrics": {"reward_hang": [0.0, 0.0]}},
    )
    code, answer = call(app, "POST", "/score", b'{"samples": [3]}')
    assert (code, answer) == (400, {"error": "samples[0] must be a list or an object, not int"})


def test_samples_unanswered_at_the_request_deadline_get_the_default_as_overload() -> None:
    app, _ = app_for("json", request_timeout_s=0.2, read_timeout_s=0.1)
    body = {"samples": [["slow", "x"], ["y", "y"]]}
    code, answer = call(app, "POST", "/score", json.dumps(body).encode())
    assert (code, answer) == (
        200,
        {
            "scores": [-1.0, 1.0],
            "statuses": ["overload", "ok"],
            "metrics": {"reward_hang": [1.0, 0.0]},
        },
    )
    assert app.metrics.samples == {"overload": 1, "ok": 1}


def test_a_large_request_holds_a_bounded_number_of_samples_in_flight_and_keeps_its_deadline() -> (
    None
):
    # Its samples each had a task of their own, all made, cancelled and gathered on the event
    # loop: 65,536 samples answered 3 s past a 5 s deadline, eight such requests at once 50 s
    # past 20 s, /health stalled meanwhile.
    app, fake = app_for("json", request_timeout_s=0.5, read_timeout_s=0.25)
    count = 3 * AT_ONCE
    body = json.dumps({"samples": [["slow", "x"]] * count}).encode()
    started = time.monotonic()
    code, answer = call(app, "POST", "/score", body)
    assert code == 200
    assert answer["statuses"] == ["overload"] * count
    assert len(fake.calls) == AT_ONCE  # the rest never waited for the pool
    assert time.monotonic() - started < 10  # a correctness bound: the deadline is 0.5 s


def test_a_defaulted_samples_log_line_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    class Loud(Fake):
        async def score(self, call: tuple[Any, ...] | dict[str, Any]) -> Scored:
            raise RuntimeError("x" * 100_000)  # a scorer's error, quoting its input

    app = RewardApp(contract("json"), Loud())
    with caplog.at_level("WARNING", logger="pytest_rewardhang.serve"):
        assert call(app, "POST", "/score", b'{"samples": [["a", "b"]]}')[0] == 200
    (line,) = [r.getMessage() for r in caplog.records if '"defaulted"' in r.getMessage()]
    assert len(line) < 1000, len(line)


@pytest.mark.parametrize(
    ("style", "body", "message"),
    [
        ("slime", {"response": "r"}, 'the body has no "prompt"'),
        ("slime", {"prompt": "p", "response": 3}, "'response' must be a str, not int"),
        ("gym", {"response": {"output": []}}, "the body has no 'responses_create_params'"),
        (
            "gym",
            {"responses_create_params": {}, "response": {"output": None}},
            "response.output must be a list, not null",
        ),
        (
            "gym",
            {"responses_create_params": {}, "response": {"output": []}},
            "the body has no 'expected_answer' (the label field)",
        ),
    ],
)
def test_bad_bodies_get_one_sentence(style: str, body: Any, message: str) -> None:
    app, fake = app_for(style)
    code, answer = call(app, "POST", app.contract.path, json.dumps(body).encode())
    assert (code, answer) == (400, {"error": message})
    assert fake.calls == []


@pytest.mark.parametrize(
    ("style", "body", "message"),
    [
        # Each was a bare 500 from uvicorn, which a trainer retries with the same samples.
        ("json", b'{"samples": [[' + b"9" * 5000 + b', "1"]]}', "the body is not JSON this *"),
        ("openrlhf", b"[" * 100_000 + b"]" * 100_000, "the body is not JSON this server reads: *"),
        (
            "gym",
            json.dumps(
                {
                    "responses_create_params": {},
                    "response": {"output": [{"type": "message", "content": 5}]},
                    "expected_answer": "1",
                }
            ).encode(),
            "response.output?0?.content must be a list, not int",
        ),
        # Python reads NaN, Infinity and 1e999 by default, and the gym style echoed them back:
        # not JSON, which a strict parser in the trainer refuses.
        (
            "gym",
            b'{"responses_create_params": {}, "response": {"output": []}, '
            b'"expected_answer": "1", "temperature": NaN}',
            "the body is not JSON this server reads: NaN is not JSON (a number must be finite)*",
        ),
        ("json", b'{"samples": [[-Infinity, "1"]]}', "*-Infinity is not JSON*"),
        ("json", b'{"samples": [[1e999, "1"]]}', "*1e999 is past a float's range*"),
        # Not characters: json.loads read the first from bytes, the second from its escape,
        # and the gym style echoed them to the trainer.
        ("json", b'{"samples": [["\xed\xa0\x80", "1"]]}', "*'utf-8' codec can't decode*"),
        (
            "gym",
            b'{"responses_create_params": {}, "response": {"output": []}, '
            b'"expected_answer": "1", "note": "\\ud800"}',
            "*a string holds a lone surrogate*",
        ),
    ],
)
def test_hostile_bodies_get_a_400_that_says_why(style: str, body: bytes, message: str) -> None:
    app, fake = app_for(style)
    code, answer = call(app, "POST", app.contract.path, body)
    assert code == 400, answer
    assert fnmatch.fnmatchcase(answer["error"], message), answer
    assert fake.calls == []


def test_a_request_over_the_samples_limit_gets_a_413_and_nothing_is_scored() -> None:
    # 3 million minimal samples fit in a 16 MB body and held 5.6 GB waiting to be scored.
    app, fake = app_for("json", max_samples=3)
    body = json.dumps({"samples": [["1", "1"]] * 4}).encode()
    assert call(app, "POST", "/score", body) == (
        413,
        {"error": "the request holds 4 samples, over the 3 samples limit"},
    )
    assert fake.calls == []
    three = json.dumps({"samples": [["1", "1"]] * 3}).encode()
    assert call(app, "POST", "/score", three)[0] == 200


def test_a_score_that_is_not_finite_is_a_500_never_nan_in_an_answer() -> None:
    class NotFinite(Fake):
        async def score(self, call: tuple[Any, ...] | dict[str, Any]) -> Scored:
            return Scored(float("nan"), "ok")

    app = RewardApp(contract("json"), NotFinite())
    code, answer = call(app, "POST", "/score", b'{"samples": [["1", "1"]]}')
    assert code == 500
    assert answer["error"].startswith("the server failed: Out of range float values"), answer


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"request_timeout_s": float("nan")}, "request_timeout_s must be a positive number *nan"),
        ({"read_timeout_s": 0}, "read_timeout_s must be a positive number of seconds, not 0"),
        ({"max_body_bytes": 1.5}, "max_body_bytes must be a positive int, not 1.5"),
        ({"max_samples": 0}, "max_samples must be a positive int, not 0"),
        ({"max_samples": -(10**5000)}, "max_samples must be a positive int, not a huge int"),
        # Both count from the request's arrival: a body that took its whole read timeout
        # would have had every sample defaulted at once.
        ({"read_timeout_s": 100}, "read_timeout_s must be below request_timeout_s"),
    ],
)
def test_nonsense_limits_fail_when_made(limits: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match="must be") as raised:
        Limits(**limits)
    assert fnmatch.fnmatchcase(str(raised.value), message), raised.value


def test_a_default_score_that_is_not_a_finite_number_fails_when_made() -> None:
    from pytest_rewardhang.serve import GuardedScoring

    for default in (float("nan"), float("inf"), True, "0", 10**5000):
        with pytest.raises(ValueError, match="default must be a finite number, not"):
            GuardedScoring(None, default)  # type: ignore[arg-type]


def test_a_failure_of_the_servers_own_is_a_500_that_is_logged_and_counted() -> None:
    class Broken(Contract):
        def calls(self, body: Any) -> list[Any]:
            raise RuntimeError("a bug of the server's")

    app = RewardApp(Broken(), Fake())
    code, answer = call(app, "POST", "/score", b'{"samples": []}')
    assert (code, answer) == (
        500,
        {"error": "the server failed: RuntimeError: a bug of the server's"},
    )
    assert (
        'rewardhang_serve_requests_total{path="/score",code="500"} 1'
        in call(app, "GET", "/metrics")[1]
    )


def test_the_gym_label_field_and_output_text() -> None:
    terms = contract("gym", label_field="ground_truth")
    body = {
        "responses_create_params": {},
        "response": {
            "output": [
                {"type": "function_call", "name": "f"},
                {"type": "message", "content": [{"type": "output_text", "text": "4"}]},
                {
                    "type": "message",
                    "content": [{"type": "refusal"}, {"type": "output_text", "text": "2"}],
                },
            ]
        },
        "ground_truth": "42",
    }
    assert terms.calls(body) == [("42", "42")]
    with pytest.raises(BadRequest, match="no 'ground_truth'"):
        terms.calls({"responses_create_params": {}, "response": {"output": []}})


def test_routes_health_ready_metrics_and_the_shutdown() -> None:
    app, _ = app_for("slime")
    assert call(app, "GET", "/health") == (200, {"status": "ok"})
    assert call(app, "GET", "/ready") == (200, {"status": "ready", "style": "slime"})
    assert call(app, "GET", "/") == (405, {"error": "GET is not allowed on /"})
    assert call(app, "POST", "/nope") == (404, {"error": "no route /nope: this server scores /"})
    code, text = call(app, "GET", "/metrics")
    assert code == 200
    assert 'rewardhang_serve_requests_total{path="/health",code="200"} 1' in text
    assert 'rewardhang_serve_requests_total{path="other",code="404"} 1' in text
    assert 'rewardhang_serve_request_seconds_bucket{le="+Inf"} 4' in text
    assert "rewardhang_serve_workers_replaced_total 0" in text

    async def shutdown() -> None:
        messages = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
        sent: list[Any] = []

        async def receive() -> Any:
            return messages.pop(0)

        async def send(message: Any) -> None:
            sent.append(message["type"])

        await app({"type": "lifespan"}, receive, send)
        assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]

    asyncio.run(shutdown())
    assert call(app, "GET", "/ready") == (503, {"status": "shutting down"})


def test_an_outcome_gives_its_value_only_when_it_is_a_finite_number() -> None:
    assert scored(Outcome(Status.OK, value=1), 0.0) == Scored(1.0, "ok")
    assert scored(Outcome(Status.OK, value=True), 0.0).status == "error"
    assert scored(Outcome(Status.OK, value=float("nan")), 0.5).score == 0.5
    assert scored(Outcome(Status.OK, value="1"), 0.0).detail.startswith("error: the scorer")
    # What a scorer returns is named in a short line, however deep or long: its repr raised
    # RecursionError in the server, or put megabytes in the answer.
    deep: list[Any] = []
    for _ in range(20_000):
        deep = [deep]
    for value in (deep, "x" * (8 << 20)):
        assert len(scored(Outcome(Status.OK, value=value), 0.0).detail) < 200
    hung = scored(Outcome(Status.TIMEOUT, budget=1.0), 0.0)
    assert (hung.score, hung.status) == (0.0, "timeout")


def test_every_style_is_known() -> None:
    assert sorted(STYLES) == ["gym", "json", "openrlhf", "slime"]
    with pytest.raises(ValueError, match="unknown style 'verl': one of"):
        contract("verl")


def test_without_the_serve_extra_the_command_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_rewardhang.__main__ import main

    monkeypatch.setitem(sys.modules, "uvicorn", None)  # what a missing module imports as
    with pytest.raises(SystemExit) as exited:
        main(["serve", "my_rewards.py:compute_score"])
    assert exited.value.code == 2
    assert "serve needs the serve extra: pip install 'pytest-rewardhang[serve]'" in (
        capsys.readouterr().err
    )


def test_ready_says_503_while_no_worker_can_start() -> None:
    # The pool's worker starts failed (its descriptors taken by idle clients) and /ready said
    # 200 while every sample scored the default.
    class Starved(Fake):
        ready = False

    app = RewardApp(contract("json"), Starved())
    code, body = call(app, "GET", "/ready")
    assert code == 503, body
    assert "no worker can start" in body["status"]
    assert call(app, "GET", "/health")[0] == 200
