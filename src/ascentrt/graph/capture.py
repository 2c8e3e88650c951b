"""Stream capture: record the work submitted to streams into a graph instead of running it.

A capture starts on one stream (its origin). Other streams join it by waiting on an event
recorded inside it (fork) and must be waited on again by the origin before the capture ends
(join). Nothing reaches the engine while a stream captures, so an invalidated capture leaves
no side effects. Modes follow CUDA's cudaStreamCaptureMode / CANN's aclmdlRICaptureMode.
"""

from __future__ import annotations

import enum
import sys
import threading
from typing import TYPE_CHECKING, Any

from .. import forksafe
from ..callsite import user_code_site
from ..engine import Hooks
from ..engine.task import EVENT_RECORD, EVENT_WAIT, NOTIFY_RECORD, NOTIFY_WAIT, VALUE_WAIT
from ..errors import CaptureError, ErrorCode, InvalidArgumentError, NotSupportedError
from ..validate import enum_member
from .graph import Graph
from .update import TaskGroup

if TYPE_CHECKING:
    from ..engine import Marker, Task
    from ..event import Event
    from ..stream import Stream


class CaptureMode(enum.IntEnum):
    """Which host calls a capture forbids (numbered as CUDA and CANN number them)."""

    GLOBAL = 0        # unsafe calls are refused in this thread and in every other thread
    THREAD_LOCAL = 1  # unsafe calls are refused in the capturing thread only
    RELAXED = 2       # unsafe calls are allowed


class CaptureStatus(enum.IntEnum):
    """A stream's capture state (cudaStreamCaptureStatus)."""

    NONE = 0
    ACTIVE = 1
    INVALIDATED = 2


_active: list["Capture"] = []   # captures begun and not yet ended (any thread)
_active_lock = forksafe.lock()


