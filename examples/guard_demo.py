"""The guard stopping the calls that froze real training runs, one outcome a line.

Run: .venv/bin/python examples/guard_demo.py   (exit status 1 if any call ends unexpectedly)
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable

from pytest_rewardhang.guard import Status, run

BUDGET = 1.0


def last_boxed(response: str) -> int:
    """Quadratic in the response length, the shape of the normaliser that froze a verl run."""
    found = -1
    for i in range(len(response)):
        if response[i:].startswith("\\boxed{"):
            found = i
    return found


def swallow_everything() -> None:
    while True:
        try:
            time.sleep(0.01)
        except BaseException:  # noqa: S112 - this is the pathology
            continue


CASES: list[tuple[str, Callable[[], object], Status]] = [
    ("a normal scorer", lambda: 1.0 if "42" in "so the answer is 42" else 0.0, Status.OK),
    ("quadratic scan, 2M-char response", lambda: last_boxed("9" * 2_000_000), Status.TIMEOUT),
    ("sum(range(10**13)) inside C", lambda: sum(range(10**13)), Status.TIMEOUT),
    ("10**10**8", lambda: 10**10**8, Status.TIMEOUT),
    ("catastrophic regex", lambda: re.match(r"(a+)+$", "a" * 64 + "!"), Status.TIMEOUT),
    ("loop swallowing BaseException", swallow_everything, Status.TIMEOUT),
    ("memory bomb (limit 256 MiB)", lambda: bytearray(8 * 1024**3), Status.MEMORY),
    ("os._exit(0) before any result", lambda: os._exit(0), Status.CRASHED),
    ("scorer raising ValueError", lambda: int("not a number"), Status.ERROR),
]


def main() -> int:
    print(f"{'call':36} {'status':8} {'wall s':>7} {'cpu s':>6}  cause")
    unexpected = 0
    for name, fn, expected in CASES:
        out = run(fn, budget=BUDGET, memory_mb=256)
        mark = "" if out.status is expected else f"   <-- expected {expected}"
        unexpected += out.status is not expected
        print(
            f"{name:36} {out.status:8} {out.wall_s:7.3f} {out.cpu_s:6.2f}  {out.describe()}{mark}"
        )
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
