"""The reward server, started as a user starts it and called as each trainer's client calls it.

Each trainer test uses the trainer's own client library (aiohttp), with its session settings,
timeouts, headers and retry policy as its source has them (cited per test; the trainers' code is
read, never copied or imported). The scorer (``_scorers.compute_score``) hangs in one C call on
``HANG``: the server must answer those samples with the default score and a marker, as a 200,
within the budget plus slack, far inside every client's timeout, so nothing is retried.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import socket
import time
from collections.abc import Awaitable
from typing import Any

import pytest

from tests.serve._scorers import HANG, SCORER
from tests.serve._server import Server, scrape, serving

pytestmark = [
    pytest.mark.slow,
    pytest.mark.needs_extra("serve"),
    pytest.mark.needs_extra("bench"),  # aiohttp, the trainers' client
    pytest.mark.timeout(180),
]

BUDGET = 0.5
#: A hung sample is answered within its budget plus this, on a loaded two-core machine (a
#: correctness bound: slime's client gives up at 120 s, OpenRLHF's at 180 s).
SLACK = 5.0
SERVE = ("--budget", str(BUDGET), "--workers", "2")


def run(coro: Awaitable[Any], bound: float = 120.0) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, bound)

    return asyncio.run(bounded())


# --- each trainer's client, as its source has it ----------------------------------------------


async def openrlhf_post(url: str, data: dict[str, Any]) -> Any:
    """OpenRLHF ``SingleTurnAgentExecutor._fetch_rewards_via_http``'s request
    (openrlhf/utils/agent.py:322-353 at 3c3be62): ``ClientTimeout(total=180)``, a new
    ``ClientSession`` per try, ``post(url, json=data)``, ``raise_for_status()``, 5 tries with a
    1 s sleep after any error (a 4xx or 5xx included)."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=180)
    for _ in range(5):
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.post(url, json=data) as response,
            ):
                response.raise_for_status()
                return await response.json()
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(1)
    raise RuntimeError("Request error for 5 times")


def slime_session() -> Any:
    """slime's shared session (slime/rollout/rm_hub/__init__.py:22-31 at 624b824):
    ``TCPConnector(limit=64, enable_cleanup_closed=True)``, ``ClientTimeout(total=120)``."""
    import aiohttp

    connector = aiohttp.TCPConnector(limit=64, enable_cleanup_closed=True)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120))


async def slime_post(session: Any, url: str, payload: dict[str, Any], tries: list[int]) -> Any:
    """slime's ``remote_rm`` (slime/rollout/rm_hub/__init__.py:34-52): ``post(args.rm_url,
    json=payload)``, ``raise_for_status()``, up to 10 tries on any exception with a backoff of
    ``min(2**attempt, 30) + random()``. ``tries`` records each attempt."""
    for attempt in range(10):
        tries.append(attempt)
        try:
            async with session.post(url, json=payload) as resp:
                resp.raise_for_status()
                return await resp.json()
        except Exception:
            if attempt + 1 >= 10:
                raise
            await asyncio.sleep(min(2**attempt, 30) + random.random())  # noqa: S311
    raise AssertionError("unreachable")


def gym_session() -> Any:
    """NeMo Gym's global client (nemo_gym/server_utils.py:148-161 at 07d6b0d): a
    ``TCPConnector`` with a keep-alive of 15 s, ``ClientTimeout()`` (no timeout at all) and a
    ``DummyCookieJar``."""
    import aiohttp

    connector = aiohttp.TCPConnector(limit=1024, limit_per_host=1024, keepalive_timeout=15.0)
    return aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(), cookie_jar=aiohttp.DummyCookieJar()
    )


