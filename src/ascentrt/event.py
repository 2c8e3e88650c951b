"""Events: markers in a stream's work, for cross-stream ordering, host waits and timing."""

from __future__ import annotations

import itertools
import threading

from .handles import Handle
from . import interrupts
from .device import Device, register_handle_type, resolve_device
from .validate import check_flag
from .engine import ENGINE, Hooks, Marker, Task
from .engine.sync import raise_stream_errors
from .engine.task import EVENT_RECORD
from .errors import ErrorCode, InvalidArgumentError, InvalidHandleError, StreamStateError
from .stream import Stream, resolve_stream
from .validate import check_timeout

_ids = itertools.count(1)
_wait_timeout: list[float | None] = [None]  # bound on device-side event waits (None = forever)


def wait_timeout() -> float | None:
    """The bound set_wait_timeout put on device-side waits (None: none)."""
    return _wait_timeout[0]


def set_wait_timeout(seconds: float | None) -> None:
    """Bound every later device-side event wait (stream.wait) to `seconds`; None = no bound."""
    _wait_timeout[0] = check_timeout(seconds)



def _discarded_error(event: Event, m: Marker) -> StreamStateError:
    """What a wait on a record that an abort, destroy or reset dropped unrun gets (CANN's
    ACL_ERROR_RT_STREAM_ABORT): the work before it may never have run."""
    return StreamStateError(f"event {event.id}'s last record never ran: {m.discarded_by} "
                            f"dropped it, with the work before it that had not started "
                            f"(record the event again)", code=ErrorCode.RT_STREAM_ABORT)

