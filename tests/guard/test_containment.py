"""Nothing outlives the call: descendants that try to escape, against real processes.

Each attack starts a real ``sleep`` that tries to outlive the guarded call, reports its pid
through a file, and the test checks that pid is dead within a generous bound (a hang must end;
no latency is claimed).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_rewardhang.guard import (
    Containment,
    Outcome,
    Pool,
    Status,
    _cgroup,
    _contain,
    _libc,
    run,
)
from pytest_rewardhang.guard._state import STATE
from tests.conftest import assert_dead, children, dead_or_dying, state
from tests.guard._bounds import GONE_WITHIN_S

pytestmark = pytest.mark.timeout(60)


def _namespaces_available() -> bool:
    try:
        subprocess.run(
            ["unshare", "--pid", "--fork", "true"], check=True, capture_output=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return True


NAMESPACES = _namespaces_available()
#: Probed as the guard probes (this process's folder of groups is made here, once).
CGROUPS = bool(_cgroup.home())


@pytest.fixture(
    autouse=True,
    params=[
        # Where there is neither, what holds is the subreaper's, which the attacks below defeat.
        pytest.param(
            Containment.PID_NAMESPACE,
            marks=pytest.mark.skipif(not NAMESPACES, reason="no PID namespaces here"),
        ),
        pytest.param(
            Containment.CGROUP,
            marks=pytest.mark.skipif(not CGROUPS, reason="no cgroup v2 folder can be made here"),
        ),
    ],
)
def contained(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each attack under each containment the platform offers: PID namespaces turned on (they
    are opt-in), or off for the cgroups of the default; probed afresh, forgotten after."""
    if request.param is Containment.PID_NAMESPACE:
        monkeypatch.setenv(_libc.PID_NAMESPACE_ENV, "1")
    else:
        monkeypatch.delenv(_libc.PID_NAMESPACE_ENV, raising=False)
    saved = STATE.pid_namespaces[:], STATE.containment[:]
    STATE.pid_namespaces.clear()
    STATE.containment.clear()
    yield
    STATE.pid_namespaces[:], STATE.containment[:] = saved


# ruff: noqa: S607 - "sleep" and "unshare" from PATH, as a scorer would start them

ROOT = Path(__file__).resolve().parents[2]

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _gone(pid: int) -> bool:
    """Dead: no process, or a zombie (whoever reaps it, it runs no code)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return stat[stat.rindex(b")") + 2 :].split()[0] in (b"Z", b"X")


def _assert_gone(pids: list[int]) -> None:
    assert pids, "nothing was reported, so nothing was checked"
    deadline = time.monotonic() + GONE_WITHIN_S
    while time.monotonic() < deadline and not all(_gone(pid) for pid in pids):
        time.sleep(0.02)
    alive = [pid for pid in pids if not _gone(pid)]
    for pid in alive:  # leave nothing behind for the next test, then fail
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"still running {GONE_WITHIN_S:g} s after the call ended: {alive}"


def _await_pids(path: Path, count: int, proc: subprocess.Popen[bytes] | None = None) -> list[int]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        words = path.read_text().split() if path.exists() else []
        if len(words) >= count and path.read_text().endswith("\n"):
            return [int(word) for word in words]
        assert proc is None or proc.poll() is None, "the caller ended before the attack began"
        time.sleep(0.01)
    pytest.fail(f"no pids in {path} after 20 s")


def _record(path: str, *pids: int) -> None:
    with open(path, "a") as f:
        f.write(" ".join(map(str, pids)) + "\n")


def _started(proc: subprocess.Popen[bytes]) -> int:
    """The pid of a child just started, as the test sees it (``proc.pid`` is the one of the
    namespace of the process that started it, which may be the call's)."""
    own = os.readlink("/proc/thread-self")  # "<pid>/task/<tid>", as /proc names them
    for child in Path(f"/proc/{own}/children").read_text().split():
        status = Path(f"/proc/{child}/status").read_text()
        (line,) = (line for line in status.splitlines() if line.startswith("NSpid:"))
        if str(proc.pid) in line.split()[1:]:
            return int(child)
    raise AssertionError(f"{proc.pid} is not a child of {own}")


def _no_subreaper_no_death_signal() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) == 0
    assert libc.prctl(_PR_SET_PDEATHSIG, 0, 0, 0, 0) == 0


