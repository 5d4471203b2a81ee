"""What a worker's answer, or its death, makes of the item it was running: an :class:`Outcome`.

Runs in the caller, on the loop's thread, except for :func:`decode_aside`'s large answers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ._driver import said
from ._handle import Worker
from ._ledger import Decoded
from ._outcome import Outcome, Status
from ._wire import (
    OUTPUT_LIMIT,
    STACK_LIMIT,
    common_fields,
    decode,
    died,
    outcome_from_frame,
    output_text,
    read_bounded,
    unpickle_failed,
)

_OK = Status.OK


def answer_outcome(
    fields: tuple[Any, ...],
    buffer: bytes | bytearray,
    at: int,
    drained: tuple[bytes, int] | None,
    budget: float,
    objects: bool,
) -> Outcome:
    """The outcome of an answer that is not a bare OK float: see RESULT."""
    _, size, output_size, dropped, _, leaked, wall, cpu, _, _, rss, _, number = fields
    output = output_text(*after(drained, bytes(buffer[at : at + output_size]), dropped))
    common = common_fields(wall, cpu, rss, output, budget)
    if not size:  # an OK float, with output or leftovers
        return outcome_from_frame(_OK.value, number, None, None, leaked, common)
    payload = buffer[at + output_size : at + output_size + size]
    try:
        status, value, error, exception = decode(payload, objects=objects)
    except Exception as exc:  # noqa: BLE001 - e.g. a class that only exists in the worker
        return unpickle_failed(exc, leaked, common)
    return outcome_from_frame(status, value, error, exception, leaked, common, objects=objects)


def decode_aside(
    index: int,
    fields: tuple[Any, ...],
    data: bytes,
    drained: tuple[bytes, int] | None,
    budget: float,
    hand_in: Callable[[Decoded], None],
) -> None:
    """Decode a large answer of plain data on a thread of its own; ``hand_in`` its outcome.

    Plain data is checked opcode by opcode before it is built (_wire._check_keys), at about
    half a second a megabyte: on the loop's thread, a 15 MB list put the other items'
    deadlines 6 s off. Beside it, the loop has the GIL back every switch interval.
    """

    def decode_it() -> None:
        try:
            outcome = answer_outcome(fields, data, 0, drained, budget, False)
        except BaseException as exc:  # noqa: BLE001 - never a silent loss of the item
            error = f"{said(exc)} in decoding the answer"
            outcome = Outcome(Status.ERROR, error=error, budget=budget)
        hand_in(Decoded(index, outcome))

    threading.Thread(target=decode_it, name="rewardhang-decode", daemon=True).start()


def death_outcome(
    worker: Worker,
    current: tuple[int, float],
    now: float,
    status: int,
    cpu: float,
    rss: float,
    leaked: int,
    drained: tuple[bytes, int] | None,
    budget: float,
) -> Outcome:
    """The outcome of ``current``, the item ``worker`` ran when it died with ``status``."""
    index, start = current
    killed = worker.kill_for == index
    wall = (worker.kill_time if killed else now) - start
    ended, signum, exit_code = died(status, killed=killed, dumped=worker.dumped == index)
    if worker.lost is not None:
        ended = Status.CRASHED
    stack = None
    if ended is Status.TIMEOUT:
        dump, _ = read_bounded(worker.fds["stack_r"], STACK_LIMIT)
        stack = dump.decode("utf-8", "replace") or None
    output = output_text(*after(drained, *read_bounded(worker.fds["output_r"], OUTPUT_LIMIT)))
    return Outcome(
        ended,
        error=worker.lost,
        stack=stack,
        signal=signum,
        exit_code=exit_code,
        leaked=leaked,
        **common_fields(wall, cpu - worker.cpu_base, rss, output, budget),
    )


def after(drained: tuple[bytes, int] | None, output: bytes, dropped: int) -> tuple[bytes, int]:
    """An item's ``output`` and ``dropped`` bytes, after what the caller read of it first."""
    if drained is None:
        return output, dropped
    early, early_dropped = drained
    room = OUTPUT_LIMIT - len(early)
    return early + output[:room], early_dropped + dropped + max(len(output) - room, 0)
