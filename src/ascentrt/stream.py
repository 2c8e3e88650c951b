"""Streams: ordered task queues, their synchronization, failure modes and destruction."""

from __future__ import annotations

import collections
import enum
import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from .handles import Handle
from . import interrupts
from .backends.base import Cost, Signal
from .device import Device, current_device, register_handle_type, resolve_device
from .engine import ENGINE, PRIORITY_LEVELS, Hooks, Marker, Task
from .engine.sync import synchronize_streams
from .engine.task import EVENT_WAIT, KERNEL, NOTIFY_RECORD, NOTIFY_WAIT, VALUE_WAIT
from .errors import (ErrorCode, ExceptionInfo, InvalidArgumentError, InvalidHandleError,
                     NotSupportedError, StreamStateError, TaskError, failure_of_a_task)
from .memory import links
from .memory.buffer import bytes_seen_by
from .validate import as_int, check_flag, check_timeout, enum_member

_ids = itertools.count(1)
_log = logging.getLogger("ascentrt.stream")


class _EventLike(Protocol):
    """What a stream needs of an Event (event.py imports this module, so it is not named here)."""

    id: int
    def record(self, stream: Stream | None = None) -> None: ...
    def _marker_for_wait(self) -> Marker: ...
    def _wait_timeout(self) -> float | None: ...


class _NotifyLike(Protocol):
    """What a stream needs of a Notify (notify.py imports this module)."""

    id: int
    device: Device

    def _check_alive(self) -> None: ...


class FailureMode(enum.IntEnum):
    """What a stream does after a task fails (CANN's aclrtStreamFailureMode)."""

    CONTINUE = 0  # later tasks run; the error surfaces at the next synchronization
    STOP = 1      # pending tasks are discarded and later submissions refused


_SCHEDULER_WORK = Cost(seconds=0.0, block_dim=0)  # a task no compute unit runs (see Cost)


def _word_now(args: tuple) -> tuple:
    """A value write's arguments as it runs: its word's bytes as a uint64 view (InvalidHandleError,
    107017, once the word was freed and not for work queued before the free), and the value."""
    word, value = args
    return word._array("<u8", None), value, word


def _write_word(view: Any, value: int, word: Any) -> None:
    """A value write's kernel: the word takes the value (on a simulated device, when is kept
    for the value waits it meets: their release's latency counts from it)."""
    view[0] = value
    device = word.device
    if device._dq.virtual:
        device._value_written[word.addr] = (value, device._dq.backend.now_ns())


