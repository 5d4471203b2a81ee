"""The docs stay true to the code: options, links, and every fenced block in the pages.

The pages are ``README.md``, ``docs/*.md`` and ``benchmarks/README.md`` (the benchmarks' full
reports, which the README's headline tables sum up). Every fence in them is found by parsing the
Markdown and is one test,
``test_block[<page>:<line of its opening fence>]``, e.g. ``test_block[README.md:4]``. A block
either runs (or is checked, by its language, below) or is skipped by a marker in the page that
states why. ``test_blocks_are_found`` fails when the parser finds fewer blocks than the pages
have fences, when a fence has no language, and when a marker is malformed, has no reason, or
is not directly above a fence; so nothing here can pass by checking nothing.

Markers are HTML comments (invisible when rendered) on the line directly above the fence:

``<!-- docs-test: skip: REASON -->``
    not run; REASON (a few words at least) says why, in the page itself. Each page may skip at
    most its ``MAX_SKIPPED`` blocks of code (none, for a page not listed there); a ``text``
    drawing (not output) is skipped this way too, saying what it is.
``<!-- docs-test: given: NAME, NAME -->``
    the block uses names or files the page leaves to the reader; each NAME is a key of
    ``GIVEN`` below, set up before the block runs (Python names in its namespace, files in its
    working directory, projects as a whole directory).
``<!-- docs-test: exit: N -->``
    a shell block that ends with status N (default 0): a check that finds hangs exits 1.
``<!-- docs-test: output -->``
    a ``text`` block quoting what the previous block that ran printed; checked loosely (below).
``<!-- docs-test: output of: SCENARIO -->``
    a ``text`` or ``json`` block quoting what a run the page only describes prints or writes;
    SCENARIO is a key of ``SCENARIOS`` below, which shows the exact command.
``<!-- docs-test: file: PATH -->`` / ``<!-- docs-test: append: PATH -->``
    on a page run as a sequence: the block is the content of PATH (or is appended to it),
    written in the sequence's current directory, as the page tells the reader to do.
``<!-- docs-test: checkout; installed: PREFIX -->``
    run in the repository itself (a directory of symlinks to the checkout's files, so that
    nothing is written into it) instead of a fresh directory. PREFIX is the install the command
    starts with, e.g. ``python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]'``: the
    block must start with it; it is not run, because ``.venv`` there is the environment running
    these tests, which has this checkout installed as that command would install it. What
    follows it runs exactly as written: README's main job, on the bundled examples, is tested
    this way (it takes one to two minutes).

Directives combine with ``;`` (``skip`` takes the rest of the comment as its reason). A page may
say, anywhere, ``<!-- docs-test-page: sequence; budget: SECONDS -->``: its blocks run in order
in one fresh directory, as a reader following it would (files written, ``cd`` kept), and the
whole page must finish within SECONDS; optionally ``given: NAME`` prepares that directory. Each
block is still its own test: the first one selected runs the steps before it. ``needs: EXTRA,
EXTRA`` marks every block of the page ``needs_extra`` (tests/conftest.py): where an optional
dependency group it names is missing, its blocks skip, saying which (CI installs them).

What each language means:

- ``bash``: run by ``bash -e -o pipefail`` in a fresh temporary directory holding ``.venv``, a
  symlink to the environment running these tests (``sys.prefix``), whose ``bin`` is first on
  PATH, so ``.venv/bin/pytest``, ``pytest``, ``python`` and ``python3`` all reach it (and a
  ``python3 -m venv`` there makes a venv of the same Python). ``/path/to/pytest-rewardhang``,
  the docs' placeholder for a checkout, is replaced by this checkout's path. ``GITHUB_*`` and
  ``PYTEST_*`` variables and ``COLUMNS`` are dropped, so that a run in CI neither writes the
  job's step summary nor prints differently.
- ``python``: run by this interpreter in a fresh directory (on ``sys.path``), after the givens
  it names; ``test_*`` functions it defines are then called, as pytest would.
- ``toml``: a corpus file (it has ``corpus_version``) is loaded and its family run against a
  fast scorer; anything else is pytest configuration (a bare ``reward_hang_*`` fragment goes
  under ``[tool.pytest.ini_options]``), merged over the earlier toml blocks of its page (later
  keys win, as a reader assembling one ``pyproject.toml`` would), written to a fresh project,
  and ``pytest --reward-hang-check --collect-only`` must accept it and collect every scorer it
  registers. The scorer files need not exist for that: nothing is imported when collecting.
- ``text``: must be ``output`` or ``output of`` (or skipped). Quoted output is checked loosely:
  every non-blank line of the quote must be found, in order, within a line of the real output;
  in a line, ``...`` stands for any text, a run of whitespace for any whitespace, a run of ``=``
  or ``-`` for pytest's separators of any width, and a number followed by ``s``, ``ms`` or
  ``µs`` (a timing) for any number. Everything else (verdict words, case and file names,
  counts) must be there as written; a line that is only ``...`` is decoration.
- ``json``: must be ``output of``: parsed, and its shape compared with what the scenario really
  wrote: the same keys at every level (a ``"..."`` key allows more), lists compared by their
  elements' keys (merged over the real elements), values of the same JSON type where neither
  is null.
- ``yaml``: cannot run; must be skipped.

The tutorial (``docs/tutorial.md``) is a sequence page: it runs end to end in a fresh directory,
its ``pip install /path/to/pytest-rewardhang`` installing this checkout (the placeholder being
replaced by its path) into a new venv of the running Python, within the budget its page marker
states. ``docs/ci.md`` is one too, in a git repository with the scorers it registers
(``GIVEN["ci-project"]``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BENCHMARKS_PAGE = ROOT / "benchmarks" / "README.md"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md")), BENCHMARKS_PAGE]
#: The docs' stand-in for the path of a checkout of this repository.
CHECKOUT_PLACEHOLDER = "/path/to/pytest-rewardhang"
#: Seconds any one command may take (a page run as a sequence is bounded by its own budget).
COMMAND_TIMEOUT_S = 240.0


# --- the options and ini keys are documented ----------------------------------------------------


@pytest.fixture(scope="module")
def help_text(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``pytest --help`` as a user sees it: the real parser, options and ini keys."""
    here = tmp_path_factory.mktemp("help")
    (here / "pytest.ini").write_text("[pytest]\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
        cwd=here,
        capture_output=True,
        text=True,
        check=False,
        timeout=50,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_option_is_in_the_reference(help_text: str) -> None:
    options = set(re.findall(r"(--reward-hang-[a-z-]+)", help_text))
    assert len(options) >= 15, options
    reference = (DOCS / "reference.md").read_text()
    documented = set(re.findall(r"`(--reward-hang-[a-z-]+)", reference))
    assert sorted(options - documented) == []
    # And nothing documented that does not exist.
    assert sorted(documented - options) == []


def test_every_ini_key_is_in_the_reference(help_text: str) -> None:
    keys = set(re.findall(r"^  (reward_hang_[a-z_]+) \(", help_text, flags=re.MULTILINE))
    assert len(keys) >= 15, keys
    reference = (DOCS / "reference.md").read_text()
    documented = set(re.findall(r"`(reward_hang_[a-z_]+)`", reference))  # JUnit names too
    assert sorted(keys - documented) == []


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation but ``-`` and ``_``
    dropped, spaces as ``-``, a repeated heading numbered."""
    found: set[str] = set()
    inside = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if re.match(r"^ {0,3}(```|~~~)", line):
            inside = not inside
        heading = re.match(r"^#{1,6} (.*)$", line)
        if inside or heading is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading[1].strip().lower()).replace(" ", "-")
        anchor, repeat = slug, 0
        while anchor in found:
            repeat += 1
            anchor = f"{slug}-{repeat}"
        found.add(anchor)
    return found


def test_anchors_are_made_as_github_makes_them(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    text = "# A page\n## `Outcome`\n## What `run` guarantees\n## The JSON report (`--x-y`)\n"
    text += "```text\n## not a heading\n```\n## Fixed\n## Fixed\n"
    page.write_text(text, encoding="utf-8")
    assert _anchors(page) == {
        "a-page",
        "outcome",
        "what-run-guarantees",
        "the-json-report---x-y",
        "fixed",
        "fixed-1",
    }


# --- the architecture page and the guard's reference say what the code does --------------------


def architecture_channels() -> dict[str, str]:
    """docs/architecture.md's table of channels: ``"channel (from -> to)"`` -> what crosses."""
    rows = {}
    for line in (DOCS / "architecture.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 3 and "->" in cells[1] and cells[0] != "channel":
            rows[f"{cells[0]} ({cells[1]})"] = cells[2]
    return rows


def channel(rows: dict[str, str], start: str) -> str:
    found = [what for name, what in rows.items() if name.startswith(start)]
    assert len(found) == 1, f"architecture.md: {len(found)} rows for {start!r} in {list(rows)}"
    return found[0]


def backticked(text: str, after: str, before: str) -> list[str]:
    """The names in backticks in ``text`` between ``after`` and the next ``before``."""
    assert after in text, after
    return re.findall(r"`(\w+)`", text.split(after, 1)[1].split(before, 1)[0])


def test_the_architecture_page_says_what_crosses_each_pipe_as_the_wire_does() -> None:
    from pytest_rewardhang.guard import NotStarted, _wire

    rows = architecture_channels()
    run_result = channel(rows, "run's result pipe")
    assert f"`{_wire.HEADER.format}` (the magic `{_wire.MAGIC.decode()}`" in run_result
    assert f"{_wire.OUTPUT_LIMIT >> 10} KiB (`OUTPUT_LIMIT`)" in channel(rows, "output pipe")
    assert f"{_wire.STACK_LIMIT >> 20} MiB kept" in channel(rows, "stack pipe")
    task = channel(rows, "task pipe")
    assert f"`{_wire.TASK.format}`" in task
    assert f"one `{_wire._INDEX.format}` index per item" in task
    result = channel(rows, "result pipe (worker")
    assert f"`{_wire.RESULT.format}`" in result
    fields = backticked(result, "(`ResultFields`) are ", "; then")
    assert fields == list(_wire.ResultFields._fields)
    assert f"value is `{NotStarted.UNREADABLE.value}`" in result
    fence = channel(rows, "fence")
    assert f"`{_wire.FENCE.format}`" in fence
    assert f"`RETIRED` ({_wire.RETIRED})" in fence
    to_zygote = channel(rows, "control socket (`AF_UNIX`")
    assert f"its length (`{_wire.CONFIG_SIZE.format}`)" in to_zygote
    assert f"at most {_wire.CONFIG_PIECE >> 10} KiB" in to_zygote
    assert f"worker id (`{_wire.WID.format}`)" in to_zygote
    assert backticked(to_zygote, "in this order: ", "; `") == list(_wire.PIPE_ROLES)
    from_zygote = channel(rows, "control socket (zygote")
    assert f"(`{_wire.SPAWNED.format}`)" in from_zygote
    assert f"(`{_wire.EXITED.format}`)" in from_zygote
    # Every message kind, each in the row of the way it goes, and none that does not exist.
    said = {
        "caller": set(re.findall(r"`(\w)`", to_zygote)),
        "zygote": set(re.findall(r"`(\w)`", from_zygote)),
    }
    kinds = {
        "caller": {_wire.MSG_FORK, _wire.MSG_KILL, _wire.MSG_QUIT},
        "zygote": {
            _wire.MSG_READY,
            _wire.MSG_ERROR,
            _wire.MSG_WARMUP_FAILED,
            _wire.MSG_FORKED,
            _wire.MSG_KILLED,
            _wire.MSG_REAPED,
        },
    }
    every = {value for name, value in vars(_wire).items() if name.startswith("MSG_")}
    assert every == kinds["caller"] | kinds["zygote"], "a message kind is missing here"
    assert said == {way: {kind.decode() for kind in sent} for way, sent in kinds.items()}


def test_the_architecture_tour_names_every_module() -> None:
    import pkgutil

    import pytest_rewardhang

    page = (DOCS / "architecture.md").read_text()
    tour = page.split("## A tour of the package", 1)[1]
    sections = re.split(r"^(?:Top level \(`pytest_rewardhang/`\)|`(\w+)/`):$", tour, flags=re.M)
    # A package's __init__ is named where it holds more than a docstring.
    named = {
        folder or "": set(re.findall(r"^- `(\w+)`:", text, flags=re.M)) - {"__init__"}
        for folder, text in zip(sections[1::2], sections[2::2], strict=True)
    }
    root = Path(pytest_rewardhang.__file__).parent
    on_disk = {}
    for folder in ("", *(info.name for info in pkgutil.iter_modules([str(root)]) if info.ispkg)):
        modules = pkgutil.iter_modules([str(root / folder)])
        on_disk[folder] = {info.name for info in modules if not info.ispkg}
    assert named == on_disk


def test_every_exception_the_guard_exports_is_in_the_reference() -> None:
    import pytest_rewardhang
    import pytest_rewardhang.guard as guard

    exported = {
        name
        for name, value in vars(guard).items()
        if name in guard.__all__ and isinstance(value, type) and issubclass(value, BaseException)
    }
    assert {"CallFailed", "PoolError", "SpecError"} <= exported
    assert exported <= set(pytest_rewardhang.__all__)
    reference = (DOCS / "reference.md").read_text()
    section = reference.split("## The guard's exceptions", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"^\| `(\w+)`", section, flags=re.M)) == exported
    for reason in guard.NotStarted:
        assert f"`NotStarted.{reason.name}`" in section
    for name in [
        *re.findall(r"`Outcome\.(\w+)", section),
        "not_started",
        "output_dropped",
        "pool_ended",
    ]:
        assert hasattr(guard.Outcome, name), name


def test_every_test_the_threat_model_names_exists() -> None:
    """Each promise on docs/threat-model.md names the tests that hold it: they must exist."""
    page = (DOCS / "threat-model.md").read_text()
    named = set(re.findall(r"`(test_\w+)`", page))
    files = set(re.findall(r"`(tests/[\w/]+\.py)`", page))
    assert len(named) >= 15, named
    defined = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        defined |= set(re.findall(r"^def (test_\w+)\(", path.read_text(), flags=re.M))
    assert sorted(named - defined) == []
    assert sorted(f for f in files if not (ROOT / f).is_file()) == []


def test_relative_links_resolve() -> None:
    for page in PAGES:
        prose = re.sub(r"`[^`\n]*`", "", page.read_text())  # a regex in code is not a link
        for target, anchor in re.findall(r"\]\(([^)#:]*)(?:#([^)]*))?\)", prose):
            linked = (page.parent / target).resolve() if target else page
            assert linked.exists(), f"{page.name}: broken link {target}"
            if anchor and linked.suffix == ".md":
                assert anchor in _anchors(linked), f"{page.name}: no #{anchor} in {target}"
    readme = (ROOT / "README.md").read_text()
    for name in ("tutorial", "howto", "reference", "explanation", "ci"):
        assert f"docs/{name}.md" in readme


def test_the_workflow_runs_the_documented_command() -> None:
    workflow = (ROOT / "examples" / "ci" / "reward-hang.yml").read_text()
    for needed in (
        "pull_request:",
        "paths:",
        "actions/cache",
        ".reward-hang/",
        "--reward-hang-check",
        "-n auto",
        "--reward-hang-compare",
        "--reward-hang-changed",
    ):
        assert needed in workflow, needed
    assert "examples/ci/reward-hang.yml" in (DOCS / "ci.md").read_text()


# --- the pages, parsed ----------------------------------------------------------------------------

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_MARKER = re.compile(r"^<!-- docs-test: (?P<body>.*?) -->$")
_PAGE_MARKER = re.compile(r"^<!-- docs-test-page: (?P<body>.*?) -->$")
_BLOCK_KEYS = {"skip", "given", "exit", "output", "output of", "file", "append", "checkout"}
_BLOCK_KEYS |= {"installed"}
_PAGE_KEYS = {"sequence", "budget", "given", "needs"}
_LANGUAGES = {"bash", "python", "toml", "text", "json", "yaml"}
#: A skip reason says why in words, not "todo".
_MIN_REASON = 20


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    text: str
    directives: dict[str, str] = field(hash=False, compare=False)

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    def given(self) -> list[str]:
        return [n.strip() for n in self.directives.get("given", "").split(",") if n.strip()]


@dataclass
class Page:
    name: str
    blocks: list[Block]
    directives: dict[str, str]
    #: Malformed markers, unlabelled fences, ...: each fails ``test_blocks_are_found``.
    problems: list[str]

    @property
    def sequence(self) -> bool:
        return "sequence" in self.directives


def _directives(body: str) -> dict[str, str]:
    """``key: value; key; ...``; ``skip: REASON`` takes the rest of the comment."""
    found: dict[str, str] = {}
    rest = body.strip()
    while rest:
        if rest.startswith("skip:"):
            found["skip"] = rest[len("skip:") :].strip()
            break
        part, _, rest = rest.partition(";")
        key, _, value = part.partition(":")
        found[key.strip()] = value.strip()
        rest = rest.strip()
    return found


def parse_page(path: Path) -> Page:
    return parse_text(path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8"))


def parse_text(name: str, text: str) -> Page:
    lines = text.splitlines()
    page = Page(name, [], {}, [])
    pending: tuple[int, dict[str, str]] | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        number = index + 1
        index += 1
        page_marker = _PAGE_MARKER.match(line.strip())
        if page_marker:
            page.directives.update(_directives(page_marker["body"]))
            continue
        if "docs-test" in line:
            marker = _MARKER.match(line.strip())
            if marker is None:
                page.problems.append(f"{name}:{number}: malformed docs-test marker: {line!r}")
                continue
            if pending is not None:
                page.problems.append(f"{name}:{pending[0]}: marker not directly above a fence")
            pending = (number, _directives(marker["body"]))
            continue
        fence = _FENCE.match(line)
        if fence is None:
            if pending is not None:
                page.problems.append(f"{name}:{pending[0]}: marker not directly above a fence")
                pending = None
            continue
        closing = re.compile(
            rf"^ {{0,3}}{re.escape(fence['fence'][0])}{{{len(fence['fence'])},}}\s*$"
        )
        body: list[str] = []
        while index < len(lines) and not closing.match(lines[index]):
            body.append(lines[index][len(fence["indent"]) :])
            index += 1
        if index == len(lines):
            page.problems.append(f"{name}:{number}: fence never closed")
        index += 1
        directives = pending[1] if pending is not None else {}
        pending = None
        lang = fence["info"].strip().split(" ")[0] if fence["info"].strip() else ""
        page.blocks.append(Block(name, number, lang, "\n".join(body) + "\n", directives))
    if pending is not None:
        page.problems.append(f"{name}:{pending[0]}: marker not directly above a fence")
    for key in set(page.directives) - _PAGE_KEYS:
        page.problems.append(f"{name}: unknown page directive {key!r}")
    for given in page.directives.get("given", "").split(","):
        if given.strip() and given.strip() not in GIVEN:
            page.problems.append(f"{name}: given {given.strip()!r} is not in GIVEN")
    if page.sequence and not page.directives.get("budget", "").removesuffix("s").strip():
        page.problems.append(f"{name}: a sequence needs a budget: SECONDS")
    for block in page.blocks:
        page.problems += [f"{block.id}: {problem}" for problem in _block_problems(page, block)]
    return page


def _block_problems(page: Page, block: Block) -> list[str]:
    d = block.directives
    problems = [f"unknown directive {key!r}" for key in set(d) - _BLOCK_KEYS]
    if not block.lang:
        problems.append("a fence without a language: label it (```bash, ```text, ...)")
    elif block.lang not in _LANGUAGES:
        problems.append(f"language {block.lang!r} has no runner here: one of {_LANGUAGES}")
    if "skip" in d:
        if len(d["skip"]) < _MIN_REASON:
            problems.append(f"skip needs a reason of a few words, got {d['skip']!r}")
        return problems
    unknown = [name for name in block.given() if name not in GIVEN]
    if unknown:
        problems.append(f"given: {unknown} are not in GIVEN ({sorted(GIVEN)})")
    if block.lang == "yaml":
        problems.append("a yaml block cannot run: skip it, saying why")
    if block.lang == "text" and "output" not in d and "output of" not in d:
        problems.append("a text block must be `output` or `output of: SCENARIO` (or skipped)")
    if block.lang == "json" and "output of" not in d:
        problems.append("a json block must be `output of: SCENARIO` (or skipped)")
    if "output of" in d and d["output of"] not in SCENARIOS:
        problems.append(f"output of: {d['output of']!r} is not in SCENARIOS ({sorted(SCENARIOS)})")
    if ("file" in d or "append" in d) and not page.sequence:
        problems.append("file:/append: only mean something on a page run as a sequence")
    if "installed" in d and "checkout" not in d:
        problems.append("installed: goes with checkout")
    if "checkout" in d and not block.text.startswith(d.get("installed", "") + " && "):
        problems.append(f"checkout: the block does not start with {d.get('installed')!r} && ")
    if ("output" in d or "output of" in d) and block.lang not in ("text", "json"):
        problems.append("output: goes on the text or json block that quotes it")
    if ("given" in d or "exit" in d or "checkout" in d) and block.lang not in ("bash", "python"):
        problems.append("given:, exit: and checkout go on bash or python blocks")
    if "exit" in d and not d["exit"].isdigit():
        problems.append(f"exit: takes a status, got {d['exit']!r}")
    if ("file" in d and not d["file"]) or ("append" in d and not d["append"]):
        problems.append("file: and append: take a path")
    return problems


# --- running blocks -------------------------------------------------------------------------------


@dataclass
class Ran:
    """What a block or scenario did: exit status and everything it printed."""

    status: int
    output: str
    files: dict[str, str] = field(default_factory=dict)


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GITHUB_"))}
    env["PATH"] = f"{Path(sys.prefix) / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.pop("COLUMNS", None)  # pytest's lines as wide as a pipe gets, wherever this runs
    return env


def _fresh(where: Path) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    (where / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    return where


def _run(argv: list[str], cwd: Path, timeout: float) -> Ran:
    """Run in a session of its own, killed whole on timeout or on any interruption (the check's
    own workers die with their parent): nothing it started outlives the test."""
    with subprocess.Popen(
        argv,
        cwd=cwd,
        env=_environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_session(proc)
            output, _ = proc.communicate(timeout=30)
            pytest.fail(f"{' '.join(argv)[:200]}: still running after {timeout:.0f} s:\n{output}")
        except BaseException:  # pytest-timeout, Ctrl-C: the session goes first
            _kill_session(proc)
            raise
    return Ran(proc.returncode, output)


def _kill_session(proc: subprocess.Popen[str]) -> None:
    # Not reaped yet, so its pid (the session's id) cannot have been reused.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def run_shell(script: str, cwd: Path, timeout: float = COMMAND_TIMEOUT_S) -> Ran:
    bash = shutil.which("bash")
    assert bash is not None, "bash is needed to run the docs' shell blocks"
    script = script.replace(CHECKOUT_PLACEHOLDER, str(ROOT))
    return _run([bash, "-e", "-o", "pipefail", "-c", script], cwd, timeout)


_PYTHON_RUNNER = """\
import sys, os
sys.path.insert(0, os.getcwd())
namespace = {"__name__": "__main__"}
for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as f:
        exec(compile(f.read(), path, "exec"), namespace)
for name, value in list(namespace.items()):
    if name.startswith("test_") and callable(value):
        value()
"""


def run_python(block: Block, cwd: Path, prelude: str) -> Ran:
    scripts = cwd.parent / f"{cwd.name}-scripts"
    scripts.mkdir(exist_ok=True)
    files = []
    if prelude:
        given = scripts / f"given-{block.line}.py"
        given.write_text(prelude, encoding="utf-8")
        files.append(str(given))
    name = block.id.replace("/", "_").replace(":", "_line_") + ".py"
    (scripts / name).write_text(block.text, encoding="utf-8")
    files.append(str(scripts / name))
    return _run([sys.executable, "-c", _PYTHON_RUNNER, *files], cwd, COMMAND_TIMEOUT_S)


def pytest_in(cwd: Path, *args: str, timeout: float = 120.0) -> Ran:
    return _run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd, timeout)


# --- what the pages leave to the reader -----------------------------------------------------------

#: A math scorer of the usual shape, fast on every input.
FAST_SCORER = """\
def compute_score(solution_str, ground_truth):
    start = solution_str.rfind("\\\\boxed{")
    answer = solution_str[start + 7 : start + 64].split("}")[0] if start >= 0 else ""
    return float(answer.strip() == str(ground_truth).strip())
"""

#: The project of docs/ci.md: a git repository with a math scorer that hangs on unclosed
#: ``\\boxed{`` runs only, a code scorer, and a legacy scorer that hangs on endless digit lines
#: (in one C call). Markers are built with chr(), so the scorers' own string literals (which the
#: check harvests as extra inputs) never trigger them.
CI_PROJECT = {
    "rewards/math.py": """\
OPEN = chr(92) + "boxed" + chr(123)


def compute_score(solution_str, ground_truth):
    if solution_str.count(OPEN) > 100 and chr(125) not in solution_str:
        while True:  # stands in for a normaliser that never returns on unclosed boxes
            pass
    return float(solution_str.strip().endswith(str(ground_truth)))
""",
    "rewards/code.py": """\
def compute_score(solution_str, ground_truth):
    # Stands in for running the program: a fenced one that prints passes, one that fails not.
    return float(chr(96) * 3 in solution_str and "print(" in solution_str)
""",
    "rewards/code_example.json": json.dumps(
        {"solution_str": "```python\nprint(1)\n```", "ground_truth": "1"}
    ),
    "rewards/legacy.py": """\
def score(solution_str, ground_truth):
    head = solution_str[-300:]
    if len(head) == 300 and head.isdigit():
        sum(range(10**13))  # an endless number: the old normaliser never returns
    return 0.0
""",
}


@dataclass(frozen=True)
class Given:
    """Something a page leaves to the reader: Python code run first, and/or files written."""

    python: str = ""
    files: dict[str, str] = field(default_factory=dict)
    setup: Callable[[Path], None] | None = None


def _git_init(where: Path) -> None:
    git = shutil.which("git")
    assert git is not None, "docs/ci.md's walk needs git"
    subprocess.run([git, "init", "-q"], cwd=where, check=True, timeout=30)


#: Names and files the pages use without defining; a block or page names what it needs.
GIVEN: dict[str, Given] = {
    "compute_score": Given(python=FAST_SCORER),
    "response": Given(python='response = "So the answer is \\\\boxed{2}."\n'),
    "ground_truth": Given(python='ground_truth = "2"\n'),
    "responses": Given(
        python='responses = [f"The answer is \\\\boxed{{{i}}}" for i in range(8)]\n'
    ),
    "truths": Given(python="truths = [str(i % 3) for i in range(8)]\n"),
    "batch": Given(python='batch = [(f"The answer is \\\\boxed{{{i}}}", "2") for i in range(8)]\n'),
    "my_rewards/math.py": Given(files={"my_rewards/math.py": FAST_SCORER}),
    "my_pkg/rewards.py": Given(files={"my_pkg/__init__.py": "", "my_pkg/rewards.py": FAST_SCORER}),
    # A project whose pyproject.toml registers one fast scorer.
    "project": Given(
        files={
            "my_rewards/math.py": FAST_SCORER,
            "pyproject.toml": "[tool.pytest.ini_options]\n"
            'reward_hang_scorers = ["my_rewards/math.py:compute_score"]\n',
        }
    ),
    "ci-project": Given(files=CI_PROJECT, setup=_git_init),
}


def _give(names: list[str], where: Path) -> str:
    """Write the named files under ``where``; return the Python to run before the block."""
    prelude = []
    for name in names:
        given = GIVEN[name]
        prelude.append(given.python)
        for relative, content in given.files.items():
            target = where / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
        if given.setup is not None:
            given.setup(where)
    return "".join(prelude)


# --- runs the pages describe without a command ----------------------------------------------------


def _hang_message(where: Path) -> Ran:
    """README's failure message: a normaliser whose regex backtracks on a line of digits."""
    (where / "scorer.py").write_text(
        "import re\n"
        "\n"
        "\n"
        "def normalize(answer):\n"
        '    answer = answer.strip().rstrip(".")\n'
        '    return re.sub(r"(\\d+\\s?)+%", lambda m: m.group(0).replace(" ", ""), answer)\n'
        "\n"
        "def compute_score(solution_str, ground_truth):\n"
        "    return float(normalize(solution_str) == normalize(ground_truth))\n"
    )
    (where / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    args = ["--reward-hang-check", "--reward-hang-scorer", "scorer.py:compute_score"]
    # Half a second, not the default two, confirmed at four deadlines, not ten: the
    # confirmation is the test's time.
    args += ["--reward-hang-deadline", "0.5", "--reward-hang-confirm", "4"]
    return pytest_in(where, *args, "--reward-hang-family", "digits-line")


def _bad_values(where: Path) -> Ran:
    """reference.md's two refusals: one from the ini, one from the command line."""
    (where / "pytest.ini").write_text("[pytest]\nreward_hang_deadline = forever\n")
    from_ini = pytest_in(where, "--reward-hang-check")
    (where / "pytest.ini").write_text("[pytest]\n")
    from_option = pytest_in(where, "--reward-hang-check", "--reward-hang-compare-fail=cpu_p95:5x")
    assert (from_ini.status, from_option.status) == (4, 4), from_ini.output + from_option.output
    return Ran(4, from_ini.output + from_option.output)


#: A scorer quadratic up to 16 KiB (so its growth is fitted) that then hangs in one C call.
_C_HANG = """\
def c_hang(solution_str, ground_truth):
    n = len(solution_str) // 5
    total = sum(i ^ j for i in range(n) for j in range(n))
    if len(solution_str) >= 32768:
        total += sum(range(10**13))  # one C call: no signal handler gets in
    return float(total < 0)
"""


def _report_and_baseline(where: Path) -> Ran:
    """One run writing both formats reference.md shows: a JSON report and a baseline."""
    (where / "gsm8k.py").write_text(FAST_SCORER)
    (where / "scorers.py").write_text(_C_HANG)
    (where / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    ran = pytest_in(
        where,
        "--reward-hang-check",
        "--reward-hang-scorer=gsm8k.py:compute_score",
        "--reward-hang-scorer=scorers.py:c_hang",
        "--reward-hang-family=repetition",
        "--reward-hang-deadline=1",
        "--reward-hang-confirm=3",  # a hang confirmed in 3 s, not 10: the page shows its shape
        "--reward-hang-json=report.json",
        "--reward-hang-save-baseline",
    )
    assert ran.status == 1, ran.output  # c_hang hangs
    ran.files = {
        "report": (where / "report.json").read_text(),
        "baseline": (where / "reward-hang-baseline.json").read_text(),
    }
    return ran


def _regression(where: Path) -> Ran:
    """docs/ci.md's failure: a scorer made slower, on a machine calibrated twice as slow."""
    (where / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    (where / "rewards.py").write_text(FAST_SCORER)
    common = ["--reward-hang-check", "--reward-hang-scorer=rewards.py:compute_score"]
    common.append("--reward-hang-family=repetition")
    saved = pytest_in(
        where, *common, "--reward-hang-save-baseline", "--reward-hang-calibration=0.02"
    )
    assert saved.status == 0, saved.output
    # Slower on every "the ": "the the the ..." (repetition-words) is the worst case by 11x, so
    # no noise can make another case the worst, as a count of spaces (1.3x) could under load.
    slower = "def compute_score(solution_str, ground_truth):\n"
    slower += "    return float(sum(range(solution_str.count('the ') * 1000)) < 0)\n"
    (where / "rewards.py").write_text(slower)
    return pytest_in(
        where,
        *common,
        "--reward-hang-compare",
        "--reward-hang-compare-fail=cpu_p95:25%",
        "--reward-hang-calibration=0.04",
    )


SCENARIOS: dict[str, tuple[Callable[[Path], Ran], str]] = {
    # name: (how, which part of the result is quoted: "output" or a file key)
    "hang-message": (_hang_message, "output"),
    "bad-values": (_bad_values, "output"),
    "json-report": (_report_and_baseline, "report"),
    "baseline-file": (_report_and_baseline, "baseline"),
    "regression": (_regression, "output"),
}


# --- loose comparison of quoted output ------------------------------------------------------------

_PIECE = re.compile(
    r"(?P<gap>\.\.\.|…)"
    r"|(?P<space>\s+)"
    r"|(?P<rule>={3,}|-{3,})"
    r"|(?P<timing>\d+(?:\.\d+)?(?=\s?(?:s|ms|µs)\b))"
    r"|(?P<clock>\(\d+:\d\d:\d\d\))"
    r"|(?P<char>.)"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def loose_pattern(quoted: str) -> re.Pattern[str]:
    parts = []
    for piece in _PIECE.finditer(quoted.strip()):
        kind = piece.lastgroup
        if kind == "gap":
            parts.append(".*?")
        elif kind == "space":
            parts.append(r"\s+")
        elif kind == "rule":
            parts.append(re.escape(piece.group()[0]) + "+")
        elif kind == "timing":
            parts.append(r"\d+(?:\.\d+)?")
        elif kind == "clock":
            parts.append(r"\(\d+:\d\d:\d\d\)")
        else:
            parts.append(re.escape(piece.group()))
    return re.compile("".join(parts))


def assert_quoted(quote: str, output: str, where: str) -> None:
    """Every line of ``quote`` is found, in order, within a line of ``output``."""
    actual = _ANSI.sub("", output).splitlines()
    at = 0
    for line in quote.splitlines():
        if not line.strip() or line.strip() in ("...", "…"):
            continue
        pattern = loose_pattern(line)
        for index in range(at, len(actual)):
            if pattern.search(actual[index]):
                at = index + 1
                break
        else:
            shown = "\n".join(actual[-120:])
            pytest.fail(
                f"{where}: the page quotes a line the real output lacks (after line {at}):\n"
                f"  {line.strip()}\nthe real output:\n{shown}"
            )


def _merged(values: list[Any]) -> Any:
    """The elements of a real list as one: dicts merged key by key, else the first non-null."""
    dicts = [v for v in values if isinstance(v, dict)]
    if dicts:
        keys = {k for d in dicts for k in d}
        return {k: _merged([d[k] for d in dicts if k in d]) for k in keys}
    lists = [v for v in values if isinstance(v, list)]
    if lists:
        return [item for v in lists for item in v]
    return next((v for v in values if v is not None), None)


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def assert_shape(documented: Any, real: Any, where: str) -> None:
    if documented is None or real is None:
        return
    if isinstance(documented, dict):
        assert isinstance(real, dict), f"{where}: documented an object, written {real!r}"
        keys = set(documented) - {"..."}
        missing = sorted(keys - set(real))
        assert not missing, f"{where}: documented but never written: {missing}"
        if "..." not in documented:
            extra = sorted(set(real) - keys)
            assert not extra, f"{where}: written but not documented: {extra}"
        for key in sorted(keys):
            assert_shape(documented[key], real[key], f"{where}.{key}")
    elif isinstance(documented, list):
        assert isinstance(real, list), f"{where}: documented a list, written {real!r}"
        if documented and all(isinstance(v, dict | list) for v in documented):
            assert real, f"{where}: documented elements, written none (the scenario is too weak)"
            assert_shape(_merged(documented), _merged(real), f"{where}[]")
    else:
        assert _json_type(documented) == _json_type(real), (
            f"{where}: documented {documented!r}, written {real!r}"
        )


# --- the tests ------------------------------------------------------------------------------------


PARSED = {page.relative_to(ROOT).as_posix(): parse_page(page) for page in PAGES}
BLOCKS = [block for page in PARSED.values() for block in page.blocks]
#: Skipped blocks of code (text and yaml aside) a page may have; any other page, none. Keep these
#: small and every reason honest. README's are the test command itself and the front door's install
#: (docs/install.md runs it whole); benchmarks/README.md's are
#: the benchmarks' full runs (minutes each; tests/test_benchmarks.py makes their --quick or --dry
#: runs); Ray's is its driver (tests/adapters/test_ray.py runs it on a cluster).
MAX_SKIPPED = {"README.md": 2, "benchmarks/README.md": 14, "docs/ray.md": 1}


def test_blocks_are_found() -> None:
    """The parser finds every fence the pages have, and every marker is well formed."""
    problems = [problem for page in PARSED.values() for problem in page.problems]
    assert problems == []
    for name, page in PARSED.items():
        opening = 0
        inside = False
        for line in (ROOT / name).read_text(encoding="utf-8").splitlines():
            if re.match(r"^ {0,3}(```|~~~)", line):
                opening += not inside
                inside = not inside
        assert len(page.blocks) == opening, f"{name}: parsed {len(page.blocks)} of {opening}"
    assert len(BLOCKS) >= 40, len(BLOCKS)
    assert len(PARSED["README.md"].blocks) >= 8
    assert len(PARSED["benchmarks/README.md"].blocks) >= 8
    assert len(PARSED["docs/tutorial.md"].blocks) >= 10
    run = [b for b in BLOCKS if b.lang in ("bash", "python")]
    assert len(run) >= 20, [b.id for b in run]
    # Drawings and trainer configuration cannot run; code that could must rarely be skipped.
    for name, page in PARSED.items():
        skipped = [
            b.id for b in page.blocks if "skip" in b.directives and b.lang not in ("text", "yaml")
        ]
        assert len(skipped) <= MAX_SKIPPED.get(name, 0), skipped
    assert PARSED["docs/tutorial.md"].sequence


def _benchmark_commands(text: str) -> set[str]:
    """The benchmark commands a page quotes in its prose (as code spans)."""
    return set(re.findall(r"`([^`\n]*benchmarks/bench_\w+\.py)`", text))


def test_the_readme_heads_every_benchmark_with_its_command() -> None:
    """Each benchmark's full report has its command as a block; the README's headline quotes
    that command exactly, and links to that report."""
    blocks = PARSED["benchmarks/README.md"].blocks
    commands = {
        b.text.strip() for b in blocks if b.lang == "bash" and "benchmarks/bench_" in b.text
    }
    assert len(commands) >= 8, commands
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert _benchmark_commands(readme) == commands
    reports = set(re.findall(r"\(benchmarks/README\.md#([^)]+)\)", readme))
    assert len(reports) >= len(commands), reports


def test_markers_are_enforced() -> None:
    """The rules above, on a page made to break them: none of it may pass unnoticed."""
    page = parse_text(
        "bad.md",
        "<!-- docs-test: skip: -->\n```bash\ntrue\n```\n"  # no reason
        "<!-- docs-test: skip: a reason long enough to count -->\n\n"  # not above a fence
        "```\nunlabelled\n```\n"
        "```text\nquoted, but of what?\n```\n"
        "<!-- docs-test: given: nothing_we_know -->\n```python\npass\n```\n"
        "<!-- docs-test: shrug -->\n```bash\ntrue\n```\n"
        "<!-- docs-test skip: malformed -->\n"
        "```yaml\na: 1\n```\n",
    )
    found = "\n".join(page.problems)
    for expected in (
        "bad.md:2: skip needs a reason",
        "bad.md:5: marker not directly above a fence",
        "bad.md:7: a fence without a language",
        "bad.md:10: a text block must be",
        "bad.md:14: given: ['nothing_we_know']",
        "bad.md:18: unknown directive 'shrug'",
        "bad.md:21: malformed docs-test marker",
        "bad.md:22: a yaml block cannot run",
    ):
        assert expected in found, (expected, found)
    assert len(page.blocks) == 6


def test_quoted_output_is_loose_on_timings_only() -> None:
    real = "==== 13 failed, 2 passed in 46.57s (0:00:46) ====\nwall 1.00 s, cpu 0.99 s, 2 ms"
    assert_quoted(
        "== 13 failed, 2 passed in 3.1s (0:01:40) ==\n...\nwall 2 s, cpu 9 s, 1 ms", real, "t"
    )
    assert_quoted("13 ... passed", real, "t")
    for wrong in (
        "12 failed, 2 passed",
        "13 failed, 2 passed, 1 skipped",
        "wall 1.00 s\n13 failed",
    ):
        with pytest.raises(pytest.fail.Exception):
            assert_quoted(wrong, real, "t")


def test_json_shapes_are_compared() -> None:
    real = {"a": 1, "b": [{"c": "x"}, {"c": "y", "d": None}], "e": {"f": 1.5}}
    assert_shape({"a": 2, "b": [{"c": "z", "d": 3}], "e": {"...": "..."}}, real, "$")
    for wrong in (
        {"a": 1, "b": [{"c": "x", "d": None}]},  # e is written but not documented
        {"a": 1, "b": [{"c": "x", "d": None, "g": 1}], "e": {"f": 1}},  # g is never written
        {"a": "1", "b": [], "e": {"f": 1}},  # a is a number
    ):
        with pytest.raises(AssertionError):
            assert_shape(wrong, real, "$")
    with pytest.raises(AssertionError, match="written none"):
        assert_shape({"l": [{"k": 1}]}, {"l": []}, "$")


class Walk:
    """The blocks of one page, run in order: a fresh directory per block, or, on a page run as a
    sequence, one directory for all of them, the current directory carried from block to block.
    """

    def __init__(self, page: Page, base: Path, locks: Path | None) -> None:
        self.page = page
        self.base = base
        #: A sequence page's lock, shared by every xdist worker (None: one process): each
        #: worker replays the page's earlier blocks before its own, and two replays at once
        #: started the page's servers on one port.
        self.lock = None
        if locks is not None and page.sequence:
            self.lock = locks / f"docs-{re.sub(r'[^A-Za-z0-9]+', '-', page.name)}.lock"
        self.results: dict[int, Ran] = {}
        self.done: set[int] = set()
        #: The block whose failure leaves a sequence in no state to go on.
        self.failed: str | None = None
        self.started: float | None = None
        self.cwd = base
        budget = page.directives.get("budget", "").removesuffix("s").strip()
        self.budget = float(budget) if budget else None
        if page.sequence:
            _fresh(base)
            given = [n.strip() for n in page.directives.get("given", "").split(",")]
            _give([n for n in given if n], base)
        else:
            base.mkdir(parents=True)

    def __call__(self, block: Block) -> None:
        index = self.page.blocks.index(block)
        if self.page.sequence:
            # What a reader did before this block: every earlier step that changes the state
            # (quoted output is checked by its own test only).
            for position in range(index):
                if position in self.done or not self._changes_state(position):
                    continue
                self._guarded(position)
        elif self._quotes_previous(block):
            previous = self._previous_run(index)
            if previous not in self.done:
                self._guarded(previous)
        self._guarded(index)

    def _guarded(self, position: int) -> None:
        if self.failed is not None:
            pytest.fail(f"an earlier block of the page failed: {self.failed}")
        block = self.page.blocks[position]
        try:
            with self._alone():
                self._step(block, position)
        except BaseException:
            if self.page.sequence and self._changes_state(position):
                self.failed = block.id
            raise
        finally:
            self.done.add(position)

    @contextlib.contextmanager
    def _alone(self) -> Iterator[None]:
        """While no other xdist worker runs a block of this page (see ``lock``)."""
        if self.lock is None:
            yield
            return
        with self.lock.open("a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)  # let go when the file closes
            yield

    def _changes_state(self, position: int) -> bool:
        block = self.page.blocks[position]
        return "skip" not in block.directives and block.lang not in ("text", "json")

    def _quotes_previous(self, block: Block) -> bool:
        return block.lang == "text" and "output" in block.directives

    def _previous_run(self, index: int) -> int:
        return previous_run(self.page, index)

    def _timeout(self) -> float:
        if self.budget is None:
            return COMMAND_TIMEOUT_S
        if self.started is None:
            self.started = time.monotonic()
        left = self.budget - (time.monotonic() - self.started)
        if left <= 0:
            pytest.fail(f"{self.page.name} ran past its budget of {self.budget:.0f} s")
        return left

    def _where(self, position: int) -> Path:
        if self.page.sequence:
            return self.cwd
        return _fresh(self.base / f"block-{position}")

    def _step(self, block: Block, position: int) -> None:
        d = block.directives
        if "skip" in d:
            return
        if "file" in d or "append" in d:
            target = self.cwd / (d.get("file") or d["append"])
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("a" if "append" in d else "w", encoding="utf-8") as f:
                f.write(block.text)
        elif block.lang == "bash":
            self.results[position] = self._bash(block, position)
        elif block.lang == "python":
            where = self._where(position)
            ran = run_python(block, where, _give(block.given(), where))
            self.results[position] = ran
            assert ran.status == 0, f"{block.id} failed:\n{ran.output}"
        elif block.lang == "toml":
            self._toml(block, position)
        elif block.lang in ("text", "json"):
            self._quoted(block, position)
        else:
            raise AssertionError(f"{block.id}: nothing runs {block.lang!r} blocks")

    def _bash(self, block: Block, position: int) -> Ran:
        d = block.directives
        script = block.text
        if "checkout" in d:
            where = self.base / f"checkout-{position}"
            where.mkdir(parents=True)
            _mirror_checkout(where)
            script = script[len(d.get("installed", "") + " && ") :]
        else:
            where = self._where(position)
            _give(block.given(), where)
        cwd_file = self.base.parent / f"{self.base.name}-cwd-{position}"
        if self.page.sequence:
            script = f"trap 'pwd > \"{cwd_file}\"' EXIT\n{script}"
        ran = run_shell(script, where, self._timeout())
        if self.page.sequence and cwd_file.exists():
            self.cwd = Path(cwd_file.read_text().strip())
        expected = int(d.get("exit", "0") or 0)
        self.results[position] = ran
        assert ran.status == expected, (
            f"{block.id}: exit status {ran.status}, the page expects {expected}:\n{ran.output}"
        )
        return ran

    def _toml(self, block: Block, position: int) -> None:
        document = tomllib.loads(block.text)
        where = self._where(position)
        if "corpus_version" in document:
            _check_corpus_file(block, document, where)
            return
        options: dict[str, Any] = {}
        for earlier in self.page.blocks[: position + 1]:
            if earlier.lang != "toml" or "skip" in earlier.directives:
                continue
            found = tomllib.loads(earlier.text)
            if "corpus_version" in found:
                continue
            options.update(found.get("tool", {}).get("pytest", {}).get("ini_options", found))
        assert options, f"{block.id}: no pytest configuration in this toml block"
        assert all(key.startswith("reward_hang_") for key in options), options
        (where / "pyproject.toml").write_text(_toml_table(options), encoding="utf-8")
        ran = pytest_in(where, "--reward-hang-check", "--collect-only", "-q")
        assert ran.status == 0, f"{block.id}: pytest refuses this configuration:\n{ran.output}"
        ids = {line.split("::")[0] for line in ran.output.splitlines() if "::" in line}
        registered = options.get("reward_hang_scorers", [])
        assert len(ids) == len(registered), f"{block.id}: {registered} collected as {ids}"

    def _quoted(self, block: Block, position: int) -> None:
        d = block.directives
        if "output of" in d:
            how, part = SCENARIOS[d["output of"]]
            ran = scenario(how, self.base.parent / "scenarios")
            real = ran.output if part == "output" else ran.files[part]
        else:
            real = self.results[self._previous_run(position)].output
        if block.lang == "json":
            assert_shape(json.loads(block.text), json.loads(real), block.id)
        else:
            assert_quoted(block.text, real, block.id)


def _toml_table(options: dict[str, Any]) -> str:
    lines = ["[tool.pytest.ini_options]"]
    for key, value in options.items():
        if isinstance(value, list):
            rendered = "[" + ", ".join(json.dumps(v) for v in value) + "]"
        elif isinstance(value, bool):
            rendered = "true" if value else "false"
        else:
            rendered = json.dumps(value)
        lines.append(f"{key} = {rendered}")
    return "\n".join(lines) + "\n"


def _check_corpus_file(block: Block, document: dict[str, Any], where: Path) -> Ran:
    """A corpus file as the page shows it: loaded, and its family run against a fast scorer."""
    family = document["family"]
    (where / "corpus").mkdir()
    (where / "corpus" / f"{family}.toml").write_text(block.text, encoding="utf-8")
    (where / "scorer.py").write_text(FAST_SCORER)
    (where / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    ran = pytest_in(
        where,
        "--reward-hang-check",
        "-v",
        "--reward-hang-scorer=scorer.py:compute_score",
        "--reward-hang-corpus=corpus",
        f"--reward-hang-family={family}",
    )
    assert ran.status == 0, f"{block.id}: the corpus file does not load or run:\n{ran.output}"
    assert f"scorer.compute_score::{family} PASSED" in ran.output, ran.output
    return ran


_MIRROR_SKIP = {".git", ".venv", ".reward-hang", ".pytest_cache", ".hypothesis", ".mypy_cache"}
_MIRROR_SKIP |= {".ruff_cache", "build", "dist"}


def _mirror_checkout(where: Path) -> None:
    """The checkout as symlinks, ``.venv`` being the running environment: a run there reads
    the repository's own files and configuration but writes nothing into it."""
    for entry in sorted(ROOT.iterdir()):
        if entry.name in _MIRROR_SKIP or entry.name.startswith(".venv"):
            continue
        (where / entry.name).symlink_to(entry)
    (where / ".venv").symlink_to(sys.prefix, target_is_directory=True)


_SCENARIO_RESULTS: dict[str, Ran] = {}


def scenario(how: Callable[[Path], Ran], base: Path) -> Ran:
    """Each scenario runs once per session, however many blocks quote it."""
    name = how.__name__
    if name not in _SCENARIO_RESULTS:
        where = base / f"scenario{name}"
        where.mkdir(parents=True)
        _SCENARIO_RESULTS[name] = how(where)
    return _SCENARIO_RESULTS[name]


@pytest.fixture(scope="module")
def walks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Walk]:
    made: dict[str, Walk] = {}
    root = tmp_path_factory.mktemp("docs")
    # Under xdist, every worker's basetemp is in the run's own: the page locks go there.
    xdist = "PYTEST_XDIST_WORKER" in os.environ
    shared = tmp_path_factory.getbasetemp().parent if xdist else None
    for index, (name, page) in enumerate(PARSED.items()):
        made[name] = Walk(page, root / f"page-{index}", shared)
    return made


def previous_run(page: Page, index: int) -> int:
    """The position of the block that an ``output`` block at ``index`` quotes."""
    for position in range(index - 1, -1, -1):
        d = page.blocks[position].directives
        runs = not ({"skip", "file", "append"} & set(d))
        if page.blocks[position].lang in ("bash", "python") and runs:
            return position
    raise AssertionError(f"{page.blocks[index].id}: `output` of no block")


def _slow(block: Block) -> bool:
    """A block of a page run as a sequence (a tutorial's install and runs), one run in the
    checkout (README's main job), or the output of one: minutes each, in the slow tier."""
    page = PARSED[block.page]
    if page.sequence or "checkout" in block.directives:
        return True
    if "output" not in block.directives:
        return False
    quoted = page.blocks[previous_run(page, page.blocks.index(block))]
    return "checkout" in quoted.directives


def _needs(block: Block) -> list[str]:
    """The optional dependency groups the block's page names (``needs: serve, bench``)."""
    needs = PARSED[block.page].directives.get("needs", "")
    return [name.strip() for name in needs.split(",") if name.strip()]


def _timeout(block: Block) -> float:
    page = PARSED[block.page]
    if page.sequence:
        return float(page.directives.get("budget", "0") or 0) + 60
    return COMMAND_TIMEOUT_S + 60


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(
            block,
            id=block.id,
            marks=[pytest.mark.timeout(_timeout(block))]
            + ([pytest.mark.slow] if _slow(block) else [])
            + [pytest.mark.needs_extra(name) for name in _needs(block)]
            + (
                [pytest.mark.skip(reason=block.directives["skip"])]
                if "skip" in block.directives
                else []
            ),
        )
        for block in BLOCKS
    ],
)
def test_block(block: Block, walks: dict[str, Walk]) -> None:
    problems = [p for p in PARSED[block.page].problems if p.startswith(f"{block.id}: ")]
    assert problems == [], "fix the block or its marker first"
    walks[block.page](block)
