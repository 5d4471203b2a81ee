"""What the guard's processes say to each other: every frame and message, both ends in one place.

Used in every one of them: the caller, run's forked child, the pool's zygote and its workers.
Here are the frames written on a pipe or the zygote's socket, the one-byte kinds of the socket's
messages, the stack-dump signal, the size bounds, and how the caller reads what reaches it (a
result frame, or the wait status of a process that ended without one) into an :class:`Outcome`.
"""

from __future__ import annotations

import array
import os
import pickle
import signal
import struct
import sys
from typing import Any

from ._outcome import Mechanism, Outcome, Status

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
#: How long before the deadline the stack is dumped, so the dump is in hand at the kill.
DUMP_LEAD_S = 0.02

# --- run: the child's one result frame -------------------------------------------------------

#: Payload length; then the pickled ``(status, value, error, exception, leaked)``.
HEADER = struct.Struct("!Q")


def framed(payload: bytes) -> bytes:  # pragma: no cover - child only
    """Run's result frame around ``payload``, as the child writes it."""
    return HEADER.pack(len(payload)) + payload


def frame_complete(buffer: bytearray) -> bool:
    """Whether the caller holds run's whole result frame."""
    size = len(buffer)
    return size >= HEADER.size and size >= HEADER.size + HEADER.unpack_from(buffer)[0]


def frame_outcome(buffer: bytearray, leaked: int, common: dict[str, Any]) -> Outcome:
    """The :class:`Outcome` of run's whole result frame; ``leaked`` adds the caller's count."""
    try:
        status, value, error, exception, child_leaked = pickle.loads(buffer[HEADER.size :])
    except Exception as exc:  # noqa: BLE001 - e.g. a class that only exists in the child
        return unpickle_failed(exc, leaked, common)
    return outcome_from_frame(status, value, error, exception, leaked + child_leaked, common)


# --- the pool: one worker's pipes ------------------------------------------------------------

#: Each worker's pipes, as the worker sees them.
PIPE_ROLES = ("task_r", "result_w", "output_w", "output_r", "stack_w")
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


#: Result frame, one per item: payload length, output length, output bytes dropped, index,
#: leaked, wall, cpu of the item, cpu of the worker so far, monotonic end time, peak RSS in KiB;
#: then the output bytes and the pickled ``(status, value, error, exception)``.
RESULT = struct.Struct("!IIQQIddddQ")


def result_frame(
    payload: bytes, output: bytes, *fields: Any
) -> bytes:  # pragma: no cover - worker only
    """An item's result frame, as the worker writes it: ``fields`` are RESULT's from the third."""
    return RESULT.pack(len(payload), len(output), *fields) + output + payload


def result_frames(buffer: bytearray) -> tuple[list[tuple[tuple[Any, ...], int]], int]:
    """The whole result frames at the start of ``buffer``, as the caller reads them.

    Each one's RESULT fields and the offset of its output (its payload follows the output);
    then how many bytes they take.
    """
    frames = []
    offset = 0
    while len(buffer) - offset >= RESULT.size:
        fields = RESULT.unpack_from(buffer, offset)
        end = offset + RESULT.size + fields[1] + fields[0]
        if len(buffer) < end:
            break
        frames.append((fields, offset + RESULT.size))
        offset = end
    return frames, offset


# --- the pool: the zygote's socket -----------------------------------------------------------

#: The socket's fd in the zygote; the caller's spawn puts it there.
SOCKET_FD = 3
#: The first message, caller to zygote, at most this long: see :func:`config_message`.
CONFIG_LIMIT = 1 << 20
#: The zygote's answer to it, at most this long: ready, or the error that stops the pool (one
#: line of text after the kind).
MSG_READY = b"R"
MSG_ERROR = b"E"
REPLY_LIMIT = 1 << 16
#: Every later message, either way, fits in this many bytes.
MESSAGE_LIMIT = 256
#: Caller to zygote: fork a worker (WID; the worker's fds attached, in PIPE_ROLES order), kill
#: one (WID), quit (nothing; the caller's exit says the same).
MSG_FORK = b"F"
MSG_KILL = b"K"
MSG_QUIT = b"Q"
#: Zygote to caller: a worker was forked (SPAWNED; its pidfd attached), one was reaped (EXITED).
MSG_FORKED = b"P"
MSG_REAPED = b"X"
WID = struct.Struct("!Q")
#: worker id, pid.
SPAWNED = struct.Struct("!Qi")
#: worker id, wait status (-1 when it could not be reaped), cpu seconds, peak RSS KiB, leaked.
EXITED = struct.Struct("!QiddI")


def config_message(path: list[str], target: tuple[Any, ...], memory_mb: float | None) -> bytes:
    """What the zygote needs to import the scorer and start workers, as the caller sends it."""
    config = {"path": path, "target": target, "memory_mb": memory_mb}
    return pickle.dumps(config, protocol=pickle.HIGHEST_PROTOCOL)


def read_config(
    message: bytes,
) -> tuple[list[str], tuple[Any, ...], float | None]:  # pragma: no cover - zygote only
    """``(sys.path, target, memory_mb)`` from the config message, as the zygote reads it."""
    config = pickle.loads(message)
    return config["path"], config["target"], config["memory_mb"]


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
    view = memoryview(data)
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


def unpickle_failed(exc: Exception, leaked: int, common: dict[str, Any]) -> Outcome:
    error = f"{type(exc).__name__}: the call's result could not be unpickled: {exc}"
    return Outcome(Status.ERROR, error=error, leaked=leaked, **common)


def outcome_from_frame(
    status: str,
    value: Any,
    error: str | None,
    exception: bytes | None,
    leaked: int,
    common: dict[str, Any],
) -> Outcome:
    """The :class:`Outcome` of a frame that the call's process made and the caller unpickled."""
    raised: BaseException | None = None
    if exception is not None:
        try:
            raised = pickle.loads(exception)
        except Exception:  # noqa: BLE001 - the text in ``error`` still says what happened
            raised = None
    return Outcome(
        Status(status), value=value, error=error, exception=raised, leaked=leaked, **common
    )


def died(wait_status: int, *, killed: bool, dumped: bool) -> tuple[Status, int | None, int | None]:
    """``(status, signal, exit code)`` of a call whose process ended without its result.

    TIMEOUT when the guard killed it at the deadline, or when it died of the stack-dump signal
    the guard sent just before (the call had reset faulthandler's handler): a timeout is never
    reported as a crash. Otherwise CRASHED, with the signal or exit code in ``wait_status``
    (neither when the process could not be reaped: -1).
    """
    signum = exit_code = None
    if wait_status >= 0:
        if os.WIFSIGNALED(wait_status):
            signum = os.WTERMSIG(wait_status)
        elif os.WIFEXITED(wait_status):
            exit_code = os.WEXITSTATUS(wait_status)
    if killed or (dumped and signum == DUMP_SIGNAL):
        return Status.TIMEOUT, None, None
    return Status.CRASHED, signum, exit_code


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
    }