def _escape(path: str) -> None:
    """The prctl escape: no subreaper and no death signal above us, then a setsid double fork."""
    _no_subreaper_no_death_signal()
    middle = os.fork()
    if middle == 0:  # pragma: no cover - the middle process
        try:
            _record(path, _started(subprocess.Popen(["sleep", "60"], start_new_session=True)))
        finally:
            os._exit(0)
    os.waitpid(middle, 0)


def _exit_with_a_subprocess(path: str) -> None:
    _record(path, _started(subprocess.Popen(["sleep", "60"])))
    os._exit(3)


def test_os_exit_with_a_running_subprocess_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "pids"
    out = run(_exit_with_a_subprocess, (str(path),), budget=10)
    assert out.status is Status.CRASHED
    assert out.exit_code == 3
    assert out.leaked == 1
    _assert_gone(_await_pids(path, 1))


def test_a_crash_with_a_running_subprocess_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "pids"

    def crash(path: str) -> None:
        _record(path, _started(subprocess.Popen(["sleep", "60"], start_new_session=True)))
        os.kill(os.getpid(), signal.SIGSEGV)

    out = run(crash, (str(path),), budget=10)
    assert out.status is Status.CRASHED
    assert out.leaked == 1
    _assert_gone(_await_pids(path, 1))


def test_the_prctl_escape_and_a_double_fork_are_killed_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "pids"

    def escape(path: str) -> str:
        _escape(path)
        return "escaped"

    out = run(escape, (str(path),), budget=10)
    assert out.value == "escaped", out.describe()
    pids = _await_pids(path, 1)
    _assert_gone(pids)
    assert out.leaked == 1


def _escape_leaving_a_zombie_leader(path: str) -> str:
    """The prctl escape, leaving a process whose main thread has exited while another runs on;
    it returns once that process has said who it is, its main thread a zombie."""
    _no_subreaper_no_death_signal()
    recorded, said = os.pipe()
    middle = os.fork()
    if middle == 0:  # pragma: no cover - the middle process, then the escapee
        try:
            if os.fork() == 0:

                def after() -> None:
                    for _ in range(2000):
                        if (state(int(os.readlink("/proc/self"))) or "Z") == "Z":
                            break
                        time.sleep(0.005)
                    _record(path, int(os.readlink("/proc/self")))
                    os.write(said, b"x")
                    time.sleep(60)

                threading.Thread(target=after, daemon=True).start()
                ctypes.CDLL(None).syscall(60, 0)  # SYS_exit: this thread only
            os.read(recorded, 1)
        finally:
            os._exit(0)
    os.close(said)
    os.waitpid(middle, 0)
    os.close(recorded)
    return "escaped"


def test_an_escapee_whose_main_thread_exited_goes_with_the_calls_group(tmp_path: Path) -> None:
    # cgroup.kill signals its exited main thread only, and none of the others acts on it: it
    # outlived the call, and its group could never be removed.
    if _contain.containment() is not Containment.CGROUP:
        pytest.skip("cgroups only: the subreaper's own limits are in the CHANGELOG")
    path = tmp_path / "pids"
    out = run(_escape_leaving_a_zombie_leader, (str(path),), budget=10)
    assert out.value == "escaped", out.describe()
    _assert_no_thread_left(_await_pids(path, 1))


def test_the_prctl_escape_then_a_hang_is_killed_at_the_deadline(tmp_path: Path) -> None:
    path = tmp_path / "pids"

    def escape_and_hang(path: str) -> None:
        _escape(path)
        time.sleep(60)

    out = run(escape_and_hang, (str(path),), budget=1)
    assert out.status is Status.TIMEOUT
    _assert_gone(_await_pids(path, 1))


def test_containment_is_reported(tmp_path: Path) -> None:
    out = run(os.getpid, budget=10)
    assert out.ok
    assert out.containment is _contain.containment()
    assert out.value != 1  # the call is not the namespace's init: ordinary signal semantics
    (tmp_path / "scorer.py").write_text("import os\ndef pid():\n    return os.getpid()\n")
    with Pool(f"{tmp_path / 'scorer.py'}:pid", budget=10, workers=1) as pool:
        (item,) = pool.map([()])
    assert item.ok
    assert item.containment is out.containment
    assert Outcome(Status.OK).containment is Containment.NONE


