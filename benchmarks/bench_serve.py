"""The guarded reward server side by side with the servers reward code runs behind today.

Run: .venv/bin/pip install -q -e '.[serve,bench]' && .venv/bin/python benchmarks/bench_serve.py
(``--quick``: a smoke run; ``--against ROOT``: also the guarded server of the package in ROOT,
e.g. one made with ``git archive REV pytest_rewardhang | tar -x -C ROOT``, in rounds that take
turns with this checkout's, ``--rounds`` of them, each figure the median run of its peer)

Three servers, each the same ASGI app (``pytest_rewardhang.serve.RewardApp``, ``--style json``)
on the same uvicorn, on loopback, differing only in how a sample is scored:

- ``pytest-rewardhang serve``: the console script, each sample on a guarded ``Pool`` of two
  workers, 0.5 s budget;
- unguarded: the scorer called in a thread (``asyncio.to_thread``), as a FastAPI endpoint that
  offloads a sync scorer does;
- thread pool + timeout: a ``ThreadPoolExecutor`` of two threads and ``asyncio.wait_for(...,
  0.5)``, the pattern reward servers use today to bound a call.

Each is loaded for a fixed time by 16 aiohttp clients (the trainers' own client library), each
posting batches of 4 samples back to back with a 10 s client timeout, once with no hangs and
once with 1% of samples hanging in one C call (``sum(range(10**13))``, the GIL held, as a regex
or sympy hang holds it). Reported per server and load: samples answered per second, p50 and
p99 request latency of the answered requests, requests the clients gave up on, and what one hang
costs in worker-seconds. Each server is a fresh process per run; the unguarded ones are killed
at the end (a thread stuck in C cannot be stopped), the guarded one stopped with SIGTERM.
Performance is measured here, not asserted in timed tests.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _procs import die_with_parent, machine  # noqa: E402

SCORER = f"{HERE / 'serve_scorers.py'}:compute_score"
BUDGET = 0.5
WORKERS = 2
CLIENTS = 16
BATCH = 4
CLIENT_TIMEOUT_S = 10.0
HANG_EVERY = 100  # 1% of samples
PEERS = {
    "guarded": "`pytest-rewardhang serve` (guarded `Pool`)",
    "unguarded": "same app, unguarded (`asyncio.to_thread`)",
    "threads": "same app, thread pool + `wait_for` timeout",
}


# --- the peers' servers (this script, run as `--peer NAME`) -----------------------------------


class Unguarded:
    default = 0.0

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    async def score(self, call: Any) -> Any:
        from pytest_rewardhang.serve import Scored

        return Scored(float(await asyncio.to_thread(self.fn, *call)), "ok")


class ThreadsWithTimeout(Unguarded):
    def __init__(self, fn: Any) -> None:
        super().__init__(fn)
        self.executor = concurrent.futures.ThreadPoolExecutor(WORKERS)

    async def score(self, call: Any) -> Any:
        from pytest_rewardhang.serve import Scored

        loop = asyncio.get_running_loop()
        try:
            value = await asyncio.wait_for(
                loop.run_in_executor(self.executor, self.fn, *call), BUDGET
            )
        except TimeoutError:  # the thread runs on: it cannot be stopped
            return Scored(self.default, "timeout")
        return Scored(float(value), "ok")


def serve_peer(name: str) -> None:
    import socket

    import uvicorn

    from pytest_rewardhang.serve import RewardApp, contract

    sys.path.insert(0, str(HERE))
    from serve_scorers import compute_score

    scoring = Unguarded(compute_score) if name == "unguarded" else ThreadsWithTimeout(compute_score)
    listener = socket.create_server(("127.0.0.1", 0))
    print(json.dumps({"event": "listening", "port": listener.getsockname()[1]}), flush=True)
    config = uvicorn.Config(RewardApp(contract("json"), scoring), log_level="warning")
    uvicorn.Server(config).run(sockets=[listener])


# --- the load ----------------------------------------------------------------------------------


@dataclass
class Run:
    peer: str
    hangs: bool
    seconds: float
    latencies: list[float]
    answered: int  # samples in answered requests
    defaulted: int  # of those, samples that got the default
    gave_up: int  # requests the client gave up on (timeout or error)
    hangs_sent: int


def start(peer: str, logs: Path) -> tuple[subprocess.Popen[bytes], int]:
    """The peer's server, its output to ``logs`` (a pipe nobody reads would fill and stop it)."""
    env = dict(os.environ)
    if peer.startswith("guarded"):
        command = [
            *(sys.executable, "-m", "pytest_rewardhang"),
            *("serve", SCORER, "--port", "0", "--workers", str(WORKERS), "--budget", str(BUDGET)),
        ]
    else:
        command = [sys.executable, __file__, "--peer", peer]
    # "guarded ROOT": the package in ROOT, which `-m` finds first when run there.
    root = peer.partition(" ")[2] or None
    if root:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (root, env.get("PYTHONPATH"))))

    def limits() -> None:
        die_with_parent()
        resource.setrlimit(resource.RLIMIT_CPU, (300, 300))  # a stuck peer burns for so long

    with logs.open("wb") as out:
        proc = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=limits,
            env=env,
            cwd=root,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        for line in logs.read_text().splitlines():
            if '"event": "listening"' in line:
                return proc, int(json.loads(line)["port"])
        time.sleep(0.05)
    stop(peer, proc)
    raise RuntimeError(f"{peer} did not start:\n{logs.read_text()}")


