"""The plugin object registered by ``--reward-hang-check``: collection, running, reporting."""

from __future__ import annotations

import json
import os
from collections.abc import Generator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_rewardhang.corpus import _cases
from pytest_rewardhang.corpus._format import CorpusError

from . import _baseline, _changed, _known, _scorers
from ._checker import HARVESTED, IMPORT_BUDGET_S, SEARCH, ScorerCheck
from ._items import FamilyItem, RewardHangItem, ScorerNode
from ._options import Settings, as_dict
from ._report import BASELINE_PROPERTY, NOT_RUN_PROPERTY, PROPERTY, VERDICT_PROPERTY, Summary
from ._scorers import ScorerConfigError, ScorerSpec
from ._verdict import Kind

#: Added to every item's pytest-timeout bound: the outer net must never beat the guard.
_TIMEOUT_MARGIN_S = 30.0


class RewardHangSession:
    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.checks: list[ScorerCheck] = []
        self.summary = Summary()
        self.collected = False
        try:
            self.corpus = _cases.load_corpus(settings.corpora)
        except CorpusError as exc:
            raise pytest.UsageError(f"corpus: {exc}") from None
        if settings.families is not None:
            unknown = sorted(settings.families - self.corpus.families() - {HARVESTED, SEARCH})
            if unknown:
                known = ", ".join(sorted(self.corpus.families() | {HARVESTED, SEARCH}))
                raise pytest.UsageError(
                    f"{settings.families_source}: unknown family {', '.join(unknown)}; "
                    f"known: {known}"
                )
        self.json_path = self._json_target()
        self.known = _known.KnownHangs(frozenset(), frozenset())
        saved = self._load_baseline()
        #: What the items measure and compare through; None when no baseline is saved or compared.
        self.baseline: _baseline.BaselineRun | None = None
        if settings.save_baseline is not None or settings.compare_baseline is not None:
            self.baseline = _baseline.BaselineRun(
                # Once per process, before any scorer runs: xdist workers calibrate themselves.
                calibration_s=settings.calibration or _baseline.calibrate(),
                rootdir=config.rootpath,
                corpus_version=self.corpus.version,
                saved=saved,
                limits=settings.compare_fail,
            )
        self.baseline_notes: list[str] = []
        #: Scorers ``--reward-hang-changed`` left out (False) and kept (True); under xdist,
        #: the controller takes its workers' (each collects them all).
        self.by_change = {False: 0, True: 0}
        #: Said when ``--reward-hang-changed`` left nothing to run (the run then passes).
        self.unchanged = ""
        self.changed_files: set[Path] | None = None
        #: Whether the change touched what every scorer is checked by: the ini file
        #: (registrations, known hangs, limits) or the baseline compared with.
        self.configuration_changed = False
        if settings.changed_ref is not None:
            try:
                self.changed_files = _changed.changed_files(settings.changed_ref, config.rootpath)
            except _changed.ChangedError as exc:
                raise pytest.UsageError(f"--reward-hang-changed: {exc}") from None
            configuration = (config.inipath, settings.compare_baseline)
            self.configuration_changed = any(
                path is not None and path.resolve() in self.changed_files for path in configuration
            )

    def _json_target(self) -> Path | None:
        """Where the JSON report goes, checked now: a bad path found after the run loses it."""
        path = self.settings.json_path
        if path is None or hasattr(self.config, "workerinput"):
            return None
        target = path if path.is_absolute() else self.config.invocation_params.dir / path
        try:  # as --junitxml does, the folder is made; unlike a failed write, this is up front
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise NotADirectoryError(f"a part of {target.parent} is a file") from None
            if target.is_dir():
                raise IsADirectoryError(f"{target} is a directory")
            if not os.access(target if target.exists() else target.parent, os.W_OK):
                raise PermissionError(f"{target}: not writable")
        except OSError as exc:
            raise pytest.UsageError(f"--reward-hang-json: cannot write the report: {exc}") from None
        return target

    def _load_baseline(self) -> dict[str, dict[str, dict[str, Any]]] | None:
        save = self.settings.save_baseline
        if save is not None and save.exists():
            # Saving merges into the file; one it cannot read (a merge conflict, say) would be
            # replaced by this run's entries alone: refuse it now, before any scorer runs.
            try:
                _baseline.load(save)
            except _baseline.BaselineError as exc:
                raise pytest.UsageError(f"--reward-hang-save-baseline: {exc}") from None
        path = self.settings.compare_baseline
        if path is None:
            return None
        if not path.exists() and self.settings.save_baseline is not None:
            return {}  # the first run of a project writes the baseline it will compare with
        try:
            return _baseline.load(path)
        except _baseline.BaselineError as exc:
            raise pytest.UsageError(f"--reward-hang-compare: {exc}") from None

    # --- collection ---------------------------------------------------------------------------

    def scorer_specs(self) -> list[ScorerSpec]:
        rootdir = self.config.rootpath
        specs: list[ScorerSpec] = []
        try:
            for line, where, at in self.settings.scorer_lines:
                specs.append(replace(_scorers.parse_line(line, where, rootdir), declared_at=at))
            specs += _scorers.decorated(rootdir)
            specs += _scorers.from_entry_points(rootdir)
            hook = "pytest_reward_hang_scorers hook"
            for place, entry in enumerate(_hooked(self.config, hook), 1):
                if not isinstance(entry, ScorerSpec):
                    entry = _scorers.parse_line(entry, hook, rootdir)
                if entry.declared_at is None:
                    entry = replace(entry, declared_at=(hook, place))
                specs.append(entry)
        except ScorerConfigError as exc:
            raise pytest.UsageError(str(exc)) from None
        seen: dict[str, ScorerSpec] = {}
        for spec in specs:
            if spec.id in seen:
                raise pytest.UsageError(
                    f"scorer id {spec.id!r} is declared twice ({seen[spec.id].declared_in}; "
                    f"{spec.declared_in}): give one of them id=NAME"
                )
            seen[spec.id] = spec
        families = self.corpus.families() | {HARVESTED, SEARCH}
        try:
            self.known = _known.resolve(self.settings.known, specs, families)
        except _known.KnownError as exc:
            raise pytest.UsageError(str(exc)) from None
        return self.known.apply(specs)

    @pytest.hookimpl(tryfirst=True)  # before -k and -m deselect
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        user_timeout = _user_timeout(config)
        specs = self.scorer_specs()  # a UsageError here leaves collected False: nothing to say
        self.collected = True
        for spec in specs:
            check = ScorerCheck(spec, self.settings, config.rootpath)
            self.checks.append(check)
            node = ScorerNode.from_parent(session, name=spec.id, nodeid=spec.id)
            made: list[pytest.Item] = []
            for family in check.families():
                item = FamilyItem.from_parent(
                    node,
                    name=family,
                    family=family,
                    settings=self.settings,
                    baseline=self.baseline,
                )
                item.check = check
                item.known_hang = self.known.item(spec.id, family)
                item.add_marker(pytest.mark.reward_hang)
                # Cases, their fresh re-runs (or the baseline's replay) and the example, each up
                # to the deadline.
                runs = 3 if self.settings.compare_baseline is not None else 2
                bound = IMPORT_BUDGET_S + (runs * check.case_count(family) + 1) * check.deadline
                bound += _TIMEOUT_MARGIN_S
                item.add_marker(pytest.mark.timeout(max(bound, user_timeout)))
                made.append(item)
            # Reported like any collected node, so "collected N items" counts ours too.
            report = pytest.CollectReport(node.nodeid, "passed", None, list(made))
            config.hook.pytest_collectreport(report=report)
            if self.changed_files is not None:
                touched = self._touched_by_change(check)
                self.by_change[touched] += 1
                if not touched:
                    config.hook.pytest_deselected(items=made)
                    continue
            items += made

    def _touched_by_change(self, check: ScorerCheck) -> bool:
        """Whether the scorer, its in-repo imports or its example changed since the ref, or
        the configuration every scorer is checked by."""
        assert self.changed_files is not None
        if self.configuration_changed:
            return True
        source = check.source[0]
        if source is None:
            return False  # outside the repository: a pull request cannot change it
        watched = _changed.dependencies(source, self.config.rootpath)
        if check.scorer.example is not None:
            watched.add(check.scorer.example.resolve())
        return bool(watched & self.changed_files)

    # --- running and reporting ----------------------------------------------------------------

    def pytest_report_teststatus(
        self, report: pytest.TestReport | pytest.CollectReport, config: pytest.Config
    ) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
        # Collection reports come here too (a user's broken test module) and have no properties.
        properties = getattr(report, "user_properties", ())
        hang = (VERDICT_PROPERTY, Kind.HANG.value) in properties
        if report.when == "call" and report.failed and hang:
            return "failed", "H", ("HANG", {"red": True})
        return None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        # A family skipped for its scorer's sake (it hangs on anything, or cannot be checked)
        # is listed by -rs at the scorer, as a skip mark's would be: not at the plugin's line
        # that skipped it. Where the scorer has no line (it does not resolve), at its declaration
        # (see ScorerSpec.declared_at); a spec made without one has none (-rs handles None).
        if not isinstance(item, RewardHangItem) or hasattr(report, "wasxfail"):
            return report
        skip = report.longrepr
        if report.skipped and isinstance(skip, tuple):
            path, line, _ = item.reportinfo()
            line = None if line is None else line + 1
            report.longrepr = (os.fspath(path), line, skip[2])  # type: ignore[assignment]
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        for name, value in report.user_properties:
            if name == PROPERTY:
                self.summary.add(json.loads(str(value)))
            elif name == BASELINE_PROPERTY:
                self.summary.add_baseline(json.loads(str(value)))
            elif name == NOT_RUN_PROPERTY:
                self.summary.add_not_run(json.loads(str(value)))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if hasattr(self.config, "workerinput"):  # an xdist worker: the controller says it all
            return
        controller = self.config.pluginmanager.hasplugin("dsession")  # xdist: workers collect
        if self.collected and not self.checks and not controller:
            terminalreporter.write_line(
                "reward hang check: no scorers are registered (reward_hang_scorers ini, "
                "--reward-hang-scorer, @pytest_rewardhang.scorer, entry points or hook)",
                yellow=True,
            )
        if self.unchanged:
            terminalreporter.write_line(self.unchanged, green=True)
        if not self.summary.records:
            return
        terminalreporter.write_sep("=", "reward hang check")
        for line in self.summary.table():
            terminalreporter.write_line(line)
        for scorer_id, why in self.summary.no_longer_hanging():
            terminalreporter.write_line(f"FAILED {scorer_id}: {why}", red=True)
        baseline_lines = self.summary.baseline_lines() + self.baseline_notes
        if baseline_lines:
            terminalreporter.write_sep("-", "reward hang baseline")
            for line in baseline_lines:
                terminalreporter.write_line(line, red=line.startswith("regressed"))
        if os.environ.get("GITHUB_ACTIONS") == "true":
            for line in self.summary.github(os.environ.get("GITHUB_STEP_SUMMARY")):
                terminalreporter.write_line(line)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        for check in self.checks:
            check.close()
        # Items fail by their verdicts; a scorer's can fail too where every item passed (one
        # expected to hang that hung nowhere). The controller decides, from every worker's items.
        if hasattr(self.config, "workerinput"):  # an xdist worker: its items only
            output: dict[str, Any] = getattr(self.config, "workeroutput", {})
            output[_BY_CHANGE] = [self.by_change[False], self.by_change[True]]
            return
        nothing = session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED
        if nothing and self.by_change[False] and not self.by_change[True]:
            # A pull request that touches no scorer passes: exit 5 turned it red. Only then: a
            # run with no scorer registered, or a -k past every changed one, still says so.
            session.exitstatus = pytest.ExitCode.OK
            self.unchanged = (
                f"reward hang check: no registered scorer changed since "
                f"{self.settings.changed_ref}: nothing to check"
            )
        if self.summary.fails() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if self.json_path is not None:
            settings = {**as_dict(self.settings), "corpus_version": self.corpus.version}
            self.summary.write_json(self.json_path, settings)
        save = self.settings.save_baseline
        if save is not None:
            # The controller writes it, from the item reports: xdist workers only measure.
            written = _baseline.save(save, self.summary.baseline_entries())
            self.baseline_notes.append(f"baseline written: {save} ({written} entries)")

    @pytest.hookimpl(optionalhook=True)  # pytest-xdist's, in the controller
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        # Every worker collects every scorer: one that went down early (crashed) said nothing.
        counts = getattr(node, "workeroutput", {}).get(_BY_CHANGE, (0, 0))
        for touched, count in zip((False, True), counts, strict=True):
            self.by_change[touched] = max(self.by_change[touched], count)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        for check in self.checks:
            check.close()


