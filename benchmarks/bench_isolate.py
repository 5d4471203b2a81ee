"""What it costs per item to run each item in a process of its own: `Pool(isolate=True)`.

Run: .venv/bin/python benchmarks/bench_isolate.py [--quick]

Three ways to score a trivial scorer (``x + 1``), one item at a time: the warm worker
(`Pool(workers=1)`), the isolated mode (`Pool(workers=1, isolate=True)`: a fork of the warm
worker per item), and a fork per call whose parent polls the child's status every 50 ms, as
NeMo Gym runs code. Each round measures every peer once, in turn, so that the machine's speed,
which changes from minute to minute on a shared VM, is the same for all of them; the table has
the medians over the rounds (and their spread). Pools are started and warmed before the first
round: their start is not counted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path[:0] = [str(HERE.parent.parent)]

import _procs  # noqa: E402

from pytest_rewardhang.guard import Pool  # noqa: E402

#: The fork-per-call peer's poll interval: NeMo Gym's.
POLL_S = 0.05


def trivial(x: int) -> int:
    return x + 1


def fork_polled(x: int) -> int:
    """One call in a forked child, its end found by polling its status every 50 ms."""
    return int(_procs.forked(trivial, (x,), POLL_S))


def per_item(score: Callable[[list[tuple[int]]], Sequence[object]], count: int) -> float:
    """Seconds per item of one run of ``count`` items."""
    items = [(i,) for i in range(count)]
    start = time.perf_counter()
    outs = score(items)
    took = time.perf_counter() - start
    assert len(outs) == count
    return took / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: few items, 2 rounds")
    args = parser.parse_args()
    rounds = 2 if args.quick else 7
    pooled = 50 if args.quick else 2000
    forked = 4 if args.quick else 40
    spec = f"{HERE}:trivial"
    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at the start")
    with (
        Pool(spec, workers=1, budget=2.0) as warm,
        Pool(spec, workers=1, budget=2.0, isolate=True) as isolated,
    ):
        peers: dict[str, tuple[Callable[[list[tuple[int]]], Sequence[object]], int]] = {
            "warm worker (`Pool`)": (warm.map, pooled),
            "isolated (`Pool(isolate=True)`)": (isolated.map, pooled),
            "fork per call, polled every 50 ms": (
                lambda items: [fork_polled(x) for (x,) in items],
                forked,
            ),
        }
        for pool in (warm, isolated):
            assert all(o.ok for o in pool.map([(i,) for i in range(20)]))
        times: dict[str, list[float]] = {name: [] for name in peers}
        for _ in range(rounds):
            for name, (score, count) in peers.items():
                times[name].append(per_item(score, count))
    print(f"load average {os.getloadavg()[0]:.1f} at the end; {rounds} rounds")
    print()
    print("| peer | per item, median (µs) | min / max over rounds (µs) | items per round |")
    print("| --- | ---: | ---: | ---: |")
    for name, (_, count) in peers.items():
        got = [t * 1e6 for t in times[name]]
        median = statistics.median(got)
        print(f"| {name} | {median:,.0f} | {min(got):,.0f} / {max(got):,.0f} | {count} |")


if __name__ == "__main__":
    main()
