"""What the guard's processes say to each other: every frame and message, both ends in one place.

Used in every one of them: the caller, run's forked child, the pool's zygote and its workers.
Here are the layouts of the frames written on a pipe or the zygote's socket, the one-byte kinds
of the socket's messages, the stack-dump signal, the fence, the size bounds, and the packing and
parsing of the frames' headers. What the caller makes of the bytes a guarded process wrote (the
pickled answer, the output, the stack dump) is ``_decode``'s: the guard's security boundary.
"""

from __future__ import annotations

import array
import os
import pickle
import signal
import struct
import sys
from typing import Any, NamedTuple

from ._outcome import Confinement, Status

_OK_VALUE = Status.OK.value

# --- bounds ----------------------------------------------------------------------------------

#: Bytes of stdout/stderr kept per call; the rest is read and thrown away, never buffered.
OUTPUT_LIMIT = 64 * 1024
#: Bytes of a stack dump kept.
STACK_LIMIT = 1 << 20
#: Bytes of a result the caller holds at most, whatever the guarded process writes: a reward is
#: a few bytes, and a process flooding its result pipe grew the caller by a GiB a second. A
#: result that pickles larger is an ERROR in the child; bytes past it on the pipe are dropped.
RESULT_LIMIT = 64 << 20
#: Bytes asked for by one read of a pipe.
CHUNK = 1 << 20

# --- the stack dump: a signal from the caller, the dump on the stack pipe --------------------

#: faulthandler's watchdog thread cannot be used: a child forked from a process that has one
#: armed (pytest's faulthandler_timeout does) deadlocks re-arming it. A signal handler that
#: faulthandler runs in C dumps the stack just as well while the child is inside a C call.
#: A real-time signal, so scorers that use SIGUSR1/2 for their own ends are not disturbed.
DUMP_SIGNAL = signal.SIGRTMIN + 6 if hasattr(signal, "SIGRTMIN") else signal.SIGUSR2


def dump_lead(budget: float) -> float:
    """How long before the deadline the stack is dumped, so the dump is in hand at the kill.

    A tenth of the budget, from 20 to 200 ms: on a busy machine a process may wait tens of ms
    to be scheduled and write its dump (20 ms lost 3 dumps in 17 under load). A call that ends
    after the dump signal is not disturbed by it; its dump is dropped.
    """
    return min(0.2, max(0.02, budget / 10))


# --- run: the child's one result frame -------------------------------------------------------

#: Every result frame, run's and a pool worker's, starts with this: a call that writes on the
#: guard's result pipe (a loop over every descriptor, say) is told from an answer at once.
MAGIC = b"RwHg"
#: Magic, payload length; then the pickled ``(status, value, error, exception, leaked)``.
HEADER = struct.Struct("!4sQ")


def framed(payload: bytes) -> bytes:  # pragma: no cover - child only
    """Run's result frame around ``payload``, as the child writes it."""
    return HEADER.pack(MAGIC, len(payload)) + payload


def frame_complete(buffer: bytearray) -> bool:
    """Whether the caller holds run's whole result frame (or enough to know it is not one)."""
    if len(buffer) < HEADER.size:
        return False
    magic, size = HEADER.unpack_from(buffer)
    return bool(magic != MAGIC or size > RESULT_LIMIT or len(buffer) >= HEADER.size + size)


# --- the pool: one worker's pipes ------------------------------------------------------------

#: Each worker's pipes, as the worker sees them, and its fence (a memfd it maps).
PIPE_ROLES = ("task_r", "result_w", "output_w", "output_r", "stack_w", "fence")
#: The fence, shared by the caller and one worker: the index + 1 of the item the caller is
#: killing at its deadline (0: none). The caller writes it before it looks for that item's
#: answer; the worker reads it after writing each answer and, finding its item there, exits
#: with RETIRED instead of starting the next one. No item is started twice.
FENCE = struct.Struct("=Q")
#: A worker's exit code when it leaves between items on its own (fenced, or its state could
#: not be put back): the items queued behind its last answer never started.
RETIRED = 86
#: Task frame: payload length and item count, the items' indexes (``!Q`` each), then the
#: pickled list of items (a tuple of positional or a dict of keyword arguments each).
TASK = struct.Struct("!QQ")
_INDEX = struct.Struct("!Q")


def task_header(indexes: list[int], payload_size: int) -> bytes:
    """What goes before a batch's pickled items, as the caller writes it."""
    packed = array.array("Q", indexes)
    if sys.byteorder != "big":
        packed.byteswap()
    return TASK.pack(payload_size, len(indexes)) + packed.tobytes()