#: The ``workeroutput`` key of a worker's ``by_change`` counts.
_BY_CHANGE = "reward_hang_by_change"


def _user_timeout(config: pytest.Config) -> float:
    """The user's own pytest-timeout setting: our bound never undercuts it."""
    for raw in (config.getoption("timeout", None), _ini(config, "timeout")):
        try:
            if raw not in (None, ""):
                return max(float(str(raw)), 0.0)
        except ValueError:
            continue
    return 0.0


def _ini(config: pytest.Config, name: str) -> object:
    try:
        return config.getini(name)
    except ValueError:
        return None


def _hooked(config: pytest.Config, hook: str) -> list[Any]:
    """What the implementations of the scorers hook returned, one list; each a list (or None),
    else one line saying what came back (a string was read a character a scorer)."""
    try:
        results = config.hook.pytest_reward_hang_scorers(config=config)
    except Exception as exc:  # noqa: BLE001 - the user's hook: its error, in one line
        raise ScorerConfigError(f"{hook} raised {type(exc).__name__}: {exc}") from None
    entries: list[Any] = []
    for result in results:
        if result is None:
            continue
        if not isinstance(result, list | tuple):
            raise ScorerConfigError(
                f"{hook} returned {type(result).__name__} {result!r:.80}: expected a list of "
                "scorer lines or ScorerSpec objects"
            )
        entries += result
    return entries
