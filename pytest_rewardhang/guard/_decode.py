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
import re
import reprlib
import signal
import struct
import sys
import time
from typing import Any

from ._outcome import Answer, NotStarted, Status
from ._wire import DUMP_SIGNAL, HEADER, LEAKED_LIMIT, MAGIC, RESULT_LIMIT

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


# --- what plain data may cost: bounds checked before anything is built -----------------------

#: Plain data can still cost the caller far more than its bytes: ints (and floats, tuples) that
#: hash alike are cheap to make, and a dict or set of n of them takes n^2 probes to build (64k
#: keys in 900 KB: about 15 s of the caller's GIL); an empty set is one byte of pickle and 216
#: of memory (a 4 MiB answer grew the caller by 1 GiB); a memo index of 2^32 has the unpickler
#: allocate its memo up to it. So every answer of plain data is read opcode by opcode first,
#: in one pass that does O(1) work an opcode (see :func:`_scan`), and refused past any of
#: these bounds, sized for rewards (a float, or a small dict, is the usual answer); with
#: ``objects=True`` the caller trusts the call, and none applies. Strings hash with a
#: per-process secret and do not collide on purpose.
#:
#: Objects made (every value pushed, every memo entry): bounds the unpickler's work and stack.
OBJECTS_LIMIT = 1 << 18
#: Bytes of memory the objects take beyond the bytes they hold (a string or bytes' own are
#: the answer's, bounded by RESULT_LIMIT), as estimated from their opcodes.
BUILT_LIMIT = 32 << 20
#: CPU seconds the check of one answer may take (the thread's own CPU time: a loaded machine
#: slows it, and refuses nothing more). Then building what passed: linear, and bounded by the
#: two limits above (about 0.2 s of the caller's GIL at worst, on a 2 GHz core). run()
#: returns at most that long after its budget because of what the answer holds; a pool
#: decodes its answers one at a time beside its loop, small ones apart (see _answers.Decoder).
DECODE_TIME_S = 2.0
#: Keys that are not strings in one dict or set.
KEYS_LIMIT = 4096
#: Digits of an int written as text (its conversion is quadratic; Python's own default).
_DIGITS_LIMIT = 4300


class Flooding(pickle.UnpicklingError):
    """An answer of plain data past a bound of what building it may cost: see above."""

    def __init__(self, why: str) -> None:
        super().__init__(
            f"the call's result {why}, so it is refused; pass objects=True to run(), "
            "guarded() or Pool() to build it anyway (which trusts the call)"
        )


# What the scan does at each opcode.
_PUSH, _STRING, _CONTAINER, _NOTHING, _MARK, _PUT, _MEMOIZE, _GET = range(8)
_TUPLE, _LIST, _DICT, _FROZENSET, _APPENDS, _SETITEMS, _ADDITEMS = range(8, 15)
_APPEND, _SETITEM, _POP_PUSH, _TUPLE_N, _STOP = range(15, 20)