def stop(peer: str, proc: subprocess.Popen[bytes]) -> None:
    if peer.startswith("guarded"):
        proc.send_signal(signal.SIGTERM)  # graceful: the pool is closed, nothing left
        try:
            proc.communicate(timeout=30)
            return
        except subprocess.TimeoutExpired:
            pass
    os.killpg(proc.pid, signal.SIGKILL)  # stuck in C: only a kill ends it
    proc.communicate(timeout=30)


async def load(port: int, seconds: float, hangs: bool) -> tuple[list[float], int, int, int, int]:
    import aiohttp

    url = f"http://127.0.0.1:{port}/score"
    counter = iter(range(10**9))
    latencies: list[float] = []
    tally = {"answered": 0, "defaulted": 0, "gave_up": 0, "hangs": 0}
    end = time.monotonic() + seconds

    def sample() -> list[str]:
        i = next(counter)
        if hangs and i % HANG_EVERY == HANG_EVERY - 1:
            tally["hangs"] += 1
            return [f"HANG {i}", str(i)]
        return [str(i), str(i)]

    async def client(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < end:
            body = {"samples": [sample() for _ in range(BATCH)]}
            began = time.monotonic()
            try:
                async with session.post(url, json=body) as response:
                    response.raise_for_status()
                    answer = await response.json()
            except (aiohttp.ClientError, TimeoutError):
                tally["gave_up"] += 1
                continue
            latencies.append(time.monotonic() - began)
            tally["answered"] += BATCH
            tally["defaulted"] += sum(s != "ok" for s in answer["statuses"])

    timeout = aiohttp.ClientTimeout(total=CLIENT_TIMEOUT_S)
    connector = aiohttp.TCPConnector(limit=CLIENTS)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        await asyncio.gather(*(client(session) for _ in range(CLIENTS)))
    return latencies, tally["answered"], tally["defaulted"], tally["gave_up"], tally["hangs"]


def measure(peer: str, hangs: bool, seconds: float) -> Run:
    with tempfile.TemporaryDirectory() as where:
        return measure_in(peer, hangs, seconds, Path(where) / "server.log")


def measure_in(peer: str, hangs: bool, seconds: float, logs: Path) -> Run:
    proc, port = start(peer, logs)
    try:
        began = time.monotonic()
        latencies, answered, defaulted, gave_up, sent = asyncio.run(load(port, seconds, hangs))
        took = time.monotonic() - began
    finally:
        stop(peer, proc)
    return Run(peer, hangs, took, latencies, answered, defaulted, gave_up, sent)


def pct(values: list[float], q: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:,.0f} ms"


def hang_cost(clean: Run, hung: Run) -> str:
    """Worker-seconds one hang takes from the server: the extra time per sample, over all the
    samples answered, per hang sent, times the workers that share the load."""
    if hung.answered == 0 or hung.gave_up:
        return "∞ (the server stopped answering)"
    extra = hung.seconds / hung.answered - clean.seconds / max(clean.answered, 1)
    return f"{max(extra, 0.0) * hung.answered * WORKERS / max(hung.hangs_sent, 1):.2f} s"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds each")
    parser.add_argument("--peer", choices=["unguarded", "threads"], help=argparse.SUPPRESS)
    parser.add_argument("--against", type=Path, help="a folder holding another pytest_rewardhang")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each peer, taking turns")
    args = parser.parse_args()
    if args.peer:
        serve_peer(args.peer)
        return 0
    try:
        import aiohttp  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        print(f"needs the serve and bench extras: pip install -e '.[serve,bench]' ({exc})")
        return 2
    peers = dict(PEERS)
    if args.against:
        if not (args.against / "pytest_rewardhang" / "__init__.py").is_file():
            parser.error(f"--against {args.against}: no pytest_rewardhang package in it")
        peers[f"guarded {args.against.resolve()}"] = f"the same, the package in `{args.against}`"
    seconds = 2.0 if args.quick else 12.0
    began = time.monotonic()
    load_start = os.getloadavg()[0]
    rounds: dict[tuple[str, bool], list[Run]] = {}
    for _ in range(args.rounds):
        for hangs in (False, True):
            for peer in peers:
                rounds.setdefault((peer, hangs), []).append(measure(peer, hangs, seconds))
    # Each peer's median run by throughput: one run's figures, never a mix of runs.
    runs = {
        key: sorted(found, key=lambda run: run.answered / run.seconds)[len(found) // 2]
        for key, found in rounds.items()
    }
    print(
        "| server | samples/s, no hangs | p50 / p99, no hangs | samples/s, 1% hangs "
        "| p50 / p99, 1% hangs | requests given up, 1% hangs | worker-s per hang |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for peer, label in peers.items():
        clean, hung = runs[peer, False], runs[peer, True]
        print(
            f"| {label} | {clean.answered / clean.seconds:,.0f} "
            f"| {pct(clean.latencies, 0.5)} / {pct(clean.latencies, 0.99)} "
            f"| {hung.answered / hung.seconds:,.0f} "
            f"| {pct(hung.latencies, 0.5)} / {pct(hung.latencies, 0.99)} "
            f"| {hung.gave_up} | {hang_cost(clean, hung)} |"
        )
    print()
    guarded = runs["guarded", True]
    print(
        f"- guarded, 1% hangs: {guarded.hangs_sent} hangs sent, {guarded.defaulted} samples "
        f"defaulted, {guarded.gave_up} requests given up"
    )
    print()
    print(
        f"{machine()}; {CLIENTS} clients x {BATCH} samples a request, {seconds:g} s per run, "
        f"{WORKERS} workers, {BUDGET} s budget, {CLIENT_TIMEOUT_S:g} s client timeout; "
        f"{args.rounds} round(s); load "
        f"average {load_start:.2f} at start, {os.getloadavg()[0]:.2f} at end; took "
        f"{time.monotonic() - began:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
