"""The reward server as a plain ASGI application, which uvicorn (the ``serve`` extra) runs.

Routes: the contract's scoring path (``POST``), the trainer's other paths it answers with ``{}``,
``GET /health`` (the process answers), ``GET /ready`` (scoring now: 503 before the pool is up
and once shutdown has begun) and ``GET /metrics`` (Prometheus text). Everything else is 404,
or 405 for a known path with the wrong method.

A request is read whole before anything is scored, within ``read_timeout_s`` (a client that
sends its body slowly gets 408) and ``max_body_bytes`` (413: what is past the limit is read and
dropped, never held), and holds at most ``max_samples`` samples (413). Bodies and answers are
strict JSON in UTF-8: bytes that are not UTF-8, a lone surrogate (``\\ud800``), ``NaN``,
``Infinity`` and numbers past a float's range are refused (400), never echoed back to a
trainer's parser that may refuse them in turn. Its samples go to the one pool, shared with
every other request's, through at most :data:`AT_ONCE` coroutines of the request's own (each
takes the next sample when its last is scored: what a request holds and what its end cancels
does not grow with its samples); each sample that hangs, crashes or raises gets the default
score, and any still unanswered ``request_timeout_s`` after the request arrived (the pool
saturated by other requests' hangs) is cancelled and gets it too, with status ``overload``:
the answer is a 200 within the client's timeout, never a 5xx that the client would retry with
the same samples.

Each request is one JSON log line on stderr (path, status, samples, statuses, milliseconds),
and each defaulted sample one more, with why.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import reprlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_rewardhang.guard import Outcome, Pool

from ._contracts import BadRequest, Contract, Scored
from ._metrics import CONTENT_TYPE, Metrics

__all__ = ["GuardedScoring", "Limits", "RewardApp", "Scoring"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

log = logging.getLogger("pytest_rewardhang.serve")

#: How many of one request's samples wait for the pool at once (see the module's docstring).
AT_ONCE = 1024
#: The most of a defaulted sample's reason (the scorer's error) one log line holds.
LOG_DETAIL = 500


class Scoring(Protocol):
    """Scores one sample: a tuple of positional or a dict of keyword arguments."""

    default: float

    async def score(self, call: tuple[Any, ...] | dict[str, Any]) -> Scored: ...


class GuardedScoring:
    """Each sample on one warm guarded :class:`Pool`: a hang costs its budget and a worker."""

    def __init__(self, pool: Pool, default: float = 0.0, keys: Sequence[str] = ()) -> None:
        checked("default", default, "a finite number")  # sent to trainers as a score
        self.pool = pool
        self.default = default
        #: The components of a dict scorer's answers, declared (``--components``) or those of
        #: its first dict answer: a default has them too (0.0), before any answer as after.
        self.keys: tuple[str, ...] = tuple(keys)

    @property
    def ready(self) -> bool:
        """Whether the pool takes work now (see Pool.ready)."""
        return self.pool.ready

    async def score(self, call: tuple[Any, ...] | dict[str, Any]) -> Scored:
        if isinstance(call, dict):
            out = await self.pool.asubmit(**call)
        else:
            out = await self.pool.asubmit(*call)
        result = scored(out, self.default, self.keys)
        if result.components and not self.keys:
            self.keys = tuple(result.components)
        return result


def scored(out: Outcome, default: float, keys: Sequence[str] = ()) -> Scored:
    """The score an outcome gives: its value when it is a finite number (or a dict's finite
    ``score``, its other numbers the components), else the default, with ``keys`` at 0.0."""
    value = out.value
    components: dict[str, float] = {}
    if out.ok and isinstance(value, dict) and "score" in value:
        components = {k: float(v) for k, v in value.items() if k != "score" and _component(k, v)}
        value = value["score"]
    if out.ok and _a_score(value):
        return Scored(float(value), "ok", "", components, out.wall_s)
    fallback = dict.fromkeys(keys, 0.0)
    if not out.ok:
        return Scored(default, out.status.value, out.describe(), fallback, out.wall_s)
    said = f"error: the scorer returned {reprlib.repr(out.value)}, not a number"
    return Scored(default, "error", said, fallback, out.wall_s)


def _a_score(value: object) -> bool:
    """A finite int or float, never a bool: a score."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int past a float's range
        return False


def _component(key: object, value: object) -> bool:
    """A number of a dict answer that goes out beside its score (a bool as 1.0 or 0.0)."""
    return isinstance(key, str) and (isinstance(value, bool) or _a_score(value))


@dataclass(frozen=True)
class Limits:
    #: Below the shortest client timeout that retries (slime's 120 s total).
    request_timeout_s: float = 100.0
    read_timeout_s: float = 30.0
    max_body_bytes: int = 16 * 2**20
    #: Above a trainer's batch (OpenRLHF's rollout batch times its samples per prompt), where a
    #: 16 MB body holds 3 million minimal samples.
    max_samples: int = 65_536

    def __post_init__(self) -> None:
        checked("request_timeout_s", self.request_timeout_s, "a positive number of seconds")
        checked("read_timeout_s", self.read_timeout_s, "a positive number of seconds")
        checked("max_body_bytes", self.max_body_bytes, "a positive int")
        checked("max_samples", self.max_samples, "a positive int")
        if self.read_timeout_s >= self.request_timeout_s:  # it counts from the arrival too
            raise ValueError("read_timeout_s must be below request_timeout_s")