def test_what_the_platform_offers_is_used(request: pytest.FixtureRequest) -> None:
    assert run(int, budget=10).containment is request.node.callspec.params["contained"]


def test_a_subprocess_sees_a_pid_of_its_own_namespace_and_no_outside_pid(tmp_path: Path) -> None:
    def pids() -> tuple[int, int]:
        out = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid(), os.getppid())"],
            capture_output=True,
            check=True,
        )
        pid, ppid = out.stdout.split()
        return int(pid), int(ppid)

    out = run(pids, budget=20)
    assert out.ok, out.describe()
    if out.containment is Containment.PID_NAMESPACE:
        assert out.value == (3, 2)  # the namespace's init is 1, the call's process 2


def test_a_nested_guard_in_a_contained_call_still_kills_and_counts(tmp_path: Path) -> None:
    path = tmp_path / "pids"

    def inner(path: str) -> str:
        _record(path, _started(subprocess.Popen(["sleep", "60"], start_new_session=True)))
        return "inner"

    def outer(path: str) -> tuple[str, int]:
        got = run(inner, (path,), budget=10)
        return got.value, got.leaked

    out = run(outer, (str(path),), budget=20)
    assert out.value == ("inner", 1), out.describe()
    _assert_gone(_await_pids(path, 1))


_CALLER = """
import sys, time
sys.path[:0] = [{root!r}, {here!r}]
from pytest_rewardhang.guard import Pool, run
import attacks
if sys.argv[2] == "run":
    run(attacks.setsid_and_hang, (sys.argv[1],), budget=60)
else:
    with Pool(attacks.{pool_attack}, budget=60, workers=2) as pool:
        pool.map([(sys.argv[1],)] * 2)
time.sleep(60)
"""

_ATTACKS = """
import os, signal, subprocess, time, ctypes

def _record(path, *pids):
    with open(path, "a") as f:
        f.write(" ".join(map(str, pids)) + "\\n")

def _started(proc):
    own = os.readlink("/proc/thread-self")
    for child in open(f"/proc/{own}/children").read().split():
        for line in open(f"/proc/{child}/status"):
            if line.startswith("NSpid:") and str(proc.pid) in line.split()[1:]:
                return int(child)
    raise AssertionError(proc.pid)

def _sleeper():
    return _started(subprocess.Popen(["sleep", "60"], start_new_session=True))

def _me():
    return int(os.readlink("/proc/self"))

def setsid_and_hang(path):
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    _record(path, _me(), _started(sleeper))
    time.sleep(60)

def escape(path):
    libc = ctypes.CDLL(None)
    libc.prctl(36, 0, 0, 0, 0)
    libc.prctl(1, 0, 0, 0, 0)
    worker = _me()
    middle = os.fork()
    if middle == 0:
        try:
            _record(path, worker, _sleeper())
        finally:
            os._exit(0)
    os.waitpid(middle, 0)

def escape_and_hang(path):
    escape(path)
    time.sleep(60)

def escape_a_relay(path, delta, chains=16):
    # prctl called through a pointer made from an address (libc's memmove's, which ctypes
    # holds, plus the distance to prctl the test measured): no audited event, so the worker
    # does not retire for it. Out of the worker's subtree then, sixteen chains whose every
    # process forks the next and exits: no pid lives long, so a look through the group finds
    # most of them gone.
    prctl = ctypes.CFUNCTYPE(ctypes.c_int, *[ctypes.c_ulong] * 5)(ctypes._memmove_addr + delta)
    prctl(36, 0, 0, 0, 0)
    prctl(1, 0, 0, 0, 0)
    _record(path, _me())
    with open(path + ".group", "w") as f:
        f.write(open("/proc/self/cgroup").read())
    for _ in range(chains):
        if os.fork() == 0:
            try:
                if os.fork() == 0:
                    os.setsid()
                    while True:
                        try:
                            if os.fork():
                                os._exit(0)
                        except OSError:
                            pass
            finally:
                os._exit(0)
    time.sleep(0.2)

def _zombie_leader(path, said=None):
    # The main thread exits (SYS_exit: this thread only); the other says who the process is
    # once its main thread reads as a zombie, so the kill that follows meets it as one.
    import threading

    def after():
        for _ in range(2000):
            if open("/proc/self/stat").read().rpartition(")")[2].split()[0] == "Z":
                break
            time.sleep(0.005)
        _record(path, _me())
        if said is not None:
            os.write(said, b"x")
        time.sleep(60)

    threading.Thread(target=after, daemon=True).start()
    ctypes.CDLL(None).syscall(60, 0)

def _awaited(path):
    for _ in range(2000):  # the item returns once its escapee has said who it is
        if os.path.exists(path) and open(path).read().strip():
            return
        time.sleep(0.005)

def escape_a_zombie_leader(path, delta):
    # Out of the worker's subtree (as escape_a_relay), a process whose main thread has exited
    # while another runs on: its pid reads as a zombie, and cgroup.kill passes over it.
    prctl = ctypes.CFUNCTYPE(ctypes.c_int, *[ctypes.c_ulong] * 5)(ctypes._memmove_addr + delta)
    prctl(36, 0, 0, 0, 0)
    prctl(1, 0, 0, 0, 0)
    middle = os.fork()
    if middle == 0:
        try:
            if os.fork() == 0:
                _zombie_leader(path)
        finally:
            os._exit(0)
    os.waitpid(middle, 0)
    _awaited(path)

def zombie_leader_and_hang(path):
    libc = ctypes.CDLL(None)
    libc.prctl(36, 0, 0, 0, 0)
    libc.prctl(1, 0, 0, 0, 0)
    if os.fork() == 0:
        try:
            if os.fork() == 0:
                _zombie_leader(path)
        finally:
            os._exit(0)
    time.sleep(60)

def kill_the_zygote_and_hang(path):
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    _record(path, _me(), _started(sleeper))
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(60)
"""


