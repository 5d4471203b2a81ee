"""The layering, enforced the trio way: who may import whom, no cycles, honest ``__all__``s.

The rule (``docs/architecture.md`` says why): ``guard`` imports the standard library and itself
only; ``corpus`` may import ``guard``; ``check`` may import ``corpus`` and ``guard``; ``adapters``
and ``serve`` import ``guard``'s public API only; nothing imports ``plugin``, nothing outside
``adapters`` imports ``adapters``, and only ``__main__`` imports ``serve``. The top-level modules
(the public surface) may import any subpackage but those; the subpackages never import them.

Module lists come from walking the package, never from literal names: after a rename, "X was not
imported" would pass for an X that no longer exists. Each layering rule is checked twice:
statically, over every import statement (``TYPE_CHECKING`` blocks and function bodies included),
and at run time, by importing each module alone in a fresh interpreter and looking at what came
with it. The last tests break every rule on purpose in a small synthetic package, so that none
of them can pass vacuously.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import pkgutil
import signal
import subprocess
import sys
import tomllib
from collections import deque
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import pytest_rewardhang

pytestmark = pytest.mark.timeout(60)

PACKAGE = pytest_rewardhang.__name__
SOURCE = Path(pytest_rewardhang.__file__).resolve().parent
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"

#: Each subpackage and the subpackages its modules may import (itself included). The walked
#: subpackages must be exactly these, so a new or renamed one cannot slip past the rule.
LAYERS: dict[str, frozenset[str]] = {
    "guard": frozenset({"guard"}),
    "corpus": frozenset({"corpus", "guard"}),
    "check": frozenset({"check", "corpus", "guard"}),
    "adapters": frozenset({"adapters", "guard"}),
    "serve": frozenset({"serve", "guard"}),
}
#: Subpackages that may import nothing outside the standard library (a trainer imports them).
STDLIB_ONLY = frozenset({"guard"})
#: Nothing imports these: ``plugin`` is pytest's entry point, ``adapters`` the trainer's.
UNIMPORTED = frozenset({"plugin", "adapters"})
#: Subpackages that may import only the public modules of the other subpackages: the adapters
#: and the server use the guard as a trainer's own code would.
PUBLIC_ONLY = frozenset({"adapters", "serve"})
#: Subpackages that only the named top-level modules import: ``serve`` is the command's.
IMPORTED_ONLY_BY = {"serve": frozenset({"__main__"})}


def _importer_may_not(package: Package, importer: str, target_top: str | None) -> bool:
    """True when ``importer`` is outside ``target_top`` and not one it may be imported by."""
    allowed = IMPORTED_ONLY_BY.get(target_top or "")
    if allowed is None or package.layer(importer) == target_top:
        return False
    return importer.removeprefix(package.name + ".") not in allowed


# --- what the package holds -------------------------------------------------------------------


@dataclass(frozen=True)
class Package:
    """A package on disk: its name, the folder that holds it, and every module in it."""

    name: str
    root: Path  # the folder that holds the package, i.e. a sys.path entry
    files: Mapping[str, Path]  # dotted module name -> its file (a package's __init__.py)
    subpackages: frozenset[str]  # the names of the package's direct subpackages

    def layer(self, module: str) -> str | None:
        """The subpackage a module belongs to, or None for the top-level modules."""
        parts = module.split(".")
        return parts[1] if len(parts) > 1 and parts[1] in self.subpackages else None

    def is_package(self, module: str) -> bool:
        return self.files[module].name == "__init__.py"

    def ours(self, module: str) -> bool:
        return module == self.name or module.startswith(self.name + ".")


def walk(name: str, root: Path) -> Package:
    """Every module below ``root/name``, found on disk without importing anything."""
    files = {name: root / name / "__init__.py"}
    subpackages: set[str] = set()
    todo = [(name, root / name)]
    while todo:
        prefix, folder = todo.pop()
        for info in pkgutil.iter_modules([str(folder)]):
            dotted = f"{prefix}.{info.name}"
            if info.ispkg:
                files[dotted] = folder / info.name / "__init__.py"
                todo.append((dotted, folder / info.name))
                if prefix == name:
                    subpackages.add(info.name)
            else:
                files[dotted] = folder / f"{info.name}.py"
    return Package(name, root, dict(sorted(files.items())), frozenset(subpackages))


# --- the static import graph ------------------------------------------------------------------


@dataclass(frozen=True)
class Edge:
    source: str
    target: str  # a module of ours, or a top-level name outside the package
    line: int

    def where(self) -> str:
        return f"{self.source}:{self.line}"


def imports(package: Package, module: str) -> tuple[list[Edge], list[Edge]]:
    """Every import in ``module``'s source, wherever it stands: ``(ours, others)``.

    Relative imports are resolved; ``from pkg import name`` is an edge to ``pkg.name`` when that
    is a module, else to ``pkg``. Parent packages that Python imports on the way are not edges
    (every module would otherwise sit in a cycle with its package's ``__init__``). Imports of
    ours that name no module come back as edges to a missing target, for the caller to refuse.
    Imports from elsewhere come back by their top-level name.
    """
    tree = ast.parse(package.files[module].read_text(encoding="utf-8"))
    here = module.split(".") if package.is_package(module) else module.split(".")[:-1]
    ours: list[Edge] = []
    others: list[Edge] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                kept = here[: len(here) - node.level + 1]
                base = ".".join([*kept, base] if base else kept)
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in package.files else base
                for alias in node.names
            ]
        else:
            continue
        for target in dict.fromkeys(targets):
            if package.ours(target):
                if target != module:
                    ours.append(Edge(module, target, node.lineno))
            else:
                others.append(Edge(module, target.partition(".")[0], node.lineno))
    return ours, others


def graph(package: Package) -> dict[str, list[Edge]]:
    return {module: imports(package, module)[0] for module in package.files}


def tangles(edges: Mapping[str, Iterable[Edge]]) -> list[set[str]]:
    """The strongly connected groups of two or more modules (Tarjan's algorithm)."""
    successors = {module: sorted({e.target for e in out}) for module, out in edges.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def connect(module: str) -> None:  # recursive: the graph is a few dozen modules
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in successors.get(module, []):
            if target not in index:
                connect(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(group)

    for module in sorted(successors):
        if module not in index:
            connect(module)
    return sorted(groups, key=min)


def cycles(edges: Mapping[str, Iterable[Edge]]) -> list[list[str]]:
    """For each tangle, the shortest cycle through its first module, as a path back to it."""
    found = []
    for group in tangles(edges):
        start = min(group)
        came_from: dict[str, str] = {}
        todo = deque([start])
        while todo:  # breadth first inside the group: the shortest way back to the start
            module = todo.popleft()
            targets = sorted({e.target for e in edges[module]} & group)
            if start in targets:
                path = [start]
                while module != start:
                    path.insert(1, module)
                    module = came_from[module]
                found.append([*path, start])
                break
            for target in targets:
                if target not in came_from:
                    came_from[target] = module
                    todo.append(target)
    return found


def static_problems(package: Package) -> list[str]:
    """Every import statement that breaks the layering, or names a module of ours that is not."""
    problems: list[str] = []
    for module in package.files:
        ours, others = imports(package, module)
        layer = package.layer(module)
        for edge in ours:
            target_layer = package.layer(edge.target)
            target_top = edge.target.split(".")[1] if "." in edge.target else None
            if edge.target not in package.files:
                problems.append(f"{edge.where()}: imports {edge.target}, which is not a module")
            elif target_top in UNIMPORTED and target_top != layer:
                problems.append(f"{edge.where()}: imports {edge.target}; nothing may")
            elif _importer_may_not(package, module, target_top):
                problems.append(f"{edge.where()}: imports {edge.target}; only __main__ may")
            elif layer is not None and target_layer not in LAYERS[layer]:
                allowed = ", ".join(sorted(LAYERS[layer]))
                problems.append(
                    f"{edge.where()}: {layer} imports {edge.target}; {layer} may import {allowed}"
                )
            elif layer in PUBLIC_ONLY and target_layer != layer and not is_public(edge.target):
                problems.append(
                    f"{edge.where()}: {layer} imports {edge.target}; {layer} may import only "
                    "the public modules of the others"
                )
        if layer in STDLIB_ONLY:
            for edge in others:
                if edge.target not in sys.stdlib_module_names:
                    problems.append(
                        f"{edge.where()}: {layer} imports {edge.target}, not the standard library"
                    )
    return problems


# --- each module imported alone, in a fresh interpreter ---------------------------------------

#: Imports nothing but the standard library's json, os and sys before it forks, so each child is
#: an interpreter that has imported nothing of ours nor of anyone else's: it imports one module
#: and reports what came with it, its ``__all__``, ``dir()`` and what kind of thing each public
#: name is. A fork per module costs a few milliseconds, a fresh ``python -c`` some fifty.
_DRIVER = r"""
import json, os, sys

def foreign(names):  # the modules among names that are not the standard library's
    import sysconfig
    paths = sysconfig.get_paths()
    folders = lambda *keys: tuple(os.path.join(os.path.realpath(paths[k]), "") for k in keys)
    stdlib, installed = folders("stdlib", "platstdlib"), folders("purelib", "platlib")
    found = []
    for name in names:
        if name.partition(".")[0] in sys.stdlib_module_names:
            continue
        # Not named there, but in the standard library's folder: e.g. the _sysconfigdata_*
        # module that sysconfig generates for the build.
        path = os.path.realpath(getattr(sys.modules.get(name), "__file__", None) or "")
        if path.startswith(stdlib) and not path.startswith(installed):
            continue
        found.append(name)
    return found

def facts(name):
    module = sys.modules[name]
    import types, typing
    exported = getattr(module, "__all__", None)
    kinds = {}
    for key, value in vars(module).items():
        if isinstance(value, types.ModuleType):
            kinds[key] = "module"
        elif isinstance(value, (typing.TypeVar, typing.ParamSpec, typing.TypeVarTuple)):
            kinds[key] = "typing"
        else:
            kinds[key] = "value"
    return {
        "all": list(exported) if isinstance(exported, (list, tuple)) else exported,
        "missing": [n for n in exported or () if isinstance(n, str) and not hasattr(module, n)],
        "dir": sorted(dir(module)),
        "kinds": kinds,
    }

def forked(task, *args):  # task(*args)'s JSON from a forked child, None if it died first
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # stdout is the report's
            answer = task(*args)
            with os.fdopen(write, "w") as out:
                json.dump(answer, out)
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as answers:
        text = answers.read()
    os.waitpid(pid, 0)
    return json.loads(text) if text else None

def imported(name):  # None once name is imported, else the traceback
    try:
        __import__(name)
    except BaseException:
        import traceback
        return traceback.format_exc()
    return None

def alone(name, before):
    failed = imported(name)
    if failed:
        return {"error": failed}
    loaded = sorted(set(sys.modules) - before)
    return {"loaded": loaded, "foreign": foreign(loaded), **facts(name)}

def group(parent, names, before):
    # Importing a.b.c imports a.b first: each of a package's modules is forked from a process
    # that imported the package, which loads nothing the module's own import would not.
    failed = parent and imported(parent)
    if failed:
        return {name: {"error": failed} for name in names}
    return {name: forked(alone, name, before) for name in names}

def main():
    sys.path.insert(0, sys.argv[1])
    before = set(sys.modules)
    groups = {}
    for name in sys.argv[2:]:
        groups.setdefault(name.rpartition(".")[0], []).append(name)
    report = {}
    for parent, names in groups.items():
        found = forked(group, parent, names, before) or {}
        report.update({name: found.get(name) or {"error": "the child died"} for name in names})
    json.dump(report, sys.stdout)

main()
"""


def import_alone(package: Package) -> dict[str, dict[str, Any]]:
    """What importing each module alone does: ``error``, or what it ``loaded``, which of that is
    ``foreign`` (not the standard library's), and the module's ``all``, ``dir`` and ``kinds``."""
    driver = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, str(package.root), *package.files],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=package.root,
        start_new_session=True,  # a module that hangs at import is killed with the driver
    )
    try:
        out, err = driver.communicate(timeout=50)
    except subprocess.TimeoutExpired:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.communicate()
        pytest.fail("importing the modules one by one took over 50 s: one of them hangs")
    assert driver.returncode == 0, err
    report: dict[str, dict[str, Any]] = json.loads(out)
    return report


def runtime_problems(package: Package, report: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Modules that fail to import alone, or bring modules their layer may not import."""
    problems: list[str] = []
    for module in package.files:
        answer = report[module]
        if "error" in answer:
            last = answer["error"].strip().splitlines()[-1]
            problems.append(f"{module}: does not import alone: {last}")
            continue
        layer = package.layer(module)
        for loaded in answer["loaded"]:
            if loaded == module or not package.ours(loaded):
                continue
            target_layer = package.layer(loaded)
            target_top = loaded.split(".")[1] if "." in loaded else None
            if target_top in UNIMPORTED and target_top != layer:
                problems.append(f"{module}: importing it imports {loaded}; nothing may")
            elif _importer_may_not(package, module, target_top):
                problems.append(f"{module}: importing it imports {loaded}; only __main__ may")
            elif layer is not None and target_layer not in (None, *LAYERS[layer]):
                allowed = ", ".join(sorted(LAYERS[layer]))
                problems.append(
                    f"{module}: importing it imports {loaded}; {layer} may import {allowed}"
                )
        foreign = sorted({n.partition(".")[0] for n in answer["foreign"] if not package.ours(n)})
        if layer in STDLIB_ONLY and foreign:
            names = ", ".join(foreign)
            problems.append(f"{module}: importing it imports {names}, not the standard library")
    return problems


# --- __all__ ----------------------------------------------------------------------------------


def borrowed(package: Package, module: str) -> set[str]:
    """Names the module binds by importing them from outside the package (typing helpers...)."""
    tree = ast.parse(package.files[module].read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level:
            if not package.ours(node.module or ""):
                names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if not package.ours(alias.name):
                    names.add(alias.asname or alias.name.partition(".")[0])
    return names


def is_public(module: str) -> bool:
    return not any(part.startswith("_") for part in module.split("."))


def entry_points(package: Package, pyproject: Path) -> set[str]:
    """Our modules that pytest loads by entry point: their names are hooks, found by name."""
    table = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    plugins = table.get("project", {}).get("entry-points", {}).get("pytest11", {})
    return {value.partition(":")[0] for value in plugins.values() if package.ours(value)}


def all_problems(
    package: Package, report: Mapping[str, Mapping[str, Any]], hooks: Collection[str]
) -> list[str]:
    """Each public module's ``__all__`` names exactly its public names, and ``dir()`` shows them.

    A public name is one the module binds without an underscore that is not a module, not a
    ``TypeVar``-like helper and not imported from outside the package: its own functions,
    classes and constants, and what it re-exports from our private modules. A public module
    with no public names (a docstring-only package) needs no ``__all__``; pytest's entry point
    needs none either, but every public name of it must be a hook (``pytest_*``).
    """
    problems: list[str] = []
    for module in package.files:
        if not is_public(module) or "error" in report[module]:
            continue  # the import failure is reported by the runtime test
        facts = report[module]
        outside = borrowed(package, module)
        public = sorted(
            name
            for name, kind in facts["kinds"].items()
            if not name.startswith("_") and kind == "value" and name not in outside
        )
        exported = facts["all"]
        if module in hooks:
            problems += [
                f"{module}: {name} is public but not a pytest hook"
                for name in public
                if not name.startswith("pytest_")
            ]
            if not [name for name in public if name.startswith("pytest_")]:
                problems.append(f"{module}: an entry point that defines no pytest hook")
            continue
        if exported is None:
            if public:
                problems.append(f"{module}: no __all__, but public names: {', '.join(public)}")
            continue
        if not isinstance(exported, list) or not all(isinstance(n, str) for n in exported):
            problems.append(f"{module}: __all__ is not a list of strings: {exported!r}")
            continue
        if len(set(exported)) != len(exported):
            problems.append(f"{module}: __all__ names something twice")
        problems += [f"{module}: __all__ names {name}, which it lacks" for name in facts["missing"]]
        problems += [
            f"{module}: {name} is public but not in __all__"
            for name in public
            if name not in exported
        ]
        problems += [
            f"{module}: {name} is in __all__ but not in dir() (define __dir__)"
            for name in exported
            if name not in facts["dir"] and name not in facts["missing"]
        ]
    return problems


# --- the real package -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def package() -> Package:
    return walk(PACKAGE, SOURCE.parent)


@pytest.fixture(scope="module")
def report(package: Package) -> dict[str, dict[str, Any]]:
    return import_alone(package)


def test_the_layers_are_the_subpackages(package: Package) -> None:
    assert sorted(package.subpackages) == sorted(LAYERS), "update LAYERS (and the docs) first"
    for layer in LAYERS:
        assert [m for m in package.files if package.layer(m) == layer][1:], f"{layer} is empty"
    for name in UNIMPORTED:
        assert f"{PACKAGE}.{name}" in package.files, f"{name} is gone: update UNIMPORTED"


def test_every_import_statement_follows_the_layers(package: Package) -> None:
    """Function-level and TYPE_CHECKING imports included: a type is a dependency too."""
    problems = static_problems(package)
    assert not problems, "\n".join(problems)


def test_each_module_imports_alone_and_brings_only_what_its_layer_may(
    package: Package, report: dict[str, dict[str, Any]]
) -> None:
    """E.g. after ``import pytest_rewardhang.guard``: no pytest, no hypothesis, no check."""
    problems = runtime_problems(package, report)
    assert not problems, "\n".join(problems)
    # The rule checked something: the guard alone came without pytest.
    guard = f"{PACKAGE}.guard"
    assert guard in report
    assert "pytest" not in report[guard]["loaded"]
    assert "hypothesis" not in report[guard]["loaded"]


def test_no_module_brings_the_servers_stack(
    package: Package, report: dict[str, dict[str, Any]]
) -> None:
    """``import pytest_rewardhang`` (or ``.serve``, or ``__main__``) loads no web server: the
    ``serve`` extra's uvicorn is imported only when ``pytest-rewardhang serve`` starts one."""
    stack = {"uvicorn", "starlette", "fastapi", "aiohttp", "ray"}
    brought = {
        module: sorted(stack & {name.partition(".")[0] for name in answer.get("loaded", ())})
        for module, answer in report.items()
    }
    assert {module: names for module, names in brought.items() if names} == {}
    assert f"{PACKAGE}.serve._app" in report, "the check looked at no serve module"


def test_no_import_cycles(package: Package) -> None:
    edges = graph(package)
    found = [
        f"{' -> '.join(cycle)}\n  (one of the cycles among {', '.join(sorted(group))})"
        for cycle, group in zip(cycles(edges), tangles(edges), strict=True)
    ]
    assert not found, "import cycles:\n" + "\n".join(found)


def test_public_modules_export_exactly_their_public_names(
    package: Package, report: dict[str, dict[str, Any]]
) -> None:
    hooks = entry_points(package, PYPROJECT)
    assert hooks, "pyproject.toml names no pytest11 entry point of ours"
    assert PACKAGE in [m for m in package.files if is_public(m)]
    problems = all_problems(package, report, hooks)
    assert not problems, "\n".join(problems)


# --- the rules catch what they are for: a synthetic package that breaks each one ---------------

FAKE = "layoutpkg"
#: A package shaped like ours that follows every rule; each case below breaks one.
CLEAN = {
    "__init__.py": '"""Top."""\nfrom .guard import run\n\n__all__ = ["run"]\n',
    "plugin.py": "def pytest_configure(config):\n    pass\n",
    "guard/__init__.py": '"""Guard."""\nfrom ._run import run\n\n__all__ = ["run"]\n',
    "guard/_run.py": (
        "import json\nfrom typing import Any, TypeVar\n\nT = TypeVar('T')\n\n\n"
        "def run() -> Any:\n    return json\n"
    ),
    "guard/_pool.py": "from ._run import run\n\nprint('a module may print as it is imported')\n",
    "corpus/__init__.py": '"""Corpus."""\n',
    "corpus/_cases.py": "from layoutpkg.guard import _run\n",
    "check/__init__.py": '"""Check."""\n',
    "check/_items.py": "from layoutpkg.corpus import _cases\n\nX = 1\n",
    "check/_session.py": "from ._items import X\n",
    "adapters/__init__.py": (
        'from layoutpkg.adapters._shared import close\n\n__all__ = ["close"]\n'
    ),
    "adapters/_shared.py": "from layoutpkg.guard import run\n\n\ndef close():\n    pass\n",
    "adapters/verl.py": '__all__ = ["score"]\n\n\ndef score():\n    pass\n',
    "serve/__init__.py": '"""Serve."""\n',
    "serve/_app.py": "from layoutpkg.guard import run\n",
    "__main__.py": "def main():\n    from layoutpkg.serve import _app\n",
}
NEIGHBOUR = "layoutthird.py"  # a module beside the package: not the standard library, not ours

#: Each case appends text to files of the clean package and names a problem it must cause
#: (an ``fnmatch`` pattern over the problem lines of all the checks together).
BROKEN: dict[str, tuple[dict[str, str], str]] = {
    "guard-imports-check-in-a-function": (
        {"guard/_pool.py": "def later():\n    from layoutpkg.check import _items\n"},
        "layoutpkg.guard._pool:5: guard imports layoutpkg.check._items; guard may import guard",
    ),
    "guard-imports-a-third-party-module": (
        {"guard/_run.py": "import layoutthird\n"},
        "layoutpkg.guard._run:*: guard imports layoutthird, not the standard library",
    ),
    "guard-brings-a-third-party-module": (
        {"guard/_run.py": "import layoutthird\n"},
        "layoutpkg.guard: importing it imports layoutthird, not the standard library",
    ),
    "corpus-names-a-check-type": (
        {
            "corpus/_cases.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
            "    from ..check._items import X\n"
        },
        "layoutpkg.corpus._cases:5: corpus imports layoutpkg.check._items; corpus may import*",
    ),
    "corpus-brings-check": (
        {"corpus/_cases.py": "from layoutpkg.check import _items\n"},
        "layoutpkg.corpus._cases: importing it imports layoutpkg.check._items; corpus may import *",
    ),
    "adapters-import-a-private-guard-module": (
        {"adapters/_shared.py": "from layoutpkg.guard import _run\n"},
        "layoutpkg.adapters._shared:*: adapters imports layoutpkg.guard._run; adapters may "
        "import only the public modules of the others",
    ),
    "adapters-import-corpus": (
        {"adapters/_shared.py": "from layoutpkg.corpus import _cases\n"},
        "layoutpkg.adapters._shared:*: adapters imports layoutpkg.corpus._cases; *",
    ),
    "check-imports-the-top-package": (
        {"check/_items.py": "from layoutpkg import run\n"},
        "layoutpkg.check._items:*: check imports layoutpkg; check may import check, corpus, guard",
    ),
    "check-imports-the-plugin": (
        {"check/_items.py": "from layoutpkg import plugin\n"},
        "layoutpkg.check._items:*: imports layoutpkg.plugin; nothing may",
    ),
    "check-brings-the-plugin": (
        {"check/_items.py": "from layoutpkg import plugin\n"},
        "layoutpkg.check._items: importing it imports layoutpkg.plugin; nothing may",
    ),
    "the-top-package-imports-adapters": (
        {"__init__.py": "def later():\n    import layoutpkg.adapters.verl\n"},
        "layoutpkg:*: imports layoutpkg.adapters.verl; nothing may",
    ),
    "an-import-of-a-renamed-module": (
        {"check/_session.py": "def later():\n    from ._gone import X\n"},
        "layoutpkg.check._session:*: imports layoutpkg.check._gone, which is not a module",
    ),
    "a-cycle-through-a-function-level-import": (
        {"check/_items.py": "def later():\n    from . import _session\n"},
        "cycle: layoutpkg.check._items -> layoutpkg.check._session -> layoutpkg.check._items",
    ),
    "a-cycle-through-a-package": (
        {"guard/_run.py": "from layoutpkg.guard import run as again\n"},
        "cycle: layoutpkg.guard -> layoutpkg.guard._run -> layoutpkg.guard",
    ),
    "a-module-that-does-not-import-alone": (
        {"check/_items.py": "from ._session import Y\n", "check/_session.py": "Y = 2\n"},
        "layoutpkg.check._session: does not import alone: ImportError: cannot import name 'Y'*",
    ),
    "a-name-in-all-that-is-not-there": (
        {"guard/__init__.py": "__all__ += ['missing']\n"},
        "layoutpkg.guard: __all__ names missing, which it lacks",
    ),
    "a-public-constant-not-in-all": (
        {"guard/__init__.py": "LIMIT = 3\n"},
        "layoutpkg.guard: LIMIT is public but not in __all__",
    ),
    "a-re-export-not-in-all": (
        {"__init__.py": "from .adapters._shared import close\n"},
        "layoutpkg: close is public but not in __all__",
    ),
    "a-lazy-name-missing-from-dir": (
        {
            "__init__.py": "__all__ += ['lazy']\n\n\ndef __getattr__(name):\n"
            "    if name == 'lazy':\n        return 1\n    raise AttributeError(name)\n"
        },
        "layoutpkg: lazy is in __all__ but not in dir() (define __dir__)",
    ),
    "a-public-module-without-all": (
        {"adapters/verl.py": "del __all__\n"},
        "layoutpkg.adapters.verl: no __all__, but public names: score",
    ),
    "check-imports-serve": (
        {"check/_items.py": "def later():\n    from layoutpkg.serve import _app\n"},
        "layoutpkg.check._items:*: imports layoutpkg.serve._app; only __main__ may",
    ),
    "the-top-package-brings-serve": (
        {"__init__.py": "from . import serve\n"},
        "layoutpkg: importing it imports layoutpkg.serve; only __main__ may",
    ),
    "a-plugin-with-a-helper": (
        {"plugin.py": "def helper():\n    pass\n"},
        "layoutpkg.plugin: helper is public but not a pytest hook",
    ),
}


def fake(tmp_path: Path, changes: Mapping[str, str]) -> Package:
    """The clean synthetic package in ``tmp_path``, with ``changes`` appended to its files."""
    for relative, text in CLEAN.items():
        path = tmp_path / FAKE / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + changes.get(relative, ""))
    (tmp_path / NEIGHBOUR).write_text("")
    return walk(FAKE, tmp_path)


def every_problem(package: Package) -> list[str]:
    report = import_alone(package)
    found = [f"cycle: {' -> '.join(cycle)}" for cycle in cycles(graph(package))]
    return [
        *static_problems(package),
        *runtime_problems(package, report),
        *found,
        *all_problems(package, report, {f"{FAKE}.plugin"}),
    ]


def test_the_synthetic_package_follows_every_rule(tmp_path: Path) -> None:
    package = fake(tmp_path, {})
    assert package.subpackages == set(LAYERS)
    assert every_problem(package) == []


@pytest.mark.parametrize(("changes", "problem"), BROKEN.values(), ids=BROKEN)
def test_the_rules_catch_what_breaks_them(
    tmp_path: Path, changes: Mapping[str, str], problem: str
) -> None:
    problems = every_problem(fake(tmp_path, changes))
    assert fnmatch.filter(problems, problem), "\n".join(problems)


def test_cycles_are_reported_as_paths() -> None:
    def edges(pairs: str) -> dict[str, list[Edge]]:
        out: dict[str, list[Edge]] = {}
        for pair in pairs.split():
            a, b = pair.split(">")
            out.setdefault(a, []).append(Edge(a, b, 1))
            out.setdefault(b, [])
        return out

    assert cycles(edges("a>b b>c c>d")) == []
    assert cycles(edges("a>b b>c c>a c>d")) == [["a", "b", "c", "a"]]
    # Two groups, each reported once, the shortest way round.
    assert cycles(edges("a>b b>a b>c c>a x>y y>x")) == [["a", "b", "a"], ["x", "y", "x"]]
