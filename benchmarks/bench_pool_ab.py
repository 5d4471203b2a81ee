"""A scorer's `Pool.map` against the serial loop, for two or more checkouts, interleaved.

Run: .venv/bin/python benchmarks/bench_pool_ab.py OLD_ROOT NEW_ROOT [--rounds 8] [--scorer medium]
[--isolate]

Each ROOT is a folder holding a `pytest_rewardhang` package, e.g. one made with
`git archive REV pytest_rewardhang | tar -x -C ROOT`. Each round runs every root once, in a
fresh process: the best of two serial loops over the scorer's items (`fast`'s 10,000 by
default, or `medium`'s 1,000), then the best of two `Pool(workers=2, warmup=...)` maps of them,
and prints the ratio, and the caller's own CPU per item in that map. ``fast_dict`` and
``fast_list`` are ``fast`` returning a small dict and a list of 1,000 floats: the answers whose
decoding the guard checks. ``--isolate`` maps with ``Pool(isolate=True)``: a process of its own
per item, which answers on a channel of its own. This VM's speed for work on both vCPUs changes
from minute to minute, so one full `bench_pool.py` run tells two commits apart only by more than
that noise; rounds that alternate between them are compared under the same conditions. Prints
each root's ratios and their median, the map's wall time per item and the caller's CPU per item.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: One measurement, in a process of its own that imports the package from ``sys.argv[1]``.
_ONE = """
import sys, time
root, count, name, isolate = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
sys.path[:0] = [root, {here!r}]
import pool_scorers
import pytest_rewardhang
assert pytest_rewardhang.__file__.startswith(root), pytest_rewardhang.__file__
from pytest_rewardhang.guard import Pool
items = pool_scorers.fast_items(count)
scorer = getattr(pool_scorers, name)
spec = {here!r} + "/pool_scorers.py:" + name
def serial():
    start = time.perf_counter()
    for item in items:
        scorer(*item)
    return time.perf_counter() - start
def pooled():
    warmup = ("warm up, the answer is 1", "1")
    with Pool(spec, workers=2, budget=0.5, warmup=warmup, isolate=isolate) as pool:
        start, cpu = time.perf_counter(), time.process_time()
        pool.map(items)
        return time.perf_counter() - start, time.process_time() - cpu
best = min(pooled() for _ in range(2))
per_item = lambda seconds: seconds / len(items) * 1e6
print(min(serial() for _ in range(2)) / best[0], per_item(best[1]), per_item(best[0]))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="+", type=Path, help="folders holding pytest_rewardhang")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument(
        "--scorer", choices=("fast", "medium", "fast_dict", "fast_list"), default="fast"
    )
    parser.add_argument(
        "--items", type=int, help="default 10,000 (fast), 1,000 (medium or --isolate)"
    )
    parser.add_argument("--isolate", action="store_true", help="Pool(isolate=True)")
    args = parser.parse_args()
    for root in args.roots:
        if not (root / "pytest_rewardhang" / "__init__.py").is_file():
            parser.error(f"{root}: no pytest_rewardhang package in it")
    code = _ONE.format(here=str(HERE))
    items = args.items or (1_000 if args.scorer == "medium" or args.isolate else 10_000)
    ratios: dict[Path, list[float]] = {root: [] for root in args.roots}
    #: The caller's CPU per item in its faster map (its process only, not its workers').
    caller: dict[Path, list[float]] = {root: [] for root in args.roots}
    #: The faster map's wall time per item.
    walls: dict[Path, list[float]] = {root: [] for root in args.roots}
    for _ in range(args.rounds):
        for root in args.roots:
            ran = subprocess.run(
                [
                    *(sys.executable, "-c", code, str(root.resolve()), str(items), args.scorer),
                    str(int(args.isolate)),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if ran.returncode:
                sys.exit(f"{root}: the measurement failed:\n{ran.stderr}")
            ratio, cpu, wall = ran.stdout.split()
            ratios[root].append(float(ratio))
            caller[root].append(float(cpu))
            walls[root].append(float(wall))
    print("| root | median | rounds | map's wall per item | caller's CPU per item |")
    print("| --- | ---: | --- | ---: | ---: |")
    for root, found in ratios.items():
        shown = " ".join(f"{r:.3g}x" for r in found)
        per_item = statistics.median(caller[root])
        wall_per_item = statistics.median(walls[root])
        print(
            f"| `{root}` | {statistics.median(found):.3g}x | {shown} | {wall_per_item:,.1f} µs "
            f"| {per_item:.1f} µs |"
        )


if __name__ == "__main__":
    main()
