"""The caller's handle on one pool worker: its pipes, the items it holds, its phase.

A worker goes through its phases in one direction only::

    STARTING --forked--> SERVING --take_back--> DRAINING
                            |                      |
                            +-------kill-----------+--> KILLING --acknowledged--> KILLED
    (any phase) --forget--> DEAD

STARTING: asked of the zygote, not forked yet. SERVING: takes work. DRAINING: gets no more
work, as what it held behind its current item was taken back (for an idle worker, at a
deadline) or it retires after its last answer. KILLING: the zygote was asked to kill it, for
``kill_for``; KILLED: the zygote said it did (it has not necessarily reaped it yet). DEAD: its
end was accounted for and its pipes closed. Its end can come in any phase (an item may kill
its own worker); the zygote reports it, and its pidfd says so first (``gone_at``).

Also :class:`Watched`, the descriptors the loop polls and whose each one is.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import os
import select
import struct
import termios
import time
from collections import deque
from typing import Any

from ._interrupts import writev
from ._outcome import UNCONFINED, Confinement
from ._wire import FENCE

_UNREAD = struct.Struct("i")

#: Bytes asked for by one read of a result pipe, read once or more every wake of the loop:
#: below malloc's mmap threshold, so that a read costs no mmap, mremap and munmap (a 1 MiB
#: read did: three system calls a wake, on top of the read).
_RECEIVE = 1 << 16

#: ``Worker.after_fence`` of a worker whose fenced item answered with nothing queued behind.
NEXT = -1
#: ``Worker.kill_for`` of a worker killed for no item of its own: every item it holds goes
#: out again (see never_started).
NOT_STARTED = -2


class Phase(enum.Enum):
    STARTING = "asked of the zygote"
    SERVING = "takes work"
    DRAINING = "gets no more work"
    KILLING = "the zygote was asked to kill it"
    KILLED = "the zygote said it killed it"
    DEAD = "accounted for, its pipes closed"


STARTING, SERVING, DRAINING = Phase.STARTING, Phase.SERVING, Phase.DRAINING
KILLING, KILLED, DEAD = Phase.KILLING, Phase.KILLED, Phase.DEAD


class Watched:
    """The descriptors in the loop's ``poll()``, each with its kind and its worker (if any)."""

    __slots__ = ("by_fd", "poller")

    def __init__(self) -> None:
        self.by_fd: dict[int, tuple[str, Worker | None]] = {}
        self.poller = select.poll()

    def register(self, fd: int, kind: str, worker: Worker | None, events: int) -> None:
        self.by_fd[fd] = (kind, worker)
        self.poller.register(fd, events)

    def unregister(self, fd: int) -> None:
        if self.by_fd.pop(fd, None) is not None:
            self.poller.unregister(fd)