class Capture:
    """What one capture recorded: per lane (stream) its ops, in the order they were submitted."""

    def __init__(self, origin: Stream, mode: CaptureMode):
        self.origin = origin
        self.mode = mode
        # (the Thread, not its id: Python hands an ended thread's id to the next one it starts)
        self.thread = threading.current_thread()
        self.lock = forksafe.lock()
        self.lanes = {origin: 0}            # stream -> lane index (origin is lane 0)
        self.ops: list[tuple[int, str, Any]] = []  # (lane, op, payload): "node" task / "record" / "wait" marker
        self.node_count = 0
        self.invalid: tuple[ErrorCode, str] | None = None  # (code, reason) once invalidated
        self.ended = False
        self.groups: dict[Stream, TaskGroup] = {}  # stream -> TaskGroup being recorded
        self.closed_groups: list[TaskGroup] = []

    # ---- recording (called from Stream._submit / launch when stream._capture is set) -------

    def add(self, stream: Stream, task: Task) -> int:
        """Record `task` (submitted to capturing `stream`); returns its node number."""
        with self.lock:
            self._check_valid()
            lane = self.lanes[stream]
            kind = task.kind
            if kind == EVENT_RECORD:
                task.marker.capture = self
                self.ops.append((lane, "record", task.marker))
                return 0
            if kind == EVENT_WAIT:
                if task.marker.capture is not self:
                    self._invalidate(ErrorCode.RT_CAPTURE_DEPENDENCY, "a captured stream waited on an "
                                     "event recorded outside this capture")
                    raise CaptureError(f"stream {stream.id} is capturing and waited on an event that "
                                       f"was recorded outside this capture: a graph may only depend "
                                       f"on work inside it (capture invalidated)",
                                       code=ErrorCode.RT_CAPTURE_DEPENDENCY)
                self.ops.append((lane, "wait", task.marker))
                return 0
            if kind in (NOTIFY_RECORD, NOTIFY_WAIT, VALUE_WAIT):
                what = "value waits" if kind == VALUE_WAIT else "notifies"
                self._invalidate(ErrorCode.RT_FEATURE_NOT_SUPPORT, f"{what[:-1]} was used in a capture")
                raise NotSupportedError(f"{what} cannot be captured into a graph (stream {stream.id}); "
                                        f"use events for ordering (capture invalidated)")
            self.ops.append((lane, "node", task))
            self.node_count += 1
            # where the program captured it (a race between two of its nodes is fixed there)
            task.captured = (user_code_site(2), stream.id, id(self), self.node_count)
            group = self.groups.get(stream)
            if group is not None:
                group.nodes.append(self.node_count - 1)
            return self.node_count

    def join(self, stream: Stream, marker: Marker) -> None:
        """`stream` (not capturing) waits on an event recorded in this capture: it joins (fork)."""
        with self.lock:
            if self.ended:
                raise CaptureError(f"the event waited on by stream {stream.id} was recorded inside a "
                                   f"capture that has ended; record it again outside the capture",
                                   code=ErrorCode.RT_EVENT_CAPTURED)
            self._check_valid()
            if stream._capture is not None:  # another capture claimed it meanwhile
                raise CaptureError(f"stream {stream.id} is already part of another capture",
                                   code=ErrorCode.RT_CAPTURE_DEPENDENCY)
            if stream.device is not self.origin.device:
                raise InvalidArgumentError(f"stream {stream.id} is on device {stream.device.id}; the "
                                           f"capture on device {self.origin.device.id}",
                                           code=ErrorCode.RT_STREAM_CONTEXT)
            lane = len(self.lanes)
            self.lanes[stream] = lane
            self.ops.append((lane, "wait", marker))
            stream._capture = self

    def _check_valid(self) -> None:
        if self.ended:  # a submission that raced with end_capture
            raise CaptureError(f"the capture begun on stream {self.origin.id} has ended",
                               code=ErrorCode.RT_STREAM_NOT_CAPTURED)
        self._raise_if_invalid()

    def _raise_if_invalid(self) -> None:
        if self.invalid is not None:
            code, reason = self.invalid
            raise CaptureError(f"the capture begun on stream {self.origin.id} was invalidated "
                               f"({reason}); end it and capture again",
                               code=ErrorCode.RT_STREAM_CAPTURE_INVALIDATED)

    def _invalidate(self, code: ErrorCode, reason: str) -> None:
        if self.invalid is None:
            self.invalid = (code, reason)

    def invalidate(self, code: ErrorCode, reason: str) -> None:
        """Mark the capture invalid: it keeps its streams until end_capture, which then raises."""
        with self.lock:
            self._invalidate(code, reason)

    def refuse(self, stream: Stream, what: str) -> None:
        """Raise RT_STREAM_CAPTURED for `what` (synchronize, query) on a capturing stream; invalidates."""
        self.invalidate(ErrorCode.RT_STREAM_CAPTURED, f"{what} of captured stream {stream.id}")
        raise CaptureError(f"{what} of stream {stream.id} while it is being captured: captured work "
                           f"does not run until the graph is launched (capture invalidated)",
                           code=ErrorCode.RT_STREAM_CAPTURED)

    def refuse_reset(self, stream: Stream, event: Event) -> None:
        """Raise NotSupportedError for an event reset on a capturing stream; invalidates.

        A graph holds records and waits as its edges; a reset has no node to become (replayed,
        it would undo a record made since)."""
        self.invalidate(ErrorCode.RT_FEATURE_NOT_SUPPORT, "an event reset was used in a capture")
        raise NotSupportedError(f"reset of event {event.id} on stream {stream.id} while it is being "
                                f"captured: a graph cannot hold an event reset; reset it after "
                                f"end_capture (capture invalidated)")

    def refuse_free(self, stream: Stream, buf: object) -> None:
        """Raise RT_STREAM_CAPTURED for a stream-ordered free on a capturing stream; invalidates.

        A graph records no frees (or allocations) as nodes: freed now, the block could go to a
        new owner before the captured work that uses it ever runs."""
        self.invalidate(ErrorCode.RT_STREAM_CAPTURED, f"stream-ordered free on captured stream {stream.id}")
        raise CaptureError(f"stream-ordered free of {buf!r} on stream {stream.id} while it is being "
                           f"captured: a graph cannot record a free (it would happen now, before the "
                           f"captured work runs); free it after end_capture, once no graph uses it "
                           f"(capture invalidated)", code=ErrorCode.RT_STREAM_CAPTURED)

    def refuse_event(self, event: Event, marker: Marker) -> None:
        """Raise RT_EVENT_CAPTURED: a host call on an event recorded inside this capture."""
        if not self.ended:
            self.invalidate(ErrorCode.RT_EVENT_CAPTURED, f"host call on captured event {event.id}")
        raise CaptureError(f"event {event.id} was recorded inside a capture: it marks graph work, "
                           f"not stream work, so it cannot be queried or synchronized"
                           + ("" if self.ended else " (capture invalidated)"),
                           code=ErrorCode.RT_EVENT_CAPTURED)

    # ---- task groups ------------------------------------------------------------------------

    def begin_group(self, stream: Stream) -> None:
        """Start marking the nodes `stream` records as one updatable task group."""
        with self.lock:
            self._check_valid()
            if stream in self.groups:
                raise CaptureError(f"stream {stream.id} already records a task group",
                                   code=ErrorCode.RT_STREAM_CAPTURE_UNMATCHED)
            self.groups[stream] = TaskGroup(self, self.lanes[stream])

    def end_group(self, stream: Stream) -> TaskGroup:
        """Stop marking; returns the group (its nodes can be updated after the capture ended)."""
        with self.lock:
            group = self.groups.pop(stream, None)
            if group is None:
                raise CaptureError(f"stream {stream.id} has no task group begun",
                                   code=ErrorCode.RT_STREAM_CAPTURE_UNMATCHED)
            self.closed_groups.append(group)
            return group


# ---- beginning and ending ---------------------------------------------------------------------