def task_frame(
    buffer: bytearray,
) -> tuple[list[int], bytearray, int] | None:  # pragma: no cover - worker only
    """The first whole task frame in ``buffer``: its indexes, pickled items and length; or None."""
    if len(buffer) < TASK.size:
        return None
    size, count = TASK.unpack_from(buffer)
    start = TASK.size + _INDEX.size * count
    end = start + size
    if len(buffer) < end:
        return None
    return list(struct.unpack_from(f"!{count}Q", buffer, TASK.size)), buffer[start:end], end


#: Result frame, one per item: this header (its fields are :class:`ResultFields`), then the
#: output bytes and the pickled ``(status, value, error, exception)``. What scorers mostly
#: return, one float of an OK call, goes in the header itself with an empty payload (no pickle
#: is ever empty): neither end pickles, and the caller builds nothing but the float.
RESULT = struct.Struct("!4sIIQQIddddQ?d")


class ResultFields(NamedTuple):
    """A result frame's header, field by field in :data:`RESULT`'s order, as the caller reads it.

    The worker packs the same fields (see :func:`result_frame`), from ``dropped`` to ``leaving``.
    """

    magic: bytes
    #: Bytes of the pickled ``(status, value, error, exception)`` after the output; 0 for an
    #: OK float, which is ``number``.
    size: int
    #: Bytes of output that follow the header, at most OUTPUT_LIMIT.
    output_size: int
    #: Bytes of output the worker read past OUTPUT_LIMIT and threw away.
    dropped: int
    #: The item's index (``index`` is tuple's own method).
    item_index: int
    leaked: int
    wall: float
    #: CPU seconds of the item, and of the worker since it started.
    cpu: float
    cpu_total: float
    #: The worker's monotonic clock when the item ended (the caller uses its own: see
    #: implausible).
    end: float
    #: The worker's peak resident size so far.
    rss_kib: int
    #: The worker retires after this answer (its state could not be put back): the items
    #: queued behind it never start. The caller kills it all the same.
    leaving: bool
    #: The value of an OK call that returned a float, when ``size`` is 0.
    number: float


#: What a worker's answer may say of its item, whatever it claims: a frame is the call's to
#: forge, so every number in it is checked against what the caller's own clock allows before
#: any of it is used (a wall time of 5e-324 drove the scheduler's mean to where dividing by it
#: raised OverflowError in the caller). Times the caller keeps (deadlines, the next item's
#: start) are its own clock's; ``end`` is never believed.
#: Slack for the worker's clock reads against the caller's, around one item.
CLOCK_SLACK_S = 1.0
#: Processes an item can have left (the kernel's largest pid_max).
LEAKED_LIMIT = 1 << 22
#: Bytes of output a worker can have thrown away per second (far above any pipe's speed).
DROPPED_PER_S = 1 << 36
_CPUS = os.cpu_count() or 1
_RSS_LIMIT_KIB = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 1024 * 2


def implausible(fields: ResultFields, ran_s: float, lived_s: float) -> str | None:
    """What in ``fields`` no worker can have measured, if anything: ``ran_s`` is how long
    since the caller handed the item, ``lived_s`` since it asked for the worker."""
    ran = ran_s + CLOCK_SLACK_S
    if (  # every answer's: one expression, where the loop below costs a microsecond an item
        0 <= fields.wall <= ran
        and 0 <= fields.cpu <= ran * _CPUS
        and 0 <= fields.cpu_total <= (lived_s + CLOCK_SLACK_S) * _CPUS
        and 0 <= fields.rss_kib <= _RSS_LIMIT_KIB
        and 0 <= fields.leaked <= LEAKED_LIMIT
        and 0 <= fields.dropped <= ran * DROPPED_PER_S
    ):
        return None
    checks = (
        ("wall", fields.wall, ran),
        ("cpu", fields.cpu, ran * _CPUS),
        ("cpu_total", fields.cpu_total, (lived_s + CLOCK_SLACK_S) * _CPUS),
        ("rss_kib", fields.rss_kib, _RSS_LIMIT_KIB),
        ("leaked", fields.leaked, LEAKED_LIMIT),
        ("dropped", fields.dropped, ran * DROPPED_PER_S),
    )
    for name, value, limit in checks:
        # ``not`` of the comparison: NaN fails every one.
        if not 0 <= value <= limit:
            return f"{name} {value!r} outside [0, {limit:g}]"
    return None


