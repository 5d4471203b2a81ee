"""``pytest-rewardhang serve SPEC``: the options, the pool, and uvicorn running the app.

The pool starts before the server listens, so the first request finds it warm and ``/ready``
answers 200 as soon as anything does. On SIGTERM or SIGINT uvicorn stops listening, lets every
request in flight be answered (each is bounded by its request timeout), and returns; then the
pool is closed, which kills its zygote and workers: no process is left.

Connections are kept below the process's descriptor limit (raised to its hard limit at start):
past :func:`connection_limit` a new one is closed at once, and one that has not sent a whole
request's headers ``read_timeout_s`` after it was made is closed, so that clients holding
idle connections cannot take the descriptors the pool needs to start a worker.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import signal
import socket
import sys
from typing import Any

from pytest_rewardhang.guard import Pool, PoolError, SpecError

from ._app import GuardedScoring, Limits, RewardApp, checked
from ._contracts import STYLES, contract

__all__ = ["add_arguments", "run_server"]

log = logging.getLogger("pytest_rewardhang.serve")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="the scorer: pkg.mod:func or path/file.py:func")
    parser.add_argument(
        "--style",
        choices=sorted(STYLES),
        default="json",
        help="the trainer's contract: openrlhf (POST /get_reward), slime (POST /), "
        "gym (POST /verify), json (POST /score) (default: json)",
    )
    parser.add_argument("--workers", type=int, default=2, help="pool workers (default: 2)")
    parser.add_argument("--budget", type=float, default=2.0, help="seconds per sample (default: 2)")
    parser.add_argument("--memory-mb", type=float, help="memory limit per sample, in MB")
    parser.add_argument(
        "--default", type=float, default=0.0, help="the score of a defaulted sample (default: 0)"
    )
    parser.add_argument(
        "--components",
        type=_components,
        default=(),
        help="a dict scorer's components beside its score, comma-separated: a defaulted "
        "sample has them (0.0) before any answer (default: those of its first dict answer)",
    )
    parser.add_argument(
        "--slow-s",
        type=float,
        help="report each sample's scoring time (reward_seconds) and flag it slow "
        "(reward_slow) over this many seconds (default: no timing)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8000, help="port (0: any free one)")
    parser.add_argument(
        "--label-field",
        default="expected_answer",
        help="gym: the request field the scorer gets as its label (default: expected_answer)",
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=Limits.request_timeout_s,
        help="seconds before a request's unscored samples get the default "
        f"(default: {Limits.request_timeout_s:g}, under slime's 120 s)",
    )
    parser.add_argument(
        "--read-timeout",
        type=float,
        default=Limits.read_timeout_s,
        help=f"seconds a client may take to send its body (default: {Limits.read_timeout_s:g})",
    )
    parser.add_argument(
        "--max-body-mb", type=float, default=16.0, help="largest request body (default: 16)"
    )
    parser.add_argument(
        "--max-samples",
        type=int,
        default=Limits.max_samples,
        help=f"most samples in one request (default: {Limits.max_samples})",
    )
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )


def _components(text: str) -> tuple[str, ...]:
    """``--components``: names, comma-separated, each once, none ``score``."""
    names = tuple(name.strip() for name in text.split(","))
    if not all(names) or len(set(names)) != len(names) or "score" in names:
        raise argparse.ArgumentTypeError(
            f"{text!r}: names of a dict scorer's components, comma-separated, each once, "
            "none of them 'score'"
        )
    return names


def run_server(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    try:
        import uvicorn
    except ImportError:
        parser.error("serve needs the serve extra: pip install 'pytest-rewardhang[serve]'")
    logging.basicConfig(
        stream=sys.stderr, level=args.log_level.upper(), format="%(message)s", force=True
    )
    limits = _limits(parser, args)
    if args.slow_s is not None:
        try:
            checked("--slow-s", args.slow_s, "a positive number of seconds")
        except ValueError as exc:
            parser.error(str(exc))
    terms = contract(args.style, args.label_field, args.slow_s)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:  # as many connections as the system lets this process have
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        listener = socket.create_server((args.host, args.port), backlog=2048)
    except OSError as exc:  # the port taken, the address not this machine's
        parser.error(f"cannot listen on {args.host}:{args.port}: {exc}")
    try:
        pool = Pool(args.spec, workers=args.workers, budget=args.budget, memory_mb=args.memory_mb)
    except (SpecError, PoolError, ValueError) as exc:  # each says why in one line
        listener.close()
        parser.error(str(exc))
    except OSError as exc:  # out of descriptors or processes for that many workers
        listener.close()
        parser.error(f"cannot start the pool: {exc}")
    try:
        app = RewardApp(terms, GuardedScoring(pool, args.default, args.components), limits)
        config = uvicorn.Config(
            app,
            http=bounded_protocol(connection_limit(args.workers), limits.read_timeout_s),
            log_level=args.log_level,
            access_log=False,  # the app logs each request itself, as JSON
            lifespan="on",
            timeout_graceful_shutdown=int(limits.request_timeout_s) + 5,
        )
        host, port = listener.getsockname()[:2]
        log.info(
            json.dumps(
                {
                    "event": "listening",
                    "url": f"http://{host}:{port}{terms.path}",
                    "port": port,
                    "style": terms.style,
                    "workers": args.workers,
                    "budget": args.budget,
                }
            )
        )
        # uvicorn stops on SIGTERM or SIGINT, then restores the handlers it found and raises the
        # signal again: these make that a return, so the pool below is closed and the exit is 0.
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, _stopped)
        uvicorn.Server(config).run(sockets=[listener])
    finally:
        pool.close()
        listener.close()
        log.info(json.dumps({"event": "stopped"}))
    return 0


#: Descriptors kept for the pool's own, per worker (its pipes, its pidfd, a fence), and for
#: the server besides (its listener, its loop, logging, a zygote's socket).
_PER_WORKER_FDS = 8
_SPARE_FDS = 64


def connection_limit(workers: int) -> int:
    """How many connections the server keeps open at once: what the descriptor limit leaves
    when the pool's workers (each replaced once, at worst) and the server have theirs."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(8, soft - 2 * _PER_WORKER_FDS * workers - _SPARE_FDS)


