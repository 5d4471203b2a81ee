"""One box per guarded process: what each kind holds, as a property of every kind.

The kinds: a ``run()`` child; a pool's zygote, spawned or forked from the caller; a warm worker;
an isolated item; each with the options off and on. Each holds nothing of its caller's (no
socket, file, other pool's pipe or other thread's call: :func:`test_a_guarded_process_holds_
nothing_of_its_callers`); with ``unprivileged=True`` none can act on any other or on the caller
(:func:`test_no_unprivileged_guarded_process_can_act_on_another`); what one makes in SysV IPC
is its own and goes with it (:func:`test_sysv_shared_memory_is_each_calls_own_and_goes_with_it`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_rewardhang.guard import Confinement, Pool, Status, _confine, run
from tests.guard import _box_items
from tests.guard._bounds import LONG
from tests.guard.test_confinement import needs

pytestmark = pytest.mark.timeout(180)

#: Every option that confines a call, on (where the kernel permits; ``confined`` says what did).
ALL_ON: dict[str, Any] = {"memory_mb": 256, "max_processes": 64, "network": False}
if os.geteuid() == 0:
    ALL_ON["unprivileged"] = True


class Holdings:
    """What a trainer holds while it scores: a listener, a connection, a log file, a second
    pool, ``run()`` calls in other threads; and the keys of all its descriptors then."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.done = tmp_path / "done"
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.client = socket.create_connection(self.listener.getsockname())
        self.server, _ = self.listener.accept()
        self.log = open(tmp_path / "trainer.log", "w")  # noqa: SIM115 - held for the test
        self.other = Pool(_box_items.descriptors, workers=1, budget=LONG)
        self.other.map([()])
        self.threads = []
        for n in range(2):
            pidfile = str(tmp_path / f"beside-{n}")
            thread = threading.Thread(
                target=run,
                args=(_box_items.wait_beside, (str(self.done), pidfile)),
                kwargs={"budget": LONG},
            )
            thread.start()
            self.threads.append(thread)
            _await_file(pidfile)
        #: The key of every descriptor the caller holds now, but ``/dev/null``: nothing a
        #: guarded process started later may hold.
        self.foreign = {
            _box_items.key("self", fd, target, dev, ino): target
            for fd, target, dev, ino in _box_items.descriptors()
            if target != os.devnull
        }

    def close(self) -> None:
        self.done.touch()
        for thread in self.threads:
            thread.join(LONG)
        self.other.close()
        for each in (self.server, self.client, self.listener, self.log):
            each.close()

    def caught(
        self, held: list[tuple[int, str, _box_items.Key]], spare_stdio: bool = False
    ) -> list[str]:
        """What of ``held`` is the caller's; ``spare_stdio``: a zygote's 1 and 2 are."""
        return [
            f"fd {fd} -> {target} (the caller's {self.foreign[key]})"
            for fd, target, key in held
            if key in self.foreign and not (spare_stdio and fd in (0, 1, 2))
        ]


def _await_file(path: str) -> None:
    end = time.monotonic() + LONG
    while not os.path.exists(path):
        assert time.monotonic() < end, f"{path} never came"
        time.sleep(0.01)


@pytest.fixture
def holdings(tmp_path: Path) -> Iterator[Holdings]:
    held = Holdings(tmp_path)
    try:
        yield held
    finally:
        held.close()


