"""Command-line options, their ini twins, and validation that names where a bad value came from.

Precedence: per-scorer key > command line > ini > default.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pytest_rewardhang.guard._limits import MAX_BUDGET_S, MAX_MEMORY_MB

T = TypeVar("T")
N = TypeVar("N", int, float)

#: What ``--reward-hang-fail-on`` may name: ``timeout`` is both a ``hang`` and a ``slow`` case.
FAILURE_KINDS = ("timeout", "hang", "slow", "error", "crashed", "memory", "leak")
#: Where a scorer is called: the guarded worker's main thread, a worker thread, an event loop.
CONTEXTS = ("main", "thread", "loop")
#: Call styles a scorer's ``style=`` key may force (``_calls`` reads the signature otherwise).
STYLES = ("verl", "single", "trl", "openrlhf", "areal", "verifiers", "slime", "rllm", "batch")
#: ``--reward-hang-compare-fail`` fields; ``_baseline.FIELDS`` says which entry key each reads.
LIMIT_FIELDS = ("cpu_p50", "cpu_p95", "cpu_max", "peak_mb", "growth")
#: The machine calibration figures (seconds of the fixed workload) a run accepts, pinned or read
#: from a baseline: about 0.03 s on a 2020s CPU. Past them a figure is not a machine's (a
#: baseline's 5e-324 scaled every CPU time it was compared with to nothing).
CALIBRATION_S = (1e-4, 1e3)
_LIMIT = re.compile(r"^(?P<field>[a-z0-9_]+):(?P<amount>[0-9]*\.?[0-9]+)(?P<percent>%?)$")


@dataclass(frozen=True)
class Limit:
    """``FIELD:N%`` (relative to the baseline) or ``FIELD:N`` (absolute), pytest-benchmark's way."""

    field: str
    amount: float
    percent: bool

    def __str__(self) -> str:
        return f"{self.field}:{self.amount:g}{'%' if self.percent else ''}"


@dataclass(frozen=True)
class Settings:
    deadline: float
    max_chars: int
    memory_mb: float | None
    seed: int
    json_path: Path | None
    fail_on: frozenset[str]
    #: (line, where it was declared, the file and line or the option and place of that).
    scorer_lines: tuple[tuple[str, str, tuple[str, int]], ...]
    save_dir: Path
    #: Extra corpus directories, after the bundled ones: their families shadow ours.
    corpora: tuple[Path, ...] = ()
    #: Only these families (None: all); the source of the selection, for messages.
    families: frozenset[str] | None = None
    families_source: str = ""
    strict_complexity: bool = False
    #: Probes per scorer of the search for slow inputs (0: no search).
    search: int = 0
    #: ``--reward-hang-steer``: the search's last phase mutates toward new code and a higher
    #: cost, measured in the worker (off: Hypothesis's targeted search on CPU time).
    steer: bool = True
    #: Where every input past its deadline is written as a corpus file (None: nowhere).
    save_corpus: Path | None = None
    #: ``--reward-hang-save-baseline``: where this run's timings are written (None: nowhere).
    save_baseline: Path | None = None
    #: ``--reward-hang-compare``: the baseline each item is compared with (None: no comparison).
    compare_baseline: Path | None = None
    compare_fail: tuple[Limit, ...] = ()
    #: A pinned machine calibration figure in seconds (None: measure it at session start).
    calibration: float | None = None
    #: ``--reward-hang-changed``: only scorers whose sources changed since this git ref.
    changed_ref: str | None = None
    #: ``reward_hang_known`` lines: specs, ids or ``scorer-id::family``.
    known: tuple[str, ...] = ()
    #: ``--reward-hang-contexts``: where every scorer is called, the first context running
    #: every case (None: main and thread, or loop and thread for an async scorer).
    contexts: tuple[str, ...] | None = None
    #: ``--reward-hang-confirm``: deadlines a fresh worker runs a timed-out case for before it
    #: is called a hang (``_checker.ScorerCheck._confirm``).
    confirm: float = 10.0


