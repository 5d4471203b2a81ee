"""What the workers say, and what it makes of their items: answers, output, deaths.

:class:`Answers` reads each worker's result pipe (and a long item's output, as it comes) and
accounts for its death; the functions make an :class:`Outcome` of an answer or a death. Runs
in the caller, on the loop's thread, except for decoding answers (see :class:`Decoder`).
"""

from __future__ import annotations

import os
import queue
import select
import threading
import time
import weakref
from collections.abc import Callable
from typing import NamedTuple

from ._contain import containment
from ._decode import DECODE_TIME_S, died, item_answer, output_text, stack_text
from ._driver import said
from ._fork import out_of_memory
from ._handle import DEAD, NEXT, NOT_STARTED, Watched, Worker
from ._launch import PoolError
from ._ledger import Decoded, Ledger
from ._outcome import (
    UNCONFINED,
    Answer,
    Confinement,
    Mechanism,
    Outcome,
    Status,
    answered,
    common_fields,
    ok_outcome,
)
from ._processes import Processes
from ._schedule import Schedule
from ._wire import (
    CHUNK,
    OUTPUT_LIMIT,
    RESULT_LIMIT,
    RETIRED,
    STACK_LIMIT,
    ResultFields,
    implausible,
    read_bounded,
    result_frames,
)

_OK = Status.OK
_FORK = Mechanism.FORK
#: How long a decoding thread waits for the next answer before it ends (see Decoder).
_DECODER_IDLE_S = 0.2
#: Answers up to this size (output included) are decoded on a thread of their own, so that a
#: large answer's decoding (up to DECODE_TIME_S) never holds up a small one: at about 1.7 s a
#: megabyte for the costliest bytes, one of these costs at most about 0.1 s.
SMALL_ANSWER = 64 << 10
#: How long an answer may wait for its decoding thread, behind the answers before it: past
#: this it is an ERROR, never decoded. With DECODE_TIME_S and the build (about 0.2 s), what
#: bounds when an answered item's outcome comes, whatever the answers before it hold.
DECODE_WAIT_S = 4 * DECODE_TIME_S
#: The bytes of answers one decoding thread holds waiting, at most: an answer past it is an
#: ERROR at once, never held (the caller's memory is not the calls' to fill).
QUEUED_LIMIT = 4 * RESULT_LIMIT


def answer_outcome(
    fields: ResultFields,
    buffer: bytes | bytearray,
    at: int,
    drained: tuple[bytes, int] | None,
    budget: float,
    objects: bool,
    confined: frozenset[Confinement] = UNCONFINED,
) -> Outcome:
    """The outcome of an answer that is not a bare OK float: see RESULT."""
    size, output_end = fields.size, at + fields.output_size
    output, dropped = after(drained, bytes(buffer[at:output_end]), fields.dropped)
    common = common_fields(
        fields.wall,
        fields.cpu,
        fields.rss_kib,
        output_text(output, dropped),
        dropped,
        budget,
        containment(),
    )
    common["confined"] = confined
    if not size:  # an OK float, with output or leftovers
        return answered(Answer(_OK, fields.number), fields.leaked, common)
    payload = buffer[output_end : output_end + size]
    answer = item_answer(payload, objects=objects)
    return answered(answer, fields.leaked, common)


class DecodeJob(NamedTuple):
    """One answer waiting to be decoded, and what its outcome needs."""

    #: When it came (monotonic): past DECODE_WAIT_S of waiting it is not decoded.
    arrived: float
    #: The item's index (``index`` is tuple's own method).
    item_index: int
    fields: ResultFields
    #: Its output, then its pickled payload.
    data: bytes
    #: What its worker's output pipe held besides, and how much more was dropped (read when
    #: the answer came).
    drained: tuple[bytes, int] | None
    budget: float
    objects: bool
    confined: frozenset[Confinement]


