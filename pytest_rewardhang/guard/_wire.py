"""What the guard's processes say to each other: every frame and message, both ends in one place.

Used in every one of them: the caller, run's forked child, the pool's zygote and its workers.
Here are the frames written on a pipe or the zygote's socket, the one-byte kinds of the socket's
messages, the stack-dump signal, the size bounds, and how the caller reads what reaches it (a
result frame, or the wait status of a process that ended without one) into an :class:`Outcome`.
"""

from __future__ import annotations

import array
import builtins
import io
import os
import pickle
import pickletools
import signal
import struct
import sys
from typing import Any

from ._contain import containment
from ._outcome import Mechanism, Outcome, Status

_OK_VALUE = Status.OK.value

# --- bounds ----------------------------------------------------------------------------------

#: Bytes of stdout/stderr kept per call; the rest is read and thrown away, never buffered.
OUTPUT_LIMIT = 64 * 1024
#: Bytes of a stack dump kept.
STACK_LIMIT = 1 << 20
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
SCRIBBLED = (
    "the guard's result pipe held bytes that are not a result frame: the call wrote on the "
    "guard's own descriptor"
)


def framed(payload: bytes) -> bytes:  # pragma: no cover - child only
    """Run's result frame around ``payload``, as the child writes it."""
    return HEADER.pack(MAGIC, len(payload)) + payload


def frame_complete(buffer: bytearray) -> bool:
    """Whether the caller holds run's whole result frame (or enough to know it is not one)."""
    if len(buffer) < HEADER.size:
        return False
    magic, size = HEADER.unpack_from(buffer)
    return bool(magic != MAGIC or len(buffer) >= HEADER.size + size)


def frame_outcome(
    buffer: bytearray, leaked: int, common: dict[str, Any], *, objects: bool = False
) -> Outcome:
    """The :class:`Outcome` of run's whole result frame; ``leaked`` adds the caller's count."""
    if HEADER.unpack_from(buffer)[0] != MAGIC:
        return Outcome(Status.ERROR, error=SCRIBBLED, leaked=leaked, **common)
    try:
        frame = decode(memoryview(buffer)[HEADER.size :], objects=objects)
        status, value, error, exception, child_leaked = frame
        child_leaked = int(child_leaked)
    except Exception as exc:  # noqa: BLE001 - e.g. a class that only exists in the child
        return unpickle_failed(exc, leaked, common)
    return outcome_from_frame(
        status, value, error, exception, leaked + child_leaked, common, objects=objects
    )


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


#: Result frame, one per item: MAGIC, payload length, output length, output bytes dropped, index,
#: leaked, wall, cpu of the item, cpu of the worker so far, monotonic end time, peak RSS in KiB,
#: whether the worker retires after this answer (its state could not be put back: the items
#: queued behind will not start), the value when the payload is empty; then the output bytes
#: and the pickled ``(status, value, error, exception)``. What scorers mostly return, one float
#: of an OK call, goes in the frame itself with an empty payload (no pickle is ever empty):
#: neither end pickles, and the caller builds nothing but the float.
RESULT = struct.Struct("!4sIIQQIddddQ?d")
#: The index result_frames gives bytes that are not a result frame: no item has it, so the
#: caller takes them for an answer the worker should not have sent, and replaces the worker.
NO_ITEM = (1 << 64) - 1
_SCRIBBLED_FIELDS = (MAGIC, 0, 0, 0, NO_ITEM, 0, 0.0, 0.0, 0.0, 0.0, 0, False, 0.0)


def result_payload(frame: tuple[Any, ...]) -> bytes | None:  # pragma: no cover - worker only
    """The pickled ``(status, value, error, exception)`` of a call, or None for an OK float,
    which its result frame carries itself."""
    if frame[0] == _OK_VALUE and type(frame[1]) is float:
        return None
    return pickle_frame(frame)


def result_frame(
    frame: tuple[Any, ...], payload: bytes | None, output: bytes, *fields: Any
) -> bytes:  # pragma: no cover - worker only
    """An item's result frame, as the worker writes it: ``fields`` are RESULT's from the fourth
    to the value's; ``frame`` is the call's ``(status, value, error, exception)`` and
    ``payload`` its :func:`result_payload`."""
    if payload is None:
        return RESULT.pack(MAGIC, 0, len(output), *fields, frame[1]) + output
    return RESULT.pack(MAGIC, len(payload), len(output), *fields, 0.0) + output + payload


