"""Host callbacks run by report threads: a stream hands callbacks to the thread subscribed to it.

The CANN model (aclrtSubscribeReport / aclrtLaunchCallback / aclrtProcessReport): a user
thread subscribes to streams and loops on process_reports(); when a stream reaches a
callback, the callback is queued for that thread, which runs it. A blocking callback holds
back the stream's later tasks until the report thread has run it.
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import threading
from typing import Any

from .engine.hooks import Hooks, act_for_stream, current_task, restore_stream_mark
from .engine.task import HOST_FUNC, Task
from . import forksafe
from .interrupts import raised_by_handler
from .errors import AscentTimeoutError, ErrorCode, InvalidArgumentError, StreamStateError
from .stream import Stream, resolve_stream
from .validate import check_flag, check_timeout

_log = logging.getLogger("ascentrt.callback")
_lock = forksafe.lock()
_reporters: dict[int, "_Reporter"] = {}   # thread id -> its reporter
_owner: dict[int, "_Reporter"] = {}       # stream id -> the reporter subscribed to it
_POLL_S = 0.25                            # how often a blocked callback checks its reporter lives


class _Running(threading.local):
    """The stream whose callback the calling thread runs (None: none)."""

    stream_id: int | None = None


_running = _Running()


class _Reporter:
    """One report thread: the device it serves, its streams, and the callbacks queued for it."""

    def __init__(self, thread: threading.Thread, device):
        # The thread itself, not only its id: Python hands an ended thread's id to the next
        # thread it starts, which must not pass for the report thread (its callbacks would wait
        # for ever, taken for queued to a live thread).
        self.thread = thread
        self.thread_id: int = thread.ident  # type: ignore[assignment]
        self.device = device
        self.streams: dict[int, Stream] = {}
        self.queue: collections.deque[tuple[int, _Report]] = collections.deque()  # (stream id, report)
        self.cond = forksafe.condition(_lock)
        self.coming = 0     # callbacks launched on its streams that did not reach them yet
        self.signal: Any = None  # while it waits on a simulated device: the backend Signal set
                            # once a callback is queued for it (or it is gone)


class _Report:
    """A queued callback and, for blocking ones, the event its stream waits on."""

    __slots__ = ("fn", "user_data", "done", "cancelled", "task", "coming_to", "inherited")

    def __init__(self, fn, user_data, blocking: bool):
        self.fn, self.user_data = fn, user_data
        self.done = threading.Event() if blocking else None
        self.cancelled = False
        self.inherited = False  # (in a forked child: queued in the parent, which reports it)
        self.task: Task | None = None  # the host task holding its stream (blocking callbacks)
        self.coming_to: _Reporter | None = None  # the reporter that counts it coming (see arrived)

    def arrived(self) -> None:
        """Under _lock: it reached its stream (or was dropped unrun): no longer coming."""
        rep, self.coming_to = self.coming_to, None
        if rep is not None:
            rep.coming -= 1


def _signal(rep: "_Reporter") -> None:
    """Under _lock: end the wait of `rep`'s thread on a simulated device (a callback is queued
    for it, or it is gone)."""
    if rep.signal is not None:
        rep.signal.set()


def _live_thread(thread_id: int) -> threading.Thread | None:
    for t in threading.enumerate():
        if t.ident == thread_id:
            return t
    return None


def _reporter_of(thread_id: int) -> "_Reporter | None":
    """Under _lock: the reporter of the live thread `thread_id`; one left by an ended thread
    whose id a new thread now has is dropped first (its callbacks cancelled, said so)."""
    rep = _reporters.get(thread_id)
    if rep is not None and not rep.thread.is_alive():
        _drop_dead(rep)
        return None
    return rep


def subscribe(thread_id: int, stream=None) -> None:
    """Let thread `thread_id` run the callbacks of `stream` (None: the current default stream).

    Raises InvalidArgumentError when the thread does not exist, 100033 when the stream already
    has a report thread, 107011 when the thread serves another device.
    """
    stream = resolve_stream(stream)
    _refuse_inside_callback(stream, "subscribe")
    thread = _live_thread(thread_id) if type(thread_id) is int else None
    if thread is None:
        raise InvalidArgumentError(f"no live thread with id {thread_id!r}")
    with _lock:
        _reap_if_dead(stream.id)
        if stream.id in _owner:
            raise InvalidArgumentError(f"stream {stream.id} already has a report thread "
                                       f"({_owner[stream.id].thread_id})",
                                       code=ErrorCode.REPEAT_SUBSCRIBE)
        rep = _reporter_of(thread_id)
        if rep is None:
            rep = _reporters[thread_id] = _Reporter(thread, stream.device)
        elif not rep.streams:  # (kept for callbacks handed over before its last unsubscribe)
            rep.device = stream.device
        elif rep.device is not stream.device:
            raise InvalidArgumentError(f"thread {thread_id} already serves device {rep.device.id}",
                                       code=ErrorCode.RT_STREAM_SUBSCRIBE)
        rep.streams[stream.id] = stream
        _owner[stream.id] = rep


def unsubscribe(thread_id: int, stream=None) -> None:
    """Undo subscribe(). A blocking callback of the stream not yet run is cancelled (its task
    fails); a non-blocking one its stream already handed over stays queued for the thread's
    next process_reports (its task is done: cancelling it would lose it silently)."""
    stream = resolve_stream(stream)
    _refuse_inside_callback(stream, "unsubscribe")
    with _lock:
        rep = _owner.get(stream.id)  # (an ended report thread's too: undoing it is cleanup)
        if rep is None or rep.thread_id != thread_id:
            raise InvalidArgumentError(f"thread {thread_id!r} is not subscribed to stream {stream.id}",
                                       code=ErrorCode.RT_STREAM_NO_CB_REG)
        del _owner[stream.id]
        del rep.streams[stream.id]
        keep: collections.deque[tuple[int, _Report]] = collections.deque()
        for sid, report in rep.queue:
            if sid == stream.id and report.done is not None:
                _cancel(report)
            else:
                keep.append((sid, report))
        rep.queue = keep
        if not rep.streams and not rep.queue and _reporters.get(thread_id) is rep:
            del _reporters[thread_id]
            _signal(rep)
        rep.cond.notify_all()


def _refuse_inside_callback(stream: Stream, what: str) -> None:
    """107011 for a subscribe, unsubscribe or callback launch on the stream whose callback the
    calling thread is running (as CANN refuses them: ACL_ERROR_RT_STREAM_SUBSCRIBE)."""
    if _running.stream_id == stream.id:
        raise InvalidArgumentError(f"{what} on stream {stream.id} from inside one of its own "
                                   f"callbacks", code=ErrorCode.RT_STREAM_SUBSCRIBE)


def _reap_if_dead(stream_id: int) -> None:
    """Under _lock: drop the report thread of `stream_id` when it exited without unsubscribing.

    Its queued callbacks can never run any more: they are cancelled and said so in a
    warning (never silently lost), and the stream has no report thread from then on.
    """
    rep = _owner.get(stream_id)
    if rep is not None and not rep.thread.is_alive():
        _drop_dead(rep)


def _drop_dead(rep: _Reporter) -> None:
    """Under _lock: forget the reporter of an ended thread, its queued callbacks cancelled."""
    lost = len(rep.queue)
    for _, report in rep.queue:
        _cancel(report)
    rep.queue.clear()
    for sid in list(rep.streams):
        _owner.pop(sid, None)
    rep.streams.clear()
    if _reporters.get(rep.thread_id) is rep:
        del _reporters[rep.thread_id]
    _signal(rep)
    rep.cond.notify_all()
    _log.warning("report thread %d exited without unsubscribing: %d callback(s) handed to it "
                 "will not run, and each callback its streams reach later fails (107015)",
                 rep.thread_id, lost)


def _cancel(report: _Report) -> None:
    report.cancelled = True
    if report.done is not None:
        report.done.set()


def launch_callback(fn, user_data=None, stream=None, *, blocking: bool = True) -> int:
    """Queue `fn(user_data)` for the stream's report thread once the stream reaches it.

    blocking=True holds back the stream's later tasks until fn has run. Raises
    InvalidArgumentError for a non-callable fn and 107015 when no thread is subscribed.
    Returns the task id.
    """
    stream = resolve_stream(stream)
    if not callable(fn):
        raise InvalidArgumentError(f"callback must be callable, got {type(fn).__name__}")
    _refuse_inside_callback(stream, "a callback launch")
    blocking = check_flag(blocking, "blocking")
    report = _Report(fn, user_data, blocking)
    task = Task(HOST_FUNC, _deliver, (stream.id, report), getattr(fn, "__name__", "callback"))
    with _lock:
        _reap_if_dead(stream.id)
        if stream.id not in _owner:
            raise InvalidArgumentError(f"stream {stream.id} has no report thread (or it exited): "
                                       f"subscribe one first", code=ErrorCode.RT_STREAM_NO_CB_REG)
        if stream._capture is None:  # (a graph's node reaches its stream at each replay)
            # Coming: its report thread, waiting on a simulated device, moves the device on
            # to it (see _wait_for_reports); counted before it is queued, which may run it.
            rep = report.coming_to = _owner[stream.id]
            rep.coming += 1
            task.on_discard = _dropped(report)
            rep.cond.notify_all()
    try:
        return stream._submit(task)
    except BaseException:
        with _lock:
            report.arrived()
        raise


def _dropped(report: _Report):
    """The on_discard of a callback's task: dropped unrun, it is no longer coming."""
    def dropped() -> None:
        with _lock:
            report.arrived()
    return dropped