class Decoder:
    """A thread that decodes answers, in the order they came, and hands each outcome in.

    A pool has two (see Answers.decoders): every answer but a bare number in its frame's
    header (a fast scorer's usual float, which the loop takes as it is) goes to the one for
    its size. Plain data is checked opcode by opcode before it is built (see _decode's
    bounds): on the loop's thread, a 15 MB list put the other items' deadlines 6 s off, and
    even a 4 KiB one a few ms; on a thread per answer, a hundred of them left the loop one GIL
    turn in a hundred. Two leave it one turn in three at worst; each answer is checked within
    DECODE_TIME_S of CPU or is an ERROR. (``objects=True`` trusts the call: no bound, but
    beside the loop too.)
    """

    def __init__(self, hand_in: weakref.WeakMethod[Callable[[Decoded], None]]) -> None:
        #: Weak, as the thread outlives a pool that was not closed until it is told to end.
        self.hand_in = hand_in
        self.jobs: queue.SimpleQueue[DecodeJob | None] = queue.SimpleQueue()
        #: Whether the thread runs; under ``lock``, so that a job put as it ends is not left.
        self.running = False
        self.lock = threading.Lock()
        #: The bytes of the answers waiting, under ``lock``: at most QUEUED_LIMIT.
        self.queued = 0

    def put(self, job: DecodeJob) -> bool:
        """Decode ``job`` in turn; False when that would hold more than QUEUED_LIMIT bytes
        waiting (nothing is held then)."""
        with self.lock:
            if self.queued + len(job.data) > QUEUED_LIMIT:
                return False
            self.queued += len(job.data)
            self.jobs.put(job)
            if not self.running:
                self.running = True
                thread = threading.Thread(target=self._decoding, name="rewardhang-decode")
                thread.daemon = True
                thread.start()
        return True

    def close(self) -> None:
        """Let the thread end once what it holds is decoded (for nobody, if the pool closed)."""
        with self.lock:
            if self.running:
                self.jobs.put(None)

    def _decoding(self) -> None:
        # It ends once idle for _DECODER_IDLE_S: a caller's process with a live thread of
        # ours is told at each fork that forking a threaded process may deadlock its child.
        while True:
            try:
                job = self.jobs.get(timeout=_DECODER_IDLE_S)
            except queue.Empty:
                job = None
            if job is None:
                with self.lock:
                    if self.jobs.empty():
                        self.running = False
                        return
                continue
            arrived, index, fields, data, drained, budget, objects, confined = job
            with self.lock:
                self.queued -= len(data)
            waited = time.monotonic() - arrived
            try:
                if waited > DECODE_WAIT_S:
                    outcome = undecoded(
                        fields,
                        f"its answer ({len(data):,} bytes) waited {waited:.1f} s to be decoded,"
                        f" behind the answers before it, past DECODE_WAIT_S ({DECODE_WAIT_S:g} s)",
                        budget,
                    )
                else:
                    outcome = answer_outcome(fields, data, 0, drained, budget, objects, confined)
            except BaseException as exc:  # noqa: BLE001 - never a silent loss of the item
                error = f"{said(exc)} in decoding the answer"
                outcome = Outcome(Status.ERROR, error=error, budget=budget)
            method = self.hand_in()
            if method is not None:
                method(Decoded(index, outcome))
            del job, data, outcome, method


def undecoded(fields: ResultFields, why: str, budget: float) -> Outcome:
    """An answer not decoded, for ``why``: an ERROR, with the times its frame carried (checked
    against the caller's clock, see implausible)."""
    return Outcome(
        Status.ERROR,
        error=f"ValueError: {why}",
        wall_s=fields.wall,
        cpu_s=fields.cpu,
        budget=budget,
        mechanism=_FORK,
    )


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
        stack = stack_text(read_bounded(worker.fds["stack_r"], STACK_LIMIT)[0])
    output, dropped = after(drained, *read_bounded(worker.fds["output_r"], OUTPUT_LIMIT))
    common = common_fields(
        wall,
        max(cpu - worker.cpu_base, 0.0),  # NaN (unknown) stays NaN
        rss,
        output_text(output, dropped),
        dropped,
        budget,
        containment(),
    )
    common["confined"] = worker.confined
    return Outcome(
        ended,
        error=worker.lost,
        stack=stack,
        signal=signum,
        exit_code=exit_code,
        leaked=leaked,
        **common,
    )