def _caller(
    tmp_path: Path, mode: str, pool_attack: str = "escape_and_hang"
) -> subprocess.Popen[bytes]:
    (tmp_path / "attacks.py").write_text(_ATTACKS)
    script = _CALLER.format(root=str(ROOT), here=str(tmp_path), pool_attack=pool_attack)
    return subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "pids"), mode],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_the_caller_sigkilled_mid_run_takes_a_setsid_grandchild_along(tmp_path: Path) -> None:
    caller = _caller(tmp_path, "run")
    try:
        pids = _await_pids(tmp_path / "pids", 2, caller)  # the call's process, the sleeper
    finally:
        caller.kill()
        caller.wait()
    _assert_gone(pids)


def test_the_caller_sigkilled_mid_map_takes_the_pool_along(tmp_path: Path) -> None:
    caller = _caller(tmp_path, "pool")
    try:
        pids = _await_pids(tmp_path / "pids", 4, caller)  # per worker: it, its escaped sleeper
        zygotes = list(children(caller.pid))
    finally:
        caller.kill()
        caller.wait()
    _assert_gone([*zygotes, *pids])


def test_the_caller_sigkilled_takes_an_escapee_whose_main_thread_exited_along(
    tmp_path: Path,
) -> None:
    # The keeper's cgroup.kill passes over it: it is sent SIGKILL by its pid as well.
    if _contain.containment() is not Containment.CGROUP:
        pytest.skip("cgroups only: the keeper is the cgroups' own")
    caller = _caller(tmp_path, "pool", "zombie_leader_and_hang")
    try:
        pids = _await_pids(tmp_path / "pids", 2, caller)  # one escapee per worker
    finally:
        caller.kill()
        caller.wait()
    _assert_no_thread_left(pids)


def test_a_call_that_kills_its_zygote_leaves_nothing(tmp_path: Path) -> None:
    caller = _caller(tmp_path, "pool", "kill_the_zygote_and_hang")
    try:
        # Each worker reports itself and its sleeper; the first to kill the zygote ends it.
        pids = _await_pids(tmp_path / "pids", 2, caller)
        time.sleep(0.2)
        pids = _await_pids(tmp_path / "pids", 2)
    finally:
        caller.kill()
        caller.wait()
    _assert_gone(pids)


