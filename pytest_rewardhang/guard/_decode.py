"""The guard's security boundary: every decode of what a guarded process sent the caller.

A guarded process runs the call, which can write anything on the guard's pipes: its result
frame, its output and its stack dump are the call's to forge. Everything the caller makes of
those bytes is made here, and nowhere else: the pickled answer, the output and the dump turned
to text, how the process ended turned to a status. Each read is bounded (the frames and pipes
it reads are, see ``_wire``) and costs the caller time linear in the bytes, running no code
the call chose; what cannot be read so is an ERROR :class:`Answer`, never an exception in the
caller.

Unpickling runs code that the pickle names: ``__reduce__`` can make the caller call
``time.sleep(30)`` or ``sys.exit(7)``, and an ordinary object (a sympy tree of ``3**10**7``)
can cost seconds of the caller's GIL, outside any deadline. So by default the caller unpickles
with :class:`_PlainUnpickler`, which names no global but ``complex`` (and, for exceptions, the
builtin exception classes): plain data (None, bool, int, float, complex, str, bytes,
bytearray, list, tuple, dict, set, frozenset) is built by the C unpickler's own opcodes, at
C speed, running no code the call chose. Anything else is refused unless the caller opted in
with ``objects=True``, which unpickles with :func:`pickle.loads` and so trusts the call.

numpy scalars (``np.float64(0.5)``, a common scorer return) are admitted when numpy is
already imported in the caller, never importing it: ``numpy.core.multiarray.scalar`` and
``numpy.dtype`` are C constructors whose cost is linear in the pickled bytes. Arrays and
every other numpy object need ``objects=True``.
"""

from __future__ import annotations

import builtins
import io
import os
import pickle
import pickletools
import reprlib
import signal
import struct
import sys
from typing import Any

from ._outcome import Answer, NotStarted, Status
from ._wire import DUMP_SIGNAL, HEADER, MAGIC, RESULT_LIMIT

_OK_VALUE = Status.OK.value
_ERROR_VALUE = Status.ERROR.value

# --- unpickling: plain data, in linear time ----------------------------------------------------


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


# --- the answer of a call ----------------------------------------------------------------------

SCRIBBLED = (
    "the guard's result pipe held bytes that are not a result frame: the call wrote on the "
    "guard's own descriptor"
)
OVERSIZED = (
    "the guard's result pipe held a frame of {size} bytes, past the "
    f"{RESULT_LIMIT >> 20} MiB it reads (RESULT_LIMIT): the call wrote on the guard's own "
    "descriptor"
)


def run_answer(buffer: bytearray, *, objects: bool = False) -> tuple[Answer, int]:
    """What run's child answered in its whole result frame (see ``_wire.HEADER``), and how many
    processes it found left running (0 when the frame cannot be read)."""
    magic, size = HEADER.unpack_from(buffer)
    if magic != MAGIC:
        return Answer(Status.ERROR, error=SCRIBBLED), 0
    if size > RESULT_LIMIT:
        return Answer(Status.ERROR, error=OVERSIZED.format(size=size)), 0
    try:
        frame = decode(memoryview(buffer)[HEADER.size : HEADER.size + size], objects=objects)
        status, value, error, exception, leaked = frame
        leaked = int(leaked)
    except Exception as exc:  # noqa: BLE001 - e.g. a class that only exists in the child
        return _undecodable(exc), 0
    return _answer(status, value, error, exception, objects), leaked


def item_answer(payload: bytes | bytearray | memoryview, *, objects: bool = False) -> Answer:
    """What a pool worker answered for one item: its result frame's pickled payload."""
    try:
        status, value, error, exception = decode(payload, objects=objects)
    except Exception as exc:  # noqa: BLE001 - e.g. a class that only exists in the worker
        return _undecodable(exc)
    return _answer(status, value, error, exception, objects)


def _undecodable(exc: Exception) -> Answer:
    if isinstance(exc, Refused | Flooding):
        error = f"{type(exc).__name__}: {exc}"
    else:
        error = f"{type(exc).__name__}: the call's result could not be unpickled: {exc}"
    return Answer(Status.ERROR, error=error)


def _answer(status: Any, value: Any, error: Any, exception: Any, objects: bool) -> Answer:
    """The answer in a frame that the call's process made and the caller unpickled.

    The exception comes back as an object only when rebuilding it runs no code the call chose
    (a builtin exception class holding plain data), or when the caller passed ``objects=True``;
    otherwise ``exception`` is None and ``error`` still holds its text and traceback. An ERROR's
    value is None, or the :class:`NotStarted` reason why the call never ran (as the worker says
    of items it could not unpickle). The frame is the call's to forge: a malformed one is an
    ERROR, never an exception in the caller.
    """
    if (
        not (isinstance(status, str) and status in _STATUSES)
        or not isinstance(error, str | None)
        or not isinstance(exception, bytes | None)
    ):
        # reprlib: bounded in depth and length, where repr could recurse past the stack or
        # quote the 64 MiB the frame may carry.
        shown = reprlib.repr(status)
        text = f"ValueError: the call's process sent a malformed result frame (status {shown})"
        return Answer(Status.ERROR, error=text)
    not_started = None
    if status == _ERROR_VALUE and type(value) is str and value in _NOT_STARTED:
        not_started, value = NotStarted(value), None
    raised: BaseException | None = None
    if exception is not None:
        try:
            raised = decode(exception, objects=objects, exceptions=True)
        except Exception:  # noqa: BLE001 - the text in ``error`` still says what happened
            raised = None
        if not isinstance(raised, BaseException):
            raised = None
    return Answer(_STATUSES[status], value, error, raised, not_started)


#: Each status by its value: a dictionary's lookup, where ``Status(value)`` goes through the
#: enum machinery's Python code at every answer.
_STATUSES = {s.value: s for s in Status}
_NOT_STARTED = frozenset(n.value for n in NotStarted)


# --- what else the process left: its output, its stack dump, how it ended ----------------------


def output_text(output: bytes, dropped: int) -> str:
    """The call's output as an :class:`Outcome` holds it: what was kept, then how much was not."""
    text = output.decode("utf-8", "replace")
    if dropped:
        text += f"\n[... {dropped} more bytes of output discarded]"
    return text


def stack_text(dump: bytes | bytearray) -> str | None:
    """faulthandler's dump as an :class:`Outcome` holds it; None when nothing was written."""
    return dump.decode("utf-8", "replace") or None


def died(wait_status: int, *, killed: bool, dumped: bool) -> tuple[Status, int | None, int | None]:
    """``(status, signal, exit code)`` of a call whose process ended without its result.

    TIMEOUT when the guard killed it at the deadline, or when it died of the stack-dump signal
    the guard sent just before (the call had reset faulthandler's handler), or of SIGSEGV or
    SIGBUS after that signal: faulthandler's dump runs on the interrupted thread's stack, and a
    call deep in C recursion has none left, so the dump itself overflows it. ``dumped`` means
    the call was still running :func:`~._wire.dump_lead` before the deadline and the signal was
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
