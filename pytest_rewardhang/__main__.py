"""``python -m pytest_rewardhang repro FILE``: run one saved case again, under the guard.

The file is what ``--reward-hang-check`` saved for a failing case: the scorer spec, the exact
keyword arguments and the deadline. The scorer is imported first, so the budget covers only
the call, as it did in the check.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .guard import run
from .guard._spec import SpecError, load_callable


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_rewardhang")
    commands = parser.add_subparsers(dest="command", required=True)
    repro = commands.add_parser("repro", help="run one saved case again under the guard")
    repro.add_argument("file", type=Path, help="a case file saved by --reward-hang-check")
    repro.add_argument("--deadline", type=float, help="seconds (default: the saved deadline)")
    args = parser.parse_args(argv)
    try:
        record = json.loads(args.file.read_text(encoding="utf-8"))
        spec, kwargs = record["spec"], record["kwargs"]
        deadline = float(args.deadline or record["deadline"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        parser.error(f"{args.file}: not a saved case: {type(exc).__name__}: {exc}")
    try:
        fn = load_callable(spec, Path.cwd())
    except SpecError as exc:
        parser.error(str(exc))
    chars = max((len(v) for v in kwargs.values() if isinstance(v, str)), default=0)
    print(
        f"{record.get('scorer', spec)} case {record.get('case', '?')}: {chars} chars, "
        f"deadline {deadline:g} s"
    )
    # objects=True: the user's own scorer, in their own terminal, and its value is the point.
    out = run(fn, kwargs=kwargs, budget=deadline, memory_mb=record.get("memory_mb"), objects=True)
    print(out.describe())
    if out.stack:
        print(out.stack)
    elif out.error:
        print(out.error)
    return 0 if out.ok else 1


if __name__ == "__main__":
    sys.exit(main())