# (cli flag, ini name, help, ini type, default)
_VALUED: list[tuple[str, str, str, str, str | None]] = [
    (
        "--reward-hang-deadline",
        "reward_hang_deadline",
        "seconds one scorer call may take",
        "string",
        "2",
    ),
    (
        "--reward-hang-confirm",
        "reward_hang_confirm",
        "deadlines a fresh worker runs a timed-out case for before it is called a hang; one "
        "that ends sooner is slow (at least 1)",
        "string",
        "10",
    ),
    (
        "--reward-hang-max-chars",
        "reward_hang_max_chars",
        "largest generated response, in characters (131072: about a 32k-token response)",
        "string",
        "131072",
    ),
    (
        "--reward-hang-memory-mb",
        "reward_hang_memory_mb",
        "MiB a scorer call may allocate on top of its process; 0 for no limit",
        "string",
        "4096",
    ),
    ("--reward-hang-seed", "reward_hang_seed", "seed of every generated input", "string", "0"),
    ("--reward-hang-json", "reward_hang_json", "write a JSON report to this path", "string", None),
    (
        "--reward-hang-fail-on",
        "reward_hang_fail_on",
        f"comma-separated outcomes that fail a scorer, of {','.join(FAILURE_KINDS)} (default: all)",
        "string",
        ",".join(FAILURE_KINDS),
    ),
    (
        "--reward-hang-save-dir",
        "reward_hang_save_dir",
        "where the exact input of every failing case is saved",
        "string",
        ".reward-hang/cases",
    ),
    (
        "--reward-hang-search",
        "reward_hang_search",
        "run a search of N probes per scorer for its slowest inputs (0: off)",
        "string",
        "0",
    ),
    (
        "--reward-hang-steer",
        "reward_hang_steer",
        "on: the search's last phase mutates the example's response and ground truth toward the "
        "scorer's unreached code and a higher cost, measured where it runs; off: Hypothesis's "
        "targeted search on CPU time",
        "string",
        "on",
    ),
    (
        "--reward-hang-contexts",
        "reward_hang_contexts",
        f"comma-separated contexts each scorer is called in, of {','.join(CONTEXTS)}; the "
        "first runs every case, the others the example and each family's slowest cases "
        "(default: main,thread; loop,thread for async scorers)",
        "string",
        "",
    ),
    (
        "--reward-hang-save",
        "reward_hang_save",
        "write every input that ran past its deadline, shrunk, as a corpus file into this "
        "directory",
        "string",
        None,
    ),
]


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("reward-hang", "reward function hang checks (pytest-rewardhang)")
    group.addoption(
        "--reward-hang-check",
        action="store_true",
        default=False,
        help="feed every registered reward function hang-inducing inputs under a fork-kill guard",
    )
    group.addoption(
        "--reward-hang-scorer",
        action="append",
        default=[],
        metavar="'SPEC [key=value ...]'",
        help="check this scorer too (repeatable); SPEC is pkg.mod:attr or path/file.py:attr",
    )
    parser.addini(
        "reward_hang_scorers",
        type="linelist",
        default=[],
        help="scorers to check, one 'SPEC [key=value ...]' a line",
    )
    for flag, ini, text, ini_type, default in _VALUED:
        group.addoption(flag, default=None, help=f"{text} (ini: {ini})")
        parser.addini(ini, type=ini_type, default=default, help=text)  # type: ignore[arg-type]
    group.addoption(
        "--reward-hang-corpus",
        action="append",
        default=[],
        metavar="DIR",
        help="add a corpus directory (repeatable); its families shadow the bundled ones of the "
        "same name (ini: reward_hang_corpora)",
    )
    parser.addini(
        "reward_hang_corpora",
        type="paths",
        default=[],
        help="corpus directories added to the bundled one, one a line",
    )
    group.addoption(
        "--reward-hang-family",
        action="append",
        default=[],
        metavar="NAME[,NAME...]",
        help="check only these corpus families (repeatable; ini: reward_hang_families)",
    )
    parser.addini(
        "reward_hang_families",
        type="args",
        default=[],
        help="check only these corpus families (space or comma separated)",
    )
    group.addoption(
        "--reward-hang-strict-complexity",
        action="store_true",
        default=None,
        help="fail every family whose time grows faster than n^1.5, projected hang or not "
        "(ini: reward_hang_strict_complexity)",
    )
    parser.addini(
        "reward_hang_strict_complexity",
        type="bool",
        default=False,
        help="fail every family whose time grows faster than n^1.5",
    )
    _add_ci_options(group, parser)


#: Where the baseline lives when neither option names a path; committed, not a cache.
DEFAULT_BASELINE = "reward-hang-baseline.json"


