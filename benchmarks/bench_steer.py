"""Steering: does a search guided by what the scorer runs reach hangs behind its gates?

Run: .venv/bin/python benchmarks/bench_steer.py [--quick] [--search 100] [--seeds 5]

The planted gated hangs of ``bench_gates.py`` (a marker gate, a ground-truth gate, two nested
gates, a gate on a JSON field, each before a loop as long as a power tower's value) and its
clean scorer, each searched by the real check in a fresh project, with the same budget of
probes (``--reward-hang-family=search --reward-hang-search=N``, the default 2 s deadline,
``--reward-hang-confirm=2``), on a few seeds: once steered (the default: mutation toward new
lines of the scorer and a higher cost, measured in its worker) and once as the search was
before it (``--reward-hang-steer=off``: Hypothesis's targeted search on CPU time). The table
gives, per scorer and search, on how many seeds it found the hang, the probe that found it on
each seed (``-``: none did, within the budget) and the median wall time of a run; the signal
the steered runs had is printed below it.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import time

from bench_gates import QUICK, SCORERS, run_check

WAYS = {"steered": "on", "unsteered (Hypothesis)": "off"}
#: The steered search writes its worst input with the signal it had (``worst.toml``).
_SIGNAL = re.compile(r"cost in (.+?), as it was found")


def search(name: str, steer: str, probes: int, seed: int) -> tuple[int | None, float, str]:
    """One search of one planted scorer in a fresh project: (the probe that found its hang or
    None, the run's wall time, the signal its steered probes had)."""
    how = [
        "--reward-hang-family=search",
        f"--reward-hang-search={probes}",
        f"--reward-hang-seed={seed}",
        f"--reward-hang-steer={steer}",
    ]
    entry, wall, worst = run_check(name, how)
    hung = next((case for case in entry["cases"] if case["hang"]), None)
    # A search case's id is search-<probe>-<chars>: the probe is its place in the search.
    found = int(hung["id"].split("-")[1]) if hung is not None else None
    signal = next((m.group(1) for text in worst if (m := _SIGNAL.search(text))), "")
    return found, wall, signal


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="two scorers, one seed")
    parser.add_argument("--search", type=int, default=100, help="the search's probes")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per scorer and search")
    args = parser.parse_args()
    names = QUICK if args.quick else tuple(SCORERS)
    seeds = range(1 if args.quick else args.seeds)
    started = time.monotonic()
    load = os.getloadavg()[0]
    signals: set[str] = set()
    print("| scorer | gate | search | found | probe that found it, per seed | median wall |")
    print("| --- | --- | --- | ---: | --- | ---: |")
    for name in names:
        for way, steer in WAYS.items():
            runs = [search(name, steer, args.search, seed) for seed in seeds]
            signals |= {signal for _, _, signal in runs if signal and steer == "on"}
            found = sum(probe is not None for probe, _, _ in runs)
            probes = ", ".join("-" if probe is None else str(probe) for probe, _, _ in runs)
            wall = statistics.median(wall for _, wall, _ in runs)
            print(
                f"| {name} | {SCORERS[name][0]} | {way} | {found}/{len(runs)} | {probes} | "
                f"{wall:.1f} s |"
            )
    print(f"steered by: {', '.join(sorted(signals)) or 'no signal'}; {args.search} probes a search")
    print(
        f"python {platform.python_version()}; {os.cpu_count()} CPUs; load {load:.2f} at the "
        f"start, {os.getloadavg()[0]:.2f} at the end; {time.monotonic() - started:.0f} s"
    )


if __name__ == "__main__":
    main()
