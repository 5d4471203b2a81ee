"""Items that forge what their worker says: module level, the standard library only, so that
a zygote imports them by name (see ``_attacks``)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from pytest_rewardhang.guard._wire import result_frame
from tests.guard._attacks import serving

#: ``ResultFields`` from ``dropped`` to ``leaving``, in the order the worker packs them.
FIELDS = ("dropped", "index", "leaked", "wall", "cpu", "cpu_total", "end", "rss_kib", "leaving")


def forges(field: str = "", value: Any = None, sleep_s: float = 0.0) -> Any:
    """Have the worker write this item's answer with ``field`` set to ``value``: its packing
    function replaced for one answer, so that the worker writes one answer, as ever. Sleeps
    ``sleep_s`` first."""
    worker = sys.modules["pytest_rewardhang.guard._worker"]
    honest = worker.result_frame

    def forged(frame: Any, payload: Any, output: bytes, *fields: Any) -> Any:
        setattr(worker, "result_frame", honest)  # noqa: B010 - one answer only
        values = list(fields)
        if field:
            values[FIELDS.index(field)] = value
        return honest(frame, payload, output, *values)

    setattr(worker, "result_frame", forged)  # noqa: B010 - the module's own global
    time.sleep(sleep_s)
    return "forged"


def swaps_its_task_pipe(what: str) -> str:
    """Put another file where the worker reads its tasks: ``devnull``, ``pipe`` (one nobody
    writes) or ``file`` (a file of garbage); then return."""
    serve, _ = serving()
    if what == "devnull":
        os.dup2(os.open(os.devnull, os.O_RDONLY), serve.task_r)
    elif what == "pipe":
        read, _write = os.pipe()
        os.dup2(read, serve.task_r)
    else:
        read, write = os.pipe()
        os.write(write, b"\xff" * 4096)
        os.dup2(read, serve.task_r)
    return "swapped"


def writes_its_fence() -> str:
    """Write its own index (plus one, as the caller does) in the worker's fence, and return;
    ``unreachable`` where the fence is not this process's to write (an isolated item's)."""
    serve, index = serving()
    try:
        serve.fence[0] = index + 1
    except ValueError:  # released: the worker's memory of it is not the item's
        return "unreachable"
    return "fenced"


#: Answers that build past a decoding bound: :func:`crafted`'s kind, its count, and the bound
#: the error names. 200,000 empty sets are 200 KB of pickle and 45 MB built; a memo index of
#: 2^32 had the unpickler allocate its memo up to it.
PAST_A_BOUND = [
    ("sets", 200_000, "BUILT_LIMIT"),
    ("nones", 300_000, "OBJECTS_LIMIT"),
    ("memo", (1 << 32) - 16, "memo entry"),
]


def crafted(kind: str, count: int, fields: int = 4) -> bytes:
    """A pickled answer of plain data, ``(ok, value, None, None)`` (and a 0 for ``fields`` 5),
    written opcode by opcode: its value a list of ``count`` empty sets (``sets``: about 220
    bytes built a byte), of ``count`` Nones (``nones``), an empty list behind ``count`` protocol
    opcodes (``protocols``), or a memo entry named ``count`` (``memo``)."""
    if kind == "sets":
        value = b"](" + b"\x8f" * count + b"e"
    elif kind == "nones":
        value = b"](" + b"N" * count + b"e"
    elif kind == "protocols":  # the costliest bytes to check: one opcode each two, nothing built
        value = b"](" + b"\x80\x05" * count + b"e"
    else:
        value = b"N" + b"r" + count.to_bytes(4, "little")
    return b"\x80\x05(\x8c\x02ok" + value + b"NN" + b"K\x00" * (fields - 4) + b"t."


def answers_with(kind: str, count: Any) -> Any:
    """Have the worker send :func:`crafted` as this item's answer: its pickling function
    replaced for one answer. (``sleep``: sleep ``count`` seconds, and return them; ``score``:
    return ``{"score": count}``, a small answer of its own.)"""
    if kind == "sleep":
        time.sleep(count)
        return count
    if kind == "score":
        return {"score": count}
    worker = sys.modules["pytest_rewardhang.guard._worker"]
    honest = worker.result_payload

    def forged(frame: Any) -> Any:
        setattr(worker, "result_payload", honest)  # noqa: B010 - one answer only
        return crafted(kind, count)

    setattr(worker, "result_payload", forged)  # noqa: B010 - the module's own global
    return "replaced"


def answers_for_the_next(forger: bool) -> str:
    """A forger writes a plausible answer of 1.0 for itself and one for the item its worker
    holds next, then returns; an honest item returns ``honest``."""
    if not forger:
        return "honest"
    serve, index = serving()
    for which in (index, index + 1):
        fields = (0, which, 0, 0.001, 0.0, 0.0, time.monotonic(), 0, False)
        try:
            os.write(serve.result_w, result_frame(("ok", 1.0, None, None), None, b"", *fields))
        except OSError:  # not this process's to write (an isolated item's)
            return "unreachable"
    return "forged"