#: The index result_frames gives bytes that are not a result frame: no item has it, so the
#: caller takes them for an answer the worker should not have sent, and replaces the worker.
NO_ITEM = (1 << 64) - 1
_SCRIBBLED_FIELDS = ResultFields(MAGIC, 0, 0, 0, NO_ITEM, 0, 0.0, 0.0, 0.0, 0.0, 0, False, 0.0)
_fields = tuple.__new__  # ResultFields from RESULT's unpacked tuple, without _make's checks


def result_payload(frame: tuple[Any, ...]) -> bytes | None:  # pragma: no cover - worker only
    """The pickled ``(status, value, error, exception)`` of a call, or None for an OK float,
    which its result frame carries itself."""
    if frame[0] == _OK_VALUE and type(frame[1]) is float:
        return None
    return pickle_frame(frame)


def result_frame(
    frame: tuple[Any, ...], payload: bytes | None, output: bytes, *fields: Any
) -> bytes:  # pragma: no cover - worker only
    """An item's result frame, as the worker writes it: ``fields`` are :class:`ResultFields`'
    from ``dropped`` to ``leaving``; ``frame`` is the call's ``(status, value, error,
    exception)`` and ``payload`` its :func:`result_payload`."""
    if payload is None:
        return RESULT.pack(MAGIC, 0, len(output), *fields, frame[1]) + output
    return RESULT.pack(MAGIC, len(payload), len(output), *fields, 0.0) + output + payload


def result_frames(buffer: bytearray) -> tuple[list[tuple[ResultFields, int]], int]:
    """The whole result frames at the start of ``buffer``, as the caller reads them.

    Each one's header and the offset of its output (its payload follows the output); then how
    many bytes they take. Bytes that are not a frame end the list with a frame for
    :data:`NO_ITEM`, and are all taken.
    """
    frames: list[tuple[ResultFields, int]] = []
    offset = 0
    size = len(buffer)
    unpack = RESULT.unpack_from
    while size - offset >= _RESULT_SIZE:
        fields: ResultFields = _fields(ResultFields, unpack(buffer, offset))
        # More output or result than a worker ever sends: the call forged the header, and the
        # answers after it would be taken for that output, or held until the caller ran out.
        if fields.magic != MAGIC or fields.output_size > OUTPUT_LIMIT or fields.size > RESULT_LIMIT:
            frames.append((_SCRIBBLED_FIELDS, size))
            return frames, size
        end = offset + _RESULT_SIZE + fields.output_size + fields.size
        if size < end:
            break
        frames.append((fields, offset + _RESULT_SIZE))
        offset = end
    return frames, offset


_RESULT_SIZE = RESULT.size


# --- the pool: the zygote's socket -----------------------------------------------------------

#: The socket's fd in the zygote; the caller's spawn puts it there.
SOCKET_FD = 3
#: The name of the temporary folder a pool's caller makes for its zygote starts so.
TMPDIR_PREFIX = "rewardhang-pool-"
#: Where a pool's zygote finds the ``cgroup.procs`` of the group its caller made for it.
GROUP_FD = SOCKET_FD + 1
#: The first message, caller to zygote: its length (CONFIG_SIZE), then the pickled config in
#: messages of at most CONFIG_PIECE bytes (a SOCK_SEQPACKET message must fit the socket's
#: buffer): see :func:`config_message`. No limit but memory.
CONFIG_SIZE = struct.Struct("!Q")
CONFIG_PIECE = 1 << 16
#: The pool's warm-up item, one in the config: a tuple of positional arguments or a dict of
#: keyword arguments for the scorer's one call in the zygote, or None.
Warmup = tuple[Any, ...] | dict[str, Any] | None
#: The zygote's answer to it, at most this long: ready, or the error that stops the pool (one
#: line of text after the kind): the scorer could not be imported, or its warm-up call failed.
MSG_READY = b"R"
MSG_ERROR = b"E"
MSG_WARMUP_FAILED = b"W"
REPLY_LIMIT = 1 << 16
#: Every later message, either way, fits in this many bytes.
MESSAGE_LIMIT = 256
#: Caller to zygote: fork a worker (WID; the worker's fds attached, in PIPE_ROLES order), kill
#: one (WID), quit (nothing; the caller's exit says the same).
MSG_FORK = b"F"
MSG_KILL = b"K"
MSG_QUIT = b"Q"
#: Zygote to caller: a worker was forked (SPAWNED; its pidfd attached), one was killed (WID; at
#: once, before it is reaped: the caller replaces a zygote that does not say so in time), one
#: was reaped (EXITED).
MSG_FORKED = b"P"
MSG_KILLED = b"k"
MSG_REAPED = b"X"
WID = struct.Struct("!Q")
#: worker id, pid, what confines its items (a bit per :class:`Confinement`, in its order).
SPAWNED = struct.Struct("!QiH")
#: worker id, wait status (-1 when it could not be reaped), cpu seconds, peak RSS KiB, leaked,
#: how many of its processes the kernel's OOM killer ended at its memory limit.
EXITED = struct.Struct("!QiddII")
_CONFINEMENTS = tuple(Confinement)