def result_frames(buffer: bytearray) -> tuple[list[tuple[tuple[Any, ...], int]], int]:
    """The whole result frames at the start of ``buffer``, as the caller reads them.

    Each one's RESULT fields (the magic first) and the offset of its output (its payload
    follows the output); then how many bytes they take. Bytes that are not a frame end the list
    with a frame for :data:`NO_ITEM`, and are all taken.
    """
    frames: list[tuple[tuple[Any, ...], int]] = []
    offset = 0
    size = len(buffer)
    unpack = RESULT.unpack_from
    while size - offset >= _RESULT_SIZE:
        fields = unpack(buffer, offset)
        # More output than a worker ever sends: the call forged the header, and the answers
        # after it would be taken for that output.
        if fields[0] != MAGIC or fields[2] > OUTPUT_LIMIT:
            frames.append((_SCRIBBLED_FIELDS, size))
            return frames, size
        end = offset + _RESULT_SIZE + fields[2] + fields[1]
        if size < end:
            break
        frames.append((fields, offset + _RESULT_SIZE))
        offset = end
    return frames, offset


_RESULT_SIZE = RESULT.size


# --- the pool: the zygote's socket -----------------------------------------------------------

#: The socket's fd in the zygote; the caller's spawn puts it there.
SOCKET_FD = 3
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
#: worker id, pid.
SPAWNED = struct.Struct("!Qi")
#: worker id, wait status (-1 when it could not be reaped), cpu seconds, peak RSS KiB, leaked.
EXITED = struct.Struct("!QiddI")


def config_message(
    path: list[str], target: tuple[Any, ...], memory_mb: float | None, warmup: Warmup
) -> list[bytes]:
    """What the zygote needs to import the scorer and start workers, as the caller sends it:
    one message per item of the list (the length, then the pickled config in pieces)."""
    # The warm-up pickled apart: the zygote unpickles it only once sys.path is the caller's and
    # the scorer is imported, as the classes of its arguments may need either.
    warm = None if warmup is None else pickle.dumps(warmup, protocol=pickle.HIGHEST_PROTOCOL)
    config = {"path": path, "target": target, "memory_mb": memory_mb, "warmup": warm}
    blob = pickle.dumps(config, protocol=pickle.HIGHEST_PROTOCOL)
    pieces = [blob[at : at + CONFIG_PIECE] for at in range(0, len(blob), CONFIG_PIECE)]
    return [CONFIG_SIZE.pack(len(blob)), *pieces]


def read_config(
    receive: Any,
) -> tuple[list[str], tuple[Any, ...], float | None, bytes | None]:  # pragma: no cover - zygote
    """``(sys.path, target, memory_mb, warmup)``, as the zygote reads it with ``receive(limit)``;
    the warm-up still pickled."""
    (size,) = CONFIG_SIZE.unpack(receive(CONFIG_SIZE.size))
    blob = bytearray()
    while len(blob) < size:
        piece = receive(CONFIG_PIECE)
        if not piece:
            raise EOFError("the caller closed the socket in the middle of the config")
        blob += piece
    config = pickle.loads(blob)
    return config["path"], config["target"], config["memory_mb"], config["warmup"]


# --- both ends -------------------------------------------------------------------------------


def pickle_frame(frame: tuple[Any, ...]) -> bytes:
    """Pickle ``(status, value, error, exception, *rest)``; an unpicklable value turns to error."""
    try:
        return pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        if frame[0] == Status.OK.value:
            what = type(frame[1]).__qualname__
            text = f"{type(exc).__name__}: the call returned a {what} that cannot be pickled: {exc}"
            return pickle_frame((Status.ERROR.value, None, text, None, *frame[4:]))
        raise


def write_all(fd: int, data: bytes | memoryview) -> None:  # pragma: no cover - child only
    written = os.write(fd, data)
    if written < len(data):  # a pipe full, or a signal in between: the rest, piece by piece
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


def output_text(output: bytes, dropped: int) -> str:
    text = output.decode("utf-8", "replace")
    if dropped:
        text += f"\n[... {dropped} more bytes of output discarded]"
    return text