def _deliver(stream_id: int, report: _Report) -> None:
    """The host task: hand the callback to the report thread; when blocking, wait until it ran."""
    report.task = current_task()  # the stream it holds while it runs (blocking ones)
    with _lock:
        report.arrived()
        _reap_if_dead(stream_id)
        rep = _owner.get(stream_id)
        if rep is None:
            raise StreamStateError(f"stream {stream_id} lost its report thread before a callback "
                                   f"ran", code=ErrorCode.RT_STREAM_NO_CB_REG)
        rep.queue.append((stream_id, report))
        _signal(rep)
        rep.cond.notify_all()
    if report.done is None:
        return
    thread = rep.thread
    while not report.done.wait(_POLL_S):
        if not thread.is_alive():
            if report.done.is_set():  # (it ran, then its thread ended: between the wait and the look)
                break
            with _lock:
                report.cancelled = True
            raise StreamStateError(f"report thread {rep.thread_id} exited before running a "
                                   f"blocking callback", code=ErrorCode.RT_STREAM_NO_CB_REG)
    if report.cancelled:
        raise StreamStateError(f"callback on stream {stream_id} was cancelled by unsubscribe",
                               code=ErrorCode.RT_STREAM_NO_CB_REG)


def process_reports(timeout: float | None = None) -> int:
    """Run the callbacks queued for the calling thread, waiting up to `timeout` s for one (on
    a simulated device, one on its way: the device moves on to it, in virtual time).

    Returns how many ran. Raises StreamStateError (107012) when this thread subscribed to no
    stream and AscentTimeoutError (507012) when nothing arrived in time. A callback that
    raises is logged and does not stop the others (on the main thread a KeyboardInterrupt or
    SystemExit reaches the caller, the callbacks after it left queued for the next call).
    """
    timeout = check_timeout(timeout)
    me = threading.get_ident()
    with _lock:
        rep = _reporter_of(me)
        if rep is None:
            raise StreamStateError(f"thread {me} subscribed to no stream",
                                   code=ErrorCode.RT_THREAD_SUBSCRIBE)
        simulated = not rep.queue and rep.device._backend.properties().virtual
        if not rep.queue and not simulated:
            rep.cond.wait_for(lambda: rep.queue or _reporters.get(me) is not rep, timeout)
    if simulated:
        _wait_on_the_device(rep, me, timeout)
    with _lock:
        entries = [e for e in rep.queue if not e[1].cancelled]
        rep.queue.clear()
        if not rep.streams and _reporters.get(me) is rep:  # (unsubscribed: these were its last)
            del _reporters[me]
        gone = _reporters.get(me) is not rep
    if not entries:
        if gone:
            raise StreamStateError(f"thread {me} was unsubscribed from its last stream",
                                   code=ErrorCode.RT_THREAD_SUBSCRIBE)
        raise AscentTimeoutError(f"no callback arrived within {timeout} s",
                                 code=ErrorCode.RT_REPORT_TIMEOUT)
    main = threading.current_thread() is threading.main_thread()
    for i, (stream_id, report) in enumerate(entries):
        # While a blocking callback runs, its stream is held by it: marking the thread as
        # running that task makes a synchronize of the same stream fail (107011), not hang.
        held = report.task.stream if report.done is not None and report.task is not None else None
        checking = Hooks.sanitizer if report.task is not None else None
        if checking is not None:  # it runs after its stream got there: so does the host from now
            checking.host_function_began(report.task)
        sanitizer = checking if held is None else None
        if sanitizer is not None:  # it runs after its stream got there, beside what follows
            sanitizer.callback_began(report.task, getattr(report.fn, "__name__", "callback"))
        prev = act_for_stream(held)
        outer, _running.stream_id = _running.stream_id, stream_id
        try:
            report.fn(report.user_data)
        except BaseException as exc:
            if not main or isinstance(exc, Exception) and not raised_by_handler(exc):
                # The callback's failure, logged (no Ctrl-C or signal handler lands on a report
                # thread of the program's: there a KeyboardInterrupt or SystemExit is one too)
                _log.exception("callback %r raised", report.fn)
                continue
            # A Ctrl-C (or SystemExit, or what the program's signal handler raised) on the main
            # thread reaches the program; the callbacks after it in the batch did not run: they
            # go back to the front of the queue for the next call, and their streams stay held
            # until then (none is lost, none is left waiting for ever).
            with _lock:
                rep.queue.extendleft(reversed(entries[i + 1:]))
                rep.cond.notify_all()
            raise
        finally:
            if sanitizer is not None:
                sanitizer.callback_ended()
            _running.stream_id = outer
            restore_stream_mark(prev)
            if report.done is not None:
                report.done.set()
    return len(entries)