def _opcodes() -> dict[int, tuple[int, int, int, int]]:
    """Each opcode plain data is made of, by its byte: what the scan does at it, the length of
    its argument (or how that length is written: see pickletools), what it builds in bytes,
    roughly, and how many entries it pops (for ``_POP_PUSH`` and ``_TUPLE_N``)."""
    # What pickle writes for plain data (and for complex, builtin exceptions and numpy scalars,
    # which the plain unpickler also rebuilds), in every protocol. An opcode pickle never
    # writes for them (DUP, POP, OBJ, persistent ids, extension codes, out-of-band buffers)
    # would let the scan's stack drift from the unpickler's: an answer using one is refused.
    actions = {
        "NONE": (_PUSH, 0), "NEWTRUE": (_PUSH, 0), "NEWFALSE": (_PUSH, 0),
        "EMPTY_TUPLE": (_STRING, 0), "INT": (_PUSH, 32), "BININT": (_PUSH, 32),
        "BININT1": (_PUSH, 0), "BININT2": (_PUSH, 32), "LONG": (_PUSH, 32),
        "LONG1": (_PUSH, 32), "LONG4": (_PUSH, 32), "FLOAT": (_PUSH, 24),
        "BINFLOAT": (_PUSH, 24), "EMPTY_LIST": (_PUSH, 56), "BYTEARRAY8": (_PUSH, 56),
        "GLOBAL": (_PUSH, 0), "EMPTY_DICT": (_CONTAINER, 64), "EMPTY_SET": (_CONTAINER, 216),
        "MARK": (_MARK, 0), "STOP": (_STOP, 0), "PROTO": (_NOTHING, 0), "FRAME": (_NOTHING, 0),
        "PUT": (_PUT, 8), "BINPUT": (_PUT, 8), "LONG_BINPUT": (_PUT, 8),
        "MEMOIZE": (_MEMOIZE, 8), "GET": (_GET, 0), "BINGET": (_GET, 0),
        "LONG_BINGET": (_GET, 0), "TUPLE": (_TUPLE, 40), "LIST": (_LIST, 56),
        "DICT": (_DICT, 64), "FROZENSET": (_FROZENSET, 216), "APPENDS": (_APPENDS, 0),
        "SETITEMS": (_SETITEMS, 0), "ADDITEMS": (_ADDITEMS, 0), "APPEND": (_APPEND, 8),
        "SETITEM": (_SETITEM, 48), "BUILD": (_APPEND, 64), "STACK_GLOBAL": (_POP_PUSH, 0),
        "REDUCE": (_POP_PUSH, 64), "NEWOBJ": (_POP_PUSH, 64), "NEWOBJ_EX": (_POP_PUSH, 64),
        "TUPLE1": (_TUPLE_N, 48), "TUPLE2": (_TUPLE_N, 56), "TUPLE3": (_TUPLE_N, 64),
    }  # fmt: skip
    for name in _STRING_OPS:
        actions[name] = (_STRING, 49)
    pops = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3, "STACK_GLOBAL": 2, "REDUCE": 2}
    pops.update({"NEWOBJ": 2, "NEWOBJ_EX": 3})
    table = {}
    for opcode in pickletools.opcodes:
        if opcode.name in actions:
            action, cost = actions[opcode.name]
            size = 0 if opcode.arg is None else opcode.arg.n
            if opcode.name == "GLOBAL":
                size = -6  # two lines
            byte = ord(opcode.code.encode("latin-1"))
            table[byte] = (action, size, cost, pops.get(opcode.name, 0))
    return table


_STRING_OPS = frozenset(
    {
        "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINBYTES",
        "BINBYTES", "BINBYTES8", "STRING", "BINSTRING", "SHORT_BINSTRING",
    }
)  # fmt: skip
_OPCODES = _opcodes()
_NAMES = {ord(opcode.code.encode("latin-1")): opcode.name for opcode in pickletools.opcodes}
_LENGTH = {-2: struct.Struct("<B"), -3: struct.Struct("<i"), -4: struct.Struct("<I")}
_LENGTH[-5] = struct.Struct("<Q")
_INDEX = {1: struct.Struct("<B"), 4: struct.Struct("<I")}
#: Opcodes between two looks at the clock.
_CLOCK_EVERY = 1 << 14
#: Pickles this short cannot pass a bound but the memo's: 1 KiB makes under a thousand
#: objects, and a dict of 300 colliding keys is built in a millisecond. Only their memo
#: indexes are checked (see _memo_checked), opcode by opcode but without the stack.
_UNSCANNED_UNDER = 1024


def _too_much_memory(built: int, size: int) -> Flooding:
    return Flooding(
        f"takes over {BUILT_LIMIT >> 20} MiB of memory to build (BUILT_LIMIT), "
        f"{built // max(size, 1)} times its size"
    )


def _runs() -> dict[int, tuple[re.Pattern[bytes], int, int]]:
    """For each opcode that pushes one scalar of a fixed size (None, True, False, an int of
    one, two or four bytes, a float): a pattern of a run of it, its length and its cost."""
    runs = {}
    for name, cost in (
        ("NONE", 0), ("NEWTRUE", 0), ("NEWFALSE", 0), ("BININT1", 0), ("BININT2", 32),
        ("BININT", 32), ("BINFLOAT", 24),
    ):  # fmt: skip
        opcode = next(op for op in pickletools.opcodes if op.name == name)
        code = opcode.code.encode("latin-1")
        length = 1 + (0 if opcode.arg is None else opcode.arg.n)
        pattern = re.compile(re.escape(code) + b"." * (length - 1), re.DOTALL)
        runs[code[0]] = (re.compile(b"(?:" + pattern.pattern + b"){2,}", re.DOTALL), length, cost)
    return runs