# --- the caller's reading into an Outcome ----------------------------------------------------
#
# Unpickling runs code that the pickle names: ``__reduce__`` can make the caller call
# ``time.sleep(30)`` or ``sys.exit(7)``, and an ordinary object (a sympy tree of ``3**10**7``)
# can cost seconds of the caller's GIL, outside any deadline. The bytes come from the call's
# process, which can write anything on its pipe. So by default the caller unpickles with
# :class:`_PlainUnpickler`, which names no global but ``complex`` (and, for exceptions, the
# builtin exception classes): plain data (None, bool, int, float, complex, str, bytes,
# bytearray, list, tuple, dict, set, frozenset) is built by the C unpickler's own opcodes, at
# C speed, running no code the call chose. Anything else is refused unless the caller opted in
# with ``objects=True``, which unpickles with :func:`pickle.loads` and so trusts the call.
#
# numpy scalars (``np.float64(0.5)``, a common scorer return) are admitted when numpy is
# already imported in the caller, never importing it: ``numpy.core.multiarray.scalar`` and
# ``numpy.dtype`` are C constructors whose cost is linear in the pickled bytes. Arrays and
# every other numpy object need ``objects=True``.


def _around_float() -> tuple[bytes, bytes]:
    """The bytes around the float in the pickle of an OK frame holding one, as workers make it."""
    marker = struct.pack(">d", 0.1)
    pickled = pickle.dumps((Status.OK.value, 0.1, None, None), protocol=pickle.HIGHEST_PROTOCOL)
    at = pickled.index(marker)
    return pickled[:at], pickled[at + len(marker) :]


#: What scorers mostly return is one float. Its frame's pickle is fixed but for the float's
#: eight bytes, which one struct read takes: no unpickler is built for it (an unpickler per
#: item was the largest part of the caller's time for a fast scorer). Any other bytes are
#: unpickled, so what the call sent means the same either way.
_FLOAT_HEAD, _FLOAT_TAIL = _around_float()
_FLOAT_SIZE = len(_FLOAT_HEAD) + 8 + len(_FLOAT_TAIL)
_DOUBLE = struct.Struct(">d")


def _ok_float(data: bytes | bytearray | memoryview) -> tuple[Any, ...] | None:
    """The frame ``data`` is the pickle of, if it is an OK frame holding one float."""
    if (
        len(data) == _FLOAT_SIZE
        and data[: len(_FLOAT_HEAD)] == _FLOAT_HEAD
        and data[-len(_FLOAT_TAIL) :] == _FLOAT_TAIL
    ):
        return (_OK_VALUE, _DOUBLE.unpack_from(data, len(_FLOAT_HEAD))[0], None, None)
    return None


class Refused(pickle.UnpicklingError):
    """What a call sent back names a global the caller does not run without ``objects=True``."""

    def __init__(self, module: str, name: str) -> None:
        self.what = f"{module}.{name}"
        super().__init__(
            f"the call's result is not plain data: rebuilding it needs {self.what}, which "
            "would run in the caller; plain data (numbers, strings, bytes, lists, tuples, "
            "dicts, sets) comes back as is; pass objects=True to run(), guarded() or Pool() "
            "to unpickle other objects in the caller (which runs code the call chose)"
        )


_PLAIN_GLOBALS: dict[tuple[str, str], Any] = {("builtins", "complex"): complex}
_NUMPY_SCALAR = {
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy", "dtype"),
}


class _PlainUnpickler(pickle.Unpickler):
    """Plain data only (and builtin exception classes when ``exceptions``): see above."""

    def __init__(self, data: bytes | bytearray | memoryview, *, exceptions: bool) -> None:
        super().__init__(io.BytesIO(data))
        self.exceptions = exceptions

    def find_class(self, module: str, name: str) -> Any:
        found = _PLAIN_GLOBALS.get((module, name))
        if found is not None:
            return found
        if self.exceptions and module == "builtins":
            cls = getattr(builtins, name, None)
            if isinstance(cls, type) and issubclass(cls, BaseException):
                return cls
        if (module, name) in _NUMPY_SCALAR and module in sys.modules:  # never imports numpy
            return getattr(sys.modules[module], name)
        raise Refused(module, name)


#: Plain data can still cost the caller quadratic time: ints (and floats, tuples) that hash
#: alike are cheap to make, and a dict or set of n of them takes n^2 probes to build (64k keys
#: in 900 KB: about 15 s of the caller's GIL). Strings hash with a per-process secret and do
#: not collide on purpose. So a result over ``_SCANNED_OVER`` bytes is read opcode by opcode
#: first (linear), and refused if one dict or set in it has more than ``_KEYS_LIMIT`` keys
#: that are not strings; under that size the worst case is a few tens of ms.
_SCANNED_OVER = 32 * 1024
_KEYS_LIMIT = 4096
_STRING_OPS = frozenset(
    {
        "SHORT_BINUNICODE",
        "BINUNICODE",
        "BINUNICODE8",
        "UNICODE",
        "SHORT_BINBYTES",
        "BINBYTES",
        "BINBYTES8",
        "STRING",
        "BINSTRING",
        "SHORT_BINSTRING",
    }
)


