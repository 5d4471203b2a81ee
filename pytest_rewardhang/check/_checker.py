"""Checking one scorer: import it once in a warm worker, call its example, then feed it cases.

Cases run one after another in a long-lived worker, as a trainer would call the scorer (some
libraries slow down as state accumulates); a case that times out is run again in a fresh
worker, to say whether it hangs on its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_rewardhang.corpus import _cases, _format, _found, _harvest
from pytest_rewardhang.corpus._cases import Case
from pytest_rewardhang.corpus._format import Formula
from pytest_rewardhang.guard import run
from pytest_rewardhang.guard._outcome import Outcome, Status
from pytest_rewardhang.guard._pool import Pool
from pytest_rewardhang.guard._spec import SpecError, is_file_target, split_spec

from . import _calls
from ._options import Settings
from ._scorers import ScorerSpec

#: Importing a scorer (sympy, torch, ...) may take far longer than one call is allowed.
IMPORT_BUDGET_S = 120.0
#: Families generated per scorer at run time, after the corpus families.
HARVESTED = "harvested"
SEARCH = "search"


@dataclass
class CaseResult:
    case: Case
    chars: int
    outcome: Outcome
    #: The timed-out case run again in a fresh worker; None when it was not re-run.
    fresh: Outcome | None = None
    saved: Path | None = None
    kwargs: dict[str, Any] = field(default_factory=dict, repr=False)


class ScorerProblem(Exception):
    """The scorer cannot be checked at all: import, signature, example. One line."""


class ScorerCheck:
    def __init__(self, scorer: ScorerSpec, settings: Settings, rootdir: Path) -> None:
        self.scorer = scorer
        self.settings = settings
        self.rootdir = rootdir
        self.deadline = scorer.deadline or settings.deadline
        self.memory_mb = scorer.memory_mb or settings.memory_mb
        corpus = _cases.load_corpus(settings.corpora)
        self.cases = _cases.cases_for(
            scorer.kind, settings.max_chars, settings.seed, corpus, settings.families
        )
        self._harvested: list[Case] | None = None
        self._units: list[str] = []
        self.spec = _absolute(scorer.spec, rootdir)
        self._info: _calls.ScorerInfo | None = None
        self._example: dict[str, Any] | None = None
        self._problem: ScorerProblem | None = None
        self.problem_reported = False
        self._pool: Pool | None = None

    def families(self) -> list[str]:
        found = _cases.families(self.cases)
        if self.scorer.kind != "code":
            generated = [HARVESTED] + ([SEARCH] if self.settings.search else [])
            chosen = self.settings.families
            found += [name for name in generated if chosen is None or name in chosen]
        return found

    def case_count(self, family: str) -> int:
        """How many cases the family runs at most (for the item's outer timeout)."""
        rungs = len(_harvest_sizes(self.settings.max_chars))
        if family == HARVESTED:
            return (_harvest.MAX_UNITS + _harvest.MAX_ATTACKS) * rungs + 2
        if family == SEARCH:
            return self.settings.search + 2
        return sum(case.family == family for case in self.cases)

    def run_family(self, family: str) -> list[CaseResult]:
        """Run the family's cases in order, smallest first, up to the first confirmed hang.

        Sizes above a response that already hangs on its own would only hang longer; the
        smallest hanging input is the useful reproduction.
        """
        info, example = self._prepare()
        pool = self._worker()
        if family == SEARCH:
            return self._search(info, example)
        cases = self._harvest(example) if family == HARVESTED else self.cases
        results = []
        for case in cases:
            if case.family != family:
                continue
            kwargs = self.kwargs_for(case)
            result = CaseResult(case, len(case.text), pool.map([kwargs])[0])
            results.append(self._judge(result, kwargs))
            if result.fresh is not None and result.fresh.status is Status.TIMEOUT:
                break
        self._save_found(results)
        return results

    def kwargs_for(self, case: Case) -> dict[str, Any]:
        info, example = self._prepare()
        kwargs = _calls.with_case(info, example, self.scorer.kind, case.text)
        if case.ground_truth is not None:
            kwargs = with_truth(info, kwargs, case.ground_truth)
        return kwargs

    def _judge(self, result: CaseResult, kwargs: dict[str, Any]) -> CaseResult:
        result.kwargs = kwargs
        if result.outcome.status is Status.TIMEOUT:
            result.fresh = self._fresh(kwargs)
        if result.outcome.status is not Status.OK or result.outcome.leaked:
            result.saved = self._save(result)
        return result

    def _harvest(self, example: dict[str, Any]) -> list[Case]:
        """Cases from the scorer's own vocabulary, collected once in a throwaway child."""
        if self._harvested is None:
            out = run(
                _harvest.collect,
                (self.spec, str(self.rootdir), example),
                budget=IMPORT_BUDGET_S,
                objects=True,  # our own Vocabulary, built by our code in the child
            )
            vocabulary = out.value if out.status is Status.OK else _harvest.Vocabulary()
            self._units = _harvest.units(vocabulary)
            self._harvested = harvested_cases(vocabulary, self.settings.max_chars, self._units)
        return self._harvested

    def _search(self, info: _calls.ScorerInfo, example: dict[str, Any]) -> list[CaseResult]:
        from pytest_rewardhang.corpus import (
            _search,  # Hypothesis is imported only when a search is asked for
        )

        self._harvest(example)
        units = self._units or ["a"]
        pool = self._worker()

        def probe(text: str) -> Outcome:
            kwargs = _calls.with_case(info, example, self.scorer.kind, text)
            return pool.map([kwargs])[0]

        database = self.rootdir / ".reward-hang" / "search" / self.scorer.id
        ran = _search.search(
            probe,
            units,
            self.settings.search,
            self.settings.seed,
            database,
            min(self.settings.max_chars, _SEARCH_MAX_CHARS),
        )
        results = []
        for case, outcome in ran:
            kwargs = _calls.with_case(info, example, self.scorer.kind, case.text)
            if outcome.status is not Status.OK or outcome.leaked:
                results.append(self._judge(CaseResult(case, len(case.text), outcome), kwargs))
        # Only the slowest examples are worth a row each; failures always are. Per character,
        # the shortest inputs would win on the call's fixed cost alone.
        slowest = sorted(ran, key=lambda pair: -pair[1].wall_s)[:3]
        for case, outcome in slowest:
            if outcome.status is Status.OK and not outcome.leaked:
                results.append(CaseResult(case, len(case.text), outcome))
        self._save_found(results)
        return results

    def _save_found(self, results: list[CaseResult]) -> None:
        """``--reward-hang-save``: each input past its deadline, shrunk, as a corpus file."""
        folder = self.settings.save_corpus
        if folder is None:
            return
        if not folder.is_absolute():
            folder = self.rootdir / folder
        for result in results:
            if result.outcome.status is not Status.TIMEOUT:
                continue
            case, text = result.case, result.case.text
            if case.formula is not None:
                passed = [
                    r.chars
                    for r in results
                    if r.case.formula_id == case.formula_id and r.outcome.status is Status.OK
                ]
                text = self._shrink(case, max(passed, default=0))
            _found.write(
                folder,
                case,
                text,
                scorer_id=self.scorer.id,
                kind=self.scorer.kind,
                deadline=self.deadline,
            )

    def _shrink(self, case: Case, passing: int) -> str:
        """The smallest expansion of the case's formula that still runs past the deadline."""
        assert case.formula is not None
        formula = case.formula
        low = max(passing, len(formula.prefix) + len(formula.suffix) + 1)
        high = len(case.text)
        while high > low * 1.25 and high - low > 16:
            middle = (low + high) // 2
            kwargs = self.kwargs_for(
                _replace_text(case, formula.expand(middle, self.settings.seed))
            )
            if self._fresh(kwargs).status is Status.TIMEOUT:
                high = middle
            else:
                low = middle
        return formula.expand(high, self.settings.seed)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def _prepare(self) -> tuple[_calls.ScorerInfo, dict[str, Any]]:
        if self._problem is not None:
            raise self._problem
        if self._info is None or self._example is None:
            try:
                self._info, self._example = self._describe_and_try_example()
            except ScorerProblem as problem:
                self._problem = problem
                raise
        return self._info, self._example

    def _describe_and_try_example(self) -> tuple[_calls.ScorerInfo, dict[str, Any]]:
        out = run(
            _calls.describe,
            (self.scorer.spec, str(self.rootdir), self.scorer.response),
            budget=IMPORT_BUDGET_S,
            objects=True,  # our own ScorerInfo, built by our code in the child
        )
        if out.status is not Status.OK:
            raise ScorerProblem(_first_line(out))
        info: _calls.ScorerInfo = out.value
        example = self._load_example(info)
        first = self._worker().map([example])[0]
        if first.status is not Status.OK:
            where = str(self.scorer.example) if self.scorer.example else "the default example"
            raise ScorerProblem(
                f"the scorer fails on its own example ({where}), so no case can be judged: "
                f"{_first_line(first)}"
            )
        return info, example

    def _load_example(self, info: _calls.ScorerInfo) -> dict[str, Any]:
        path = self.scorer.example
        if path is None:
            return _calls.default_example(info, self.scorer.kind)
        try:
            example = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ScorerProblem(f"example={path}: cannot read it: {exc.strerror}") from None
        except ValueError as exc:
            raise ScorerProblem(f"example={path}: not valid JSON: {exc}") from None
        if not isinstance(example, dict):
            raise ScorerProblem(f"example={path}: expected a JSON object of keyword arguments")
        if info.response_arg not in example:
            raise ScorerProblem(
                f"example={path}: has no {info.response_arg!r}, the argument that receives "
                "the response (set response=ARGNAME if that is wrong)"
            )
        return example

    def _worker(self) -> Pool:
        if self._pool is None:
            self._pool = self._new_pool()
        return self._pool

    def _new_pool(self) -> Pool:
        call = _calls.ScorerCall(self.spec, str(self.rootdir))
        return Pool(call, workers=1, budget=self.deadline, memory_mb=self.memory_mb)

    def _fresh(self, kwargs: dict[str, Any]) -> Outcome:
        with self._new_pool() as pool:
            return pool.map([kwargs])[0]

    def _save(self, result: CaseResult) -> Path | None:
        folder = self.settings.save_dir / self.scorer.id
        if not folder.is_absolute():
            folder = self.rootdir / folder
        path = folder / f"{result.case.id}.json"
        record = {
            "spec": self.scorer.spec,  # as declared: relative to the rootdir, portable
            "scorer": self.scorer.id,
            "case": result.case.id,
            "family": result.case.family,
            "kind": self.scorer.kind,
            "deadline": self.deadline,
            "memory_mb": self.memory_mb,
            "status": str(result.outcome.status),
            "kwargs": result.kwargs,
        }
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(
                json.dumps(record, indent=1), encoding="utf-8"
            )  # ASCII: lone surrogates too
        except (OSError, TypeError, ValueError):
            return None
        return path


#: A cap on search sizes: past it, every example of a linear scorer costs the run real time.
_SEARCH_MAX_CHARS = 16384


def _harvest_sizes(max_chars: int) -> list[int]:
    return _format.ladder(_format.DEFAULT_SIZES, max_chars)


def harvested_cases(
    vocabulary: _harvest.Vocabulary, max_chars: int, units: list[str]
) -> list[Case]:
    cases = []
    formulas = [
        (f"u{i}", f"{unit!r} repeated", Formula("", (unit,), "")) for i, unit in enumerate(units)
    ]
    attacks = [a for pattern in vocabulary.patterns for a in _harvest.attacks(pattern)]
    formulas += [
        (f"regex{i}", f"pumps {attack.units[0]!r} against a regex of the scorer", attack)
        for i, attack in enumerate(attacks[: _harvest.MAX_ATTACKS])
    ]
    for name, description, formula in formulas:
        stem = f"{HARVESTED}-{name}"
        for size in _harvest_sizes(max_chars):
            text = formula.expand(size)
            cases.append(
                Case(
                    f"{stem}-{size}",
                    HARVESTED,
                    text,
                    description,
                    None,
                    formula,
                    stem,
                    "harvested from the scorer's vocabulary",
                )
            )
    return sorted(cases, key=lambda case: len(case.text))


def _replace_text(case: Case, text: str) -> Case:
    return Case(case.id, case.family, text, case.description, case.ground_truth)


def with_truth(info: _calls.ScorerInfo, kwargs: dict[str, Any], truth: str) -> dict[str, Any]:
    """The case's ground truth in place of the example's, in the argument the example uses."""
    if info.style == "openrlhf":
        return {**kwargs, "labels": [truth]}
    names = (
        ("solution", "answer", "ground_truth")
        if info.style == "trl"
        else ("ground_truth", "answer", "label", "reference")
    )
    for name in names:
        if name in kwargs:
            return {**kwargs, name: [truth] if info.style == "trl" else truth}
    return kwargs


def _absolute(spec: str, rootdir: Path) -> str:
    """Workers may run elsewhere than the user's cwd: pin file specs to absolute paths."""
    target, attr = split_spec(spec)
    if is_file_target(target) and not Path(target).is_absolute():
        return f"{(rootdir / target).resolve()}:{attr}"
    return spec


def _first_line(out: Outcome) -> str:
    if out.status is Status.ERROR and out.error:
        line = out.error.splitlines()[0]
        for cls in (SpecError, _calls.CallStyleError):  # our own errors speak for themselves
            for prefix in (f"{cls.__module__}.{cls.__qualname__}: ", f"{cls.__qualname__}: "):
                line = line.removeprefix(prefix)
        return line
    return out.describe()
