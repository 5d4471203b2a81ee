"""Baselines: per scorer and family timings saved to a committed JSON file, and compared later.

CPU times are compared after dividing by a calibration figure of the machine that measured them
(a fixed pure-Python workload timed at session start), so a CI runner half as fast as the one that
wrote the baseline reads the same normalised times and does not fail a pull request.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_rewardhang import __version__
from pytest_rewardhang.guard._outcome import Status

from . import _changed

if TYPE_CHECKING:
    from pytest_rewardhang.corpus._growth import Growth

    from ._checker import CaseResult

FORMAT = 1
#: ``--reward-hang-compare-fail`` field -> baseline key. CPU fields are normalised.
FIELDS = {
    "cpu_p50": "cpu_p50_s",
    "cpu_p95": "cpu_p95_s",
    "cpu_max": "cpu_max_s",
    "peak_mb": "peak_mb",
    "growth": "growth_exponent",
}
CPU_FIELDS = frozenset({"cpu_p50", "cpu_p95", "cpu_max"})
#: A normalised CPU difference below this is the worker round trip's jitter, never a regression:
#: a trivial scorer measures ~4 ms a call, and 100% of that is not worth a red CI run.
NOISE_FLOOR_S = 0.01
_LIMIT = re.compile(r"^(?P<field>[a-z0-9_]+):(?P<amount>[0-9]*\.?[0-9]+)(?P<percent>%?)$")


@dataclass(frozen=True)
class Limit:
    """``FIELD:N%`` (relative to the baseline) or ``FIELD:N`` (absolute), pytest-benchmark's way."""

    field: str
    amount: float
    percent: bool

    def __str__(self) -> str:
        return f"{self.field}:{self.amount:g}{'%' if self.percent else ''}"

    def exceeded(self, before: float, now: float) -> bool:
        allowed = before * self.amount / 100 if self.percent else self.amount
        if self.field in CPU_FIELDS and now - before < NOISE_FLOOR_S:
            return False
        return now - before > allowed


def parse_limit(raw: str) -> Limit:
    match = _LIMIT.match(raw.strip())
    if match is None:
        raise ValueError("expected FIELD:N% or FIELD:N, e.g. cpu_p95:25% or cpu_max:0.5")
    field = match["field"]
    if field not in FIELDS:
        raise ValueError(f"unknown field {field}; choose from {', '.join(FIELDS)}")
    return Limit(field, float(match["amount"]), bool(match["percent"]))


def _workload() -> int:
    """Dict, string and integer work of the kind scorers do; its result only defeats no-op-ing."""
    counts: dict[str, int] = {}
    total = 0
    for i in range(150_000):
        key = str(i % 997)
        counts[key] = counts.get(key, 0) + len(key) * i
        total = (total + counts[key]) % 1_000_003
    return total


def calibrate(repeats: int = 5) -> float:
    """CPU seconds of the fixed workload, the best of ``repeats`` (noise only ever adds time)."""
    best = math.inf
    for _ in range(repeats):
        start = time.process_time()
        _workload()
        best = min(best, time.process_time() - start)
    return max(best, 1e-6)


def source_hash(path: Path | None, rootdir: Path) -> str | None:
    """sha256 over the scorer's file and the in-repository modules it imports."""
    if path is None:
        return None
    digest = hashlib.sha256()
    for found in sorted(_changed.dependencies(path, rootdir)):
        try:
            digest.update(found.relative_to(rootdir).as_posix().encode() + b"\0")
        except ValueError:
            digest.update(found.name.encode() + b"\0")
        digest.update(found.read_bytes() + b"\0")
    return "sha256:" + digest.hexdigest()[:16]


def _nearest_rank(sorted_values: Sequence[float], fraction: float) -> float:
    index = max(0, math.ceil(fraction * len(sorted_values)) - 1)
    return sorted_values[index]