#: What pickle writes for plain data (and for complex, builtin exceptions and numpy scalars,
#: which the plain unpickler also rebuilds), in every protocol. The scan below follows only
#: these: an opcode pickle never writes for them (DUP, POP, OBJ, persistent ids, extension
#: codes, out-of-band buffers) would let the scan's stack drift from the unpickler's, so a
#: large result that uses one is refused instead.
_PLAIN_OPS = frozenset(
    {
        "PROTO", "FRAME", "STOP", "MARK", "NONE", "NEWTRUE", "NEWFALSE",
        "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT",
        "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_LIST", "LIST", "APPEND",
        "APPENDS", "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS", "EMPTY_SET", "ADDITEMS",
        "FROZENSET", "BYTEARRAY8", "PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE", "GET", "BINGET",
        "LONG_BINGET", "GLOBAL", "STACK_GLOBAL", "REDUCE", "NEWOBJ", "NEWOBJ_EX", "BUILD",
        *_STRING_OPS,
    }
)  # fmt: skip
_TUPLE_OPS = frozenset({"EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3"})


class Flooding(pickle.UnpicklingError):
    """A large result the caller does not build in its own time: see above."""

    def __init__(self, why: str) -> None:
        super().__init__(
            f"the call's result {why}, so it is refused; pass objects=True to run(), "
            "guarded() or Pool() to build it anyway (which trusts the call)"
        )


def _check_keys(data: bytes | bytearray | memoryview) -> None:
    """Raise :class:`Flooding` if the pickle builds a dict or set with too many non-string keys.

    Follows the unpickler's stack, one entry per object: True for a string (or a tuple of
    strings: its hash comes from theirs), False for another object, and for a dict or set a
    one-item list counting its non-string keys (the same list wherever the memo brings that
    container back). Marks are kept apart, so that every opcode costs O(1) plus what it pops:
    linear in the pickle.
    """
    stack: list[Any] = []
    marks: list[int] = []  # where each open mark is on the stack
    memo: dict[Any, Any] = {}

    def add(container: Any, members: list[Any]) -> None:
        if type(container) is list:
            container[0] += sum(member is not True for member in members)
            if container[0] > _KEYS_LIMIT:
                raise Flooding(
                    f"has a dict or set of over {_KEYS_LIMIT} keys that are not strings: they "
                    "could hash alike, and building it take the caller quadratic time"
                )

    def popped(count: int) -> list[Any]:
        at = max(len(stack) - count, 0)
        members = stack[at:]
        del stack[at:]
        return members

    def to_mark() -> list[Any]:
        return popped(len(stack) - (marks.pop() if marks else 0))

    for opcode, arg, _ in pickletools.genops(bytes(data)):
        name = opcode.name
        if name not in _PLAIN_OPS:
            raise Flooding(
                f"is over {_SCANNED_OVER // 1024} KiB and uses the pickle opcode {name}, which "
                "plain data does not need: what building it would cost cannot be checked"
            )
        if name == "MARK":
            marks.append(len(stack))
        elif name in ("EMPTY_DICT", "EMPTY_SET"):
            stack.append([0])
        elif name in ("SETITEMS", "ADDITEMS", "DICT", "FROZENSET"):
            members = to_mark()
            hashed = members[0::2] if name in ("SETITEMS", "DICT") else members
            if name in ("DICT", "FROZENSET"):
                stack.append([0])
            add(stack[-1] if stack else None, hashed)
        elif name == "SETITEM":
            add(stack[-3] if len(stack) > 2 else None, popped(2)[:1])
        elif name == "MEMOIZE":
            memo[len(memo)] = stack[-1] if stack else False
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[arg] = stack[-1] if stack else False
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(memo.get(arg, False))
        else:
            before = opcode.stack_before
            if pickletools.markobject in before:  # TUPLE, LIST, APPENDS (its list is below)
                members = to_mark()
                popped(len(before) - 2)
            else:
                members = popped(len(before))
            made = all(m is True for m in members) if name in _TUPLE_OPS else name in _STRING_OPS
            stack.extend([made] * len(opcode.stack_after))


class ObjectsFailed(pickle.UnpicklingError):
    """Unpickling with ``objects=True`` raised a BaseException that is not an Exception."""


