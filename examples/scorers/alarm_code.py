"""A code scorer guarded by ``signal.alarm``, like the one that pinned a core for 7.5 hours.

The alarm fires between bytecodes only: a long C call (``sum(range(10**13))``), a catastrophic
regex or a loop that swallows the timeout exception runs on forever. ``expect=hang``.
"""

from __future__ import annotations

import re
import signal
import threading
from types import FrameType

_FENCE = re.compile(r"```(?:python)?\n(.*?)```", re.DOTALL)


class _Timeout(Exception):
    pass


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise _Timeout


def compute_score(solution_str: str, ground_truth: str, timeout_s: int = 1) -> float:
    match = _FENCE.search(solution_str)
    program = match.group(1) if match else solution_str
    on_main = threading.current_thread() is threading.main_thread()
    if on_main:  # off the main thread there is no guard at all
        signal.signal(signal.SIGALRM, _on_alarm)
        signal.alarm(timeout_s)
    try:
        namespace: dict[str, object] = {}
        exec(program + "\n" + ground_truth, namespace)
        return 1.0
    except Exception:
        return 0.0
    finally:
        if on_main:
            signal.alarm(0)