class Stream(Handle):
    """A queue of tasks that run one at a time, in submission order, on one device."""

    role = ""  # what an internal stream is for (a communicator's lane): the profiler shows it
    # (stream, position) of work queued on other streams as part of this one's (a non-blocking
    # host function it handed off, a graph replay's forked lanes; see engine.task.with_spawned):
    # a free ordered after this stream waits for it too, as work queued before the free
    _spawned: tuple = ()

    def __init__(self, device: Device | int | None = None, priority: int = 0, *,
                 stop_on_failure: bool = False, _internal: bool = False) -> None:
        device = resolve_device(device)
        level = as_int(priority)  # (numpy's ints too, as the sizes and counts take them)
        if level is None or not 0 <= level < PRIORITY_LEVELS:
            raise InvalidArgumentError(f"priority must be an int in [0, {PRIORITY_LEVELS - 1}] "
                                       f"(0 is highest), got {priority!r}")
        priority = level
        self.id = next(_ids)
        self.device = device
        self._priority = priority
        self._internal: bool = _internal
        self._dq = device._dq
        # Engine-owned state (read and written under ENGINE.lock).
        self._tasks: collections.deque[Task] = collections.deque()
        self._active = False
        self._submitted = 0
        self._completed = 0
        self._running: Task | None = None
        self._batch: list[Task] | tuple = ()  # the tasks an executor took with _running (cpu)
        self._blocked: Task | None = None
        self._released_ns = 0          # virtual devices: when a blocked wait of it last ended
        self._ended_class = -1         # virtual devices: the executor class of its last task
        self._ended_ns = 0             # and when that task ended
        self._errors: list[ExceptionInfo] = []
        self._sync_waiters: list[tuple[int, Signal]] = []
        self._refuse: str | None = None  # None, "closing" (a destroy waits), "destroyed" or "failed"
        self._cut: int | None = None   # set by a discard: later tasks of the running batch are dropped
        self._after_running: list | None = None  # records a discard dropped behind a running task
        self._failure: ExceptionInfo | None = None
        # Discards of pending work (abort, destroy with force, a reset) so far, and the latest
        # ones as (count, first task dropped, what): a synchronization that waited meanwhile
        # for a task they dropped reports it (107023).
        self._aborts = 0
        self._abort_log: tuple[tuple[int, int, str], ...] = ()
        self._stop_on_failure = check_flag(stop_on_failure, "stop_on_failure")
        self._capture: Any = None      # set while the stream is being captured into a graph
        limit = device._backend.properties().max_streams
        with ENGINE.lock:  # (the count and the entry at once: other threads create streams too)
            if limit and not _internal and counted_streams(device) >= limit:
                raise StreamStateError(f"device {device.id} already has {limit} streams, the "
                                       f"most its {device.properties.backend} model allows: "
                                       f"destroy one first", code=ErrorCode.RT_NO_STREAM_RESOURCE)
            self._dq.streams[self.id] = self

    # ---- submission --------------------------------------------------------------------------

    def _submit(self, task: Task) -> int:
        """Hand a task to the engine (or to the capture recording it); returns its task id."""
        if self._capture is not None:
            return self._capture.add(self, task)
        task.thread = threading.get_ident()
        return ENGINE.submit(self, task)

    def _withdraw(self, task: Task, args: tuple) -> bool:
        """Make `task`, queued on this stream by a call that failed before it ran, run on `args`
        instead (its operation with nothing to move), in stream order, holding nothing of what
        it was given: True; False once an executor took it (it runs, or ran, as queued)."""
        with ENGINE.lock:
            if task not in self._tasks:  # (taken, run, or dropped with the stream's pending work)
                return False
            task.args, task.resolve, task.keep, task.nbytes = args, None, None, 0
            task.name = f"{task.name} (withdrawn)"
            return True

    def _refusal(self) -> Exception:
        if self._refuse == "destroyed":
            return InvalidHandleError(f"stream {self.id} was destroyed")
        if self._refuse == "closing":
            return InvalidHandleError(f"stream {self.id} is being destroyed")
        return StreamStateError(f"stream {self.id} stopped after a failed task "
                                f"(failure mode STOP): {self._failure}",
                                code=ErrorCode.RT_STREAM_ABORT, info=self._failure)

    # ---- properties --------------------------------------------------------------------------

    @property
    def priority(self) -> int:
        """0 (highest) .. 7 (lowest); fixed at creation (the ready queues index by it)."""
        return self._priority

    @property
    def failure_mode(self) -> FailureMode:
        """CONTINUE (default) or STOP."""
        return FailureMode.STOP if self._stop_on_failure else FailureMode.CONTINUE

    def set_failure_mode(self, mode: FailureMode | int) -> None:
        """Choose CONTINUE or STOP for later task failures; raises InvalidArgumentError otherwise."""
        member = enum_member(FailureMode, mode)
        if member is None:
            raise InvalidArgumentError(f"failure mode must be CONTINUE (0) or STOP (1), got {mode!r:.40}")
        mode = member
        self._check_alive()
        self._stop_on_failure = mode == FailureMode.STOP

    @property
    def pending(self) -> int:
        """Tasks submitted but not yet completed."""
        return self._submitted - self._completed

    def _check_alive(self) -> None:
        if self._refuse == "destroyed" or self._refuse == "closing":
            raise self._refusal()

    def _awaited_positions(self) -> dict:
        """For each stream this one's queue waits on, the latest recorded position.

        Only waits that cannot time out count: a timed-out wait lets the stream go on, so the
        pool's reuse must not rest on it.
        """
        with ENGINE.lock:
            tasks = list(self._tasks)
        out: dict = {}
        for t in tasks:
            if t.kind == EVENT_WAIT and t.timeout is None:
                m = t.marker
                if m.position > out.get(m.stream, 0):
                    out[m.stream] = m.position
        return out

    # ---- ordering between streams -----------------------------------------------------------

    def record(self, event: _EventLike | None = None) -> Any:
        """Record `event` (a new one when None) after the work submitted so far; returns it."""
        if event is None:
            event = self.device.create_event()
        elif getattr(type(event), "handle_kind", None) != "event":
            raise InvalidArgumentError(f"record() takes an Event, got {type(event).__name__}")
        event.record(self)
        return event

    def wait(self, event: _EventLike) -> None:
        """Make later tasks of this stream wait for the work `event` captured at its last record."""
        if getattr(type(event), "handle_kind", None) != "event":
            raise InvalidArgumentError(f"wait() takes an Event, got {type(event).__name__}")
        self._check_alive()
        marker = event._marker_for_wait()
        if self._capture is None:
            if marker.capture is not None:  # an event recorded in a capture: this stream joins it
                marker.capture.join(self, marker)
                return
            if marker.done and not (self._dq.virtual and marker.ts_ns):  # (a simulated one:
                # queued all the same, so that a record a moment ago still takes its latency)
                if self._refuse is not None:
                    raise self._refusal()  # a stopped stream refuses work, even a no-op wait
                if marker.discarded_by:  # (its work never came: this stream would run without it)
                    raise StreamStateError(
                        f"stream {self.id} cannot wait on event {event.id}: its last record "
                        f"never ran ({marker.discarded_by} dropped it; record it again)",
                        code=ErrorCode.RT_STREAM_ABORT)
                if Hooks.sanitizer is not None:
                    Hooks.sanitizer.stream_waited(self, marker)  # the order holds all the same
                self._dq.backend.host_call("event_wait")  # (a simulated host pays the call all the same)
                return  # already satisfied: nothing to order (and nothing to wait for)
        task = Task(EVENT_WAIT, name="event_wait")
        task.marker = marker
        task.timeout = event._wait_timeout()
        self._submit(task)

    def _check_same_device(self, notify: _NotifyLike) -> None:
        """A notify lives on one device: as an event's record, it is refused on another's stream."""
        if notify.device is not self.device:
            raise InvalidArgumentError(f"notify {notify.id} belongs to device {notify.device.id}; "
                                       f"stream {self.id} to device {self.device.id}",
                                       code=ErrorCode.RT_STREAM_CONTEXT)

    def _order_after(self, event: _EventLike) -> None:
        """Queue a wait on `event`'s last record that never times out (the pool orders reuse with it)."""
        task = Task(EVENT_WAIT, name="event_wait")
        task.marker = event._marker_for_wait()
        self._submit(task)

    def record_notify(self, notify: _NotifyLike) -> None:
        """Signal `notify` once this stream reaches this point."""
        if getattr(type(notify), "handle_kind", None) != "notify":
            raise InvalidArgumentError(f"record_notify() takes a Notify, got {type(notify).__name__}")
        notify._check_alive()
        self._check_same_device(notify)
        task = Task(NOTIFY_RECORD, name="notify_record")
        task.notify = notify
        self._submit(task)

    def wait_notify(self, notify: _NotifyLike, timeout: float | None = None) -> None:
        """Block this stream until `notify` is recorded, then reset it; a timeout fails the wait."""
        if getattr(type(notify), "handle_kind", None) != "notify":
            raise InvalidArgumentError(f"wait_notify() takes a Notify, got {type(notify).__name__}")
        timeout = check_timeout(timeout)
        notify._check_alive()
        self._check_same_device(notify)
        task = Task(NOTIFY_WAIT, name="notify_wait")
        task.notify = notify
        task.timeout = timeout
        self._submit(task)

    def wait_value(self, word: Any, met: Callable[[int], bool], what: str, timeout: float | None = None,
                   timeout_error: Callable[[Any, Task], BaseException] | None = None,
                   last_resort: bool = False) -> int:
        """Block this stream until met(w) holds for w, the 64-bit word in 8-byte device buffer
        `word` (a device-side wait, as aclrtValueWait's: it holds no executor). The word is
        looked at when the wait is reached, whenever work completes, while the host waits,
        and every millisecond on a real-time device; `timeout` s fail it (timeout_error(stream,
        task) says how; with `last_resort`, a deadlock through the wait is reported at once, not
        left to the timeout). `what` describes it ("the word at 0x... to equal 3"). A wait
        queued before a free of its word goes on watching those bytes; a word gone for it (a
        device reset) fails it (107017), and so does a condition that raises (507018): neither
        is counted as met. For a counter, compare cyclically as CANN's and CUDA's GEQ do,
        ((w - v) & (2**64 - 1)) < 2**63, not w >= v. Returns its task id."""
        self._check_word(word, "wait_value")
        if not callable(met):
            raise InvalidArgumentError(f"wait_value: the condition must be callable, got {type(met).__name__}")

        def check() -> bool:
            # Read as it is looked at, as the wait task sees the word (the engine looks from
            # any thread): queued before a free, it keeps watching those bytes; the device's
            # own read, told to no observer. Under the engine lock nothing may raise: a word
            # gone for it (a device reset) or a condition that raises sets the task's error,
            # and the engine fails the wait with it (its stream goes on in continue mode).
            try:
                raw = bytes_seen_by(word, task)
            except InvalidHandleError as exc:
                task.error = failure_of_a_task(InvalidHandleError, f"value wait for {what} on "
                                               f"stream {self.id}: {exc.message}",
                                               ErrorCode.RT_INVALID_HANDLE)
                return True
            try:
                value = int(raw[:8].view("<u8")[0])
                if not met(value):
                    return False
                written = self.device._value_written.get(word.addr) if self._dq.virtual else None
                if written is not None and written[0] == value:  # (a value write made it: its
                    task.written_ns = written[1]                  # release counts from then)
                return True
            except BaseException as exc:  # (SystemExit too: whichever thread looks lives on)
                _log.debug("the condition of value wait %s raised", what, exc_info=True)
                task.error = failure_of_a_task(
                    TaskError, f"value wait for {what} on stream {self.id}: its condition raised "
                    f"{type(exc).__name__}: {exc}", ErrorCode.RT_AICPU_EXCEPTION)
                task.error.__cause__ = exc
                interrupts.give_back(exc)  # (a Ctrl-C or a handler's, on the main thread: its own)
                return True

        task = Task(VALUE_WAIT, check, (what,), name="value_wait")
        task.keep = word
        task.value = (word.addr, met)
        task.timeout = check_timeout(timeout)
        task.timeout_error = timeout_error
        task.timeout_is_last_resort = check_flag(last_resort, "last_resort")
        return self._submit(task)

    def write_value(self, word: Any, value: int) -> int:
        """Write the 64-bit `value` (an int; a negative one as its two's complement) into the
        first 8 bytes of device buffer `word` after this stream's earlier work (aclrtValueWrite's
        write): a wait_value on the word, on any stream, can wait for it, and the race sanitizer
        orders that wait after this write. Returns its task id."""
        self._check_word(word, "write_value")  # (written through a view made as it runs: a
        number = as_int(value)                # word freed meanwhile fails it, 107017)
        if number is None or not -(1 << 63) <= number < (1 << 64):
            raise InvalidArgumentError(f"write_value: the value must be an int that fits 64 bits, "
                                       f"got {value!r:.40}")
        number &= (1 << 64) - 1
        task = Task(KERNEL, _write_word, (word, number), name="value_write")
        task.resolve = _word_now
        task.writes = (word[0:8],)
        task.keep = word
        task.cost = _SCHEDULER_WORK  # (the stream's scheduler writes it: no AI core, no time)
        task.value = (word.addr, number)
        return self._submit(task)

    def _check_word(self, word: Any, what: str) -> None:
        """InvalidArgumentError unless `word` is 8 bytes or more of this device's memory."""
        if getattr(word, "device", None) is not self.device or not hasattr(word, "_array") \
                or getattr(word, "nbytes", 0) < 8:
            raise InvalidArgumentError(f"{what}: the word must be 8 bytes or more of device "
                                       f"{self.device.id}'s memory, got {word!r:.60}")

    # ---- graph capture (the implementation registered in Hooks.capture by ascentrt.graph) ----

    def begin_capture(self, mode: int = 0) -> None:
        """Record this stream's later work (and that of streams it forks to) instead of running it.

        `mode`: CaptureMode GLOBAL (0), THREAD_LOCAL (1) or RELAXED (2), as CUDA and CANN define them.
        """
        _capture().begin_capture(self, mode)

    def end_capture(self) -> Any:
        """End the capture begun on this stream; returns the replayable Graph (see capture.end_capture)."""
        return _capture().end_capture(self)

    def capture_status(self) -> Any:
        """CaptureStatus NONE, ACTIVE or INVALIDATED; InvalidHandleError once destroyed."""
        self._check_alive()
        return _capture().capture_status(self)

    def begin_task_group(self) -> None:
        """While capturing: mark the tasks submitted from now on as one updatable task group."""
        _capture().begin_task_group(self)

    def end_task_group(self) -> Any:
        """End the task group; returns the TaskGroup handle for Graph.update."""
        return _capture().end_task_group(self)

    # ---- host synchronization ---------------------------------------------------------------

    def synchronize(self, timeout: float | None = None) -> None:
        """Wait until every task submitted so far completed; raise the first task error, if any."""
        timeout = check_timeout(timeout)
        self._check_alive()
        if self._capture is not None:
            self._capture.refuse(self, "synchronize")
        synchronize_streams([self], timeout, f"stream {self.id} synchronize")
        self.device._memory.settle()  # (a release threshold applies at a synchronize)

    def query(self) -> bool:
        """True when every task submitted so far has completed."""
        self._check_alive()
        if self._capture is not None:
            self._capture.refuse(self, "query")
        ENGINE.host_looks(self._dq.backend)
        sanitizer = Hooks.sanitizer
        seen = sanitizer.stream_clocks([self]) if sanitizer is not None else None
        done = self._completed >= self._submitted
        if done and seen is not None:
            sanitizer.host_waited(seen)  # a completed query orders the host after the work
        if not done:
            # (a simulated device: see sim._poll_missed)
            self._dq.backend.host_call(f"poll_miss stream {self.device.id}.{self.id}")
        return done

    def destroy(self, force: bool = False, timeout: float | None = None) -> int:
        """Destroy the stream: wait for its work (or with force, discard pending tasks).

        Returns how many tasks were discarded. Destroying twice raises InvalidHandleError; a
        wait past `timeout` seconds raises the synchronize timeout (507046) and leaves the
        stream alive (destroy it with force then).
        """
        if self._internal:
            raise InvalidArgumentError("a device's default stream cannot be destroyed; reset the device")
        timeout = check_timeout(timeout)
        force = check_flag(force, "force")
        if force:  # (also of a stream another thread's destroy is closing: it takes over)
            if self._refuse == "destroyed":
                raise InvalidHandleError(f"stream {self.id} was destroyed")
            if self._capture is not None:  # (its capture cannot go on: end_capture then raises)
                self._capture.invalidate(ErrorCode.RT_STREAM_CAPTURED,
                                         f"destroy(force=True) of captured stream {self.id}")
            return self._drop(force=True)
        self._check_alive()
        if self._capture is not None:  # (said as a destroy: the program called no synchronize)
            self._capture.refuse(self, "destroy")
        clock = self._dq.backend.now_ns
        deadline = None if timeout is None else clock() + timeout * 1e9
        self._settle(timeout)  # (other threads may still queue work meanwhile)
        # Then refuse more, and wait for what other threads queued while it waited: a launch
        # that returned without error runs (one after this is refused, 107017), never dropped
        # unrun as the stream leaves its device.
        before = self._close()
        try:
            self._settle(None if deadline is None else max((deadline - clock()) / 1e9, 1e-6))
        except BaseException:
            with ENGINE.lock:  # (a wait past the timeout leaves the stream alive, as it was)
                if self._refuse == "closing":
                    self._refuse = before
            raise
        return self._drop(force=False)

    def _settle(self, timeout: float | None) -> None:
        """Wait for the stream's queued work, as a destroy does (task errors die with it)."""
        try:  # (a wait that can never end is said as this destroy's)
            synchronize_streams([self], timeout, f"destroy of stream {self.id}")
        except TaskError as exc:
            if interrupts.raised_by_handler(exc):  # (the program's own handler raised one: it comes out)
                raise
            # destroying is not the place to report task errors: they die with the stream
        except StreamStateError as exc:
            if exc.code != ErrorCode.RT_STREAM_ABORT or interrupts.raised_by_handler(exc):
                raise  # (a capture refuses the destroy)

    def _close(self) -> str | None:
        """Refuse every later submission (107017), keeping the queued work, which runs: the
        stream is being destroyed. Returns what it refused before; InvalidHandleError when it
        is destroyed, or being destroyed, already."""
        with ENGINE.lock:
            self._check_alive()
            before, self._refuse = self._refuse, "closing"
            return before

    def _drop(self, force: bool) -> int:
        """Take the stream off its device (with `force`, its pending tasks discarded first);
        returns how many were. InvalidHandleError when another thread destroyed it first."""
        with ENGINE.lock:
            if self._refuse == "destroyed":
                raise InvalidHandleError(f"stream {self.id} was destroyed")
            dropped = ENGINE._discard(self, f"destroy(force=True) of stream {self.id}") if force else 0
            self._refuse = "destroyed"
            self._dq.streams.pop(self.id, None)
        self.device._memory.forget_stream(self)  # (its allocators check a stream once)
        if Hooks.sanitizer is not None:
            Hooks.sanitizer.stream_destroyed(self)  # (its clock: kept only for live streams)
        return dropped

    close = destroy

    def abort(self) -> int:
        """Discard the tasks not started yet (CANN's aclrtStreamAbort): the running one
        finishes, waits on the records it drops are let go, as a destroy with force does, and
        the stream stays usable. Returns how many tasks were discarded."""
        self._check_alive()
        if self._capture is not None:
            self._capture.refuse(self, "abort")
        self._dq.backend.host_call("synchronize")  # (a simulated device catches up first)
        with ENGINE.lock:
            if self._refuse == "destroyed":
                raise InvalidHandleError(f"stream {self.id} was destroyed")
            return ENGINE._discard(self, f"Stream.abort of stream {self.id}")

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._refuse != "destroyed":
            self.destroy()

    def __ascentrt_stream__(self) -> tuple[int, int, int]:
        """The stream protocol, in the manner of cuda.core's __cuda_stream__: (version 0,
        device id, stream id). A library that holds one orders its work against the stream
        through ascentrt: Stream.record() after the stream's work, Stream.wait(event) before."""
        return 0, self.device.id, self.id

    def __repr__(self) -> str:
        return f"Stream(id={self.id}, device={self.device.id}, priority={self.priority})"


def _capture() -> Any:
    """The registered capture implementation; NotSupportedError when ascentrt.graph is absent."""
    impl = Hooks.capture
    if impl is None:
        raise NotSupportedError("stream capture needs ascentrt.graph, which is not loaded")
    return impl


def counted_streams(device: Device) -> int:
    """How many of the device's streams count against its max_streams (under ENGINE.lock): the
    program's and the device's default stream once made, as CANN counts its default streams;
    not the runtime's own (graph lanes, the stream of non-blocking host functions)."""
    default = device._default_stream
    return sum(not x._internal or x is default for x in list(device._dq.streams.values()))


def resolve_stream(stream: object) -> Stream:
    """The stream to use: None means the current device's default stream; raises on bad handles."""
    if stream is None:
        return current_device().default_stream
    if type(stream) is not Stream and not isinstance(stream, Stream):
        raise InvalidArgumentError(f"stream must be an ascentrt.Stream or None, got {type(stream).__name__}")
    if stream._refuse == "destroyed":
        raise InvalidHandleError(f"stream {stream.id} was destroyed")
    return stream


register_handle_type("stream", Stream)
interrupts.protect(Stream.destroy, Stream.abort)  # (their bookkeeping around the engine's)
links.register(stream_type=Stream)
