"""The reward server held to its bounds by its clients: idle connections, large bodies.

Started as a user starts it (``_server.serving``) and called with the standard library's own
HTTP client and sockets, as any trainer's client would.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.serve._scorers import HANG
from tests.serve._server import serving

pytestmark = [pytest.mark.slow, pytest.mark.needs_extra("serve"), pytest.mark.timeout(180)]


def request(base: str, method: str, path: str, body: Any = None, timeout: float = 60) -> Any:
    """``(status, JSON answer)`` of one request on a connection of its own."""
    address = urlsplit(base)
    host = address.hostname or "127.0.0.1"
    connection = http.client.HTTPConnection(host, address.port, timeout=timeout)
    try:
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        connection.request(method, path, body=data, headers={"content-type": "application/json"})
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        connection.close()


def test_idle_connections_leave_the_pool_the_descriptors_it_needs() -> None:
    # 400 connections that never send a byte, under a limit of 256 descriptors: they took
    # them all, the worker a hang killed could not be replaced, the pool closed for good, and
    # every later sample of every client scored the default while /ready said 200. Now the
    # oldest idle ones are closed for new ones, and the silent ones at the read timeout.
    options = ("--budget", "0.5", "--workers", "1", "--read-timeout", "3")
    with serving(*options, nofile=256) as server:
        address = urlsplit(server.base)
        idle = []
        try:
            for _ in range(400):
                idle.append(socket.create_connection((address.hostname, address.port), 10))
            time.sleep(0.5)
            code, hung = request(server.base, "POST", "/score", {"samples": [[HANG, "x"]]})
            assert (code, hung["statuses"]) == (200, ["timeout"]), hung
            code, scored = request(server.base, "POST", "/score", {"samples": [["a", "a"]]})
            assert (code, scored["scores"]) == (200, [1.0]), scored
            assert request(server.base, "GET", "/ready")[0] == 200
            assert request(server.base, "GET", "/health")[0] == 200
            # Silent past the read timeout: closed by the server.
            time.sleep(4)
            closed = 0
            for connection in idle:
                connection.settimeout(5)
                try:
                    closed += connection.recv(1) == b""
                except OSError:
                    closed += 1
            assert closed == len(idle)
        finally:
            for connection in idle:
                connection.close()


def test_health_answers_while_large_bodies_are_parsed() -> None:
    # 16 MB of floats, each checked in Python as it is parsed: on the event loop, three such
    # bodies held /health (and every other request) for seconds.
    floats = ", ".join(["0.123456789012345"] * 850_000)
    body = f'{{"samples": [[{floats}]]}}'.encode()
    with serving("--budget", "2", "--workers", "1") as server:
        parsed: list[Any] = []

        def send() -> None:
            parsed.append(request(server.base, "POST", "/score", body, 120))

        senders = [threading.Thread(target=send) for _ in range(3)]
        for sender in senders:
            sender.start()
        waits: list[float] = []
        try:
            while any(s.is_alive() for s in senders) and len(waits) < 100:
                start = time.monotonic()
                assert request(server.base, "GET", "/health", timeout=30)[0] == 200
                waits.append(time.monotonic() - start)
                time.sleep(0.02)
        finally:
            for sender in senders:
                sender.join(timeout=120)
        # Every sample's default (850,000 arguments), in a 200.
        assert [code for code, _ in parsed] == [200] * 3, parsed
        assert waits, "the bodies were parsed before /health was asked"
        assert max(waits) < 1.0, waits