class Event(Handle):
    """Captures a stream's submitted work at record time; `timing=True` also takes a timestamp."""

    handle_kind = "event"

    def __init__(self, device: Device | int | None = None, timing: bool = False, *,
                 limited: bool = True, at_record: bool = False) -> None:
        """`limited`: it takes one of the device's events at creation (a modelled device holds
        a bounded number); `at_record`: it takes one at its first record instead (pyACL's
        create_event, reference §8); neither: it takes none (the runtime's own, pyACL's ex events)."""
        self.device = resolve_device(device)
        limited = check_flag(limited, "limited")
        self._at_record = check_flag(at_record, "at_record") and not limited
        self._counted = False  # whether it holds one of the device's events
        if limited:
            self._take_device_event()
        self.id = next(_ids)
        self.timing = check_flag(timing, "timing")
        self._marker: Marker | None = None
        # Stream-ordered resets queued after the record `_marker` holds: (that record, the
        # resets' places in their streams); the first of them that runs undoes that record
        self._resets: tuple[Marker, tuple[Marker, ...]] | None = None
        self._destroyed = False

    def _current(self) -> Marker | None:
        """The record the event stands for now: None when never recorded, or once a reset
        queued after its last record ran (one dropped unrun never did)."""
        m = self._marker
        r = self._resets
        if r is not None and r[0] is m and any(x.done and not x.dropped for x in r[1]):
            return None
        return m

    def _take_device_event(self) -> None:
        """Hold one of the device's events until destroyed; 207007 where the model has no more."""
        limit = self.device._backend.properties().max_events
        if limit:  # a modelled device holds a bounded number
            live = self.device._events
            if len(live) >= limit:
                raise StreamStateError(f"device {self.device.id} already has {limit} events, the "
                                       f"most its model allows: destroy one first",
                                       code=ErrorCode.RT_NO_EVENT_RESOURCE)
            live.add(self)
        self._counted = True

    def _check_alive(self) -> None:
        if self._destroyed:
            raise InvalidHandleError(f"event {self.id} was destroyed")

    def record(self, stream: Stream | None = None) -> None:
        """Capture the work submitted to `stream` so far (None: the current device's default stream)."""
        self._check_alive()
        stream = resolve_stream(stream)
        if stream.device is not self.device:
            raise InvalidArgumentError(f"event {self.id} belongs to device {self.device.id}; "
                                       f"stream {stream.id} to device {stream.device.id}",
                                       code=ErrorCode.RT_STREAM_CONTEXT)
        if self._at_record and not self._counted:
            self._take_device_event()  # (before anything is queued: refused, nothing changed)
        marker = Marker(stream, 0, self.timing)
        task = Task(EVENT_RECORD, name="event_record")
        task.marker = marker
        if stream._capture is not None:
            stream._submit(task)
        else:
            task.thread = threading.get_ident()
            ENGINE.submit_all((stream,), ((stream, task),))  # sets the position it captures
        self._marker = marker
        self._resets = None  # (resets queued before it are about an earlier record)

    def query(self) -> bool:
        """True when the recorded work has completed (or the event was never recorded)."""
        self._check_alive()
        m = self._current()
        if m is not None and m.capture is not None:
            m.capture.refuse_event(self, m)
        ENGINE.host_looks(self.device._backend)
        m = self._current()  # (a reset the look let run: never recorded now)
        if m is None:
            return True
        if m.discarded_by:
            raise _discarded_error(self, m)
        done = m.done  # (read once: what it says, the sanitizer's ordering says too)
        if done:
            if Hooks.sanitizer is not None:
                Hooks.sanitizer.marker_waited(m)  # a completed query orders the host after it
        else:
            # (a simulated device: see sim._poll_missed)
            self.device._backend.host_call(f"poll_miss event {self.id}")
        return done

    def synchronize(self, timeout: float | None = None) -> None:
        """Block until the recorded work completed; raise a task error that happened before it."""
        self._synchronize(timeout, f"event {self.id} synchronize")

    def _synchronize(self, timeout: float | None, what: str) -> None:
        """synchronize(), its timeout or deadlock named as `what` (the runtime's own waits on
        an event of its own say what the program asked for instead)."""
        timeout = check_timeout(timeout)
        self._check_alive()
        m = self._current()
        if m is None:
            return
        if m.capture is not None:
            m.capture.refuse_event(self, m)
        backend = m.stream._dq.backend
        ev = backend.new_signal()
        with ENGINE.lock:
            if not m.done:
                m.host_waiters.append(ev)
        if not m.done:
            def cancel() -> None:
                if ev in m.host_waiters:
                    m.host_waiters.remove(ev)
            ENGINE.wait_host(ev, timeout, [m.stream], what, ErrorCode.RT_EVENT_SYNC_TIMEOUT, cancel)
        backend.host_call("synchronize")  # (a simulated device: the return path, once, see sync.py)
        m.stream.device._memory.settle()  # (a release threshold applies at a synchronize)
        if Hooks.sanitizer is not None:
            Hooks.sanitizer.marker_waited(m)
        raise_stream_errors([m.stream], before=m.position)
        if m.discarded_by:  # (before or while this waited, as CANN's aclrtSynchronizeEvent)
            raise _discarded_error(self, m)

    def reset(self, stream: Stream | None = None) -> None:
        """Forget the last record, at once (no stream) or as a task of `stream` after its
        earlier work, as aclrtResetEvent: until that task runs the event stands for its last
        record (a wait queued meanwhile waits for it); then it reads as never recorded."""
        self._check_alive()
        if stream is None:
            self._marker = None
            self._resets = None
            return
        stream = resolve_stream(stream)
        if stream.device is not self.device:
            raise InvalidArgumentError(f"event {self.id} belongs to device {self.device.id}; "
                                       f"stream {stream.id} to device {stream.device.id}",
                                       code=ErrorCode.RT_STREAM_CONTEXT)
        if stream._capture is not None:
            stream._capture.refuse_reset(stream, self)
        last = self._current()
        if last is not None and last.capture is not None:
            last.capture.refuse_event(self, last)  # (graph work: no stream order to reset it in)
        place = Marker(stream, 0, False)
        task = Task(EVENT_RECORD, name="event_reset")
        task.marker = place
        task.thread = threading.get_ident()
        ENGINE.submit_all((stream,), ((stream, task),))
        if last is not None:
            r = self._resets
            self._resets = (last, (r[1] if r is not None and r[0] is last else ()) + (place,))

    @property
    def recorded(self) -> bool:
        """Whether the event has a record to wait for; InvalidHandleError once destroyed."""
        self._check_alive()
        return self._current() is not None

    @property
    def timestamp_ns(self) -> int:
        """When the recorded work completed (the device clock, ns); needs timing=True and completion."""
        m = self._completed_marker("timestamp")
        return m.ts_ns

    def _completed_marker(self, what: str) -> Marker:
        self._check_alive()
        m = self._current()
        if not self.timing:
            raise InvalidArgumentError(
                f"event {self.id} was created without timing=True; no {what}: make the events "
                f"you time with dev.create_event(timing=True) or Event(timing=True) and record "
                f"them with stream.record(event) (stream.record() alone makes an untimed one, "
                f"as cudaEventDisableTiming does, so that a wait's event costs no timestamp)",
                code=ErrorCode.RT_EVENT_TIMESTAMP_INVALID)
        if m is not None and m.capture is not None:
            m.capture.refuse_event(self, m)  # (graph work: it never completes as stream work)
        if m is None or not m.done or m.dropped:
            state = "was never recorded (or a reset of it ran)" if m is None else \
                "is not completed yet" if not m.done else \
                "is a record its stream dropped unrun (destroyed, or stopped after a failure)"
            raise InvalidArgumentError(f"event {self.id} {state}; no {what}",
                                       code=ErrorCode.RT_EVENT_TIMESTAMP_INVALID)
        return m

    def _marker_for_wait(self) -> Marker:
        self._check_alive()
        m = self._current()
        if m is None:
            raise InvalidArgumentError(f"event {self.id} was never recorded (or a reset of it "
                                       f"ran): record it before a stream waits on it",
                                       code=ErrorCode.RT_PARAM_INVALID)
        return m

    def _wait_timeout(self) -> float | None:
        return _wait_timeout[0]

    def destroy(self) -> None:
        """Release the event; work already recorded still completes. Twice raises InvalidHandleError."""
        self._check_alive()
        self._destroyed = True
        self.device._events.discard(self)

    close = destroy

    def __enter__(self) -> "Event":
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._destroyed:
            self.destroy()

    def __repr__(self) -> str:
        return f"Event(id={self.id}, device={self.device.id}, timing={self.timing})"


register_handle_type("event", Event)
interrupts.protect(Event.record)  # (a record queued must be the event's marker)
interrupts.protect(Event.reset)  # (a reset queued must be among the event's resets)


def elapsed_time(start: Event, end: Event) -> float:
    """Milliseconds between the completions of two timing events' records (negative when `end`
    completed first, as CUDA's); both must be of one device, whose clock they read."""
    if not isinstance(start, Event) or not isinstance(end, Event):
        raise InvalidArgumentError("elapsed_time takes two Events")
    if start.device is not end.device:
        raise InvalidArgumentError(f"elapsed_time between events of device {start.device.id} and "
                                   f"device {end.device.id}: each device has its own clock; "
                                   f"record both on one device",
                                   code=ErrorCode.RT_EVENT_TIMESTAMP_INVALID)
    a = start._completed_marker("elapsed time")
    b = end._completed_marker("elapsed time")
    return (b.ts_ns - a.ts_ns) / 1e6
