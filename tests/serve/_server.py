"""A reward server started as a user starts it: the console script, on loopback, a free port.

:func:`serving` starts ``pytest-rewardhang serve`` (or ``python -m pytest_rewardhang serve``) in a
session of its own, waits for its ``listening`` log line, and yields a :class:`Server`. At the end
it sends SIGTERM, waits for a clean exit, and checks that every process the server had below it
(the pool's zygote and workers, recorded while it ran) is gone; a server that does not stop is
killed with all below it, and the test fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import children, kill_everything_below, state
from tests.serve._scorers import SCORER

START_S = 60.0
STOP_S = 30.0


@dataclass
class Server:
    proc: subprocess.Popen[str]
    base: str  # http://127.0.0.1:PORT
    url: str  # the scoring endpoint
    log: list[str] = field(default_factory=list)
    seen: set[int] = field(default_factory=set)

    def below(self) -> set[int]:
        """Every process below the server now; remembered for the check at the end."""
        found, todo = set(), [self.proc.pid]
        while todo:
            try:
                kids = children(todo.pop())
            except OSError:
                continue
            found |= kids
            todo.extend(kids)
        self.seen |= found
        return found

    def events(self, name: str) -> list[dict[str, object]]:
        out = []
        for line in list(self.log):
            if line.startswith("{"):
                record = json.loads(line)
                if record.get("event") == name:
                    out.append(record)
        return out

    def stop(self) -> int:
        self.below()
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=STOP_S)


@contextmanager
def serving(
    *options: str, module: bool = False, scorer: str = SCORER, nofile: int | None = None
) -> Iterator[Server]:
    """The server, started as a user starts it (see above); ``nofile``: under that descriptor
    limit, soft and hard (``prlimit``, which execs the server: its pid is the server's)."""
    command = (
        [sys.executable, "-m", "pytest_rewardhang"]
        if module
        else [str(Path(sys.executable).with_name("pytest-rewardhang"))]
    )
    if nofile is not None:
        command = ["prlimit", f"--nofile={nofile}:{nofile}", *command]
    proc = subprocess.Popen(
        [*command, "serve", scorer, "--host", "127.0.0.1", "--port", "0", *options],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    log: list[str] = []
    listening = threading.Event()

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            log.append(line.rstrip("\n"))
            if '"event": "listening"' in line:
                listening.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + START_S
        while not listening.wait(0.05):
            assert proc.poll() is None, "the server exited:\n" + "\n".join(log)
            assert time.monotonic() < deadline, "no listening line:\n" + "\n".join(log)
        record = next(json.loads(x) for x in log if '"event": "listening"' in x)
        server = Server(proc, f"http://127.0.0.1:{record['port']}", str(record["url"]), log)
        assert len(server.below()) >= 2, "no pool below the server"  # its zygote and a worker
        yield server
        if proc.poll() is None:
            assert server.stop() == 0, "\n".join(log)
        reader.join(timeout=10)
        assert proc.returncode == 0, "\n".join(log)
        assert any('"event": "stopped"' in line for line in log), "\n".join(log)
        deadline = time.monotonic() + STOP_S
        while time.monotonic() < deadline and any(state(p) is not None for p in server.seen):
            time.sleep(0.05)
        left = {p: state(p) for p in server.seen if state(p) is not None}
        assert not left, f"left behind after the server stopped (pid: state): {left}"
    finally:
        if proc.poll() is None:
            kill_everything_below(proc)
        elif os.path.exists(f"/proc/{proc.pid}"):
            proc.wait(timeout=5)
        reader.join(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()


def scrape(server: Server) -> dict[str, float]:
    """The server's /metrics, each sample line by name and labels."""
    import urllib.request

    with urllib.request.urlopen(f"{server.base}/metrics", timeout=10) as answer:  # noqa: S310
        text = answer.read().decode()
        assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out
