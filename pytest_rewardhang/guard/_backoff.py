"""The pauses of the guard's poll loops."""

from __future__ import annotations

import time


class Backoff:
    """The pauses of a poll loop: 0.2 ms, doubling up to 2 ms, none past ``until``
    (monotonic)."""

    def __init__(self, until: float) -> None:
        self.until = until
        self.pause = 0.0002

    def sleep(self) -> bool:
        """Sleep the next pause (cut short at ``until``); False, at once, once it has passed."""
        wait = self.until - time.monotonic()
        if wait <= 0:
            return False
        time.sleep(min(self.pause, wait))
        self.pause = min(self.pause * 2, 0.002)
        return True