def bounded_protocol(limit: int, headers_s: float) -> Any:
    """uvicorn's HTTP protocol, keeping at most ``limit`` connections open: past it, the oldest
    idle one (no request, or its answer sent) is closed for the new one, or the new one if all
    are busy; and one that has not sent a request's headers ``headers_s`` after it was made is
    closed (uvicorn waits forever)."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    #: The open connections, oldest first (a dict for its order and O(1) removal).
    opened: dict[Any, None] = {}

    class Bounded(AutoHTTPProtocol):  # type: ignore[misc, valid-type, unused-ignore]
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            opened[self] = None
            if len(self.connections) > limit:
                idle = next((c for c in opened if c is not self and c.idle()), self)
                opened.pop(idle, None)
                idle.transport.abort()  # its connection_lost forgets it
                if idle is self:
                    return
            self.loop.call_later(headers_s, self._close_if_silent)

        def connection_lost(self, exc: Exception | None) -> None:
            opened.pop(self, None)
            super().connection_lost(exc)

        def idle(self) -> bool:
            cycle = self.cycle
            return cycle is None or bool(cycle.response_complete)

        def _close_if_silent(self) -> None:
            if self.cycle is None and not self.transport.is_closing():
                self.transport.close()

    return Bounded


def _limits(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Limits:
    """The request limits given, each checked under its option's name, and the default score."""
    checks = (
        ("--default", args.default, "a finite number"),
        ("--request-timeout", args.request_timeout, "a positive number of seconds"),
        ("--read-timeout", args.read_timeout, "a positive number of seconds"),
        ("--max-body-mb", args.max_body_mb, "a positive number of MiB"),
        ("--max-samples", args.max_samples, "a positive int"),
    )
    try:
        for option, value, kind in checks:
            checked(option, value, kind)
    except ValueError as exc:
        parser.error(str(exc))
    if not 2**-20 <= args.max_body_mb <= 2**30:  # a byte to a PiB
        parser.error(f"--max-body-mb must be from 2**-20 (a byte) to 2**30, not {args.max_body_mb}")
    if args.read_timeout >= args.request_timeout:  # a slow body would leave no time to score
        parser.error("--read-timeout must be below --request-timeout (both count from arrival)")
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be from 0 to 65535, not {args.port}")
    return Limits(
        args.request_timeout, args.read_timeout, int(args.max_body_mb * 2**20), args.max_samples
    )


def _stopped(signum: int, frame: object) -> None:
    """The stop signal, once uvicorn has stopped: nothing left to do but close the pool."""
