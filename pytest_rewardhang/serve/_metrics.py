"""The server's counters, rendered in Prometheus' text exposition format (version 0.0.4).

Kept by the one event loop that serves requests, so nothing here takes a lock.
"""

from __future__ import annotations

import bisect
from collections import Counter

__all__ = ["CONTENT_TYPE", "Metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Request latency buckets in seconds: a clean batch answers in milliseconds, a hang at the budget.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
#: The statuses after which the pool replaced the worker: it was killed, or it died.
_REPLACED = frozenset({"timeout", "crashed", "memory"})
_PREFIX = "rewardhang_serve"


class Metrics:
    def __init__(self) -> None:
        self.requests: Counter[tuple[str, int]] = Counter()  # (path, HTTP status)
        self.samples: Counter[str] = Counter()  # by status
        self.sample_seconds = 0.0
        self.slow_samples = 0
        self.in_flight = 0
        self._buckets = [0] * len(BUCKETS)
        self._latency_sum = 0.0
        self._latency_count = 0

    def request(self, path: str, status: int, seconds: float) -> None:
        self.requests[path, status] += 1
        self._latency_sum += seconds
        self._latency_count += 1
        first = bisect.bisect_left(BUCKETS, seconds)
        for i in range(first, len(BUCKETS)):
            self._buckets[i] += 1

    def sample(self, status: str, seconds: float = 0.0, slow: bool = False) -> None:
        self.samples[status] += 1
        self.sample_seconds += seconds
        self.slow_samples += slow

    @property
    def workers_replaced(self) -> int:
        return sum(n for status, n in self.samples.items() if status in _REPLACED)

    def render(self) -> str:
        p = _PREFIX
        lines = [
            f"# HELP {p}_requests_total HTTP requests answered, by path and status code.",
            f"# TYPE {p}_requests_total counter",
            *(
                f'{p}_requests_total{{path="{path}",code="{code}"}} {n}'
                for (path, code), n in sorted(self.requests.items())
            ),
            f"# HELP {p}_samples_total Samples scored, by outcome (ok, or why the default).",
            f"# TYPE {p}_samples_total counter",
            *(f'{p}_samples_total{{status="{s}"}} {n}' for s, n in sorted(self.samples.items())),
            f"# HELP {p}_sample_seconds_total Time samples took in their workers.",
            f"# TYPE {p}_sample_seconds_total counter",
            f"{p}_sample_seconds_total {self.sample_seconds:.6f}",
            f"# HELP {p}_slow_samples_total Samples that took over --slow-s (none unless set).",
            f"# TYPE {p}_slow_samples_total counter",
            f"{p}_slow_samples_total {self.slow_samples}",
            f"# HELP {p}_workers_replaced_total Pool workers killed or dead and replaced.",
            f"# TYPE {p}_workers_replaced_total counter",
            f"{p}_workers_replaced_total {self.workers_replaced}",
            f"# HELP {p}_requests_in_flight Requests being read or scored now.",
            f"# TYPE {p}_requests_in_flight gauge",
            f"{p}_requests_in_flight {self.in_flight}",
            f"# HELP {p}_request_seconds Time from a request's start to its answer.",
            f"# TYPE {p}_request_seconds histogram",
            *(
                f'{p}_request_seconds_bucket{{le="{bound:g}"}} {n}'
                for bound, n in zip(BUCKETS, self._buckets, strict=True)
            ),
            f'{p}_request_seconds_bucket{{le="+Inf"}} {self._latency_count}',
            f"{p}_request_seconds_sum {self._latency_sum:.6f}",
            f"{p}_request_seconds_count {self._latency_count}",
        ]
        return "\n".join(lines) + "\n"