async def gym_post(session: Any, url: str, body: dict[str, Any]) -> tuple[int, Any]:
    """NeMo Gym's ``request`` (nemo_gym/server_utils.py:208-264): the JSON dumped by hand with
    ``Content-Type: application/json``, retried after 0.5 s on ``ServerDisconnectedError`` and
    ``ClientOSError``; the agent then calls ``raise_for_status`` on the answer
    (responses_api_agents/simple_agent/app.py:337-344, server_utils.py:267-279)."""
    import aiohttp

    data = json.dumps(body).encode()
    for _ in range(20):
        try:
            response = await session.request(
                method="POST", url=url, data=data, headers={"Content-Type": "application/json"}
            )
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            await asyncio.sleep(0.5)
            continue
        async with response:
            response.raise_for_status()
            return response.status, await response.json()
    raise AssertionError("the server kept disconnecting")


def gym_verify_body(text: str, expected: str) -> dict[str, Any]:
    """A verify request as a NeMo Gym agent sends it (nemo_gym/base_resources_server.py:88-97:
    ``responses_create_params``, ``response``, and the task's own fields, here the
    ``expected_answer`` of resources_servers/math_with_judge/app.py:54-59)."""
    return {
        "responses_create_params": {"input": [{"role": "user", "content": "What is 6 * 7?"}]},
        "response": {
            "id": "resp_1",
            "output": [
                {"type": "reasoning", "summary": []},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                },
            ],
        },
        "expected_answer": expected,
    }


# --- the trainers ------------------------------------------------------------------------------


def test_openrlhf_gets_rewards_and_the_hang_marked_within_the_budget() -> None:
    with serving("--style", "openrlhf", *SERVE) as server:
        batch = {
            "query": ["Q: 6*7? 42", f"Q: loop? {HANG} 9 9 9", "Q: 1+1? 3"],
            "prompts": ["Q: 6*7?", "Q: loop?", "Q: 1+1?"],
            "labels": ["42", "9", "2"],
        }
        started = time.monotonic()
        answer = run(openrlhf_post(server.url, batch))
        took = time.monotonic() - started
        assert answer == {
            "rewards": [1.0, 0.0, 0.0],
            "scores": [1.0, 0.0, 0.0],
            "extra_logs": {"reward_hang": [0.0, 1.0, 0.0]},
        }
        assert took < BUDGET + SLACK, f"answered in {took:.2f} s"
        # With a list of URLs, OpenRLHF shards each call's samples over them (agent.py:324-336):
        # a call of one sample sends the other servers empty lists, which must be answered.
        empty = run(openrlhf_post(server.url, {"query": [], "prompts": [], "labels": []}))
        assert empty == {"rewards": [], "scores": [], "extra_logs": {"reward_hang": []}}
        metrics = scrape(server)
        assert metrics['rewardhang_serve_samples_total{status="timeout"}'] == 1
        assert metrics['rewardhang_serve_samples_total{status="ok"}'] == 2
        assert metrics["rewardhang_serve_workers_replaced_total"] == 1
        assert metrics['rewardhang_serve_requests_total{path="/get_reward",code="200"}'] == 2
        (defaulted,) = server.events("defaulted")
        assert defaulted["status"] == "timeout"


def test_one_request_of_twenty_thousand_samples_is_scored_whole_and_health_answers() -> None:
    # Past max_pending the samples waited for room, each woken at every freed slot: 20,000
    # took 32 s and 13,739 got the overload default, 50,000 froze /health for 22 s.
    import urllib.request

    async def big_request_and_health(server: Server) -> tuple[Any, float]:
        n = 20_000
        request = asyncio.ensure_future(
            openrlhf_post(server.url, {"query": ["7"] * n, "labels": ["7"] * (n - 1) + ["8"]})
        )
        worst = 0.0
        while not request.done():
            start = time.monotonic()
            await asyncio.to_thread(urllib.request.urlopen, server.base + "/health", timeout=60)
            worst = max(worst, time.monotonic() - start)
            await asyncio.sleep(0.1)
        return await request, worst

    with serving("--style", "openrlhf", *SERVE) as server:
        answer, worst = run(big_request_and_health(server))
    assert answer["rewards"] == [1.0] * 19_999 + [0.0]
    assert sum(answer["extra_logs"]["reward_hang"]) == 0  # none defaulted as overload
    assert worst < 30.0, f"/health took {worst:.1f} s"