_FOLDER = """
import os, sys, time
sys.path[:0] = [{root!r}]
from pytest_rewardhang.guard import _cgroup, run
assert run(int, budget=10).ok
# The keeper is nobody's child here: a caller that counts or reaps its children never sees it.
with open(f"/proc/{{os.getpid()}}/task/{{os.getpid()}}/children") as f:
    print(_cgroup.home(), f.read().split(), flush=True)
if sys.argv[1] == "sigkill":
    time.sleep(60)
"""


@pytest.mark.parametrize("end", ["exit", "sigkill"])
def test_the_folder_of_groups_goes_with_its_process(end: str) -> None:
    if _contain.containment() is not Containment.CGROUP:
        pytest.skip("cgroups only")
    script = _FOLDER.format(root=str(ROOT))
    with subprocess.Popen([sys.executable, "-c", script, end], stdout=subprocess.PIPE) as proc:
        try:
            assert proc.stdout is not None
            home, kids = proc.stdout.readline().decode().split(maxsplit=1)
            assert kids.strip() == "[]"
            assert Path(home).is_dir()
        finally:
            if end == "sigkill":
                proc.kill()
            proc.wait(timeout=30)
    deadline = time.monotonic() + GONE_WITHIN_S
    while Path(home).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not Path(home).exists(), f"{home} outlived its process by {GONE_WITHIN_S:g} s"


def test_a_call_whose_group_cannot_be_made_says_so() -> None:
    if _contain.containment() is not Containment.CGROUP:
        pytest.skip("cgroups only")
    limit = Path(_cgroup.home()) / "cgroup.max.descendants"
    limit.write_text("0")  # the kernel refuses every new group below our folder
    try:
        out = run(os.getpid, budget=10)
    finally:
        limit.write_text("max")
    assert out.ok, out.describe()
    assert out.containment is Containment.SUBREAPER
    assert run(os.getpid, budget=10).containment is Containment.CGROUP


_STORM = """
import os, time

def storm(path):
    for _ in range(40):
        if os.fork() == 0:
            while True:
                pass
    with open(path, "w") as f:
        f.write(str(int(os.readlink("/proc/self"))))
    time.sleep(60)
"""


def test_a_killed_fork_storm_is_reaped_while_the_pool_goes_on(tmp_path: Path) -> None:
    # The zygote reaps a killed worker's orphans as they finish exiting, without holding up
    # the replacement workers: the storm's processes end up neither running nor zombies.
    (tmp_path / "storm.py").write_text(_STORM)
    with Pool(f"{tmp_path / 'storm.py'}:storm", budget=1, workers=2) as pool:
        outs = pool.map([(str(tmp_path / f"w{i}"),) for i in range(3)])
        assert [out.status for out in outs] == [Status.TIMEOUT] * 3
        # How many it had forked by the deadline depends on the machine's load.
        assert all(out.leaked >= 1 for out in outs), [out.leaked for out in outs]
        (zygote,) = children()

        def settled() -> bool:
            # One listing for both questions: orphans reparent to the zygote as they exit, so
            # a second listing may hold ones the first did not.
            left = children(zygote)
            return not any(map(dead_or_dying, left)) and len(left) <= 3

        deadline = time.monotonic() + GONE_WITHIN_S
        while time.monotonic() < deadline and not settled():
            time.sleep(0.02)
        # The workers and a PID namespace's init, and nothing dead or dying.
        left = {pid: state(pid) for pid in children(zygote)}
        assert settled(), f"a dead worker's orphans were not reaped: {left}"


def _living(procs: Path, but: int) -> list[int]:
    """The living members of the group whose ``cgroup.procs`` is ``procs`` (none once it is
    removed), but ``but``."""
    try:
        members = {int(pid) for pid in procs.read_text().split()} - {but}
    except FileNotFoundError:
        return []
    return [pid for pid in members if not dead_or_dying(pid)]


def _prctl_delta() -> int:
    """How far libc's prctl lies from the memmove whose address ctypes holds: an item adds it
    to call prctl through a pointer, which raises no audited event (the documented hole)."""
    prctl = ctypes.cast(ctypes.CDLL(None).prctl, ctypes.c_void_p).value or 0
    return prctl - ctypes._memmove_addr  # type: ignore[attr-defined,no-any-return]


