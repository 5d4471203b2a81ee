"""Baselines: per scorer and family timings saved to a committed JSON file, and compared later.

CPU times are compared after dividing by a calibration figure of the machine that measured them
(a fixed pure-Python workload timed at session start), so a CI runner half as fast as the one that
wrote the baseline reads the same normalised times and does not fail a pull request. The
calibration scales, it does not translate: a scorer can speed up or slow down differently from
the workload on another interpreter or CPU, so each entry records both, and a comparison across
them says so.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_rewardhang.guard._outcome import Status

from . import _changed
from ._options import CALIBRATION_S, LIMIT_FIELDS, Limit

if TYPE_CHECKING:
    from pytest_rewardhang.corpus._growth import Growth

    from ._checker import CaseResult

FORMAT = 1
#: ``--reward-hang-compare-fail`` field (named in ``_options``, which parses the limits) -> the
#: baseline key it compares, in ``LIMIT_FIELDS`` order. CPU fields are normalised.
FIELDS = dict(
    zip(
        LIMIT_FIELDS,
        ("cpu_p50_s", "cpu_p95_s", "cpu_max_s", "peak_mb", "growth_exponent"),
        strict=True,
    )
)
CPU_FIELDS = frozenset({"cpu_p50", "cpu_p95", "cpu_max"})
#: What a comparison cannot do without; a file lacking one is refused when loaded.
REQUIRED = ("calibration_s", "corpus_version")
#: A normalised CPU difference below this is the worker round trip's jitter, never a regression:
#: a trivial scorer measures ~4 ms a call, and 100% of that is not worth a red CI run.
NOISE_FLOOR_S = 0.01


def _exceeded(limit: Limit, before: float, now: float) -> bool:
    """Whether ``now`` is past ``before`` by more than ``limit`` allows (jitter never is)."""
    allowed = before * limit.amount / 100 if limit.percent else limit.amount
    if limit.field in CPU_FIELDS and now - before < NOISE_FLOOR_S:
        return False
    return now - before > allowed


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
    return min(max(best, CALIBRATION_S[0]), CALIBRATION_S[1])


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


@cache
def _plugin_version() -> str | None:
    """The installed plugin's version, as pytest's header shows it; None where not installed.

    Read from the distribution, not the top-level package: ``check`` never imports the package's
    public surface.
    """
    try:
        return metadata.version("pytest-rewardhang")
    except metadata.PackageNotFoundError:
        return None


@cache
def environment() -> dict[str, str]:
    """What an entry's timings depend on beyond the calibration: the interpreter and the CPU."""
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    except OSError:
        models = []
    if models:
        cpu = f"{models[0]} ({platform.machine()})"
    python = f"{platform.python_implementation()} {platform.python_version()}"
    return {"python": python, "cpu": cpu}


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
        "plugin_version": _plugin_version(),
        "calibration_s": float(f"{calibration_s:.4g}"),
        **environment(),
    }


@dataclass(frozen=True)
class Comparison:
    """``new`` (no usable baseline entry; ``reason`` says why), ``ok`` or ``regressed``."""

    status: str
    reason: str = ""
    #: One line per limit exceeded, for the failure message.
    regressions: tuple[str, ...] = ()
    #: How the baseline's interpreter or CPU differs from this run's ("" when they match, or
    #: when the baseline predates recording them).
    elsewhere: str = ""


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
        if _exceeded(limit, float(old), float(normalised)):
            unit = "" if limit.field == "growth" else " MiB" if limit.field == "peak_mb" else " s"
            shown = f"{normalised:.4g}{unit}"
            if limit.field in CPU_FIELDS:
                shown += (
                    f" normalised ({new:.4g} s measured here; this machine's calibration is "
                    f"{1 / scale:.3g}x the baseline's)"
                )
            lines.append(f"{limit.field} {old:.4g}{unit} -> {shown}, over the limit {limit}")
    elsewhere = "; ".join(
        f"{key} {before[key]} -> {now.get(key)}"
        for key in ("python", "cpu")
        if before.get(key) is not None and before.get(key) != now.get(key)
    )
    if lines:
        return Comparison("regressed", moved, regressions=tuple(lines), elsewhere=elsewhere)
    return Comparison("new" if moved else "ok", moved, elsewhere=elsewhere)