_RUNS = _runs()


def _too_many_keys() -> Flooding:
    return Flooding(
        f"has a dict or set of over {KEYS_LIMIT} keys that are not strings (KEYS_LIMIT): "
        "they could hash alike, and building it take the caller quadratic time"
    )


def _memo_checked(data: bytes) -> bool:
    """Whether no memo index in ``data`` is past the opcodes before it (False: scan it whole,
    which says what is wrong)."""
    if b"p" not in data and b"q" not in data and b"r" not in data:
        return True  # no byte of PUT, BINPUT or LONG_BINPUT anywhere
    position, size, opcodes = 0, len(data), _OPCODES
    ops = 0
    while position < size:
        entry = opcodes.get(data[position])
        if entry is None:
            return False
        action, length, _, _ = entry
        position += 1
        ops += 1
        if length > 0:
            if action == _PUT and _INDEX[length].unpack_from(data, position)[0] > ops:
                return False
            position += length
        elif length == -1 or length == -6:  # lines: PUT's index among them
            if action == _PUT or length == -6:
                return False
            end = data.find(b"\n", position)
            if end < 0:
                return False
            position = end + 1
        elif length < 0:
            form = _LENGTH[length]
            if position + form.size > size:
                return False
            position += form.size + max(form.unpack_from(data, position)[0], 0)
    return True