class Answers:
    """What the workers say, read and accounted for: answers, output as it comes, deaths.

    Only the driving thread's. Each answer finishes its item in the ledger (or is decoded
    aside, and handed back through the inbox); each death ends the item running, sends the
    rest back for a retry, and has the worker replaced.
    """

    def __init__(
        self,
        size: int,
        budget: float,
        objects: bool,
        ledger: Ledger,
        schedule: Schedule,
        processes: Processes,
        watched: Watched,
        hand_in: Callable[[Decoded], None],
    ) -> None:
        self.size = size
        self.budget = budget
        #: Unpickle results that are not plain data: see _decode.decode.
        self.objects = objects
        self.ledger = ledger
        self.schedule = schedule
        self.processes = processes
        self.watched = watched
        #: Weak: the driver's method, held strongly, would be a reference cycle and keep a
        #: closed pool (and its scorer) alive until the cyclic GC ran.
        self.hand_in = weakref.WeakMethod(hand_in)
        #: Workers that died in a row before they took an item.
        self.fruitless_deaths = 0
        #: Small answers' and large ones': a large answer's decoding holds up no small one.
        self.decoders = (
            Decoder(weakref.WeakMethod(self._hand_in)),
            Decoder(weakref.WeakMethod(self._hand_in)),
        )
        for decoder in self.decoders:
            weakref.finalize(self, decoder.close)

    def close(self) -> None:
        """Let the decoding threads end once what they hold is decoded."""
        for decoder in self.decoders:
            decoder.close()

    def _hand_in(self, decoded: Decoded) -> None:
        """From a decoding thread: hand the outcome to the loop, if the pool is still there."""
        hand_in = self.hand_in()
        if hand_in is not None:
            hand_in(decoded)

    def read(self, worker: Worker) -> None:
        """Read ``worker``'s answers, and finish their items."""
        worker.receive()
        frames, consumed = result_frames(worker.inbuf)
        for fields, at in frames:
            if worker.lost is not None:
                break  # what it sent made no sense: nothing more from it is believed
            self._answered(worker, fields, worker.inbuf, at)
        if consumed:
            del worker.inbuf[:consumed]

    def drain(self, worker: Worker, current: tuple[int, float] | None) -> None:
        """Read what ``worker``'s long item wrote to its output so far: see _engine._DRAIN_AFTER_S.

        Its answers first: what is in the pipe after the item's answer is the next item's,
        for the worker to read. (Only a caller held up between the two reads, while the worker
        answers and starts the next item, takes the first output of that item for this one's.)
        """
        self.read(worker)
        if current is None or worker.current() != current or worker.phase is DEAD:
            return  # it answered, with what was read of its output here
        fd = worker.fds["output_r"]
        if worker.drained is None:
            worker.drained = (b"", 0)
            self.watched.register(fd, "output", worker, select.POLLIN)
        try:
            chunk = os.read(fd, CHUNK)  # one read a wake: a flood never holds up the loop
        except BlockingIOError:
            return
        if not chunk:  # no writer left: it is dying, and poll() would report that forever
            self.watched.unregister(fd)
            return
        worker.drained = after(worker.drained, chunk, 0)

    def _answered(self, worker: Worker, fields: ResultFields, buffer: bytearray, at: int) -> None:
        index = fields.item_index
        sent = worker.sent
        now = time.monotonic()
        if not sent or sent[0][0] != index or sent[0][1] is None:
            # Not the item it is running: something in the call wrote on the result pipe.
            # The worker goes; the item it was running is its own, a crash, never the batch.
            self._forged(
                worker,
                "the worker's result pipe carried something other than this item's answer "
                "(the call wrote on the worker's pipe), so the worker was killed",
            )
            return
        wrong = implausible(fields, now - sent[0][1], now - worker.requested)
        if wrong is not None:
            self._forged(
                worker,
                f"the worker's answer for this item said what no worker measures ({wrong}): "
                "the call forged it, so the worker was killed",
            )
            return
        sent_at = sent.popleft()[1]
        drained = worker.take_drained(self.watched)
        if worker.retries:
            worker.retries.discard(index)
        if fields.leaving:
            # It retires now: nothing it holds will start. Not on its word alone: an item can
            # set the flag and go on, so the worker is killed (a retiring one is on its way).
            self.ledger.retry.extend(worker.take_back(self.watched, keep=0))
            if not worker.killed and self.processes.zygote is not None:
                self.processes.kill(worker, index, now)
        elif index == worker.fenced:
            # It may have read the fence after this answer, and retired without a word.
            worker.after_fence = sent[0][0] if sent else NEXT
        self.processes.replaced = 0
        # The next item's start is when the caller saw this answer, never what the frame says:
        # a time to come froze its deadline, one long past brought it early.
        worker.last_end = now
        worker.cpu_base = fields.cpu_total
        if worker.dumped == index:  # the dump came just before it finished: drop it
            read_bounded(worker.fds["stack_r"], STACK_LIMIT)
            worker.dumped = None
        self.fruitless_deaths = 0
        # Within what the caller's clock allows (see implausible): at most since it was handed.
        wall = min(fields.wall, now - sent_at)
        self.schedule.timed(wall)
        size = fields.size
        if not (size or fields.output_size or fields.dropped or fields.leaked or drained):
            # The common case, an OK float carried in the frame itself: a fast scorer's
            # whole answer comes to this one call (see ok_outcome).
            rss_mb = fields.rss_kib / 1024
            outcome = ok_outcome(
                fields.number,
                wall,
                fields.cpu,
                rss_mb,
                self.budget,
                _FORK,
                containment(),
                worker.confined,
            )
            self.ledger.finish(index, outcome)
            return
        if wall != fields.wall:
            fields = fields._replace(wall=wall)
        # Anything more is decoded beside the loop, never in it: see Decoder.
        data = bytes(buffer[at : at + fields.output_size + size])
        decoder = self.decoders[len(data) > SMALL_ANSWER]
        job = DecodeJob(
            time.monotonic(),
            index,
            fields,
            data,
            drained,
            self.budget,
            self.objects,
            worker.confined,
        )
        if not decoder.put(job):
            why = (
                f"its answer ({len(data):,} bytes) came while {decoder.queued:,} bytes of answers"
                f" waited to be decoded, past QUEUED_LIMIT ({QUEUED_LIMIT:,})"
            )
            self.ledger.finish(index, undecoded(fields, why, self.budget))

    def _forged(self, worker: Worker, why: str) -> None:
        """What ``worker`` sent cannot be an answer: nothing more from it is believed, and it is
        killed. Which of its items wrote it no byte says (an earlier item's answer written for
        itself, or a thread it left, reaches the pipe while the next one runs): the item it
        runs is run again alone, and charged (see ``Worker.lost``) only if it does it again
        (see ``died``)."""
        worker.lost = why
        current = worker.current()
        if not worker.killed and self.processes.zygote is not None:
            # Between items too: a worker that runs nothing is not believed either, and what it
            # is handed next would wait for its deadline.
            index = current[0] if current is not None else NOT_STARTED
            self.processes.kill(worker, index, time.monotonic())

    def died(self, worker: Worker, status: int, cpu: float, rss: float, leaked: int) -> None:
        """Account for a dead worker's items: the running one ends, the rest go back."""
        self.read(worker)
        now = time.monotonic()
        current = worker.current()
        back = [entry[0] for entry in worker.sent]
        # It left between items on its own: fenced (the item after the fenced one never
        # started), or its state could not be put back (its answer said so, and what it held
        # went back then). Any other item that exits with that code, exited itself.
        retired = status >= 0 and os.WIFEXITED(status) and os.WEXITSTATUS(status) == RETIRED
        # Retired with a fence the caller never wrote, or sent what no answer is: an item did,
        # and the one running now may never have started (or is that item): it runs again,
        # alone. So does one its zygote's replacement may have cut short.
        forged = (retired and worker.fence_forged()) or worker.lost is not None
        if current is not None and self.ledger.remaining:
            index = current[0]
            back.pop(0)
            if (worker.orphaned is not None or forged) and index not in self.ledger.suspected:
                self.ledger.suspects.append(index)
                self.ledger.suspected.add(index)
            elif not worker.never_started(index, retired) and not worker.never_read(worker.sent[0]):
                if worker.orphaned is not None:
                    worker.lost = worker.orphaned
                drained = worker.take_drained(self.watched)
                outcome = death_outcome(
                    worker, current, now, status, cpu, rss, leaked, drained, self.budget
                )
                if worker.oom_kills:  # over its memory limit, whatever else it came to
                    memory_mb = self.processes.memory_mb
                    outcome = out_of_memory(outcome, worker.oom_kills, memory_mb)
                self.ledger.finish(index, outcome)
            else:
                # Killed for an item that answered at the deadline, or retired after one: the
                # fence kept this one from starting. It goes out again.
                back.insert(0, index)
        elif not worker.killed and not retired and worker.orphaned is None:
            self.fruitless_deaths += 1  # (one its zygote's death took is not its own)
        self.ledger.retry.extendleft(reversed(back))
        killed = worker.killed  # read before forget() makes it DEAD
        self.processes.forget(worker)
        if self.processes.closed:
            return
        if self.fruitless_deaths > 4 * self.size:
            raise PoolError("workers keep dying before they take an item")
        if not killed or self.processes.zygote is None:  # else requested at the kill
            self.processes.to_spawn += 1


def after(drained: tuple[bytes, int] | None, output: bytes, dropped: int) -> tuple[bytes, int]:
    """An item's ``output`` and ``dropped`` bytes, after what the caller read of it first."""
    if drained is None:
        return output, dropped
    early, early_dropped = drained
    room = OUTPUT_LIMIT - len(early)
    return early + output[:room], early_dropped + dropped + max(len(output) - room, 0)