class BaselineRun:
    """This run's side of the baselines: each family's entry, and its comparison with the file.

    Made once per session when a baseline is saved or compared (the machine is calibrated first);
    the items measure through it, so they need nothing else from the session.
    """

    def __init__(
        self,
        *,
        calibration_s: float,
        rootdir: Path,
        corpus_version: str,
        saved: dict[str, dict[str, dict[str, Any]]] | None,
        limits: Iterable[Limit],
    ) -> None:
        self.calibration_s = calibration_s
        self.rootdir = rootdir
        self.corpus_version = corpus_version
        #: The file compared with, ``{scorer id: {family: entry}}``; None: nothing to compare.
        self.saved = saved
        self.limits = tuple(limits)
        self._source_hashes: dict[str, str | None] = {}

    def entry(
        self,
        scorer_id: str,
        results: list[CaseResult],
        growth: Sequence[Growth],
        source: Path | None,
    ) -> dict[str, Any] | None:
        # Hashed once per scorer: every family of it reads the same files.
        if scorer_id not in self._source_hashes:
            self._source_hashes[scorer_id] = source_hash(source, self.rootdir)
        return entry(
            results,
            growth,
            calibration_s=self.calibration_s,
            source=self._source_hashes[scorer_id],
            corpus_version=self.corpus_version,
        )

    def compare(self, scorer_id: str, family: str, now: dict[str, Any]) -> Comparison | None:
        if self.saved is None:
            return None
        return compare(now, self.saved.get(scorer_id, {}).get(family), self.limits)


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
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested too deep
        raise BaselineError(f"{path}: cannot read the baseline: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise BaselineError(f"{path}: not a reward hang baseline (format {FORMAT})")
    scorers = document.get("scorers")
    if not isinstance(scorers, dict):
        raise BaselineError(f"{path}: not a reward hang baseline: no 'scorers' object")
    for scorer_id, families in scorers.items():
        if not isinstance(families, dict):
            raise BaselineError(f"{path}: {scorer_id}: expected an object of families")
        for family, found in families.items():
            missing = [key for key in REQUIRED if not isinstance(found, dict) or key not in found]
            if missing:
                raise BaselineError(
                    f"{path}: {scorer_id}::{family}: entry lacks {', '.join(missing)}"
                )
            for key in ("calibration_s", *FIELDS.values()):
                wrong = _wrong(key, found.get(key))
                if wrong:
                    raise BaselineError(f"{path}: {scorer_id}::{family}: {key} {wrong}")
    return scorers


def _wrong(key: str, value: object) -> str:
    """What is wrong with a baseline number, compared with (a NaN or a string passed every
    comparison, or failed it with a traceback); empty if nothing."""
    if value is None and key != "calibration_s":  # a measure this entry does not have
        return ""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    try:  # an int too large for a float (a 400-digit one) overflowed in every comparison
        number = number and math.isfinite(float(value))  # type: ignore[arg-type]
    except OverflowError:
        number = False
    if not number:
        shown = "an int too large for a float" if isinstance(value, int) else repr(value)
        return f"must be a finite number, not {shown}"
    if key == "growth_exponent":  # a fit's slope: a flat curve's may come out below 0
        return ""
    if key == "calibration_s":  # the machine's speed: every CPU time is divided by it
        low, high = CALIBRATION_S
        if not low <= value <= high:  # type: ignore[operator]
            return f"must be {low:g} to {high:g} seconds (of the fixed workload), not {value!r}"
    elif value < 0:  # type: ignore[operator]
        return f"must be at least 0, not {value!r}"
    return ""


def save(path: Path, entries: Iterable[tuple[str, str, dict[str, Any]]]) -> int:
    """Write ``(scorer id, family, entry)`` over what the file held; entries not run stay.

    A run limited by ``-k`` or ``--reward-hang-changed`` refreshes only what it ran.
    """
    scorers = load(path) if path.exists() else {}  # an unreadable one is refused, not replaced
    written = 0
    for scorer_id, family, found in entries:
        scorers.setdefault(scorer_id, {})[family] = found
        written += 1
    document = {"format": FORMAT, "scorers": scorers}
    write_atomically(path, json.dumps(document, indent=2, sort_keys=True, allow_nan=False) + "\n")
    return written


def write_atomically(path: Path, text: str) -> None:
    """Readers (and a run killed halfway) see the old file or the new one, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temp.write_text(text, encoding="utf-8")
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