def _scan(data: bytes | bytearray | memoryview) -> None:
    """Raise :class:`Flooding` if building ``data`` would pass a bound (see above).

    Follows the unpickler's stack, one entry per object: True for a string (or a tuple of
    strings: its hash comes from theirs), False for another object, and for a dict or set a
    one-item list counting its non-string keys (the same list wherever the memo brings that
    container back). Marks are kept apart, so that every opcode costs O(1) plus what it pops
    (each entry popped once): linear in the pickle, and at most ``OBJECTS_LIMIT`` pushes.
    """
    data = bytes(data) if type(data) is not bytes else data
    size = len(data)
    if size < _UNSCANNED_UNDER and _memo_checked(data):
        return
    deadline = time.thread_time() + DECODE_TIME_S
    stack: list[Any] = []
    push = stack.append
    marks: list[int] = []  # where each open mark is on the stack
    memo: dict[int, Any] = {}
    counter: Any = None
    made = built = ops = 0
    position = 0
    opcodes, find = _OPCODES, data.find
    while position < size:
        run = _RUNS.get(data[position])
        if run is not None:
            # A run of one scalar's opcodes (a list of floats or ints), read in C: each pushes
            # one object, of a fixed size.
            pattern, length, cost = run
            found = pattern.match(data, position)
            if found is not None:
                count = (found.end() - position) // length
                stack.extend([False] * count)
                made += count
                built += cost * count
                ops += count
                position = found.end()
                if made > OBJECTS_LIMIT:
                    raise Flooding(f"makes over {OBJECTS_LIMIT} objects (OBJECTS_LIMIT)")
                if built > BUILT_LIMIT:
                    raise _too_much_memory(built, size)
                continue
        entry = opcodes.get(data[position])
        if entry is None:
            name = _NAMES.get(data[position], repr(data[position : position + 1]))
            raise Flooding(
                f"uses the pickle opcode {name}, which plain data does not need: what "
                "building it would cost cannot be checked"
            )
        action, length, cost, pops = entry
        position += 1
        arg = 0
        if length > 0:
            if action in (_PUT, _GET):
                arg = _INDEX[length].unpack_from(data, position)[0]
            position += length
        elif length < -1:  # a length, then that many bytes
            form = _LENGTH.get(length)
            if form is None:  # GLOBAL: two lines
                end = find(b"\n", find(b"\n", position) + 1)
                if end < 0:
                    break  # the unpickler says what is wrong with it
                position = end + 1
            elif position + form.size <= size:
                position += form.size + max(form.unpack_from(data, position)[0], 0)
            else:
                break
        elif length == -1:  # text up to a newline
            end = find(b"\n", position)
            if end < 0:
                break
            if end - position > _DIGITS_LIMIT and action != _STRING:
                raise Flooding(f"writes a number of over {_DIGITS_LIMIT} digits as text")
            if action in (_PUT, _GET):
                try:
                    arg = int(data[position:end])
                except ValueError:
                    break
            position = end + 1
        built += cost
        if action == _PUSH:
            push(False)
        elif action == _STRING:
            push(True)
        elif action == _MEMOIZE:
            memo[len(memo)] = stack[-1] if stack else False
        elif action == _APPEND:
            if stack:
                stack.pop()
            made -= 1
        elif action == _CONTAINER:
            push([0])
        elif action == _MARK:
            marks.append(len(stack))
        elif action == _GET:
            push(memo.get(arg, False))
        elif action == _NOTHING:
            pass  # counted all the same: every opcode that pops nothing is
        elif action == _PUT:
            # The unpickler's memo is an array as long as the largest index: one past what
            # was ever made would have it allocate up to the index.
            if arg > made:
                raise Flooding(f"names memo entry {arg}, past the {made} objects made so far")
            memo[arg] = stack[-1] if stack else False
        elif action == _STOP:
            break
        elif action == _SETITEM:
            key = stack[-2] if len(stack) > 1 else False
            del stack[-2:]
            if key is not True and stack and type(stack[-1]) is list:
                stack[-1][0] += 1
                if stack[-1][0] > KEYS_LIMIT:
                    raise _too_many_keys()
            made -= 1
        elif action in (_POP_PUSH, _TUPLE_N):
            members = stack[-pops:] if len(stack) >= pops else stack[:]
            del stack[-pops:]
            push(action == _TUPLE_N and all(m is True for m in members))
        else:  # up to the last mark
            at = marks.pop() if marks else 0
            members = stack[at:]
            del stack[at:]
            count = len(members)
            if action == _TUPLE:
                push(all(m is True for m in members))
                built += 8 * count
            elif action == _LIST:
                push(False)
                built += 8 * count
            elif action == _APPENDS:
                built += 8 * count
                made -= 1
            else:
                keys = members[0::2] if action in (_DICT, _SETITEMS) else members
                built += 48 * len(keys)
                if action in (_DICT, _FROZENSET):
                    counter = [0]
                    push(counter)
                else:
                    made -= 1
                    counter = stack[-1] if stack else None
                if type(counter) is list:
                    counter[0] += sum(key is not True for key in keys)
                    if counter[0] > KEYS_LIMIT:
                        raise _too_many_keys()
        made += 1
        ops += 1
        if made > OBJECTS_LIMIT:
            raise Flooding(f"makes over {OBJECTS_LIMIT} objects (OBJECTS_LIMIT)")
        if built > BUILT_LIMIT:
            raise _too_much_memory(built, size)
        if not ops % _CLOCK_EVERY and time.thread_time() > deadline:
            raise Flooding(
                f"took the caller over {DECODE_TIME_S:g} s of CPU to check (DECODE_TIME_S), at "
                f"{position} of its {size} bytes"
            )


class ObjectsFailed(pickle.UnpicklingError):
    """Unpickling with ``objects=True`` raised a BaseException that is not an Exception."""


def decode(
    data: bytes | bytearray | memoryview,
    *,
    objects: bool = False,
    exceptions: bool = False,
) -> Any:
    """Unpickle what a call's process sent, as the caller does: plain data unless ``objects``.

    Plain data is checked against the bounds above first. Raises an Exception
    (:class:`Refused` for a value that is not plain data, :class:`Flooding` past a bound)
    when it cannot;
    never a BaseException that the pickle chose (with ``objects=True`` a pickle can raise
    ``SystemExit`` or ``KeyboardInterrupt`` from its ``__reduce__``: it comes out as
    :class:`ObjectsFailed`).
    """
    frame = _ok_float(data)
    if frame is not None:
        return frame
    if not objects:
        _scan(data)
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
        if type(leaked) is not int or not 0 <= leaked <= LEAKED_LIMIT:
            # Checked before any use, as every number a frame carries (see _wire.implausible).
            raise ValueError(
                f"the call's process sent a malformed result frame (leaked {leaked!r})"
            )
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
