"""What the guard remembers between calls is one object, ``STATE`` (``guard/_state.py``).

Held as a property of the source: no module keeps state of its own in names (no ``global``,
no at-fork hook but the ``_state`` modules', no module-level value its functions change); and
of a real fork: a forked child drops what names its parent, and no lock a thread of the
parent's held at the fork.
"""

from __future__ import annotations

import ast
import json
import os
import threading
from pathlib import Path

import pytest

import pytest_rewardhang
from pytest_rewardhang.guard import Containment, _cgroup, _confine, _contain, _procfs, run
from pytest_rewardhang.guard._state import STATE

PACKAGE = Path(pytest_rewardhang.__file__).resolve().parent
#: Where each part keeps what it remembers for the life of a process.
STATE_MODULES = frozenset({PACKAGE / "guard" / "_state.py", PACKAGE / "adapters" / "_state.py"})
#: Methods that change a list, dict or set in place.
MUTATORS = frozenset(
    [
        "append",
        "add",
        "update",
        "clear",
        "pop",
        "popitem",
        "remove",
        "discard",
        "extend",
        "insert",
        "setdefault",
        "sort",
        "reverse",
        "difference_update",
        "intersection_update",
        "symmetric_difference_update",
    ]
)
#: Module-level values that are state by what they are.
STATEFUL_CALLS = frozenset(
    ["count", "Lock", "RLock", "Condition", "Event", "Semaphore", "deque", "Random"]
)


def state_kept(source: str) -> list[str]:
    """Where ``source`` (one module) keeps process-wide state of its own, line by line: a
    module-level value its functions change, a counter or lock, ``global``, an at-fork hook.
    What the module's own body builds as it is imported (a table) is a constant."""
    tree = ast.parse(source)
    names: set[str] = set()
    found = []
    for statement in tree.body:
        targets = statement.targets if isinstance(statement, ast.Assign) else []
        if isinstance(statement, ast.AnnAssign):
            targets = [statement.target]
        names.update(t.id for t in targets if isinstance(t, ast.Name))
        value = getattr(statement, "value", None)
        if isinstance(value, ast.Call):
            name = _called(value)
            if name in STATEFUL_CALLS:
                found.append(f"{statement.lineno}: a module-level {name}()")
    functions = [
        node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    for node in ast.walk(tree):
        if isinstance(node, ast.Global | ast.Nonlocal):
            found.append(f"{node.lineno}: global {', '.join(node.names)}")
        elif isinstance(node, ast.Call) and _called(node) == "register_at_fork":
            found.append(f"{node.lineno}: an at-fork hook")
    for node in (part for function in functions for part in ast.walk(function)):
        if isinstance(node, ast.Call):
            called = node.func
            if (
                isinstance(called, ast.Attribute)
                and called.attr in MUTATORS
                and isinstance(called.value, ast.Name)
                and called.value.id in names
            ):
                found.append(f"{node.lineno}: {called.value.id}.{called.attr}()")
            elif (
                _called(node) == "next"
                and node.args
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id in names
            ):
                found.append(f"{node.lineno}: next({node.args[0].id})")
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Store | ast.Del)
            and isinstance(node.value, ast.Name)
            and node.value.id in names
        ):
            found.append(f"{node.lineno}: {node.value.id}[...] set")
    return sorted(set(found))


def _called(call: ast.Call) -> str:
    """The name a call calls: ``f`` of ``f(...)`` and of ``x.f(...)``."""
    called = call.func
    return called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")


def test_no_module_keeps_state_of_its_own() -> None:
    """The guard's and the adapters' process-wide state live in their ``_state`` modules
    (which alone register an at-fork hook); a module that needs more than they hold keeps it
    in an object of its own, never in names it rebinds or fills."""
    kept = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = state_kept(path.read_text())
        if path in STATE_MODULES:
            where = [line for line in where if not line.endswith("an at-fork hook")]
        if where:
            kept[str(path.relative_to(PACKAGE))] = where
    assert kept == {}, "process-wide state kept outside an object"


@pytest.mark.parametrize(
    "source",
    [
        "_seen = set()\ndef f(x):\n    _seen.add(x)\n",
        "_box = []\ndef f(x):\n    _box[:] = [x]\n",
        "import os\nos.register_at_fork(after_in_child=print)\n",
        "_n = 0\ndef f():\n    global _n\n    _n += 1\n",
        "import itertools\n_ids = itertools.count()\ndef f():\n    return next(_ids)\n",
        "_table = {}\ndef f(k, v):\n    _table[k] = v\n",
        "import itertools\n_names = itertools.count()\n",
        "import threading\n_lock: threading.Lock = threading.Lock()\n",
    ],
    ids=[
        "a-set-added-to",
        "a-box-filled",
        "an-at-fork-hook",
        "a-global",
        "a-counter-counted",
        "a-table-filled",
        "a-counter",
        "a-lock",
    ],
)
def test_the_scan_finds_each_way_of_keeping_state(source: str) -> None:
    assert state_kept(source)


def test_the_scan_passes_constants_and_locals() -> None:
    source = "TABLE = {'a': 1}\ndef f(x):\n    seen = set()\n    seen.add(x)\n    return TABLE[x]\n"
    assert state_kept(source) == []


@pytest.mark.timeout(120)
def test_a_forked_child_drops_what_names_its_parent_and_keeps_the_machine() -> None:
    assert run(os.getpid, budget=30).ok  # this process's folder of groups, its keeper, ...
    _procfs.where()
    _confine.uids().take()
    contained = _contain.containment()
    home = _cgroup.home()
    # The parent's to end: harmless to a later sweep (no such child, no such folder).
    STATE.unreaped.add(1 << 30)
    STATE.cgroups_pending.append("/nonexistent/rewardhang-test")
    read, write = os.pipe()
    held, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:
        with STATE.cgroup_lock:
            held.set()
            release.wait(60)

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    assert held.wait(60)
    try:
        pid = os.fork()
    finally:
        release.set()
        holder.join(60)
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            seen = {
                "ids": list(STATE.ids),
                "home": STATE.cgroup_home,
                "keeper": STATE.keeper,
                "joined": len(STATE.joined),
                "held": len(STATE.held_masks),
                "to_end": [list(STATE.unreaped), STATE.cgroups_pending, STATE.v1_pending],
                "uids": STATE.uids is None,
                "lock": STATE.cgroup_lock.acquire(timeout=5),
                "containment": STATE.containment[0].value,
                "where": list(_procfs.where()),
            }
            os.write(write, json.dumps(seen).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    try:
        with os.fdopen(read, "rb") as pipe:
            seen = json.loads(pipe.read())
    finally:
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert seen["ids"] == [0, 0, 0]
    assert seen["home"] == []
    assert seen["keeper"] == []
    assert seen["joined"] == 0
    assert seen["held"] == 0
    assert seen["to_end"] == [[], [], []]
    assert seen["uids"], "the child hands out a block of uids of its own"
    assert seen["lock"], "a lock its parent's thread held at the fork"
    assert seen["containment"] == contained.value  # the machine's answer kept
    assert seen["where"][0] == pid  # its own pid, found again
    # The parent's are as they were.
    assert _cgroup.home() == home
    if contained is Containment.CGROUP:
        assert STATE.keeper
