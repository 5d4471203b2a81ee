"""The frames' layouts against the names the caller reads them by."""

from __future__ import annotations

import pickle

from pytest_rewardhang.guard._decode import item_answer
from pytest_rewardhang.guard._outcome import Answer, NotStarted, Status
from pytest_rewardhang.guard._wire import (
    MAGIC,
    NO_ITEM,
    RESULT,
    ResultFields,
    result_frame,
    result_frames,
    result_payload,
)


def test_a_result_frame_reads_back_field_by_field() -> None:
    assert len(ResultFields._fields) == len(RESULT.unpack(bytes(RESULT.size)))
    ok = ("ok", 0.25, None, None)
    error = ("error", None, "ValueError: no", None)
    framed = b""
    for index, frame in enumerate((ok, error)):
        payload = result_payload(frame)
        packed = (7, index, 1, 0.5, 0.25, 3.0, 12.0, 2048, index == 1)
        framed += result_frame(frame, payload, b"printed", *packed)
    frames, taken = result_frames(bytearray(framed))
    assert taken == len(framed)
    (first, at), (second, _) = frames
    assert isinstance(first, ResultFields)
    assert (first.magic, first.size, first.output_size, first.dropped) == (MAGIC, 0, 7, 7)
    assert (first.item_index, first.leaked, first.wall, first.cpu) == (0, 1, 0.5, 0.25)
    assert (first.cpu_total, first.end, first.rss_kib) == (3.0, 12.0, 2048)
    assert (first.leaving, first.number) == (False, 0.25)
    assert framed[at : at + first.output_size] == b"printed"
    assert (second.item_index, second.leaving, second.size > 0) == (1, True, True)


def test_bytes_that_are_not_a_result_frame_are_no_item() -> None:
    frames, taken = result_frames(bytearray(b"x" * RESULT.size * 2))
    assert taken == RESULT.size * 2
    assert [fields.item_index for fields, _ in frames] == [NO_ITEM]


def test_an_error_frame_says_why_its_item_never_started() -> None:
    # A worker that could not unpickle a batch says so where an ERROR's value goes.
    frame = ("error", NotStarted.UNREADABLE.value, "TypeError: the items could not...", None)
    answer = item_answer(pickle.dumps(frame))
    assert answer == Answer(Status.ERROR, None, frame[2], None, NotStarted.UNREADABLE)
    # A value that is no reason is the value, as before.
    assert item_answer(pickle.dumps(("error", "other", "E", None))).not_started is None