def test_slime_gets_one_score_per_sample_and_never_retries_a_hang() -> None:
    async def scenario(url: str) -> tuple[list[Any], list[int]]:
        tries: list[int] = []
        async with slime_session() as session:
            payloads = [
                {"prompt": "6*7?", "response": "42", "label": "42"},
                {"prompt": "loop?", "response": f"{HANG} 1 1", "label": "1"},
                {"prompt": "1+1?", "response": "3", "label": "2"},
            ]
            answers = await asyncio.gather(*(slime_post(session, url, p, tries) for p in payloads))
        return list(answers), tries

    with serving("--style", "slime", *SERVE) as server:
        assert server.url.endswith("/")
        answers, tries = run(scenario(server.url.rstrip("/")))  # slime's --rm-url http://host:port
        assert answers == [
            {"score": 1.0, "status": "ok", "reward_hang": 0.0},
            {"score": 0.0, "status": "timeout", "reward_hang": 1.0},
            {"score": 0.0, "status": "ok", "reward_hang": 0.0},
        ]
        assert tries == [0, 0, 0], "a sample was retried"


def test_gym_verify_echoes_the_request_with_its_reward() -> None:
    """Started through ``python -m pytest_rewardhang serve``, the other way to start it."""

    async def scenario(base: str) -> list[tuple[int, Any]]:
        async with gym_session() as session:
            seeded = await gym_post(session, f"{base}/seed_session", {})
            good = gym_verify_body("the answer is 42", "the answer is 42")
            hung = gym_verify_body(f"{HANG} forever", "42")
            verified = await asyncio.gather(
                gym_post(session, f"{base}/verify", good), gym_post(session, f"{base}/verify", hung)
            )
            return [seeded, *verified]

    with serving("--style", "gym", *SERVE, module=True) as server:
        seeded, good, hung = run(scenario(server.base))
        assert seeded == (200, {})
        assert good == (
            200,
            {
                **gym_verify_body("the answer is 42", "the answer is 42"),
                "reward": 1.0,
                "reward_status": "ok",
                "reward_hang": 0.0,
            },
        )
        assert hung[0] == 200
        assert (hung[1]["reward"], hung[1]["reward_status"]) == (0.0, "timeout")


# --- load: many clients, 1% of samples hanging in C --------------------------------------------


def test_load_with_one_percent_hangs_loses_nothing_and_answers_each_sample_once() -> None:
    """400 samples from 40 concurrent slime-style clients, 4 of them hanging; each answer must
    be its own sample's score (the labels make every expected score differ by sample)."""
    samples = 400
    hangs = {37, 141, 263, 389}

    def payload(i: int) -> dict[str, Any]:
        response = f"{HANG} {i}" if i in hangs else str(i)
        return {"prompt": f"p{i}", "response": response, "label": str(i) if i % 3 else "no"}

    def expected(i: int) -> dict[str, Any]:
        if i in hangs:
            return {"score": 0.0, "status": "timeout", "reward_hang": 1.0}
        return {"score": 1.0 if i % 3 else 0.0, "status": "ok", "reward_hang": 0.0}

    async def scenario(url: str) -> tuple[dict[int, Any], list[int]]:
        tries: list[int] = []
        todo = list(range(samples))
        answers: dict[int, Any] = {}
        async with slime_session() as session:

            async def client() -> None:
                while todo:
                    i = todo.pop()
                    assert i not in answers
                    answers[i] = await slime_post(session, url, payload(i), tries)

            await asyncio.gather(*(client() for _ in range(40)))
        return answers, tries

    with serving("--style", "slime", "--budget", str(BUDGET), "--workers", "2") as server:
        started = time.monotonic()
        answers, tries = run(scenario(server.url), bound=150)
        took = time.monotonic() - started
        assert answers == {i: expected(i) for i in range(samples)}
        assert len(tries) == samples, "some sample was sent twice"
        metrics = scrape(server)
        assert metrics['rewardhang_serve_samples_total{status="ok"}'] == samples - len(hangs)
        assert metrics['rewardhang_serve_samples_total{status="timeout"}'] == len(hangs)
        assert metrics['rewardhang_serve_requests_total{path="/",code="200"}'] == samples
        assert metrics["rewardhang_serve_request_seconds_count"] == samples + 0  # one per request
        assert metrics["rewardhang_serve_requests_in_flight"] == 0
        # Each hang holds one of the two workers for its budget: a bound, not a benchmark.
        assert took < 60, f"{samples} samples took {took:.1f} s"