def entry(
    results: Iterable[CaseResult],
    growth: Sequence[Growth],
    *,
    calibration_s: float,
    source: str | None,
    corpus_version: str,
) -> dict[str, Any] | None:
    """What the baseline keeps for one family, or None when no case finished."""
    finished = [r for r in results if r.outcome.status is Status.OK]
    if not finished:
        return None
    cpu = sorted(r.outcome.cpu_s for r in finished)
    worst = max(finished, key=lambda r: r.outcome.cpu_s)
    steepest = max((g.exponent for g in growth), default=None)
    return {
        "cases": len(finished),
        "cpu_p50_s": round(_nearest_rank(cpu, 0.5), 4),
        "cpu_p95_s": round(_nearest_rank(cpu, 0.95), 4),
        "cpu_max_s": round(cpu[-1], 4),
        "worst_case": worst.case.id,
        "peak_mb": round(max(r.outcome.max_rss_mb for r in finished), 1),
        "growth_exponent": None if steepest is None else round(steepest, 3),
        "source_hash": source,
        "corpus_version": corpus_version,
        "plugin_version": __version__,
        "calibration_s": float(f"{calibration_s:.4g}"),
    }


@dataclass(frozen=True)
class Comparison:
    """``new`` (no usable baseline entry; ``reason`` says why), ``ok`` or ``regressed``."""

    status: str
    reason: str = ""
    #: One line per limit exceeded, for the failure message.
    regressions: tuple[str, ...] = ()


def compare(
    now: dict[str, Any], before: dict[str, Any] | None, limits: Iterable[Limit]
) -> Comparison:
    if before is None:
        return Comparison("new", "no baseline entry")
    if before.get("corpus_version") != now.get("corpus_version"):  # other inputs: incomparable
        changed = f"({before.get('corpus_version')} -> {now.get('corpus_version')})"
        return Comparison("new", f"corpus version changed {changed}")
    # A changed scorer is a new entry, but still held to the old numbers: the change that makes
    # a scorer slower is the very one a PR gate must catch. An intended slowdown refreshes the
    # baseline in the same change.
    moved = ""
    if before.get("source_hash") != now.get("source_hash"):
        moved = f"scorer source changed ({before.get('source_hash')} -> {now.get('source_hash')})"
    scale = float(before["calibration_s"]) / float(now["calibration_s"])
    lines = []
    for limit in limits:
        key = FIELDS[limit.field]
        old, new = before.get(key), now.get(key)
        if old is None or new is None:
            continue
        normalised = new * scale if limit.field in CPU_FIELDS else new
        if limit.exceeded(float(old), float(normalised)):
            unit = "" if limit.field == "growth" else " MiB" if limit.field == "peak_mb" else " s"
            shown = f"{normalised:.4g}{unit}"
            if limit.field in CPU_FIELDS:
                shown += (
                    f" normalised ({new:.4g} s measured here; this machine's calibration is "
                    f"{1 / scale:.3g}x the baseline's)"
                )
            lines.append(f"{limit.field} {old:.4g}{unit} -> {shown}, over the limit {limit}")
    if lines:
        return Comparison("regressed", moved, regressions=tuple(lines))
    return Comparison("new", moved) if moved else Comparison("ok")


class BaselineError(Exception):
    """A baseline file that cannot be read; the message names it."""


def load(path: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """``{scorer id: {family: entry}}``."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BaselineError(
            f"no baseline at {path}: write one with --reward-hang-save-baseline"
        ) from None
    except (OSError, ValueError) as exc:
        raise BaselineError(f"{path}: cannot read the baseline: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise BaselineError(f"{path}: not a reward hang baseline (format {FORMAT})")
    scorers = document.get("scorers")
    if not isinstance(scorers, dict):
        raise BaselineError(f"{path}: not a reward hang baseline: no 'scorers' object")
    return scorers


def save(path: Path, entries: Iterable[tuple[str, str, dict[str, Any]]]) -> int:
    """Write ``(scorer id, family, entry)`` over what the file held; entries not run stay.

    A run limited by ``-k`` or ``--reward-hang-changed`` refreshes only what it ran.
    """
    try:
        scorers = load(path) if path.exists() else {}
    except BaselineError:
        scorers = {}
    written = 0
    for scorer_id, family, found in entries:
        scorers.setdefault(scorer_id, {})[family] = found
        written += 1
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"format": FORMAT, "scorers": scorers}
    path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return written