def _add_ci_options(group: pytest.OptionGroup, parser: pytest.Parser) -> None:
    # Saving is an action, never an ini default: a run must not rewrite the committed file.
    group.addoption(
        "--reward-hang-save-baseline",
        nargs="?",
        const="",
        default=None,
        metavar="PATH",
        help="write this run's per scorer and family timings to a baseline JSON file "
        f"(default: the reward_hang_baseline ini, {DEFAULT_BASELINE})",
    )
    group.addoption(
        "--reward-hang-compare",
        nargs="?",
        const="",
        default=None,
        metavar="PATH",
        help="compare every item with a saved baseline (default path: the reward_hang_baseline "
        "ini; ini: reward_hang_compare)",
    )
    parser.addini(
        "reward_hang_baseline",
        type="string",
        default=DEFAULT_BASELINE,
        help="the baseline file, relative to the ini file",
    )
    parser.addini(
        "reward_hang_compare",
        type="bool",
        default=False,
        help="compare every run with the reward_hang_baseline file",
    )
    group.addoption(
        "--reward-hang-compare-fail",
        action="append",
        default=[],
        metavar="FIELD:N%|FIELD:N",
        help=f"fail an item whose FIELD ({', '.join(LIMIT_FIELDS)}) regressed by more than N%% "
        "or N (repeatable; ini: reward_hang_compare_fail)",
    )
    parser.addini(
        "reward_hang_compare_fail",
        type="args",
        default=[],
        help="regression limits, FIELD:N% or FIELD:N, space separated",
    )
    group.addoption(
        "--reward-hang-calibration",
        default=None,
        metavar="SECONDS",
        help="use this machine calibration figure instead of timing the fixed workload "
        "(ini: reward_hang_calibration)",
    )
    parser.addini(
        "reward_hang_calibration",
        type="string",
        default="",
        help="a pinned machine calibration figure in seconds (empty: measure it)",
    )
    # No ini twin: a ref fixed in configuration would silently skip scorers on every run.
    group.addoption(
        "--reward-hang-changed",
        nargs="?",
        const="HEAD",
        default=None,
        metavar="GIT_REF",
        help="check only scorers whose source, or in-repo modules it imports, changed since "
        "GIT_REF (default HEAD: uncommitted changes)",
    )
    parser.addini(
        "reward_hang_known",
        type="linelist",
        default=[],
        help="known hangs, reported as xfailed until they stop hanging: a scorer spec or id, "
        "or scorer-id::family, one a line",
    )


def _scorer_lines(config: pytest.Config) -> list[tuple[str, str, tuple[str, int]]]:
    """Each scorer line, where it was declared, and at what file and line (in the config file)
    or which of an option's values (``-o``, the command line) it is."""
    from . import _declared  # here: without the flag, this module is all of the check loaded

    key, flag = "reward_hang_scorers", "--reward-hang-scorer"
    ini = f"{key} (ini)"
    values = config.getini(key)
    overrides = config.getoption("override_ini") or []
    if any(entry.partition("=")[0] == key for entry in overrides):  # as pytest splits it
        found: list[tuple[str, int] | None] = [(f"-o {key}", n) for n in range(1, len(values) + 1)]
    elif config.inipath is not None:
        found = _declared.in_config(config.inipath, key, values)
    else:
        found = [None] * len(values)
    placed = enumerate(zip(values, found, strict=True), 1)
    lines = [(line, ini, at or (ini, n)) for n, (line, at) in placed]
    return lines + [(line, flag, (flag, n)) for n, line in enumerate(config.getoption(flag), 1)]


def load(config: pytest.Config) -> Settings:
    def value(flag: str, ini: str, parse: Callable[[str], T]) -> T:
        cli = config.getoption(flag)
        raw, source = (cli, flag) if cli is not None else (config.getini(ini), f"{ini} (ini)")
        try:
            return parse(str(raw).strip())
        except ValueError as exc:
            raise pytest.UsageError(f"{source}: {exc}, got {raw!r}") from None

    json_raw = value("--reward-hang-json", "reward_hang_json", str)
    memory = value("--reward-hang-memory-mb", "reward_hang_memory_mb", non_negative_float)
    lines = _scorer_lines(config)
    save_raw = value("--reward-hang-save", "reward_hang_save", str)
    families, families_source = _families(config)
    strict = config.getoption("--reward-hang-strict-complexity")
    return Settings(
        deadline=value("--reward-hang-deadline", "reward_hang_deadline", positive_seconds),
        confirm=value("--reward-hang-confirm", "reward_hang_confirm", deadlines),
        max_chars=value("--reward-hang-max-chars", "reward_hang_max_chars", max_chars),
        memory_mb=memory or None,
        seed=value("--reward-hang-seed", "reward_hang_seed", int_value),
        json_path=Path(json_raw) if json_raw and json_raw != "None" else None,
        fail_on=value("--reward-hang-fail-on", "reward_hang_fail_on", fail_on_set),
        scorer_lines=tuple(lines),
        save_dir=Path(value("--reward-hang-save-dir", "reward_hang_save_dir", str)),
        corpora=_corpus_dirs(config),
        families=families,
        families_source=families_source,
        strict_complexity=bool(strict or _ini_switch(config, "reward_hang_strict_complexity")),
        search=value("--reward-hang-search", "reward_hang_search", non_negative_int),
        steer=value("--reward-hang-steer", "reward_hang_steer", on_off),
        save_corpus=Path(save_raw) if save_raw and save_raw != "None" else None,
        contexts=value("--reward-hang-contexts", "reward_hang_contexts", optional_contexts),
        **_ci_settings(config),
    )