def confinement_bits(confined: frozenset[Confinement]) -> int:
    """``confined`` as SPAWNED carries it."""
    return sum(1 << n for n, confinement in enumerate(_CONFINEMENTS) if confinement in confined)


def confinement_of(bits: int) -> frozenset[Confinement]:
    """What :func:`confinement_bits` made ``bits`` of."""
    return frozenset(c for n, c in enumerate(_CONFINEMENTS) if bits >> n & 1)


def config_message(
    path: list[str],
    target: tuple[Any, ...],
    memory_mb: float | None,
    warmup: Warmup,
    isolate: bool = False,
    confining: Any = None,  # a _fork.Confining; _fork imports this module
) -> list[bytes]:
    """What the zygote needs to import the scorer and start workers, as the caller sends it:
    one message per item of the list (the length, then the pickled config in pieces)."""
    # The warm-up pickled apart: the zygote unpickles it only once sys.path is the caller's and
    # the scorer is imported, as the classes of its arguments may need either.
    warm = None if warmup is None else pickle.dumps(warmup, protocol=pickle.HIGHEST_PROTOCOL)
    config: dict[str, Any] = {
        "path": path,
        "target": target,
        "memory_mb": memory_mb,
        "warmup": warm,
    }
    config["isolate"] = isolate
    config["confining"] = confining
    blob = pickle.dumps(config, protocol=pickle.HIGHEST_PROTOCOL)
    pieces = [blob[at : at + CONFIG_PIECE] for at in range(0, len(blob), CONFIG_PIECE)]
    return [CONFIG_SIZE.pack(len(blob)), *pieces]


def read_config(
    receive: Any,
) -> tuple[list[str], tuple[Any, ...], float | None, bytes | None, bool, Any]:  # pragma: no cover
    """``(sys.path, target, memory_mb, warmup, isolate, confining)``, as the zygote reads it
    with ``receive(limit)``; the warm-up still pickled."""
    (size,) = CONFIG_SIZE.unpack(receive(CONFIG_SIZE.size))
    blob = bytearray()
    while len(blob) < size:
        piece = receive(CONFIG_PIECE)
        if not piece:
            raise EOFError("the caller closed the socket in the middle of the config")
        blob += piece
    config = pickle.loads(blob)
    return (
        config["path"],
        config["target"],
        config["memory_mb"],
        config["warmup"],
        config["isolate"],
        config["confining"],
    )


# --- both ends -------------------------------------------------------------------------------


def pickle_frame(frame: tuple[Any, ...]) -> bytes:
    """Pickle ``(status, value, error, exception, *rest)``; an unpicklable value turns to error."""
    try:
        pickled = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        if frame[0] == Status.OK.value:
            what = type(frame[1]).__qualname__
            text = f"{type(exc).__name__}: the call returned a {what} that cannot be pickled: {exc}"
            return pickle_frame((Status.ERROR.value, None, text, None, *frame[4:]))
        raise
    if len(pickled) > RESULT_LIMIT:
        what = "returned a value" if frame[0] == Status.OK.value else "raised an exception"
        text = (
            f"the call {what} of {len(pickled)} bytes pickled, past the {RESULT_LIMIT >> 20} MiB "
            "the guard brings back (RESULT_LIMIT)"
        )
        return pickle_frame((Status.ERROR.value, None, text, None, *frame[4:]))
    return pickled


def write_all(fd: int, data: bytes | memoryview) -> None:  # pragma: no cover - child only
    try:
        written = os.write(fd, data)
    except BlockingIOError:  # the call made our end non-blocking, and the pipe is full
        written = 0
    if written < len(data):  # a pipe full, or a signal in between: the rest, piece by piece
        os.set_blocking(fd, True)
        view = memoryview(data)[written:]
        while view:
            view = view[os.write(fd, view) :]


def read_bounded(fd: int, limit: int) -> tuple[bytes, int]:
    """What is in the pipe now, up to ``limit`` bytes, and how many more were dropped."""
    kept = bytearray()
    dropped = 0
    while True:
        try:
            chunk = os.read(fd, CHUNK)
        except (BlockingIOError, OSError):
            break
        if not chunk:
            break
        room = max(limit - len(kept), 0)
        kept += chunk[:room]
        dropped += max(len(chunk) - room, 0)
    return bytes(kept), dropped