def _wait_on_the_device(rep: _Reporter, me: int, timeout: float | None) -> None:
    """process_reports' wait on a simulated device: until a callback is queued for `rep` (or
    it is gone), or `timeout` s.

    The report thread is a host waiting on the device: while a callback of its streams is
    coming, the device moves on to it at once (the backend's host_wait, in virtual time: the
    timeout is virtual). While none is, nothing the device does can bring one, and the thread
    waits in real time for the host to launch one, the clock unmoved (a report thread idle
    beside a host thread that computes must not move that thread's time)."""
    backend = rep.device._backend
    clock = backend.now_ns
    virtual_end = None if timeout is None else clock() + timeout * 1e9
    signal = backend.new_signal()  # (one for the whole wait: see SimBackend.host_wait)
    with _lock:
        rep.signal = signal
    try:
        while True:
            with _lock:
                if rep.queue or _reporters.get(me) is not rep:
                    return
                # (each stretch with none coming may last the whole timeout: one coming
                # that is then dropped unrun starts another)
                if not rep.coming:
                    if not rep.cond.wait_for(
                            lambda: rep.queue or rep.coming or _reporters.get(me) is not rep, timeout):
                        return
                    continue
            left = None if virtual_end is None else (virtual_end - clock()) / 1e9
            if left is not None and left <= 0:
                return
            backend.host_wait(signal, left)
    finally:
        with _lock:
            if rep.signal is signal:
                rep.signal = None


