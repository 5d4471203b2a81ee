"""What one scorer call ran: the code it reached and a cost that does not move with the load.

Runs in the guarded worker, next to the scorer (``_calls.ScorerCall`` wraps the call in
:func:`measured` when the steered search asks for it), and answers plain data: the signal it
had, the cost, the CPU seconds, and the locations of the scorer's own code this worker reached
for the first time (the search keeps the union; a worker replaced after a timeout reports its
locations again, which the union absorbs).

The cost is the instructions the thread retired, from ``perf_event_open`` through ``ctypes``
where the kernel exposes a hardware counter (it counts the work inside C calls, a regex
engine's too); elsewhere the line events of the scorer's own code, counted up to
:data:`MAX_LINES` and carried on past that by the CPU time (counting every line of a hang would
slow it several times over). Line events come from ``sys.monitoring`` on 3.12 and later (a
location outside the scorer's files is disabled at its first event, so the standard library
and site-packages run at full speed), from ``sys.settrace`` and ``threading.settrace`` on 3.11
(frames outside the scorer's files get no local trace function).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import inspect
import os
import platform
import struct
import sys
import sysconfig
import threading
import time
import zlib
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any, TypeVar

T = TypeVar("T")

INSTRUCTIONS = "instructions"
LINES = "line events + CPU"
#: Line events counted per call (a tenth of a second of counting); past it the cost grows
#: with the CPU time.
MAX_LINES = 200_000
#: Locations a worker remembers, and reports per call: the answer stays small.
MAX_KNOWN = 1 << 16
MAX_NEW = 4096
#: ``perf_event_open``'s number per machine; the counter's ``ioctl`` requests.
_PERF_SYSCALL = {"x86_64": 298, "aarch64": 241}
_PERF_ENABLE, _PERF_DISABLE, _PERF_RESET = 0x2400, 0x2401, 0x2403
_PERF_FLAG_FD_CLOEXEC = 8
#: A free ``sys.monitoring`` tool id (0, 1, 2 and 5 are the debugger's, coverage's, the
#: profiler's and the optimizer's).
_TOOL_IDS = (3, 4)


class _Measuring:
    """What a worker remembers between the calls it measures, in one object (:data:`_SEEN`)."""

    def __init__(self) -> None:
        #: The features this worker reported, and the key each location is reported by.
        self.known: set[int] = set()
        self.places: dict[tuple[CodeType, int], int] = {}
        #: Whether each code object is the scorer's (see :func:`own`).
        self.own: dict[CodeType, bool] = {}
        #: The instruction counter, once tried (None: there is none).
        self.counter: int | None = None
        self.counter_tried = False
        #: The ``sys.monitoring`` tool id taken, once taken.
        self.tool: int | None = None
        #: The standard library's, site-packages' and this package's folders.
        self.not_own_dirs: tuple[str, ...] = ()
        #: The folder of the scorer's own package (or file): its code is the scorer's wherever
        #: it lies, in site-packages too (verl's, TRL's scorers), where nothing else is.
        self.scorer_dirs: tuple[str, ...] = ()
        self.scorer_file = ""


_SEEN = _Measuring()


def measured(call: Callable[[], T], scorer: object = None) -> tuple[T, dict[str, Any]]:
    """``call()``'s value, and what it ran: ``{"signal", "cost", "cpu_s", "new"}``; ``scorer``
    is the function it calls, whose package's code counts as its own."""
    _note_scorer(scorer)
    counter = _instructions()
    tally = _Tally()
    started = time.process_time()
    if counter is not None:
        _ioctl(counter, _PERF_RESET)
        _ioctl(counter, _PERF_ENABLE)
    stop = _start_lines(tally)
    try:
        value = call()
    finally:
        stop()
        if counter is not None:
            _ioctl(counter, _PERF_DISABLE)
    cpu = time.process_time() - started
    if counter is not None:
        signal, cost = INSTRUCTIONS, float(_read(counter))
    else:
        signal, cost = LINES, float(tally.lines)
        if tally.capped_at is not None and tally.capped_at > 0:
            # Past the cap the lines are not counted: the CPU time says how many more ran.
            cost = MAX_LINES * max(cpu / tally.capped_at, 1.0)
    return value, {"signal": signal, "cost": cost, "cpu_s": cpu, "new": tally.new()}