def _closure(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as no fresh interpreter imports it: its pool's zygote is forked from the caller."""

    def call(*args: Any) -> Any:
        return fn(*args)

    return call


@pytest.mark.parametrize("options", [{}, ALL_ON], ids=["defaults", "all-on"])
@pytest.mark.parametrize(
    "kind",
    [
        "run",
        "zygote",
        "forked-zygote",
        "warm-worker",
        "forked-warm-worker",
        "isolated-item",
        "forked-isolated-item",
    ],
)
def test_a_guarded_process_holds_nothing_of_its_callers(
    holdings: Holdings, kind: str, options: dict[str, Any]
) -> None:
    """Listed in the guarded process (or, for a zygote, from outside while it serves): not one
    descriptor open on anything the caller held, its standard streams included, but a
    zygote's output and error (its caller's, where the scorer's import prints)."""
    if kind == "run":
        out = run(_box_items.held, budget=LONG, **options)
        assert out.status is Status.OK, out.describe()
        assert holdings.caught(out.value) == []
        return
    forked = kind.startswith("forked-")
    fn = _closure(_box_items.held) if forked else _box_items.held
    isolate = kind.endswith("isolated-item")
    with Pool(fn, workers=2, budget=LONG, isolate=isolate, **options) as pool:
        zygote = pool._engine.zygote
        assert zygote is not None
        assert zygote.forked == forked
        outs = pool.map([()] * 4)
        for out in outs:
            assert out.status is Status.OK, out.describe()
            assert holdings.caught(out.value) == []
        if kind.endswith("zygote"):
            assert holdings.caught(_box_items.held(zygote.pid), spare_stdio=True) == []
            # Its workers, from outside too, between items.
            for worker in pool._engine.workers.values():
                assert holdings.caught(_box_items.held(worker.pid)) == []


def test_an_isolated_item_holds_its_own_channel_alone() -> None:
    """An isolated item holds its own result channel, its stack pipe and its output (fds 1 and
    2 and their non-blocking twins), and nothing else of its worker's: not the worker's task
    or result pipe, nor its memory of the fence."""
    with Pool(_box_items.held, workers=1, budget=LONG, isolate=True) as pool:
        out = pool.map([()])[0]
        worker = next(iter(pool._engine.workers.values()))
        theirs = {key: f"{fd} -> {target}" for fd, target, key in _box_items.held(worker.pid)}
        maps = Path(f"/proc/{worker.pid}/maps").read_text()
    assert out.status is Status.OK, out.describe()
    held = {fd: target for fd, target, _ in out.value}
    assert held[0] == os.devnull
    pipes = [fd for fd, target in held.items() if fd > 2]
    assert all(held[fd].startswith("pipe:") for fd in pipes), held
    # Its handed pipe and stack pipe, and the output's two twins: nothing more.
    assert len(pipes) <= 4, held
    shared = {theirs[key] for _, target, key in out.value if key in theirs and target != os.devnull}
    # What it shares with its worker is its output and stack pipes, never its answers' pipe,
    # nor its task pipe.
    assert len(shared) <= 2, (shared, theirs)
    assert "rewardhang-fence" in maps  # the worker's, which the item no longer maps
    assert not any("fence" in target for target in held.values())


def test_an_isolated_item_does_not_map_its_workers_fence() -> None:
    with Pool(_box_items.fence_mapped, workers=1, budget=LONG, isolate=True) as pool:
        isolated = pool.map([()])[0]
    with Pool(_box_items.fence_mapped, workers=1, budget=LONG) as pool:
        warm = pool.map([()])[0]
    assert isolated.status is Status.OK
    assert warm.status is Status.OK
    assert (isolated.value, warm.value) == (False, True)


# --- identities -------------------------------------------------------------------------------


@needs(Confinement.UNPRIVILEGED, "a root caller")
def test_no_unprivileged_guarded_process_can_act_on_another(readable: Path) -> None:
    """Every kind of guarded process, unprivileged, tries every way to act on every other and
    on the caller (signal, memory, ``/proc`` files, limits, ptrace): each is refused. The
    targets: the caller, two pools' zygotes, their warm and isolating workers, a ``run()``
    child and an isolated item waiting beside."""
    done = str(readable / "done")
    warm = Pool(_box_items.item, workers=2, budget=LONG, unprivileged=True)
    isolating = Pool(_box_items.item, workers=2, budget=LONG, unprivileged=True, isolate=True)
    waiting = threading.Thread(
        target=run,
        args=(_box_items.wait_beside, (done,)),
        kwargs={"budget": LONG, "unprivileged": True},
    )
    try:
        waiting.start()
        item = isolating.submit("wait_beside", done)
        workers = [worker.pid for worker in isolating._engine.workers.values()]
        beside: dict[int, int] = {}
        end = time.monotonic() + LONG
        while len(beside) < 2:  # the run() child (ours), the isolated item (a worker's)
            assert time.monotonic() < end, f"the processes waiting beside never came: {beside}"
            time.sleep(0.01)
            beside = _box_items.guarded_children(os.getpid())
            for worker in workers:
                beside.update(_box_items.guarded_children(worker))
        targets = [os.getpid(), *beside]
        for pool in (warm, isolating):
            zygote = pool._engine.zygote
            assert zygote is not None
            targets.append(zygote.pid)
            targets += [worker.pid for worker in pool._engine.workers.values()]
        attackers = {
            "run": run(_box_items.act_on, (targets,), budget=LONG, unprivileged=True),
            "warm": warm.map([("act_on", targets)])[0],
            "isolated": isolating.map([("act_on", targets)])[0],
        }
        Path(done).touch()
        assert item.result(LONG).status is Status.OK
    finally:
        Path(done).touch()
        waiting.join(LONG)
        warm.close()
        isolating.close()
    uids = set()
    for kind, out in attackers.items():
        assert out.status is Status.OK, (kind, out.describe())
        assert Confinement.UNPRIVILEGED in out.confined, kind
        came = dict(out.value)
        uids.add(int(came.pop("uid")))
        done_ = {attempt: result for attempt, result in came.items() if result == "done"}
        assert done_ == {}, kind
        assert len(came) >= (len(targets) - 1) * 7, kind
    assert len(uids) == 3
    assert min(uids) >= _confine.UID_BASE


@needs(Confinement.UNPRIVILEGED, "a root caller")
def test_each_unprivileged_process_has_a_uid_of_its_own() -> None:
    """Concurrent calls, the workers of one pool and the isolated items of one worker: no two
    alike while they run (a uid is handed out again only after its holder is gone)."""
    with Pool(os.getuid, workers=3, budget=LONG, unprivileged=True) as warm:
        workers = {out.value for out in warm.map([()] * 30)}
    with Pool(os.getuid, workers=1, budget=LONG, unprivileged=True, isolate=True) as isolating:
        items = [out.value for out in isolating.map([()] * 5)]
    assert len(workers) == 3
    assert len(set(items)) == 5
    assert all(uid >= _confine.UID_BASE for uid in workers | set(items))


def test_uids_are_handed_out_in_turn_and_given_back() -> None:
    uids = _confine.Uids()
    taken = [uids.take() for _ in range(_confine.UID_BLOCK)]
    assert None not in taken
    assert len(set(taken)) == _confine.UID_BLOCK
    assert uids.take() is None  # a full block: no uid shared
    first = taken[0]
    assert first is not None
    uids.give(first)
    assert uids.take() == first
    # In a forked child, a block of its own.
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, str(uids.take()).encode())
        os._exit(0)
    os.close(write)
    try:
        child = int(os.read(read, 64))
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert child not in taken