class Worker:
    """The caller's handle on one worker: its phase, and data about it and its items."""

    __slots__ = (
        "after_fence",
        "batches",
        "confined",
        "cpu_base",
        "drained",
        "dumped",
        "fds",
        "fenced",
        "gone_at",
        "inbuf",
        "kill_for",
        "kill_time",
        "last_end",
        "lost",
        "oom_kills",
        "orphaned",
        "phase",
        "pid",
        "pidfd",
        "queued",
        "requested",
        "retries",
        "sent",
        "unsent",
        "wid",
        "written",
    )

    def __init__(self, wid: int, fds: dict[str, int]) -> None:
        self.wid = wid
        #: The caller's ends: task_w, result_r, output_r, stack_r.
        self.fds = fds
        self.phase = STARTING
        self.pid = 0
        self.pidfd = -1
        #: Items handed to this worker and not answered yet, oldest first: [index, sent at,
        #: end]. ``sent at`` stays None until the whole frame holding the item is in the pipe;
        #: ``end`` is where that frame ends in what was ever queued on the pipe.
        self.sent: deque[list[Any]] = deque()
        self.batches: deque[tuple[int, list[list[Any]]]] = deque()
        self.unsent = bytearray()
        self.queued = 0
        self.written = 0
        self.inbuf = bytearray()
        self.last_end = 0.0
        self.cpu_base = 0.0
        #: Items handed out again (see Ledger.retry) in flight here: at most one per worker.
        self.retries: set[int] = set()
        #: The item whose stack it was asked to dump (see DUMP_SIGNAL), until it answers.
        self.dumped: int | None = None
        #: The item it is being killed for, and when the kill was asked: from KILLING on.
        self.kill_for: int | None = None
        self.kill_time = 0.0
        #: When its pidfd said it had ended, the zygote not having said so yet.
        self.gone_at: float | None = None
        #: When the zygote was asked for this worker.
        self.requested = time.monotonic()
        #: Why this worker's current item ended, when not by its own doing or a timeout.
        self.lost: str | None = None
        #: Why its zygote was replaced while it ran an item (see Ledger.suspects).
        self.orphaned: str | None = None
        #: The last item the fence was written for (see FENCE); and the item handed to it next,
        #: once that one answered anyway (NEXT until there is one): if the worker then
        #: retires, that item never started.
        self.fenced: int | None = None
        self.after_fence: int | None = None
        #: While the caller reads the current item's output as it comes (see
        #: _engine._DRAIN_AFTER_S): the bytes it kept so far (up to OUTPUT_LIMIT) and how many
        #: more it dropped.
        self.drained: tuple[bytes, int] | None = None
        #: What confines its items, as its zygote made it (see Confinement).
        self.confined: frozenset[Confinement] = UNCONFINED
        #: How many of its processes the kernel's OOM killer ended, as its zygote reported.
        self.oom_kills = 0

    def current(self) -> tuple[int, float] | None:
        """The item running now and the time it started, if one is."""
        if not self.sent or self.sent[0][1] is None:
            return None
        return self.sent[0][0], max(self.last_end, self.sent[0][1])

    # --- its phase ---------------------------------------------------------------------------

    def forked(self, pid: int, pidfd: int) -> None:
        """The zygote forked it: STARTING -> SERVING."""
        self.pid, self.pidfd, self.phase = pid, pidfd, SERVING

    def killing(self, index: int, now: float) -> None:
        """The zygote is asked to kill it, for ``index``: SERVING or DRAINING -> KILLING."""
        self.kill_for, self.kill_time, self.phase = index, now, KILLING

    def acknowledged(self) -> None:
        """The zygote said it killed it: KILLING -> KILLED."""
        if self.phase is KILLING:
            self.phase = KILLED

    @property
    def killed(self) -> bool:
        """Whether the zygote was asked to kill it (KILLING or KILLED)."""
        return self.phase is KILLING or self.phase is KILLED

    # --- as the scheduling policy sees it (see _schedule.Seen) -------------------------------

    @property
    def serving(self) -> bool:
        return self.phase is SERVING

    @property
    def held(self) -> int:
        return len(self.sent)

    @property
    def retrying(self) -> bool:
        return bool(self.retries)

    @property
    def writing(self) -> bool:
        return bool(self.unsent)

    def owed_since(self) -> float | None:
        """Since when the zygote owes word of this worker: of its kill, or of its end."""
        if self.phase is KILLING:
            return self.kill_time
        if self.phase is KILLED:
            return None
        # An item may stop the zygote and then end its worker: without this, the item waited
        # for its deadline and was reported a timeout.
        return self.gone_at

    def never_started(self, index: int, retired: bool) -> bool:
        """Whether ``index``, the item it held first when it died, never started: it was
        killed for an item that answered at the deadline, or it retired after the fenced item
        answered, the fence keeping the next one from starting. Never when what it sent made
        no sense (``lost``): nothing it says is believed then."""
        return self.lost is None and (
            (retired and index == self.after_fence) or (self.killed and self.kill_for != index)
        )

    # --- the task pipe ------------------------------------------------------------------------

    def send(self, watched: Watched, batch: list[int], header: bytes, blob: bytes) -> None:
        """Hand it the items of ``batch``, framed as ``header`` and ``blob``."""
        if self.after_fence == NEXT:
            self.after_fence = batch[0]
        self.queued += len(header) + len(blob)
        entries = [[i, None, self.queued] for i in batch]
        self.sent.extend(entries)
        self.batches.append((self.queued, entries))
        if self.unsent:
            self.unsent += header
            self.unsent += blob
            return  # the pipe is full; POLLOUT brings us back
        self.write(watched, [header, blob])

    def write(self, watched: Watched, parts: list[bytes] | None = None) -> None:
        """Write ``parts`` (or what is left over from before); keep what does not fit."""
        fd = self.fds["task_w"]
        try:
            written = writev(fd, parts if parts is not None else [self.unsent])
        except BlockingIOError:
            written = 0
        except BrokenPipeError:
            # Nothing reads the pipe: the worker died (reported separately), or an item closed
            # or replaced its end and it goes on without reading. Its items are counted as
            # handed, so that their deadlines come, and their frames as never read (see
            # never_read): none of them is charged, all go out again.
            self.unsent.clear()
            self.batches.clear()
            now = time.monotonic()
            for entry in self.sent:
                if entry[1] is None:
                    entry[1] = now
            watched.unregister(fd)
            return
        if parts is not None:
            self.unsent += b"".join(parts)[written:] if written < sum(map(len, parts)) else b""
        else:
            del self.unsent[:written]
        self.written += written
        now = time.monotonic()
        while self.batches and self.batches[0][0] <= self.written:
            for entry in self.batches.popleft()[1]:
                entry[1] = now
        if self.unsent:
            watched.by_fd[fd] = ("task", self)
            with contextlib.suppress(KeyError):
                watched.poller.unregister(fd)
            watched.poller.register(fd, select.POLLOUT)
        elif fd in watched.by_fd:
            watched.unregister(fd)

    def fence(self, index: int) -> None:
        """Tell it to start nothing after ``index``: see FENCE."""
        os.pwrite(self.fds["fence"], FENCE.pack(index + 1), 0)
        self.fenced = index

    def fence_forged(self) -> bool:
        """Whether the fence holds something the caller did not write there: the worker's
        items wrote it, and a retirement it caused says nothing of the item behind."""
        held: int = FENCE.unpack(os.pread(self.fds["fence"], FENCE.size, 0))[0]
        return held != (0 if self.fenced is None else self.fenced + 1)

    def never_read(self, entry: list[Any]) -> bool:
        """Whether the worker has not taken the whole frame holding ``entry`` off its task
        pipe: that item never started, whatever the worker says (an item may have put another
        file where the worker reads its tasks)."""
        try:
            unread: int = _UNREAD.unpack(
                fcntl.ioctl(self.fds["task_w"], termios.FIONREAD, b"\0" * _UNREAD.size)
            )[0]
        except OSError:
            return False
        end: int = entry[2]
        return self.written - unread < end

    def take_back(self, watched: Watched, keep: int) -> list[int]:
        """Give it no more work; what it holds past its first ``keep`` items, to hand out again.

        SERVING -> DRAINING (a worker being killed stays so)."""
        if self.phase is SERVING:
            self.phase = DRAINING
        kept = [self.sent.popleft() for _ in range(min(keep, len(self.sent)))]
        back = [entry[0] for entry in self.sent]
        self.sent.clear()
        self.sent.extend(kept)
        # Bytes of those items not yet in the pipe need not go: it will never read them.
        self.batches.clear()
        self.unsent.clear()
        watched.unregister(self.fds["task_w"])
        return back

    # --- the result and output pipes ----------------------------------------------------------

    def receive(self) -> None:
        """Read what is on its result pipe into ``inbuf``."""
        fd = self.fds["result_r"]
        while True:
            try:
                chunk = os.read(fd, _RECEIVE)
            except BlockingIOError:
                break
            if not chunk:
                break
            self.inbuf += chunk
            if len(chunk) < _RECEIVE:
                break

    def take_drained(self, watched: Watched) -> tuple[bytes, int] | None:
        """What the caller read of the item that ended as it came, if it did (see drain)."""
        drained = self.drained
        if drained is not None:
            watched.unregister(self.fds["output_r"])
            self.drained = None
        return drained
