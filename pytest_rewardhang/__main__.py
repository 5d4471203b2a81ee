"""``python -m pytest_rewardhang repro FILE``: run one saved case again, under the guard;
``python -m pytest_rewardhang serve SPEC``: the guarded reward server (``pytest_rewardhang.serve``).

The file is what ``--reward-hang-check`` saved for a failing case: the scorer spec, the exact
keyword arguments, the deadline and the context the check called it in (the main thread, a
worker thread or an event loop), which ``--context`` overrides. The scorer is imported first,
so the budget covers only the call, as it did in the check.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pytest_rewardhang.check._calls import CONTEXT_NAMES, ScorerCall, response_length
from pytest_rewardhang.check._shown import shown
from pytest_rewardhang.guard import run
from pytest_rewardhang.guard._limits import mebibytes, seconds
from pytest_rewardhang.guard._spec import SpecError

#: Cases saved before contexts existed were called off the main thread.
_OLD_CONTEXT = "thread"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_rewardhang")
    commands = parser.add_subparsers(dest="command", required=True)
    repro = commands.add_parser("repro", help="run one saved case again under the guard")
    repro.add_argument("file", type=Path, help="a case file saved by --reward-hang-check")
    repro.add_argument("--deadline", type=float, help="seconds (default: the saved deadline)")
    repro.add_argument(
        "--context",
        choices=sorted(CONTEXT_NAMES),
        help="where to call the scorer: main (the main thread), thread (a worker thread), "
        "loop (an event loop) (default: the context the check used)",
    )
    serve = commands.add_parser(
        "serve", help="serve a scorer over HTTP, each sample under the guard (the serve extra)"
    )
    from pytest_rewardhang.serve import add_arguments, run_server  # no uvicorn until it runs

    add_arguments(serve)
    args = parser.parse_args(argv)
    if args.command == "serve":
        return run_server(serve, args)
    if args.deadline is not None:
        try:
            seconds("--deadline", args.deadline)
        except ValueError as exc:
            repro.error(str(exc))
    try:
        record = json.loads(args.file.read_text(encoding="utf-8"))
        spec, kwargs = record["spec"], record["kwargs"]
        if not (isinstance(spec, str) and isinstance(kwargs, dict)):
            raise TypeError("its spec must be a string and its kwargs an object")
        deadline = float(record["deadline"] if args.deadline is None else args.deadline)
        context = str(args.context or record.get("context") or _OLD_CONTEXT)
        materialize = tuple((str(a), str(b)) for a, b in record.get("materialize", []))
        if context not in CONTEXT_NAMES:
            raise ValueError(f"unknown context {context!r}")
        seconds("deadline", deadline)
        memory_mb = mebibytes("memory_mb", record.get("memory_mb"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
        why = f"it has no {exc.args[0]!r}" if isinstance(exc, KeyError) else f"{exc}"
        return _refused(f"{args.file}: not a saved case: {why}")
    call = ScorerCall(spec, str(Path.cwd()), context, materialize, keep_value=True)
    try:
        call.load()
    except SpecError as exc:
        return _refused(str(exc))  # the spec is the case file's
    chars = record.get("chars")
    if not isinstance(chars, int):
        arg = record.get("response_arg")
        values = [kwargs[arg]] if isinstance(arg, str) and arg in kwargs else list(kwargs.values())
        chars = max((response_length(v) for v in values), default=0)
    # The spec is what runs, whatever the file calls the scorer: said first, so that a case
    # file from elsewhere (a CI cache, an artifact) cannot run other code under a known name.
    print(
        shown(
            f"{spec} ({record.get('scorer', '?')}) case {record.get('case', '?')}: {chars} chars,"
            f" deadline {deadline:g} s, called {CONTEXT_NAMES[context]} ({context})"
        )
    )
    # objects=True: the user's own scorer, in their own terminal, and its value is the point.
    out = run(call, kwargs=kwargs, budget=deadline, memory_mb=memory_mb, objects=True)
    print(shown(out.describe()))
    if out.stack:
        print(shown(out.stack))
    elif out.error:
        print(shown(out.error))
    return 0 if out.ok else 1


def _refused(why: str) -> int:
    """One line on stderr, exit 2: a file, not the command line, was wrong (no usage)."""
    print(f"python -m pytest_rewardhang repro: error: {shown(why)}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