class _Tally:
    def __init__(self) -> None:
        self.lines = 0
        #: Line events per location of the scorer's code, in this call.
        self.counts: dict[tuple[CodeType, int], int] = {}
        #: The CPU seconds into the call at which counting stopped (None: it did not).
        self.capped_at: float | None = None
        self.cpu_started = time.process_time()

    def new(self) -> list[int]:
        """The features this worker had not seen: a location with its count's power of two
        (AFL's hit-count buckets, which PerfFuzz's per-location maxima refine), so an input
        that runs a loop twice as often as any before it reaches something new."""
        found = []
        for (code, line), count in self.counts.items():
            place = _SEEN.places.get((code, line))
            if place is None:
                # The same in every process: a file, a function, a line; no address.
                where = f"{code.co_filename}:{code.co_name}:{line}"
                place = zlib.crc32(where.encode(errors="replace"))
                if len(_SEEN.places) < MAX_KNOWN:  # code made afresh each call: no pile up
                    _SEEN.places[code, line] = place
            feature = place << 6 | count.bit_length()
            known = _SEEN.known
            if feature not in known and len(known) < MAX_KNOWN:
                known.add(feature)
                found.append(feature)
        return sorted(found)[:MAX_NEW]

    def cap(self) -> None:
        self.capped_at = time.process_time() - self.cpu_started


def own(code: CodeType) -> bool:
    """Whether ``code`` is the scorer's: a file of its own package, or outside the standard
    library, site-packages and this package."""
    seen = _SEEN.own
    found = seen.get(code)
    if found is None:
        if len(seen) >= MAX_KNOWN:  # code made afresh each call (an ``exec``) must not pile up
            seen.clear()
        name = code.co_filename
        found = seen[code] = name.startswith(_SEEN.scorer_dirs) or not name.startswith(
            ("<", *_skipped_dirs())
        )
    return found


def _note_scorer(scorer: object) -> None:
    """Take the folder of ``scorer``'s top-level package (its file's, outside one) as its own."""
    code = getattr(inspect.unwrap(scorer), "__code__", None) if callable(scorer) else None
    if code is None or code.co_filename.startswith("<") or code.co_filename == _SEEN.scorer_file:
        return  # a worker scores one scorer: its folders are looked up once
    _SEEN.scorer_file = code.co_filename
    folder = os.path.dirname(os.path.abspath(code.co_filename))
    while os.path.exists(os.path.join(folder, "__init__.py")):
        parent = os.path.dirname(folder)
        if not os.path.exists(os.path.join(parent, "__init__.py")):
            break
        folder = parent
    if _SEEN.scorer_dirs != (own_dir := os.path.join(folder, ""),):
        _SEEN.scorer_dirs = (own_dir,)
        _SEEN.own.clear()


def _skipped_dirs() -> tuple[str, ...]:
    if not _SEEN.not_own_dirs:
        paths = sysconfig.get_paths()
        dirs = {
            paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths
        }
        dirs.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        _SEEN.not_own_dirs = tuple(os.path.join(d, "") for d in dirs if d)
    return _SEEN.not_own_dirs


def _start_lines(tally: _Tally) -> Callable[[], None]:
    """Count the scorer's line events and note its new locations; returns what stops it."""
    if sys.version_info >= (3, 12):
        return _start_monitoring(tally)
    return _start_tracing(tally)