def _ci_settings(config: pytest.Config) -> dict[str, Any]:
    ini_dir = config.inipath.parent if config.inipath else config.rootpath
    here = config.invocation_params.dir
    ini_baseline = ini_dir / str(config.getini("reward_hang_baseline"))

    def baseline_path(flag: str) -> Path | None:
        raw = config.getoption(flag)
        if raw is None:
            return None
        return here / raw if raw else ini_baseline

    compare = baseline_path("--reward-hang-compare")
    if compare is None and _ini_switch(config, "reward_hang_compare"):
        compare = ini_baseline
    cli_limits = config.getoption("--reward-hang-compare-fail")
    raw_limits, source = (
        (cli_limits, "--reward-hang-compare-fail")
        if cli_limits
        else (config.getini("reward_hang_compare_fail"), "reward_hang_compare_fail (ini)")
    )
    limits = []
    for raw in raw_limits:
        try:
            limits.append(parse_limit(raw))
        except ValueError as exc:
            raise pytest.UsageError(f"{source}: {exc}, got {raw!r}") from None
    if cli_limits and compare is None:  # limits alone would gate nothing, silently
        raise pytest.UsageError(
            "--reward-hang-compare-fail: limits need a baseline to compare with: add "
            "--reward-hang-compare [PATH] (or reward_hang_compare = true in the ini)"
        )
    cli_calibration = config.getoption("--reward-hang-calibration")
    raw_calibration, source = (
        (cli_calibration, "--reward-hang-calibration")
        if cli_calibration is not None
        else (config.getini("reward_hang_calibration"), "reward_hang_calibration (ini)")
    )
    calibration = None
    if str(raw_calibration).strip():
        try:
            calibration = calibration_seconds(str(raw_calibration).strip())
        except ValueError as exc:
            raise pytest.UsageError(f"{source}: {exc}, got {raw_calibration!r}") from None
    changed = config.getoption("--reward-hang-changed")
    if changed is not None and not changed.strip():
        raise pytest.UsageError("--reward-hang-changed: expected a git ref, got ''")
    known = tuple(config.getini("reward_hang_known"))
    for entry in known:  # a TOML array may hold anything
        if not isinstance(entry, str):
            raise pytest.UsageError(f"reward_hang_known (ini): expected lines, got {entry!r}")
    return {
        "save_baseline": baseline_path("--reward-hang-save-baseline"),
        "compare_baseline": compare,
        "compare_fail": tuple(limits),
        "calibration": calibration,
        "changed_ref": changed,
        "known": known,
    }


def _corpus_dirs(config: pytest.Config) -> tuple[Path, ...]:
    """Ini directories are relative to the ini file; command-line ones to where pytest ran."""
    found: list[Path] = []
    sources = [(Path(p), "reward_hang_corpora (ini)") for p in config.getini("reward_hang_corpora")]
    here = config.invocation_params.dir
    sources += [
        (here / p, "--reward-hang-corpus") for p in config.getoption("--reward-hang-corpus")
    ]
    for path, source in sources:
        if not path.is_dir():
            raise pytest.UsageError(f"{source}: no such corpus directory, got {str(path)!r}")
        found.append(path.resolve())
    return tuple(found)


def _families(config: pytest.Config) -> tuple[frozenset[str] | None, str]:
    cli = config.getoption("--reward-hang-family")
    raw, source = (
        (cli, "--reward-hang-family")
        if cli
        else (
            config.getini("reward_hang_families"),
            "reward_hang_families (ini)",
        )
    )
    names = frozenset(part.strip() for entry in raw for part in entry.split(",") if part.strip())
    return (names or None), source