def checked(name: str, value: object, kind: str) -> None:
    """A ``ValueError`` naming ``name`` unless ``value`` is ``kind``: "a finite number", "a
    positive int", or "a positive number of" some unit. Never NaN, an infinity or a bool: NaN
    went out as every hang's score, a read timeout of -1 answered every request 408."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:  # an int past a float's range is no score (its text has no end a trainer reads)
            finite = math.isfinite(float(value))
        except OverflowError:
            finite = False
        positive = value > 0 and (kind != "a positive int" or isinstance(value, int))
        if finite and (kind == "a finite number" or positive):
            return
    huge = isinstance(value, int) and value.bit_length() > 64  # its repr may not be made
    raise ValueError(f"{name} must be {kind}, not {'a huge int' if huge else repr(value)}")


class RewardApp:
    """The ASGI application: one contract, one scoring backend, shared by every request."""

    def __init__(self, contract: Contract, scoring: Scoring, limits: Limits | None = None) -> None:
        self.contract = contract
        self.scoring = scoring
        self.limits = limits or Limits()
        self.metrics = Metrics()
        self.ready = True
        #: One large body parsed at a time, off the event loop (see _body).
        self._parsing = asyncio.Semaphore(1)
        self._routes: dict[str, Callable[[Scope, Receive], Awaitable[tuple[int, Any]]]] = {
            f"POST {contract.path}": self._score,
            **{f"POST {path}": self._empty for path in contract.extra_paths},
            "GET /health": self._health,
            "GET /ready": self._ready,
            **{f"GET {path}": self._constant for path in contract.gets},
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        started = time.monotonic()
        path, method = scope["path"], scope["method"]
        if (method, path) == ("GET", "/metrics"):
            await _send(send, 200, self.metrics.render().encode(), CONTENT_TYPE)
            return
        handler = self._routes.get(f"{method} {path}")
        self.metrics.in_flight += 1
        scope["rewardhang.arrived"] = started  # the request timeout counts from here
        try:
            if handler is not None:
                code, body = await _handled(handler, scope, receive)
            elif any(route.endswith(f" {path}") for route in self._routes):
                code, body = 405, {"error": f"{method} is not allowed on {path}"}
            else:
                code, body = (
                    404,
                    {"error": f"no route {path}: this server scores {self.contract.path}"},
                )
        finally:
            self.metrics.in_flight -= 1
        try:
            payload = json.dumps(body, allow_nan=False).encode()
        except ValueError as exc:
            # Bodies are read strictly and scores are finite, the default too: a number that is
            # not would be a bug of the server's, said as one, not sent as NaN to a trainer.
            code, payload = 500, json.dumps({"error": f"the server failed: {exc}"}).encode()
        await _send(send, code, payload, "application/json")
        self.metrics.request(path if handler else "other", code, time.monotonic() - started)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.ready = False
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _health(self, scope: Scope, receive: Receive) -> tuple[int, Any]:
        return 200, {"status": "ok"}

    async def _ready(self, scope: Scope, receive: Receive) -> tuple[int, Any]:
        if not self.ready:
            return 503, {"status": "shutting down"}
        if not getattr(self.scoring, "ready", True):
            return 503, {"status": "no worker can start now (out of descriptors or processes)"}
        return 200, {"status": "ready", "style": self.contract.style}

    async def _constant(self, scope: Scope, receive: Receive) -> tuple[int, Any]:
        return 200, self.contract.gets[scope["path"]]

    async def _empty(self, scope: Scope, receive: Receive) -> tuple[int, Any]:
        try:
            await self._body(scope, receive, _nothing)
        except BadRequest as exc:
            return exc.status, {"error": str(exc)}
        return 200, {}

    async def _score(self, scope: Scope, receive: Receive) -> tuple[int, Any]:
        started = time.monotonic()
        try:
            body, calls = await self._body(scope, receive, self.contract.calls)
            if len(calls) > self.limits.max_samples:
                raise BadRequest(
                    f"the request holds {len(calls)} samples, over the "
                    f"{self.limits.max_samples} samples limit",
                    413,
                )
        except BadRequest as exc:
            log.info(json.dumps({"event": "bad_request", "code": exc.status, "error": str(exc)}))
            return exc.status, {"error": str(exc)}
        deadline = scope.get("rewardhang.arrived", started) + self.limits.request_timeout_s
        results = await self._score_all(calls, deadline)
        for result in results:
            self.metrics.sample(result.status, result.seconds, self.contract.slow(result))
            if not result.ok:
                why = result.detail[:LOG_DETAIL]
                log.warning(json.dumps({"event": "defaulted", "status": result.status, "why": why}))
        log.info(
            json.dumps(
                {
                    "event": "scored",
                    "path": scope["path"],
                    "samples": len(results),
                    "statuses": dict(Counter(r.status for r in results)),
                    "ms": round((time.monotonic() - started) * 1000, 1),
                }
            )
        )
        return 200, self.contract.answer(body, results)

    async def _score_all(
        self, calls: Sequence[tuple[Any, ...] | dict[str, Any]], deadline: float
    ) -> list[Scored]:
        """Each call's score, through at most :data:`AT_ONCE` coroutines; what is unscored at
        ``deadline`` (monotonic) is cancelled and gets the default, as ``overload``."""
        results: list[Scored | None] = [None] * len(calls)
        pending = iter(range(len(calls)))
        default = self.scoring.default

        async def consume() -> None:
            for i in pending:
                try:
                    results[i] = await self.scoring.score(calls[i])
                except Exception as exc:  # noqa: BLE001 - the backend's failure: this sample's
                    results[i] = Scored(default, "error", f"{type(exc).__name__}: {exc}")

        consumers = [asyncio.ensure_future(consume()) for _ in range(min(len(calls), AT_ONCE))]
        if consumers:
            _, late = await asyncio.wait(consumers, timeout=max(deadline - time.monotonic(), 0))
            for consumer in late:
                consumer.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        overload = Scored(default, "overload", "still waiting at the request's deadline")
        return [overload if result is None else result for result in results]

    async def _body(
        self, scope: Scope, receive: Receive, then: Callable[[Any], Any]
    ) -> tuple[Any, Any]:
        """The request's JSON body, and what ``then`` makes of it; one past the size limit is
        read to its end and dropped (never held), so that the client, still sending, gets its
        413 and not a reset. A body over :data:`PARSED_ON_LOOP` bytes is parsed on a thread
        (one at a time), not on the event loop: a few megabytes of floats took it seconds, and
        ``/health`` waited for them."""
        limit = self.limits.max_body_bytes
        declared = next(
            (int(v) for k, v in scope.get("headers", ()) if k == b"content-length" and v.isdigit()),
            None,
        )
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.limits.read_timeout_s):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise BadRequest("the client went away before sending its body")
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size <= limit:
                        chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            raise BadRequest(
                f"the body took over {self.limits.read_timeout_s:g} s to arrive", 408
            ) from None
        if size > limit:
            said = f"the body is {declared} bytes" if declared else "the body is"
            raise BadRequest(f"{said} over the {limit} bytes limit", 413)
        data = b"".join(chunks)
        del chunks
        if len(data) <= PARSED_ON_LOOP:
            return _parsed(data, then)
        async with self._parsing:
            return await asyncio.to_thread(_parsed, data, then)


#: Bodies up to this many bytes are parsed on the event loop (a millisecond or two at most).
PARSED_ON_LOOP = 64 * 1024


def _nothing(body: Any) -> None:
    return None


def _parsed(data: bytes, then: Callable[[Any], Any]) -> tuple[Any, Any]:
    """The JSON in ``data``, strictly, and what ``then`` makes of it."""
    try:
        # Decoded strictly: json.loads lets surrogates encoded as UTF-8 through.
        text = data.decode("utf-8")
        body = json.loads(text, parse_constant=_not_json, parse_float=_finite)
        if _SURROGATE_ESCAPE.search(text):  # else there is none: a walk is not needed
            _no_lone_surrogate(body)
    except (ValueError, RecursionError) as exc:
        # ValueError: not UTF-8, not JSON, or an integer of over 4,300 digits (Python's
        # bound on reading one); RecursionError: nested past the interpreter's depth.
        raise BadRequest(f"the body is not JSON this server reads: {exc}") from None
    return body, then(body)


#: A surrogate's escape in JSON text (``\ud83d``), the only way one gets into strict UTF-8.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _no_lone_surrogate(body: Any) -> None:
    """A ``ValueError`` if a string in ``body`` holds a lone surrogate (``"\\ud800"`` in JSON):
    not a character, so UTF-8 cannot hold it, and the gym style would echo it to a trainer."""
    pending = [body]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            pending += value.keys()
            pending += value.values()
        elif isinstance(value, list):
            pending += value
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("a string holds a lone surrogate (not a character)") from None


def _not_json(constant: str) -> float:
    raise ValueError(f"{constant} is not JSON (a number must be finite)")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is past a float's range")
    return value


async def _handled(
    handler: Callable[[Scope, Receive], Awaitable[tuple[int, Any]]], scope: Scope, receive: Receive
) -> tuple[int, Any]:
    """The handler's answer; a 500 that says what failed, logged and counted like any answer,
    for a failure of the server's own (uvicorn's bare 500 was in no log line or metric)."""
    try:
        return await handler(scope, receive)
    except Exception as exc:  # noqa: BLE001 - the server's own failure, answered not raised
        said = f"{type(exc).__name__}: {exc}"
        log.error(json.dumps({"event": "failed", "path": scope["path"], "error": said}))
        return 500, {"error": f"the server failed: {said}"}


async def _send(send: Send, code: int, body: bytes, content_type: str) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": code, "headers": headers})
    await send({"type": "http.response.body", "body": body})