@contextlib.contextmanager
def _escaping(tmp_path: Path, attack: str) -> Iterator[tuple[Pool, Path, int]]:
    """A one-worker pool of ``attack`` (of ``_ATTACKS``), whose items escape their worker
    through prctl called by pointer; the file its items record pids in; the pointer's
    distance. Under cgroups only: elsewhere what escapes dies when the pool closes."""
    if _contain.containment() is not Containment.CGROUP:
        pytest.skip("cgroups only: elsewhere what escapes dies when the pool closes")
    (tmp_path / "attacks.py").write_text(_ATTACKS)
    with Pool(f"{tmp_path / 'attacks.py'}:{attack}", budget=10, workers=1) as pool:
        yield pool, tmp_path / "pids", _prctl_delta()


def test_a_relay_that_escaped_its_worker_is_killed(tmp_path: Path) -> None:
    # Each process of a chain lives as long as one fork, so one look through the worker's group
    # after the item found most chains' pids gone, and left them running beside the items
    # after. The worker looks until it finds nobody alive; a chain that outruns every look
    # retires it, and its group is killed whole.
    with _escaping(tmp_path, "escape_a_relay") as (pool, path, delta):
        (out,) = pool.map([(str(path), delta)])
        assert out.ok, out.describe()
        (worker,) = _await_pids(path, 1)
        (line,) = [line for line in Path(f"{path}.group").read_text().split() if line[:3] == "0::"]
        procs = Path(_cgroup._mount() or "/", line[3:].lstrip("/"), "cgroup.procs")
        deadline = time.monotonic() + GONE_WITHIN_S
        while _living(procs, worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _living(procs, worker), out.describe()
        assert out.leaked >= 1, out.describe()
        (after,) = pool.map([(str(tmp_path / "more"), delta, 0)])
        assert after.ok, after.describe()  # the pool goes on


def test_an_escapee_whose_main_thread_exited_is_killed(tmp_path: Path) -> None:
    # Its main thread a zombie, its other thread running: the worker's look passed over it as
    # not alive, and the cgroup.kill of its group at the worker's end reached no thread of
    # it: it outlived the pool, and its group, for good.
    with _escaping(tmp_path, "escape_a_zombie_leader") as (pool, path, delta):
        (out,) = pool.map([(str(path), delta)])
        assert out.ok, out.describe()
        (escapee,) = _await_pids(path, 1)
        _assert_no_thread_left([escapee])
        assert out.leaked >= 1, out.describe()


def _assert_no_thread_left(pids: list[int]) -> None:
    """Every thread of ``pids`` ends within the bound; what is left is killed, then fails."""
    deadline = time.monotonic() + GONE_WITHIN_S
    while any(map(_running_threads, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [pid for pid in pids if _running_threads(pid)]
    for pid in left:  # leave nothing behind for the next test, then fail
        os.kill(pid, signal.SIGKILL)
    assert not left, f"still running {GONE_WITHIN_S:g} s after: {left}"


def _running_threads(pid: int) -> list[int]:
    """The threads of ``pid`` that are neither zombies nor gone."""
    try:
        tids = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        return []
    return [tid for tid in tids if (state(tid) or "X") not in "ZX"]


def test_a_workers_escapee_is_killed(tmp_path: Path) -> None:
    # The prctl escape from an item that returns: the worker's check after the item finds its
    # descendants, not this one. Under cgroups the worker looks through its group after an
    # item that forked or called C, so the escapee cannot charge the items after it; under a
    # PID namespace it dies when the pool closes.
    (tmp_path / "attacks.py").write_text(_ATTACKS)
    path = tmp_path / "pids"
    with Pool(f"{tmp_path / 'attacks.py'}:escape", budget=10, workers=1) as pool:
        (out,) = pool.map([(str(path),)])
        assert out.ok, out.describe()
        pids = _await_pids(path, 2)  # the worker, the escaped sleeper
        if _contain.containment() is Containment.CGROUP:
            assert out.leaked == 1, out.describe()
            assert_dead(pids[1:])
            (after,) = pool.map([(str(tmp_path / "more"),)])
            assert after.ok, after.describe()  # the same worker goes on
            assert after.leaked == 1, after.describe()
    _assert_gone(pids[1:])