def _ini_switch(config: pytest.Config, key: str) -> bool:
    """A bool ini value; pytest's own error (``invalid truth value 'maybe'``) named no key."""
    try:
        return bool(config.getini(key))
    except (ValueError, pytest.UsageError) as exc:  # pytest's UsageError, for a bool ini
        raise pytest.UsageError(f"{key} (ini): {exc}, expected true or false") from None


def _number(
    raw: str,
    kind: Callable[[str], N],
    valid: Callable[[N], bool],
    what: str,
    maximum: float = math.inf,
) -> N:
    """``raw`` as a ``kind`` that is ``valid``, else a ValueError saying what was expected;
    ``maximum`` is the guard's own bound (past it, its limits and timers overflow)."""
    try:
        number = kind(raw)
    except ValueError:
        raise ValueError(f"expected {what}") from None
    if not ((isinstance(number, int) or math.isfinite(number)) and valid(number)):
        raise ValueError(f"expected {what}")
    if number > maximum:
        shown = f"{maximum:,}" if isinstance(maximum, int) else f"{maximum:g}"
        raise ValueError(f"expected {what} of at most {shown}")
    return number


def positive_seconds(raw: str) -> float:
    return _number(raw, float, lambda n: n > 0, "a positive number of seconds", MAX_BUDGET_S)


def calibration_seconds(raw: str) -> float:
    low, high = CALIBRATION_S
    return _number(raw, float, lambda n: low <= n <= high, f"{low:g} to {high:g} seconds")


def deadlines(raw: str) -> float:
    return _number(raw, float, lambda n: n >= 1, "a number of deadlines, at least 1", 1000)


def positive_mib(raw: str) -> float:
    return _number(raw, float, lambda n: n > 0, "a positive number of MiB", MAX_MEMORY_MB)


def non_negative_float(raw: str) -> float:
    return _number(raw, float, lambda n: n >= 0, "a number of MiB, 0 for no limit", MAX_MEMORY_MB)


def positive_int(raw: str) -> int:
    return _number(raw, int, lambda n: n > 0, "a positive whole number")


#: The largest generated response: about a million tokens. Every case of a run is built in the
#: pytest process; 2e9 had the kernel's OOM killer end it without a word.
MAX_CHARS = 4 * 2**20


def max_chars(raw: str) -> int:
    return _number(raw, int, lambda n: n > 0, "a positive number of characters", MAX_CHARS)


def non_negative_int(raw: str) -> int:
    return _number(raw, int, lambda n: n >= 0, "a whole number of examples, 0 for none")


def on_off(raw: str) -> bool:
    if raw not in ("on", "off"):
        raise ValueError("expected on or off")
    return raw == "on"


def int_value(raw: str) -> int:
    return _number(raw, int, lambda n: True, "a whole number")


def parse_limit(raw: str) -> Limit:
    match = _LIMIT.match(raw.strip())
    if match is None:
        raise ValueError("expected FIELD:N% or FIELD:N, e.g. cpu_p95:25% or cpu_max:0.5")
    field = match["field"]
    if field not in LIMIT_FIELDS:
        raise ValueError(f"unknown field {field}; choose from {', '.join(LIMIT_FIELDS)}")
    return Limit(field, float(match["amount"]), bool(match["percent"]))


def context_list(raw: str) -> tuple[str, ...]:
    """``main,thread``: contexts in order, each once."""
    names = [part.strip() for part in raw.split(",") if part.strip()]
    if not names:
        raise ValueError(f"name at least one context from {', '.join(CONTEXTS)}")
    unknown = sorted(set(names) - set(CONTEXTS))
    if unknown:
        raise ValueError(f"unknown context {', '.join(unknown)}; choose from {', '.join(CONTEXTS)}")
    return tuple(dict.fromkeys(names))


def optional_contexts(raw: str) -> tuple[str, ...] | None:
    return context_list(raw) if raw and raw != "None" else None


def fail_on_set(raw: str) -> frozenset[str]:
    kinds = frozenset(part.strip() for part in raw.split(",") if part.strip())
    if not kinds:  # nothing would fail: a gate that can never close is a mistake, not a choice
        raise ValueError(f"name at least one outcome from {', '.join(FAILURE_KINDS)}")
    unknown = sorted(kinds - set(FAILURE_KINDS))
    if unknown:
        raise ValueError(
            f"unknown outcome {', '.join(unknown)}; choose from {', '.join(FAILURE_KINDS)}"
        )
    return kinds


def as_dict(settings: Settings) -> dict[str, Any]:
    return {
        "deadline": settings.deadline,
        "confirm": settings.confirm,
        "max_chars": settings.max_chars,
        "seed": settings.seed,
    }
