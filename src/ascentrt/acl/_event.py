"""acl.rt event calls, onto ascentrt.Event (timing events; flags kept beside the handle)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import forksafe
from ..engine import ENGINE, Hooks
from ..event import Event, elapsed_time, set_wait_timeout
from ..errors import ErrorCode
from . import constants as C
from ._api import EVENTS, api, fail, need_context, note_task, stream_of, timeout_ms

if TYPE_CHECKING:
    from ..stream import Stream

_KNOWN_FLAGS = (C.ACL_EVENT_SYNC | C.ACL_EVENT_CAPTURE_STREAM_PROGRESS | C.ACL_EVENT_TIME_LINE
                | C.ACL_EVENT_DEVICE_USE_ONLY | C.ACL_EVENT_EXTERNAL | C.ACL_EVENT_IPC)
# What a device without stream / event limits (the cpu backend) reports as left of them: the
# value `ascentrt calibrate` writes as max_streams / max_events for "no limit", so a calibrated
# sim preset answers alike; it fits CANN's uint32.
NO_LIMIT = 1 << 30
_lock = forksafe.lock()
_flags: dict[int, tuple[int | None, bool]] = {}  # handle -> (flag or None for create_event, ex?)
# handle -> the marker recorded after the latest wait on it, by waiting stream (an earlier one
# on that stream is passed when it is, and orders less)
_waits: dict[int, dict[int, Event]] = {}


def _create(flag: int | None, ex: bool) -> int:
    if flag is not None and flag & ~_KNOWN_FLAGS:
        raise fail(ErrorCode.INVALID_PARAM, f"unknown event flag bits {flag & ~_KNOWN_FLAGS:#x}")
    # CANN's runtime timestamps every record, whatever the flags: so does the facade. A SYNC
    # event of create_event_with_flag takes a device event at creation; create_event's and
    # the other *_with_flag ones take theirs at their first record (reference §8: never out of
    # them at creation); ex events take none (not hardware-limited).
    sync = flag is not None and bool(flag & C.ACL_EVENT_SYNC)
    handle = EVENTS.add(Event(need_context().device, timing=True, limited=sync and not ex,
                              at_record=not ex))
    with _lock:
        _flags[handle] = (flag, ex)
    return handle


def check_sync_flag(handle: int, what: str, ex_allowed: bool = True) -> None:
    """Events made by the *_with_flag creators need ACL_EVENT_SYNC for waits and resets."""
    flag, ex = _flags.get(handle, (None, False))
    if ex and not ex_allowed:
        raise fail(ErrorCode.RT_PARAM_INVALID, f"{what} does not take events of create_event_ex_with_flag")
    if flag is not None and not flag & C.ACL_EVENT_SYNC:
        raise fail(ErrorCode.RT_PARAM_INVALID, f"{what} needs an event created with ACL_EVENT_SYNC")


def complete_before_record(handle: int, event: Event) -> bool:
    """Whether the event is one of create_event_ex_with_flag never recorded: complete, so a
    wait on it passes at once (CANN's runtime queues no wait task for it)."""
    return _flags.get(handle, (None, False))[1] and not event.recorded


def _passed(marker: Event) -> bool:
    """Whether a stream passed the point `marker` holds (its work there done, or dropped by
    an abort: either way nothing waits there any more)."""
    m = marker._marker
    return m is None or m.done


def note_wait(handle: int, stream: Stream) -> None:
    """Remember where `stream` passes its wait on the event, for query_event_wait_status."""
    marker = stream.device.internal_event()  # (the runtime's own: no slot of the program's)
    marker.record(stream)
    with _lock:
        _waits.setdefault(handle, {})[stream.id] = marker


@api("", out=(0,))
def create_event() -> int:
    """(event, ret): an event usable for cross-stream waits and elapsed time (aclrtCreateEvent)."""
    return _create(None, False)


@api("I", out=(0,))
def create_event_with_flag(flag: int) -> int:
    """(event, ret): an event with ACL_EVENT_* flags; TIME_LINE enables timestamps (aclrtCreateEventWithFlag)."""
    return _create(flag, False)


@api("I", out=(0,))
def create_event_ex_with_flag(flag: int) -> int:
    """(event, ret): as create_event_with_flag, reusable on re-record; complete before its
    first record (aclrtCreateEventExWithFlag)."""
    return _create(flag, True)


@api("k")
def destroy_event(event: int) -> None:
    """Release the event; work already recorded still completes (aclrtDestroyEvent)."""
    EVENTS.get(event).destroy()
    EVENTS.remove(event)
    with _lock:
        _flags.pop(event, None)
        _waits.pop(event, None)


@api("kk")
def record_event(event: int, stream: int) -> None:
    """Capture the work submitted to the stream so far, 0 = default stream (aclrtRecordEvent)."""
    ev = EVENTS.get(event)
    s = stream_of(stream, own=True)
    ev.record(s)
    note_task(stream, s)


@api("kk")
def reset_event(event: int, stream: int) -> None:
    """Queue a reset of the event on the stream, after its earlier work: the event stands for
    its last record until it runs (ACL_EVENT_SYNC events) (aclrtResetEvent)."""
    ev = EVENTS.get(event)
    s = stream_of(stream, own=True)
    check_sync_flag(event, "reset_event", ex_allowed=False)
    ev.reset(s)
    note_task(stream, s)


@api("k", out=(C.ACL_EVENT_STATUS_COMPLETE,))
def query_event(event: int) -> int:
    """(status, ret): 0 complete (or never recorded), 1 not ready; deprecated in pyACL (aclrtQueryEvent)."""
    ev = EVENTS.get(event)
    if _flags[event][1]:
        raise fail(ErrorCode.RT_PARAM_INVALID, "query_event does not take events of create_event_ex_with_flag")
    return C.ACL_EVENT_STATUS_COMPLETE if ev.query() else C.ACL_EVENT_STATUS_NOT_READY


@api("k", out=(C.ACL_EVENT_RECORDED_STATUS_NOT_READY,))
def query_event_status(event: int) -> int:
    """(status, ret): 1 when the recorded work completed, 0 when not yet or never recorded (aclrtQueryEventStatus)."""
    ev = EVENTS.get(event)
    ex = _flags[event][1]
    if not ev.recorded and not ex:
        return C.ACL_EVENT_RECORDED_STATUS_NOT_READY
    done = ev.query()
    if not done or (not ev.recorded and not ex):  # (a reset the query's look let run: never recorded)
        return C.ACL_EVENT_RECORDED_STATUS_NOT_READY
    return C.ACL_EVENT_RECORDED_STATUS_COMPLETE


@api("k", out=(C.ACL_EVENT_WAIT_STATUS_COMPLETE,))
def query_event_wait_status(event: int) -> int:
    """(status, ret): 0 when every stream_wait_event on it was passed, 1 otherwise (aclrtQueryEventWaitStatus)."""
    ev = EVENTS.get(event)
    check_sync_flag(event, "query_event_wait_status", ex_allowed=False)
    backend = ev.device._backend
    ENGINE.host_looks(backend)  # (as Stream.query)
    with _lock:
        markers = _waits.get(event, {})
        pending = any(not _passed(m) for m in markers.values())
        if not pending:
            _waits.pop(event, None)
    if pending:  # (a simulated device: a loop polling it moves on, see sim._poll_missed)
        backend.host_call(f"poll_miss event wait {ev.id}")
        return C.ACL_EVENT_WAIT_STATUS_NOT_READY
    sanitizer = Hooks.sanitizer
    if sanitizer is not None:  # every wait passed: the host comes after them, as a query that
        for m in markers.values():  # found the work done (see Event.query)
            if m._marker is not None and not m._marker.discarded_by:  # (work that ran)
                sanitizer.marker_waited(m._marker)
    return C.ACL_EVENT_WAIT_STATUS_COMPLETE


@api("k")
def synchronize_event(event: int) -> None:
    """Block until the recorded work completes (aclrtSynchronizeEvent)."""
    EVENTS.get(event).synchronize()


@api("ki")
def synchronize_event_with_timeout(event: int, timeout: int) -> None:
    """As synchronize_event, at most timeout ms (-1 forever); expiry is 507047 (aclrtSynchronizeEventWithTimeout)."""
    ev = EVENTS.get(event)
    ev.synchronize(timeout_ms(timeout))


@api("kk", out=(0.0,))
def event_elapsed_time(start: int, end: int) -> float:
    """(ms, ret): time between two completed records of timing events (aclrtEventElapsedTime);
    107007 when `end` completed before `start`."""
    ms = elapsed_time(EVENTS.get(start), EVENTS.get(end))
    if ms < 0:
        raise fail(ErrorCode.RT_EVENT_TIMESTAMP_REVERSAL,
                   f"the end event completed {-ms:.6f} ms before the start event")
    return ms


@api("k", out=(0,))
def event_get_timestamp(event: int) -> int:
    """(timestamp_us, ret): when the event's recorded work completed, in µs (aclrtEventGetTimestamp)."""
    return EVENTS.get(event).timestamp_ns // 1000


@api("I")
def set_op_wait_timeout(timeout: int) -> None:
    """Bound later device-side event waits to timeout seconds, 0 = never time out (aclrtSetOpWaitTimeout)."""
    # (the "I" format refuses what overflows a uint32, 2**64 once wrapped to 0, never time out,
    # and reads a negative one as the unsigned int it stands for, as C does)
    set_wait_timeout(None if timeout == 0 else timeout)


@api("k", out=(0,))
def get_event_id(event: int) -> int:
    """(id, ret): the event's id (aclrtGetEventId)."""
    return EVENTS.get(event).id


@api("", out=(0,))
def get_event_avail_num() -> int:
    """(n, ret): device events the current device has left, its limit less those the program's
    live events hold (a SYNC event from creation, a plain one from its first record) (aclrtGetEventAvailNum)."""
    dev = need_context().device
    limit = dev._backend.properties().max_events
    if limit:  # a modelled device counts the events holding one (not the runtime's own)
        return max(limit - len(dev._events), 0)
    # No limit (the cpu backend), so no count kept by the device: the program's live events
    # that hold one.
    held = sum(1 for _, ev in EVENTS.items() if ev.device is dev and not ev._destroyed and ev._counted)
    return max(NO_LIMIT - held, 0)


def forget_all() -> None:
    """Drop the side tables (acl.finalize)."""
    with _lock:
        _flags.clear()
        _waits.clear()


__all__ = ["create_event", "create_event_with_flag", "create_event_ex_with_flag", "destroy_event",
           "record_event", "reset_event", "query_event", "query_event_status",
           "query_event_wait_status", "synchronize_event", "synchronize_event_with_timeout",
           "event_elapsed_time", "event_get_timestamp", "set_op_wait_timeout", "get_event_id",
           "get_event_avail_num"]