def subscribed_streams(thread_id: int) -> list:
    """The streams whose callbacks thread `thread_id` runs."""
    with _lock:
        rep = _reporter_of(thread_id)
        return list(rep.streams.values()) if rep else []


def forget_destroyed_streams() -> None:
    """Drop the subscriptions of streams that were destroyed (their callbacks can never come)."""
    with _lock:
        for sid, rep in list(_owner.items()):
            stream = rep.streams.get(sid)
            if stream is None or stream._refuse == "destroyed":
                del _owner[sid]
                rep.streams.pop(sid, None)
                if not rep.streams and _reporters.get(rep.thread_id) is rep:
                    del _reporters[rep.thread_id]
                rep.cond.notify_all()


def _held_by(thread_id: int) -> list:
    """Streams whose blocking callback is queued for report thread `thread_id`: they cannot go
    on until it processes reports (the engine's deadlock diagnosis asks)."""
    with _lock:
        rep = _reporter_of(thread_id)
        if rep is None:
            return []
        return [r.task.stream for _, r in rep.queue
                if r.done is not None and r.task is not None and not r.cancelled]


def _warn_unrun_at_exit() -> None:
    """At exit: say which report threads still had callbacks queued that never ran (a program
    that subscribed a thread, often its main one, and ended before processing them)."""
    with _lock:
        left = [(rep.thread_id, sum(not r.cancelled and not r.inherited for _, r in rep.queue))
                for rep in _reporters.values()]
    for thread_id, n in left:
        if n:
            _log.warning("the program ended with %d callback(s) queued for report thread %d that "
                         "never ran: it did not call process_report for them", n, thread_id)


def _after_fork_in_child() -> None:
    """In a forked child: the callbacks queued so far are the parent's (it runs them, or says
    they never ran): the child's report at exit leaves them out."""
    with _lock:
        for rep in _reporters.values():
            for _, r in rep.queue:
                r.inherited = True


Hooks.thread_holds.append(_held_by)
atexit.register(_warn_unrun_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