# --- IPC --------------------------------------------------------------------------------------


def _listed(shmid: int) -> bool:
    """Whether the caller's IPC namespace lists the segment."""
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return any(int(line.split()[1]) == shmid for line in lines)


@needs(Confinement.PRIVATE_IPC, "an IPC namespace")
@pytest.mark.parametrize("kind", ["run", "isolated-item"])
def test_sysv_shared_memory_is_each_calls_own_and_goes_with_it(kind: str) -> None:
    """A call (an isolated item) makes a 32 MiB segment and leaves it: the next call does not
    find it, the caller's namespace never lists it, and its memory goes with the call."""
    size = 32 << 20
    try:
        if kind == "run":
            made = run(_box_items.shared_memory, (size,), budget=LONG)
            found = run(_box_items.shared_memory, (0,), budget=LONG)
        else:
            with Pool(_box_items.shared_memory, workers=1, budget=LONG, isolate=True) as pool:
                made, found = pool.map([(size,), (0,)])
        assert made.status is Status.OK, made.describe()
        assert Confinement.PRIVATE_IPC in made.confined
        assert found.status is Status.OK
        assert found.value == -1
        assert _box_items.shared_memory(0) == -1
        assert not _listed(made.value)
    finally:
        with contextlib.suppress(OSError):
            _box_items.remove_shared_memory()