def _start_monitoring(tally: _Tally) -> Callable[[], None]:
    monitoring: Any = getattr(sys, "monitoring")  # noqa: B009 - 3.12+, and mypy runs on 3.11
    events = monitoring.events
    if _SEEN.tool is None:
        for tool in _TOOL_IDS:
            if monitoring.get_tool(tool) is None:
                monitoring.use_tool_id(tool, "pytest-rewardhang")
                _SEEN.tool = tool
                break
        else:
            return lambda: None
    tool = _SEEN.tool
    disable = monitoring.DISABLE
    counts = tally.counts

    def on_line(code: CodeType, line: int) -> Any:
        if not own(code):
            return disable  # this location, for good: the library runs unwatched
        tally.lines += 1
        if tally.lines >= MAX_LINES:
            tally.cap()
            monitoring.set_events(tool, 0)
        counts[code, line] = counts.get((code, line), 0) + 1
        return None

    def on_jump(code: CodeType, at: int, to: int) -> Any:
        # A loop on one line (a comprehension, a generator expression) raises one LINE event
        # in all: from 3.12 a line's event comes only when the line changes, where settrace
        # saw every jump back. A jump within one line is counted as its line's event.
        if not own(code):
            return disable
        lines = _lines_of(code)
        line = lines.get(to)
        if line is None or line != lines.get(at):
            return None  # a LINE event follows
        return on_line(code, line)

    monitoring.register_callback(tool, events.LINE, on_line)
    monitoring.register_callback(tool, events.JUMP, on_jump)
    monitoring.set_events(tool, events.LINE | events.JUMP)

    def stop() -> None:
        monitoring.set_events(tool, 0)
        monitoring.register_callback(tool, events.LINE, None)
        monitoring.register_callback(tool, events.JUMP, None)

    return stop


@functools.lru_cache(maxsize=MAX_KNOWN)  # code made afresh each call must not pile up
def _lines_of(code: CodeType) -> dict[int, int]:
    """Each instruction offset of ``code`` to its line."""
    return {
        offset: line
        for start, end, line in code.co_lines()
        if line is not None
        for offset in range(start, end, 2)
    }


def _start_tracing(tally: _Tally) -> Callable[[], None]:
    counts = tally.counts

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event != "line":
            return local
        if tally.capped_at is not None:
            return None
        tally.lines += 1
        if tally.lines >= MAX_LINES:
            tally.cap()
        where = frame.f_code, frame.f_lineno
        counts[where] = counts.get(where, 0) + 1
        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        if event != "call" or tally.capped_at is not None or not own(frame.f_code):
            return None
        return local

    before, before_threads = sys.gettrace(), threading.gettrace()
    threading.settrace(calls)
    sys.settrace(calls)

    def stop() -> None:
        sys.settrace(before)
        threading.settrace(before_threads)

    return stop


def _instructions() -> int | None:
    """A counter of the instructions this process's threads retire in user space, opened once
    per process; None where the kernel has none (a virtual machine, ``perf_event_paranoid``)."""
    if not _SEEN.counter_tried:
        _SEEN.counter_tried = True
        _SEEN.counter = _open_counter()
    return _SEEN.counter


#: Where the kernel lists the processor's own event counters (``cpu``, ``cpu_core`` on x86,
#: ``armv8_pmuv3_0`` on arm); a virtual machine without one lists only software events.
_PMU_DEVICES = "/sys/bus/event_source/devices"


def _has_counter() -> bool:
    try:
        names = os.listdir(_PMU_DEVICES)
    except OSError:
        return False
    return any(name == "cpu" or name.startswith(("cpu_", "armv")) for name in names)


def _open_counter() -> int | None:
    number = _PERF_SYSCALL.get(platform.machine())
    # Looked up before ctypes is: loading the C library through it retires the worker (see
    # guard._worker), which on a machine without a counter would cost a fork per probe.
    if number is None or not _has_counter():
        return None
    # struct perf_event_attr, its first version (64 bytes): type PERF_TYPE_HARDWARE (0), size,
    # config PERF_COUNT_HW_INSTRUCTIONS (1); flags: disabled, inherit (the threads the call
    # starts, counted when they end), exclude_kernel, exclude_hv.
    flags = (1 << 0) | (1 << 1) | (1 << 5) | (1 << 6)
    attr = struct.pack("=IIQQQQQ", 0, 64, 1, 0, 0, 0, flags).ljust(64, b"\0")
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.syscall(number, ctypes.create_string_buffer(attr, 64), 0, -1, -1,
                          _PERF_FLAG_FD_CLOEXEC)  # fmt: skip
    except (OSError, AttributeError):
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None


def _ioctl(fd: int, request: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.ioctl(fd, request, 0)


def _read(fd: int) -> int:
    try:
        raw = os.read(fd, 8)
    except OSError:
        return 0
    return int.from_bytes(raw, sys.byteorder) if len(raw) == 8 else 0