def begin_capture(stream: Stream, mode: CaptureMode | int = CaptureMode.GLOBAL) -> None:
    """Start capturing `stream`: its later work is recorded into a graph instead of run."""
    member: CaptureMode | None = enum_member(CaptureMode, mode)  # (True is not THREAD_LOCAL)
    if member is None:
        raise InvalidArgumentError(f"capture mode must be GLOBAL (0), THREAD_LOCAL (1) or RELAXED (2), "
                                   f"got {mode!r:.40}", code=ErrorCode.RT_CAPTURE_MODE_NOT_SUPPORT)
    stream._check_alive()
    if stream._refuse is not None:
        raise stream._refusal()
    with _active_lock:
        if stream._capture is not None:
            raise CaptureError(f"stream {stream.id} is already capturing",
                               code=ErrorCode.RT_STREAM_CAPTURED)
        cap = Capture(stream, member)
        stream._capture = cap
        _active.append(cap)
        if check_unsafe not in Hooks.sync_guards:  # synchronous calls ask it while captures run
            Hooks.sync_guards.append(check_unsafe)


def end_capture(stream: Stream) -> Graph:
    """End the capture begun on `stream`; returns the instantiated Graph.

    Raises RT_STREAM_NOT_CAPTURED (not capturing), RT_STREAM_CAPTURE_UNMATCHED (not the stream
    the capture began on), RT_STREAM_CAPTURE_WRONG_THREAD (another thread, unless RELAXED),
    RT_STREAM_UNJOINED (a forked stream was never waited on again) and
    RT_STREAM_CAPTURE_INVALIDATED (an earlier error invalidated it). In the last three cases
    the capture is over and nothing it recorded ran.
    """
    cap = stream._capture
    if not isinstance(cap, Capture):  # (None, or a task group update diverting the stream)
        raise CaptureError(f"stream {stream.id} is not capturing", code=ErrorCode.RT_STREAM_NOT_CAPTURED)
    if cap.origin is not stream:
        raise CaptureError(f"the capture stream {stream.id} is part of was begun on stream "
                           f"{cap.origin.id}: end it there", code=ErrorCode.RT_STREAM_CAPTURE_UNMATCHED)
    if cap.mode != CaptureMode.RELAXED and cap.thread is not threading.current_thread():
        raise CaptureError(f"the capture on stream {stream.id} was begun in another thread; in "
                           f"{cap.mode.name} mode only that thread can end it",
                           code=ErrorCode.RT_STREAM_CAPTURE_WRONG_THREAD)
    with cap.lock:
        cap.ended = True
        for s in cap.lanes:
            s._capture = None
        open_groups = list(cap.groups)
        cap.groups.clear()
    with _active_lock:
        if cap in _active:
            _active.remove(cap)
        if not _active and check_unsafe in Hooks.sync_guards:
            Hooks.sync_guards.remove(check_unsafe)
    cap._raise_if_invalid()
    if open_groups:
        raise CaptureError(f"a task group begun on stream {open_groups[0].id} was never ended; "
                           f"the capture is discarded", code=ErrorCode.RT_STREAM_CAPTURE_UNMATCHED)
    return Graph._from_capture(cap)


def capture_status(stream: Stream) -> CaptureStatus:
    """NONE, ACTIVE or INVALIDATED: where `stream` stands with respect to a capture."""
    cap = stream._capture
    if cap is None or not hasattr(cap, "invalid"):
        return CaptureStatus.NONE
    return CaptureStatus.ACTIVE if cap.invalid is None else CaptureStatus.INVALIDATED


# ---- calls that a capture forbids ------------------------------------------------------------

def check_unsafe(what: str) -> None:
    """Refuse a synchronous call that a capture in progress forbids (and invalidate that capture).

    As in CUDA: a GLOBAL capture forbids it in every thread, a THREAD_LOCAL or GLOBAL capture
    in the thread that began it; RELAXED forbids nothing. Costs one list test when no capture runs.
    """
    if not _active:
        return
    me = threading.current_thread()
    with _active_lock:
        offenders = [c for c in _active if c.invalid is None and
                     (c.mode == CaptureMode.GLOBAL or c.mode == CaptureMode.THREAD_LOCAL and c.thread is me)]
    if not offenders:
        return
    for c in offenders:
        c.invalidate(ErrorCode.RT_STREAM_CAPTURED, f"{what} during a {c.mode.name} capture")
    streams = ", ".join(str(c.origin.id) for c in offenders)
    raise CaptureError(f"{what} is not permitted while a {offenders[0].mode.name} capture is in "
                       f"progress (begun on stream {streams}); use RELAXED mode or pinned memory "
                       f"(capture invalidated)", code=ErrorCode.RT_STREAM_CAPTURED)


def begin_task_group(stream: Stream) -> None:
    """Mark the nodes `stream` records from now on as one task group (it must be capturing)."""
    cap = stream._capture
    if not isinstance(cap, Capture):
        raise CaptureError(f"stream {stream.id} is not capturing: task groups are marked during a "
                           f"capture", code=ErrorCode.RT_STREAM_NOT_CAPTURED)
    cap.begin_group(stream)


def end_task_group(stream: Stream) -> TaskGroup:
    """End the task group begun on `stream`; returns it (pass it to Graph.update later)."""
    cap = stream._capture
    if not isinstance(cap, Capture):
        raise CaptureError(f"stream {stream.id} is not capturing", code=ErrorCode.RT_STREAM_NOT_CAPTURED)
    return cap.end_group(stream)



# Stream.begin_capture and friends call this module through the engine's observer slot.
Hooks.capture = sys.modules[__name__]