# --- bad requests ------------------------------------------------------------------------------


def raw(base: str, request: bytes, timeout: float = 20.0) -> tuple[int, bytes]:
    """Send ``request`` as bytes on a fresh connection; the status code and the body back."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    match = re.match(rb"HTTP/1\.1 (\d+)", head)
    assert match, data[:200]
    return int(match.group(1)), body


def post(path: str, body: bytes, *headers: str) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *headers,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def test_bad_requests_get_one_clear_4xx_each_and_the_server_carries_on() -> None:
    options = ("--style", "openrlhf", *SERVE, "--max-body-mb", "1", "--read-timeout", "1")
    with serving(*options, "--max-samples", "5") as server:
        cases: list[tuple[bytes, int, str]] = [
            (post("/get_reward", b"{not json"), 400, "the body is not JSON"),
            (
                post("/get_reward", b'{"query": ["a"], "labels": [NaN]}'),
                400,
                "the body is not JSON this server reads: NaN is not JSON",
            ),
            (
                post("/get_reward", json.dumps({"query": ["a"] * 6}).encode()),
                413,
                "the request holds 6 samples, over the 5 samples limit",
            ),
            (post("/get_reward", b"\xff\xfe"), 400, "the body is not JSON"),
            (post("/get_reward", b"[1, 2]"), 400, "the body must be a JSON object, not list"),
            (post("/get_reward", b'{"prompt": "x"}'), 400, "the body has no 'query'"),
            (post("/get_reward", b'{"query": "x"}'), 400, "'query' must be a list, not str"),
            (
                post("/get_reward", b'{"query": ["a", "b"], "labels": ["1"]}'),
                400,
                "'labels' must be a list as long as 'query' (2), not 1 items",
            ),
            (post("/get_reward", b'{"query": [7]}'), 400, "query[0] must be a string, not int"),
            (
                post("/get_reward", b"x" * (2 * 2**20)),
                413,
                "the body is 2097152 bytes over the 1048576 bytes limit",
            ),
            (
                b"GET /get_reward HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                405,
                "GET is not allowed on /get_reward",
            ),
            (post("/score", b"{}"), 404, "no route /score: this server scores /get_reward"),
        ]
        for request, code, message in cases:
            got, body = raw(server.base, request)
            answer = json.loads(body)
            assert (got, list(answer)) == (code, ["error"]), request[:80]
            assert answer["error"].startswith(message), (answer, request[:80])
        # A chunked body with no length given, over the limit: cut off as it arrives.
        chunk = b"y" * 2**16
        chunked = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(20)) + b"0\r\n\r\n"
        head = (
            b"POST /get_reward HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: close\r\n\r\n"
        )
        got, body = raw(server.base, head + chunked)
        assert got == 413
        assert json.loads(body) == {"error": "the body is over the 1048576 bytes limit"}
        # A slow client: the headers, then the body a byte a while, never finished.
        host, port = server.base.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=20) as sock:
            sock.sendall(
                post("/get_reward", b"")[:-4].replace(b"Content-Length: 0", b"Content-Length: 100")
                + b"\r\n\r\n"
            )
            started = time.monotonic()
            sock.sendall(b'{"q')
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
            assert time.monotonic() - started < 10
        assert data.startswith(b"HTTP/1.1 408"), data[:200]
        assert b"the body took over 1 s to arrive" in data
        # And it still scores.
        answer = run(openrlhf_post(server.url, {"query": ["1"], "prompts": [""], "labels": ["1"]}))
        assert answer["rewards"] == [1.0]
        metrics = scrape(server)
        assert metrics['rewardhang_serve_requests_total{path="/get_reward",code="400"}'] == 8
        assert metrics['rewardhang_serve_requests_total{path="/get_reward",code="413"}'] == 3
        assert metrics['rewardhang_serve_requests_total{path="/get_reward",code="408"}'] == 1
        assert metrics['rewardhang_serve_requests_total{path="other",code="404"}'] == 1


# --- health, readiness, shutdown ---------------------------------------------------------------


def test_health_ready_and_a_graceful_shutdown_that_answers_the_request_in_flight() -> None:
    import urllib.request

    async def in_flight(server: Server) -> Any:
        request = asyncio.ensure_future(
            openrlhf_post(server.url, {"query": [f"{HANG}", "5"], "labels": ["x", "5"]})
        )
        await asyncio.sleep(0.3)  # the request is in, its hang running
        assert not request.done()
        server.proc.send_signal(15)  # SIGTERM, as an orchestrator stops a replica
        return await request

    with serving("--style", "openrlhf", "--budget", "2", "--workers", "1") as server:
        for path, body in (
            ("/health", {"status": "ok"}),
            ("/ready", {"status": "ready", "style": "openrlhf"}),
        ):
            with urllib.request.urlopen(server.base + path, timeout=10) as answer:  # noqa: S310
                assert (answer.status, json.loads(answer.read())) == (200, body)
        server.below()  # the pool's processes, remembered for the check that they are gone
        answer = run(in_flight(server))
        assert answer["rewards"] == [0.0, 1.0]
        assert answer["extra_logs"] == {"reward_hang": [1.0, 0.0]}
        assert server.proc.wait(timeout=30) == 0
    # serving() checked: exit 0, the "stopped" line, and no process of the pool left.


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--default", "nan", "--default must be a finite number, not nan"),
        ("--request-timeout", "-1", "--request-timeout must be a positive number of seconds"),
        ("--read-timeout", "inf", "--read-timeout must be a positive number of seconds, not inf"),
        ("--max-body-mb", "0", "--max-body-mb must be a positive number of MiB"),
        ("--max-samples", "0", "--max-samples must be a positive int, not 0"),
        ("--max-body-mb", "0.0000001", "--max-body-mb must be from 2**-20 (a byte) to 2**30"),
        ("--max-body-mb", "1.7e308", "--max-body-mb must be from 2**-20 (a byte) to 2**30"),
        ("--port", "70000", "--port must be from 0 to 65535, not 70000"),
        ("--slow-s", "-1", "--slow-s must be a positive number of seconds, not -1.0"),
        ("--components", "acc,,acc", "argument --components: 'acc,,acc': names of a dict scorer"),
        ("--read-timeout", "200", "--read-timeout must be below --request-timeout"),
    ],
)
def test_a_nonsense_option_is_refused_at_start_naming_it(
    tmp_path: Any, option: str, value: str, message: str
) -> None:
    # Each was taken: NaN went out as every hang's score, a read timeout of -1 answered every
    # request 408, a body limit of 0 every request 413.
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "pytest_rewardhang", "serve", SCORER, "--port", "0", option, value],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_a_scorer_that_does_not_import_is_refused_at_start(tmp_path: Any) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "pytest_rewardhang", "serve", "no_such_module:f", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "cannot import 'no_such_module'" in done.stderr