def decode(
    data: bytes | bytearray | memoryview, *, objects: bool = False, exceptions: bool = False
) -> Any:
    """Unpickle what a call's process sent, as the caller does: plain data unless ``objects``.

    Raises an Exception (:class:`Refused` for a value that is not plain data) when it cannot;
    never a BaseException that the pickle chose (with ``objects=True`` a pickle can raise
    ``SystemExit`` or ``KeyboardInterrupt`` from its ``__reduce__``: it comes out as
    :class:`ObjectsFailed`).
    """
    frame = _ok_float(data)
    if frame is not None:
        return frame
    if not objects:
        if len(data) > _SCANNED_OVER:
            _check_keys(data)
        return _PlainUnpickler(data, exceptions=exceptions).load()
    try:
        return pickle.loads(data)
    except Exception:
        raise
    except BaseException as exc:  # noqa: BLE001 - SystemExit etc. from a __reduce__
        raise ObjectsFailed(f"unpickling raised {type(exc).__name__}: {exc}") from None


def unpickle_failed(exc: Exception, leaked: int, common: dict[str, Any]) -> Outcome:
    if isinstance(exc, Refused | Flooding):
        error = f"{type(exc).__name__}: {exc}"
    else:
        error = f"{type(exc).__name__}: the call's result could not be unpickled: {exc}"
    return Outcome(Status.ERROR, error=error, leaked=leaked, **common)


def outcome_from_frame(
    status: str,
    value: Any,
    error: str | None,
    exception: bytes | None,
    leaked: int,
    common: dict[str, Any],
    *,
    objects: bool = False,
) -> Outcome:
    """The :class:`Outcome` of a frame that the call's process made and the caller unpickled.

    The exception comes back as an object only when rebuilding it runs no code the call chose
    (a builtin exception class holding plain data), or when the caller passed ``objects=True``;
    otherwise ``exception`` is None and ``error`` still holds its text and traceback. The frame
    is the call's to forge: a malformed one is an ERROR, never an exception in the caller.
    """
    if (
        not (isinstance(status, str) and status in _STATUSES)
        or not isinstance(error, str | None)
        or not isinstance(exception, bytes | None)
    ):
        text = f"ValueError: the call's process sent a malformed result frame (status {status!r})"
        return Outcome(Status.ERROR, error=text, leaked=leaked, **common)
    raised: BaseException | None = None
    if exception is not None:
        try:
            raised = decode(exception, objects=objects, exceptions=True)
        except Exception:  # noqa: BLE001 - the text in ``error`` still says what happened
            raised = None
        if not isinstance(raised, BaseException):
            raised = None
    return Outcome(
        Status(status), value=value, error=error, exception=raised, leaked=leaked, **common
    )


_STATUSES = frozenset(s.value for s in Status)


def died(wait_status: int, *, killed: bool, dumped: bool) -> tuple[Status, int | None, int | None]:
    """``(status, signal, exit code)`` of a call whose process ended without its result.

    TIMEOUT when the guard killed it at the deadline, or when it died of the stack-dump signal
    the guard sent just before (the call had reset faulthandler's handler), or of SIGSEGV or
    SIGBUS after that signal: faulthandler's dump runs on the interrupted thread's stack, and a
    call deep in C recursion has none left, so the dump itself overflows it. ``dumped`` means
    the call was still running :func:`dump_lead` before the deadline and the signal was
    sent, so such a death is at the deadline and caused by the guard: a timeout is never
    reported as a crash. Otherwise CRASHED, with the signal or exit code in ``wait_status``
    (neither when the process could not be reaped: -1).
    """
    signum = exit_code = None
    if wait_status >= 0:
        if os.WIFSIGNALED(wait_status):
            signum = os.WTERMSIG(wait_status)
        elif os.WIFEXITED(wait_status):
            exit_code = os.WEXITSTATUS(wait_status)
    if killed or (dumped and signum in _DUMP_DEATHS):
        return Status.TIMEOUT, None, None
    return Status.CRASHED, signum, exit_code


#: What a process dies of when the stack-dump signal reaches it: see :func:`died`.
_DUMP_DEATHS = frozenset({DUMP_SIGNAL, signal.SIGSEGV, signal.SIGBUS})


def common_fields(
    wall: float, cpu: float, rss_kib: float, output: str, budget: float | None
) -> dict[str, Any]:
    """The fields every forked call's :class:`Outcome` has, whatever its status."""
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "max_rss_mb": rss_kib / 1024,
        "output": output,
        "budget": budget,
        "mechanism": Mechanism.FORK,
        "containment": containment(),
    }
