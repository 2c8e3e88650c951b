"""The engine: stream queues, dependency tracking, executors, completion, deadlock detection.

One lock guards all stream and queue state; it is never held while user code (kernels, host
functions, callbacks) runs. Submission appends to the stream and, only when the stream was
idle, hands it to an executor class; a worker that finishes a task continues with the next
ready stream itself, so a busy stream costs no thread handoff per task.
"""

from __future__ import annotations

import collections
import contextlib
import heapq
import atexit
import itertools
import signal
import logging
import os
import sys
import threading
import time
from typing import Any, Iterator

from .. import forksafe
from ..backends.base import SUBMITTED
from .. import config, interrupts
from ..callsite import site_text, user_code_site
from ..errors import (AscentError, DeadlockError, ErrorCode, ExceptionInfo, StreamStateError,
                      TimeoutError_, failure_of_a_task, keeping_last_error, note_async_error,
                      warn_at_caller)
from .hooks import Hooks, _local, current_task
from .stepping import ExecutorQueue, batch_succeeded, pending
from .task import (with_spawned, DETACH, EVENT_RECORD, EVENT_WAIT, EXECUTOR_NAMES, HOST_FUNC, KERNEL,
                   KIND_NAMES, NOTIFY_RECORD, NOTIFY_WAIT, VALUE_WAIT, Task)

BATCH = 64  # most tasks one executor takes from a stream per lock round trip
VALUE_POLL_S = 1e-3  # how often a real-time device looks again at a value wait's word
SLICE_NS = 1_000_000  # a batch yields to a waiting stream of equal priority after this long
PRIORITY_LEVELS = 8  # 0 (highest) .. 7 (lowest), as CANN's create_stream_with_config
# A virtual wait's slice doubles while work runs without progress, up to this (a task's cost is
# at most 1e9 s: the clock must stay an int64 of ns)
MAX_VIRTUAL_SLICE_S = 1e6

# A failed task's code comes from its kind alone (copies and fills: RT_COPY_DATA), not from
# the executor that ran it: a graph's node that failed on a forked lane is raised by the
# launch stream's join task, renamed to the node, on another executor class.
_ERROR_OF_KIND = {KERNEL: ErrorCode.RT_AICORE_EXCEPTION, HOST_FUNC: ErrorCode.RT_AICPU_EXCEPTION}
_log = logging.getLogger("ascentrt")


class _ReadyQueue:
    """Streams whose head task waits for an executor of one class, by priority then FIFO."""

    __slots__ = ("levels", "count")

    def __init__(self):
        self.levels: list[collections.deque] = [collections.deque() for _ in range(PRIORITY_LEVELS)]
        self.count = 0

    def push(self, stream) -> None:
        self.levels[stream._priority].append(stream)
        self.count += 1

    def pop(self):
        if not self.count:
            return None
        self.count -= 1
        for level in self.levels:
            if level:
                return level.popleft()
        raise AssertionError("ready count out of step")  # pragma: no cover

    def remove(self, stream) -> None:
        level = self.levels[stream._priority]
        if stream in level:
            level.remove(stream)
            self.count -= 1


class DeviceQueues:
    """The executors of one device: per class a ready queue, parked workers and worker threads."""

    def __init__(self, engine: "Engine", device_id: int, backend):
        self.engine = engine
        self.device_id = device_id
        self.backend = backend
        props = backend.properties()
        self.sizes = sizes = props.executors
        self.virtual = props.virtual            # time is modelled: host calls are charged
        self.queue_depth = props.queue_depth    # a stream this full makes a submit wait
        self.release_ns = props.release_ns      # a wait's release to its stream going on (virtual)
        self.ready = [_ReadyQueue() for _ in sizes]
        # Per class, the wake-up locks of parked workers not yet woken (a list: its length is
        # the number of idle workers). Lighter than a Condition: one release wakes one worker.
        self.idle: list[list] = [[] for _ in sizes]
        self.busy = [0 for _ in sizes]
        # Per class, the queues holding an executor's place: one is appended (a single step
        # a signal handler's exception cannot cut in half) before the backend starts it, so an
        # executor whose start was interrupted is never started twice (see start)
        self.queues: list[list[ExecutorQueue]] = [[] for _ in sizes]
        self.started = False
        self.closing = False                    # set at exit: parked executors end
        self.streams: dict[int, Any] = {}      # id -> live stream, for diagnosis
        self.active: set = set()                # streams with work queued, running or blocked
        self.detached: Any = None               # hidden stream for non-blocking host functions
        engine.devices.append(self)
        engine.active_sets.append(self.active)

    def start(self) -> None:
        """Start the executors through the backend (under the engine lock, before the first task
        is queued). Raises StreamStateError (207005) when one cannot start, queuing nothing;
        the next submission starts the missing ones. An exception a signal handler of the
        program raises meanwhile reaches the program as it is, with nothing queued, and the
        executor whose start it cut is counted if its thread began, else started again."""
        interrupts.install()  # (from the first submission on: see interrupts.protect)
        if sys.is_finalizing():
            raise StreamStateError("the interpreter is shutting down: no executor can start, so "
                                   "work submitted now would never run",
                                   code=ErrorCode.RT_RESOURCE_ALLOC_FAIL)
        self.closing = False
        for ex, n in enumerate(self.sizes):
            if self.virtual and n:
                n = 1  # a simulator steps one queue per class for all its units
            placed = self.queues[ex]
            for q in [q for q in placed if not q.began.is_set()]:  # (a start that was cut)
                if not q.began.wait(UNSTARTED_WAIT_S):
                    q.revoked = True  # never began: its place goes to a new one
                    placed.remove(q)
            while len(placed) < n:
                name = f"ascentrt-dev{self.device_id}-{EXECUTOR_NAMES[ex]}{len(placed)}"
                q = ExecutorQueue(self.engine, self, ex)
                placed.append(q)
                try:
                    self.backend.start_queue(name, q)
                except (RuntimeError, MemoryError) as exc:
                    if type(exc) not in (RuntimeError, MemoryError):
                        raise  # (a subclass: the program's own, from a signal handler)
                    # e.g. RuntimeError: can't start new thread
                    q.revoked = True
                    placed.remove(q)
                    raise StreamStateError(f"device {self.device_id}: executor {name} could not "
                                           f"start ({exc}); nothing was queued",
                                           code=ErrorCode.RT_RESOURCE_ALLOC_FAIL) from exc
                q.began.set()  # (a simulator's queue has no thread to say so)
        self.started = True


# How long a submission that finds an executor whose start an exception cut waits for its
# thread to begin, before it starts another in its place (the thread begins within
# milliseconds when it was started at all)
UNSTARTED_WAIT_S = 0.5
# How long the exit waits for the executors and the watchdog to end (a task running then
# keeps its thread until it returns)
EXIT_WAIT_S = 1.0


_WAIT_KINDS = (EVENT_WAIT, NOTIFY_WAIT)


def _control_ns(s) -> int:
    """When a record that virtual stream `s` runs inline happens: now, or, right after a wait
    released the stream, no earlier than that release's latency (as the task it precedes)."""
    dq = s._dq
    now = dq.backend.now_ns()
    released = s._released_ns
    if released and released + dq.release_ns > now:
        return released + dq.release_ns
    return now


def _released_unrun(s, t: Task) -> bool:
    """Whether wait `t` of stream `s` was released by a record its stream dropped unrun."""
    if t.kind == EVENT_WAIT:
        return t.marker.dropped and t.marker.lost_work and t.marker.stream is not s
    return t.releaser is not None and t.releaser.dropped and t.releaser.lost_work


def _error_text(exc: BaseException) -> str:
    """'ExceptionType: message', as a profile shows a failure."""
    return f"{type(exc).__name__}: {exc}"


def _unrun_record(s, t: Task) -> AscentError:
    """The failure of wait `t` of stream `s`, released by a record that never ran."""
    if t.kind == EVENT_WAIT:
        record, what, why = t.marker.stream, "an event record", t.marker.discarded_by
    else:
        releaser: Any = t.releaser
        record, what, why = releaser.stream, f"a record of notify {t.notify.id}", releaser.discarded_by
    why = f"{why} dropped it" if why else f"stream {record.id} stopped at a failed task and dropped it"
    return failure_of_a_task(StreamStateError, f"stream {s.id}'s wait (task {t.id}) was released by "
                             f"{what} on stream {record.id} that never ran ({why}, with the work "
                             f"before it): the work after the wait ran without it", ErrorCode.RT_STREAM_ABORT)


class _AllOf:
    """A signal that `count` streams set, one each as it reaches its target (under the engine
    lock): it sets `signal` at the last."""

    __slots__ = ("signal", "left")

    def __init__(self, signal, count: int):
        self.signal, self.left = signal, count

    def set(self) -> None:
        """One more stream is done."""
        self.left -= 1
        if self.left == 0:
            self.signal.set()


class Engine:
    """Process-wide scheduler state. Streams of every device share one lock (cross-device waits)."""

    def __init__(self):
        # Reentrant only so that submit() can tell it still holds the lock after an interrupt.
        self.lock = forksafe.rlock()
        self.devices: list[DeviceQueues] = []  # every device's queues, in device order
        self.active_sets: list[set] = []       # their `active` sets, for a cheap "anything busy?"
        self._claimed_waits: set = set()  # notify waits dropped records will let go (_discard)
        # Streams blocked at a value wait: looked at again whenever work completes (it may have
        # written the word), at a host wait's checks, and by the watchdog on a real-time device
        # (the host may write it)
        self._value_waits: list = []
        self._checking_values = False
        # One entry per submitting host or worker blocked on the lock (appended and popped by
        # the waiter itself: atomic list operations, never stale): the holder hands the GIL over
        # as it lets the lock go. Without that the waiter, woken without the GIL, waits out the
        # holder's switch interval (5 ms), and launches spread over many streams (a lock round
        # trip per stream) fall into a convoy.
        self.lock_waiters: list = []
        self.executor_faults = 0   # internal errors executors met (see _executor_fault)
        self.progress = 0          # tasks completed so far: a stalled device stops moving it
        # heap of (deadline, seq, stream, task) for timed waits, and of (time, seq, stream,
        # record) for virtual records stamped later than they ran (see _control)
        self._deadlines: list = []
        self._seq = itertools.count()
        self._watchdog = False   # its thread was started (or a start was tried and cut)
        self._watching = False   # a watchdog thread runs (it says so itself, as it begins)
        self._watch_stop = False  # the exit stopped it: it ends (see _stop_executors_at_exit)
        self.stopped_at_exit = False  # the exit ended every executor (a wait starts them again)
        self._watchdog_cv = forksafe.condition(self.lock)
        self._exit_cv = forksafe.condition(self.lock)  # executors ending at exit notify it
        # stream -> (thread id, streams, what) while a task of that stream waits in wait_host:
        # the stream (and the executor running it) then depends on those streams.
        self._host_waits: dict = {}
        # thread id -> (the streams it waits for in wait_host, whether without end): any host
        # thread, for the deadlock check (one that waits without end for stuck streams cannot
        # act either)
        self._thread_waits: dict = {}
        # ASCENTRT_CALL_SITES (read as the devices are made): each task keeps the program line
        # that queued it, for the reports of stuck streams to name
        self.sites = False

    # ---- submission (hot path) -------------------------------------------------------------

    def submit(self, stream, task: Task) -> int:
        """Append `task` to `stream` and start the stream if it was idle; returns the task id.

        The one-task form of submit_all(), for the launch hot path; event records go through
        submit_all(), which sets the position their marker captures.
        """
        dq = stream._dq
        if dq.virtual:  # (_host_submits, inlined: a simulated launch pays every call)
            if self._value_waits:  # (a word the host wrote since its last call: then, before
                self.look_at_values()  # this call's cost passes)
            ready = dq.backend.host_call(KIND_NAMES[task.kind])
            if ready:  # (submitted by a host function: not before its time)
                task.ready_ns = ready
            if dq.queue_depth and stream._submitted - stream._completed >= dq.queue_depth:
                self._wait_for_room(stream)
        if self.sites:
            task.site = user_code_site(2)
        races = None
        san = Hooks.sanitizer
        if san is not None and stream._refuse is None:
            # Before the engine lock (its work would hold the executors up); it may refuse the
            # task, and nothing is queued yet. Its races are told once the task is queued.
            races = san.submitted(stream, task)
        lock = self.lock
        try:  # (cheaper than `with`, which costs ~0.1 us per launch here)
            if not lock.acquire(False):
                if races is None:
                    self._wait_for_lock()
                else:  # (the sanitizer took the task in: a signal must not cut it off here)
                    self._wait_for_lock_whole()
            try:
                if stream._refuse is not None:
                    raise stream._refusal()
                if not dq.started:
                    dq.start()  # before anything is queued: a failed start leaves no trace
                stream._submitted = task_id = stream._submitted + 1
                task.id = task_id
                task.stream = stream
                if Hooks.profiler is not None:
                    task.t_enqueue = dq.backend.now_ns()
                stream._tasks.append(task)
                if not stream._active:
                    stream._active = True
                    dq.active.add(stream)
                    ex = task.executor
                    if ex is None:
                        self._advance(stream, None)  # a control task: completes inline
                    else:
                        # An idle stream's queue was empty, so `task` is its head: make it ready
                        # (what _advance would do, without its loop: many streams take this path).
                        ready = dq.ready[ex]  # (its push, inlined: one call less per launch)
                        ready.levels[stream._priority].append(stream)
                        ready.count += 1
                        parked = dq.idle[ex]
                        if parked:
                            parked.pop().release()
            finally:
                lock.release()
                if self.lock_waiters:
                    _hand_over_gil()
        except BaseException:
            # Interrupted between the acquire and the try.
            if lock._is_owned():  # type: ignore[attr-defined]  # RLock has it; typeshed omits it
                lock.release()
            raise
        if dq.virtual and self._thread_waits:
            dq.backend.host_call(SUBMITTED)  # (after the append: see the constant)
        if races:  # (a warning turned into an error leaves the task queued, as the state says)
            san.announce(races)
        return task_id

    def _wait_for_lock(self) -> None:
        """Block until this thread holds the engine lock (a wait a signal may end)."""
        self._acquire_as_waiter()

    def _acquire_as_waiter(self) -> None:
        """Block until this thread holds the engine lock, marked as waiting meanwhile (see
        lock_waiters: its holder then hands the GIL over as it lets go). (Whether a signal may
        end the wait is its caller's: the registered frames are those around it.)"""
        waiting = self.lock_waiters
        waiting.append(None)
        try:
            self.lock.acquire()
        finally:
            waiting.pop()

    def _wait_for_lock_whole(self) -> None:
        """_wait_for_lock for a submit whose task the race sanitizer has taken in (it checks
        before the engine lock): not an interruptible wait, so a signal comes once the task is
        queued, never leaving the sanitizer with accesses of a task that never was."""
        self._acquire_as_waiter()

    def _host_submits(self, stream, what: str) -> None:
        """On a virtual device: charge the host call, and wait while the stream's submission
        queue is full (as a full SQ makes the host's next submit wait)."""
        dq = stream._dq
        if self._value_waits:  # (a word the host wrote since its last call: then, before this
            self.look_at_values()  # call's cost passes)
        dq.backend.host_call(what)
        if dq.queue_depth and stream._submitted - stream._completed >= dq.queue_depth:
            self._wait_for_room(stream)

    def _wait_for_room(self, stream) -> None:
        """Wait until the full submission queue of `stream` has room for one more task (a
        profiler is told: that time is waiting on the device, not the submit's own cost)."""
        depth = stream._dq.queue_depth
        prof = Hooks.profiler
        t0 = prof.now_ns() if prof is not None else 0
        self.wait_completed(stream, None, f"a submit to full stream {stream.id} ({depth} tasks "
                                f"queued)", behind=depth - 1)
        if prof is not None:
            prof.waited_for_room(stream, t0)

    def wait_completed(self, stream, timeout: float | None, what: str, behind: int = 0) -> None:
        """Block the host until all but the last `behind` tasks submitted to `stream` so far have
        completed; TimeoutError_ (507046) past `timeout` s, DeadlockError if they never can."""
        self.wait_all_completed([stream], timeout, what, behind)

    def wait_all_completed(self, streams: list, timeout: float | None, what: str,
                           behind: int = 0) -> None:
        """wait_completed for several streams of one device at once: one wait that ends when
        the last of them is done (a simulated host's return path starts there, not at the
        first stream's end, as it would after one wait per stream)."""
        with self.lock:
            targets = [(s, s._submitted - behind) for s in streams]
            targets = [(s, target) for s, target in targets if s._completed < target]
            if not targets:
                return
            signal = targets[0][0]._dq.backend.new_signal()
            ev = signal if len(targets) == 1 else _AllOf(signal, len(targets))
            for s, target in targets:
                s._sync_waiters.append((target, ev))

        def cancel():
            for s, _ in targets:
                s._sync_waiters = [w for w in s._sync_waiters if w[1] is not ev]

        self.wait_host(signal, timeout, [s for s, _ in targets], what, ErrorCode.RT_STREAM_SYNC_TIMEOUT,
                       cancel)

    # ---- progress (all under the lock) -----------------------------------------------------

    def _advance(self, stream, running_ex) -> None:
        """Move `stream` (and any stream its control tasks release) as far as possible."""
        work = [stream]
        while work:
            s = work.pop()
            tasks = s._tasks
            while tasks:
                t = tasks[0]
                ex = t.executor
                if ex is not None:
                    dq = s._dq
                    ready = dq.ready[ex]
                    ready.push(s)
                    # The worker that ran `stream` pops the next ready stream itself; wake
                    # another only when there is more ready work than that one pop.
                    if ex != running_ex or s is not stream or ready.count > 1:
                        parked = dq.idle[ex]
                        if parked:
                            parked.pop().release()  # woken once: later submits see one fewer idle
                    break
                if not self._control(s, t, work):
                    break  # blocked on a wait
                tasks.popleft()
                self._completed(s)
                if t.kind == VALUE_WAIT and t.error is not None:  # (its word could not be
                    self._report_later([self._fail(s, t, t.error)])  # looked at: not met)
                elif t.kind in _WAIT_KINDS and _released_unrun(s, t):
                    # Released by a record its stream dropped unrun: what this stream does next
                    # would read what the work before that record was to write. It fails (in
                    # STOP mode, the rest of it is dropped too), as CANN reports an aborted wait.
                    self._report_later([self._fail(s, t, _unrun_record(s, t))])
            else:
                s._active = False
                s._dq.active.discard(s)

    def _control(self, s, t: Task, work: list) -> bool:
        """Run a control task inline; False when the stream must block on it."""
        kind = t.kind
        if kind == EVENT_RECORD:
            m = t.marker
            if m.timing or Hooks.profiler is not None or s._dq.virtual:  # (see EVENT_WAIT)
                m.ts_ns = _control_ns(s)
                t.t_start = t.t_end = m.ts_ns
                if m.ts_ns > s._dq.backend.now_ns():
                    # Virtual, right after a wait's release: it happens that release's latency
                    # later, so it is done then, not now (a query before then says not yet, a
                    # synchronize ends then): the simulator completes it at its time, as it
                    # fires a timed wait's deadline. Its stream goes on meanwhile.
                    heapq.heappush(self._deadlines, (m.ts_ns, next(self._seq), s, t))
                    self._profile_control(t, m.ts_ns)
                    return True
            self._mark_done(m, work)
            self._profile_control(t, m.ts_ns)  # (the time the event has: elapsed_time's)
            return True
        if kind == EVENT_WAIT:
            if t.marker.done:
                if s._dq.virtual:  # (a release a moment ago still takes its latency, as one
                    # that let a blocked wait go: which came first at one instant must not matter)
                    s._released_ns = max(s._released_ns, t.marker.ts_ns)
                    # (it ends no earlier than the record it waited for: a record right after
                    # a wait is stamped that wait's release latency later than it ran)
                    self._profile_control(t, ends_at=max(s._dq.backend.now_ns(), t.marker.ts_ns))
                else:
                    self._profile_control(t)
                return True
            t.marker.waiters.append(s)
            self._block(s, t)
            return False
        if kind == NOTIFY_RECORD:
            n = t.notify
            at = _control_ns(s) if s._dq.virtual else 0  # (0: now)
            self._profile_control(t, at)  # first: the record happens, then the wait it releases ends
            if n._waiters:
                self._let_go(n._waiters.popleft(), t, work, at)
            elif not n._set:
                n._set = t  # set, by this record (a second one finds it set: the first released)
                if s._dq.virtual:
                    n._set_ns = _control_ns(s)
            return True
        if kind == NOTIFY_WAIT:
            n = t.notify
            if n._set or t.let_go:
                ends = 0  # (now)
                if t.let_go:  # (a record dropped unrun let this queued wait go: see _discard;
                    t.let_go = False  # its releaser says which, and _advance fails the wait)
                else:
                    t.releaser = n._set
                    n._set = False
                    if s._dq.virtual:  # (its release's latency, as for an event's: see there)
                        s._released_ns = max(s._released_ns, n._set_ns)
                        ends = max(s._dq.backend.now_ns(), n._set_ns)  # (no earlier than the
                        # record's stamp: see EVENT_WAIT)
                self._profile_control(t, ends_at=ends)
                return True
            n._waiters.append(s)
            self._block(s, t)
            return False
        if kind == VALUE_WAIT:
            if t.fn():
                if Hooks.sanitizer is not None:  # (one it held, seeing no write that meets it)
                    Hooks.sanitizer.value_wait_passed(s)
                if s._dq.virtual and t.written_ns:  # (a write a moment ago still takes its
                    # release's latency, as an event record does: see EVENT_WAIT)
                    s._released_ns = max(s._released_ns, t.written_ns)
                    self._profile_control(t, ends_at=max(s._dq.backend.now_ns(), t.written_ns))
                else:
                    self._profile_control(t)
                return True
            self._value_waits.append(s)
            self._block(s, t)
            if not s._dq.virtual:
                self._wake_watchdog()  # (it polls the word: the host may write it)
            return False
        if kind == DETACH:
            t.fn.thread = t.thread          # its errors belong to the thread and stream
            t.fn.origin = (s, t.id)         # that launched it, not to the hidden detached stream
            t.fn.acting_for = (t.fn.origin,)  # (a free after it on `s` still shows it the bytes)
            detached = s._dq.detached
            self.submit_locked(detached, t.fn)
            if t.t_enqueue:  # (profiling: it was submitted when the program launched it)
                t.fn.t_enqueue = t.t_enqueue
            # A free ordered after `s` waits for it too: it was queued before the free, and
            # still reads the bytes.
            s._spawned = with_spawned(s._spawned, ((detached, t.fn.id),))
            return True
        raise AssertionError(f"not a control task: {t!r}")  # pragma: no cover

    def _block(self, s, t: Task) -> None:
        """Stream `s` blocks at wait `t` (its waiters list already holds it)."""
        s._blocked = t
        if Hooks.profiler is not None:  # the wait's slice spans the time it blocks
            t.t_start, t.t_end = s._dq.backend.now_ns(), 0
        self._arm_deadline(s, t)

    def _let_go(self, w, t: Task, work: list, at_ns: int = 0) -> None:
        """Release stream `w`, blocked at a notify wait, by record `t` (virtual: made at `at_ns`,
        else now)."""
        w._blocked = None
        if w._dq.virtual:
            w._released_ns = at_ns or w._dq.backend.now_ns()
        work.append(w)
        consumed = w._tasks.popleft()  # the waiter's wait task completes here
        consumed.releaser = t           # (for the profiler's record -> wait arrow)
        self._completed(w)
        self._profile_control(consumed, ends_at=at_ns)

    def _wait_to_let_go(self, n, dropping):
        """The wait task a notify record dropped unrun lets go, chosen as it is dropped: the
        first one blocked on `n`, else the first queued on a stream (not `dropping`, whose
        tasks go too), one no other dropped record claimed; a wait queued later must not
        pass: nothing was produced for it. None when there is none."""
        claimed = self._claimed_waits
        for w in n._waiters:
            if w._blocked is not None and w._blocked not in claimed:
                claimed.add(w._blocked)
                return w._blocked
        for s in self._all_streams():
            if s is dropping:
                continue
            for x in list(s._tasks):
                if x.kind == NOTIFY_WAIT and x.notify is n and x not in claimed:
                    claimed.add(x)
                    return x
        return None

    @staticmethod
    def _mark_done(m, work: list) -> None:
        """Complete marker `m`: the streams waiting on it go to `work`, host waiters wake."""
        m.done = True
        if m.waiters:
            for w in m.waiters:
                w._blocked = None
                if w._dq.virtual:  # (from the record's stamp: it may pay its own release's latency)
                    w._released_ns = max(w._dq.backend.now_ns(), m.ts_ns)
                work.append(w)
            m.waiters = []
        for ev in m.host_waiters:
            ev.set()
        m.host_waiters = []

    def release_markers(self, markers) -> None:
        """Complete markers that no stream will record now (the parts of a collective that gave
        up): whatever waits on them goes on."""
        with self.lock:
            if Hooks.sanitizer is not None:  # first: what the waiters do next comes after
                Hooks.sanitizer.markers_released(markers)
            released: list = []
            for m in markers:
                if not m.done:
                    self._mark_done(m, released)
            for w in released:
                self._advance(w, None)

    def submit_locked(self, stream, task: Task) -> None:
        """Submit while already holding the lock (used to hand off non-blocking host functions:
        the observers saw the task when it was submitted to its own stream)."""
        self.submit_all_locked((stream,), ((stream, task),), observe=False)

    def submit_all(self, streams, work, internal: bool = False) -> None:
        """Submit many tasks at once (a graph launch): `work` is (stream, task) pairs in order.

        Every task is queued under one lock hold before any stream starts, so an executor
        woken by the first task never races the queuing of the rest; raises the refusal of
        the first stream in `streams` that refuses work, before queuing anything. `internal`:
        the runtime's own streams (a communicator's lanes), which never make the host wait for
        room in their queues.
        """
        first = streams[0]
        if first._dq.virtual:
            what = KIND_NAMES[work[0][1].kind] if len(work) == 1 else "graph_launch"
            if internal:
                first._dq.backend.host_call(what)
            else:
                self._host_submits(first, what)
        with self.lock:
            for s in streams:
                if s._refuse is not None:
                    raise s._refusal()
            self.submit_all_locked(streams, work)
        if first._dq.virtual and self._thread_waits:
            first._dq.backend.host_call(SUBMITTED)  # (after the append: see the constant)

    def submit_all_locked(self, streams, work, observe: bool = True) -> None:
        """submit_all() for a caller that holds the lock (and checked the streams)."""
        for s in streams:
            if not s._dq.started:
                s._dq.start()  # before anything is queued
        san = Hooks.sanitizer if observe else None
        races = san.submitted_all(work) if san is not None else None  # may refuse: nothing queued yet
        stamp = Hooks.profiler is not None
        me = threading.get_ident()
        site = user_code_site(2) if self.sites else None  # (one call of the program queued them)
        for s, t in work:
            s._submitted = t.id = s._submitted + 1
            t.stream = s
            if site is not None and t.site is None:
                t.site = site
            if not t.thread:
                t.thread = me  # (a graph's or a collective's tasks: the thread that launched them)
            if stamp:
                t.t_enqueue = s._dq.backend.now_ns()
            if t.kind == EVENT_RECORD:
                t.marker.position = t.id
            s._tasks.append(t)
        for s in reversed(streams):  # forked lanes first: their waits are in place when records run
            if s._tasks and not s._active:
                s._active = True
                s._dq.active.add(s)
                self._advance(s, None)
        if races:  # (once all is queued: a warning turned into an error leaves it so)
            san.announce(races)  # type: ignore[union-attr]

    def _profile_control(self, t: Task, at: int = 0, ends_at: int = 0) -> None:
        """Report control task `t` to the profiler, as ended now (or at `at`, when not 0, an
        instant; or at `ends_at`, a wait that may have blocked since its start)."""
        prof = Hooks.profiler
        if prof is not None:
            now = at or ends_at or t.stream._dq.backend.now_ns()
            if t.t_end or not t.t_start or at:  # not a wait that blocked (t_end 0): no time
                t.t_start = now
            t.t_end = now
            # A wait released by a record dropped unrun fails once it ends (see _advance and
            # _release_records): the profile shows that failure on it.
            unrun = t.kind in _WAIT_KINDS and t.error is None and _released_unrun(t.stream, t)
            if unrun:
                prof.task_done(t, _error_text(_unrun_record(t.stream, t)))
            else:
                prof.task_done(t)

    def _completed(self, s, count: int = 1) -> None:
        """Count finished tasks of `s` and wake host threads synchronizing on it."""
        s._completed += count
        self.progress += count
        if s._sync_waiters:
            self._wake_synchronizers(s)

    @staticmethod
    def _wake_synchronizers(s) -> None:
        """Wake the host threads whose wait on `s` its completed count now satisfies."""
        done = s._completed
        keep = []
        for target, ev in s._sync_waiters:
            if done >= target:
                ev.set()
            else:
                keep.append((target, ev))
        s._sync_waiters = keep

    def _fail(self, s, t: Task, exc: BaseException) -> ExceptionInfo:
        """Record a task failure on its stream; in STOP mode discard the rest of the stream."""
        if isinstance(exc, AscentError):  # (task_code: an error of another numbering, HCCL's)
            code = getattr(exc, "task_code", None) or exc.code
        else:
            code = _ERROR_OF_KIND.get(t.kind, ErrorCode.RT_COPY_DATA)
        if t.on_fail is not None:  # (a collective's lane step: its collective fails on every rank)
            t.on_fail(t, exc)
        if t.origin is not None:  # a non-blocking host function: report on the launching stream
            origin, task_id = t.origin
            info = ExceptionInfo(s.device.id, origin.id, task_id, int(code), t.label, exc, t.thread)
            origin._errors.append(info)
            note_async_error(t.thread, code)
            return info
        info = ExceptionInfo(s.device.id, s.id, t.id, int(code), t.label, exc, t.thread)
        s._errors.append(info)
        note_async_error(t.thread, code)
        if s._stop_on_failure and (s._refuse is None or s._refuse == "closing"):
            s._refuse = "failed"
            s._failure = info
            self._discard(s)
        return info

    def _discard(self, s, why: str = "") -> int:
        """Drop the pending tasks of `s` (the one running finishes) and release their waiters;
        `why` (an abort, a destroy, a reset) is what synchronizations that waited meanwhile
        report (none for a STOP-mode failure: they report the failure itself)."""
        blocked = s._blocked
        if blocked is not None:
            self._unblock(s)  # first: a record released below must not hand `s` a notify
            prof = Hooks.profiler
            if prof is not None:  # the wait blocked until now: the profile shows it cut short
                blocked.dropped = True
                blocked.t_end = s._dq.backend.now_ns()
                prof.task_done(blocked)
        tasks = s._tasks
        dropped = 0
        # (the first task this drops: the one after the running one, else the queue's head)
        first = tasks[0].id if tasks else 0
        if s._running is not None:
            # A worker runs a batch outside the lock: its tasks after the running one must not
            # start. Publish the cut before reading _running; the worker publishes _running
            # before reading _cut, so one of the two always sees the other (see _worker).
            cut_before = s._cut
            s._cut = -1
            running = s._running
            last = tasks[0].id - 1 if tasks else s._submitted
            s._cut = running.id
            # (the worker completes them when its batch ends; an earlier discard during this
            # task counted them already)
            dropped = 0 if cut_before == running.id else last - running.id
            first = running.id + 1
        queued = len(tasks)
        records = []
        prof = Hooks.profiler
        unrun: list | None = [] if prof is not None else None  # (what the profile shows dropped)
        # Whether work before the records dropped here never ran (or failed: a STOP-mode
        # discard follows a failure): their waiters go on without it. A record right behind
        # work that all ran releases them as its run would have.
        lost = not why or why == _FORKED  # (a fork: the child never saw the running one end)
        while tasks:
            t = tasks.popleft()
            if t.on_discard is not None:  # (first: what its record releases must know)
                t.on_discard()
            if t.kind == EVENT_RECORD or t.kind == NOTIFY_RECORD:
                t.dropped = True  # (a profile shows it dropped, not run, where it lets waiters go)
                records.append(t)
                if t.kind == EVENT_RECORD:
                    t.marker.lost_work = lost
                    if why:
                        t.marker.discarded_by = why  # (its event's later syncs report it)
                else:
                    t.lost_work = lost
                    t.lets_go = self._wait_to_let_go(t.notify, s)
                    t.discarded_by = why
                continue
            if t.executor is not None:
                lost = True
            if unrun is not None:
                unrun.append(t)
        if unrun:
            prof.tasks_dropped(s, unrun, s._dq.backend.now_ns())
        if s._running is not None:
            # A task still runs: the records behind it release their waiters once it ends (a
            # stream that waits on one, or a block reused after it, must not overlap with it).
            s._after_running = (s._after_running or []) + records
        else:
            self._release_records(s, records)
        self._completed(s, queued)
        for ready in s._dq.ready:
            ready.remove(s)
        if s._running is None:
            s._active = False
            s._dq.active.discard(s)
        if why and (dropped + queued or s._running is not None):
            # (counted with only a task running too: a task that waits by itself, value_wait's,
            # looks at the count and stops)
            s._aborts += 1
            if dropped + queued:
                s._abort_log = (*s._abort_log[-7:], (
                    s._aborts, first, f"{dropped + queued} pending task(s) of stream {s.id} "
                                      f"discarded by {why}"))
        return dropped + queued

    def _release_records(self, s, records: list) -> None:
        """Release the waiters of event and notify records a discard dropped: nothing will run
        before them any more (none would ever be released otherwise)."""
        for t in records:
            released: list = []
            if t.kind == EVENT_RECORD:
                t.marker.dropped = True  # (done, for its waiters, but it has no time)
                self._mark_done(t.marker, released)
                self._profile_control(t)
            else:
                # It never ran: it sets nothing a later wait would take; the wait that existed
                # when it was dropped goes on (none would let it go otherwise).
                self._profile_control(t)
                target, t.lets_go = t.lets_go, None
                if target is not None:
                    self._claimed_waits.discard(target)
                    n = t.notify
                    blocked = next((w for w in n._waiters if w._blocked is target), None)
                    if blocked is not None:  # (its stream is at it: released here, and it fails
                        n._waiters.remove(blocked)  # when work the record was to follow never ran)
                        self._let_go(blocked, t, released)
                        if t.lost_work:
                            self._report_later([self._fail(blocked, target, _unrun_record(blocked, target))])
                    else:
                        target.let_go = True  # (when its stream reaches it)
                        target.releaser = t
            for w in released:
                self._advance(w, None)

    def _cut_off(self, s, t: Task) -> bool:
        """Whether _discard dropped `t`, a task of a batch running outside the lock."""
        with self.lock:
            return s._cut is not None and t.id > s._cut

    def _unblock(self, s) -> None:
        """Take `s` off whatever marker or notify it waits on."""
        t = s._blocked
        s._blocked = None
        if t.kind == EVENT_WAIT and s in t.marker.waiters:
            t.marker.waiters.remove(s)
        elif t.kind == NOTIFY_WAIT and s in t.notify._waiters:
            t.notify._waiters.remove(s)
        elif t.kind == VALUE_WAIT and s in self._value_waits:
            self._value_waits.remove(s)

    def host_looks(self, backend) -> None:
        """The host looks at the device without waiting for it (a query): a simulated device
        catches up to now, and the value waits whose word the host wrote before it went go."""
        if self._value_waits:  # (written before this call: released then, not after its cost)
            self.look_at_values()
        backend.host_call("query")

    def look_at_values(self) -> None:
        """Let go the value waits whose word now meets its condition: the host, which may have
        written a word itself, looks at the device (a query) without waiting for it (a waiting
        host, completing work and, on a real-time device, the watchdog look too)."""
        if self._value_waits:
            with self.lock:
                self._check_values()

    def _check_values(self) -> None:
        """Let go the streams whose value wait's word now meets its condition (under the lock)."""
        if self._checking_values:  # (letting one go advances streams, which look again here)
            return
        self._checking_values = True
        try:
            met = [s for s in self._value_waits if s._blocked.fn()]
            for s in met:
                t = s._blocked
                self._unblock(s)
                if Hooks.sanitizer is not None:  # (one it held, seeing no write that meets it)
                    Hooks.sanitizer.value_wait_passed(s)
                if s._dq.virtual:
                    s._released_ns = s._dq.backend.now_ns()
                s._tasks.popleft()
                self._completed(s)
                self._profile_control(t)
                if t.error is not None:  # (its word could not be looked at: failed, not met)
                    self._report_later([self._fail(s, t, t.error)])
                self._advance(s, None)
        finally:
            self._checking_values = False

    # ---- executors -------------------------------------------------------------------------

    def _worker(self, q: ExecutorQueue) -> None:
        """Executor loop: take the highest-priority ready stream and run its head tasks.

        Consecutive tasks of one stream for this executor class are taken in one batch (one
        lock round trip for many small tasks). When another stream waits for this executor
        class and no other worker is idle, the batch yields at the next task boundary to a
        higher priority, and to an equal priority once it has run for SLICE_NS: priorities
        hold between tasks and equal priorities share the executor, without paying a lock
        round trip (and a GIL handoff) per tiny task.
        """
        dq, ex = q.dq, q.executor
        lock = self.lock
        ready = dq.ready[ex]
        levels = ready.levels
        idle = dq.idle[ex]
        busy = dq.busy
        execute = dq.backend.execute
        now = dq.backend.now_ns
        # (this thread's own dict of _local, read once: each attribute store of a thread-local
        # looks the thread up again)
        mark = _local.__dict__
        wake = threading.Lock()  # held while this worker is parked; a waker releases it
        wake.acquire()
        lock.acquire()
        if q.revoked:  # (its start looked failed; another serves in its place)
            lock.release()
            return
        batch: Any
        while True:
            # (an error of the runtime's own in this loop must never end the executor holding
            # the lock: see _executor_fault; `phase` says how far the batch got)
            s = batch = t = None  # (none kept while parked: a task holds its function's globals)
            phase = done = 0
            try:
                if dq.closing:  # stopped at exit (see _stop_executors_at_exit): the work left
                    dq.queues[ex].remove(q)  # waits, queued, for executors started again
                    self._exit_cv.notify_all()
                    lock.release()
                    return
                s = ready.pop()
                if s is None:
                    idle.append(wake)  # the waker pops it before releasing: no lost wake-up
                    lock.release()
                    wake.acquire()
                    lock.acquire()
                    continue
                tasks = s._tasks
                batch = [tasks.popleft()]
                while tasks and len(batch) < BATCH and tasks[0].executor == ex:
                    batch.append(tasks.popleft())
                stop_on_failure = s._stop_on_failure
                s._running = batch[0]  # under the lock: the stream is owned until this batch ends
                s._batch = batch       # (what runs after it: a profile that ends meanwhile lists it)
                busy[ex] += 1
                phase = 1
                mark["stream"] = s  # current_task() reads s._running: no per-task thread-local store
                lock.release()
                if self.lock_waiters:
                    _hand_over_gil()
                prof = Hooks.profiler
                failed = []
                done = 0
                level = s._priority
                mine = levels[level]  # (streams of this one's priority waiting for the class)
                deadline = now() + SLICE_NS  # (the batch has run its slice from then on)
                for t in batch:
                    # At each boundary between tasks (none after the last: the batch ends
                    # there anyway): yield to a higher priority, or to an equal one once the
                    # batch ran its slice, waiting while no other worker is idle
                    if ready.count and done and not idle and (
                            level and any(levels[:level])   # a higher priority waits
                            or mine and now() >= deadline):
                        break
                    s._running = t
                    if s._cut is not None and self._cut_off(s, t):
                        break  # the stream was destroyed with force (or reset) while this batch ran
                    if prof is not None:
                        t.t_start = now()
                    try:
                        execute(t)
                    except BaseException as e:  # a failing task must never kill its executor
                        t.error = e
                        failed.append(t)
                    if prof is not None:
                        t.t_end = now()
                    done += 1
                    if failed and stop_on_failure:
                        break
                mark["stream"] = None
                if not lock.acquire(False):
                    self._wait_for_lock()
                phase = 2
                if done == len(batch) and not failed and s._cut is None and prof is None:
                    batch_succeeded(self, busy, dq.active, ex, s, done)
                else:
                    self._batch_ended(dq, ex, s, batch, done, failed)
            except BaseException as exc:
                if self._executor_fault(q, exc, s, batch, phase, done):
                    return

    def _executor_fault(self, q: ExecutorQueue, exc: BaseException, s: Any, batch: Any,
                        phase: int, done: int) -> bool:
        """An error of the runtime's own in an executor's loop (a bug: the tasks' own errors
        are caught as they run). Said loudly (logged once, at CRITICAL, with the traceback);
        the batch it held fails with 507000 (RT_INTERNAL_ERROR) where its end was not recorded,
        so no synchronize waits for it forever; the executor goes on serving, the engine lock
        held again. True when it must end instead (faults without end: then it ends without
        the lock, its place given up)."""
        lock = self.lock
        _local.stream = None
        if not lock._is_owned():  # type: ignore[attr-defined]  # RLock has it; typeshed omits it
            self._wait_for_lock()
        self.executor_faults += 1
        if self.executor_faults == 1:
            _log.critical("ascentrt: internal error in an executor of device %d (the runtime's bug, "
                          "not the program's): the tasks it held fail with 507000; please report it",
                          q.dq.device_id, exc_info=exc)
        try:
            if s is not None and batch and (phase < 2 or s._running is not None):
                # (phase 2 with the stream no longer running: its end was recorded already)
                if phase == 0:
                    s._running = batch[0]
                    q.dq.busy[q.executor] += 1
                n = len(batch) if phase == 0 else min(done + 1, len(batch)) if phase == 1 else done
                with keeping_last_error():
                    err = AscentError(f"internal error of the runtime around this task: "
                                      f"{type(exc).__name__}: {exc}", code=ErrorCode.RT_INTERNAL_ERROR)
                failed = []
                for t in batch[:n]:
                    if t.error is None:
                        t.error = err
                    failed.append(t)
                self._batch_ended(q.dq, q.executor, s, batch, n, failed)
        except BaseException:
            _log.exception("ascentrt: an executor could not fail the batch of its internal error")
            if not lock._is_owned():  # type: ignore[attr-defined]
                self._wait_for_lock()
        if self.executor_faults < 1000:
            return False
        # (a fault that repeats without end: this executor gives its place up, unlocked)
        with contextlib.suppress(ValueError):
            q.dq.queues[q.executor].remove(q)
        while lock._is_owned():  # type: ignore[attr-defined]
            lock.release()
        return True

    def _batch_ended(self, dq: DeviceQueues, ex: int, s, batch: list, done: int,
                     failed: list | tuple) -> None:
        """Complete the first `done` tasks of a batch run outside the lock, put back the rest,
        move the stream on; then report to the profiler and exception callbacks (briefly
        releasing the lock, which the caller holds)."""
        lock = self.lock
        dq.busy[ex] -= 1
        s._running = None
        s._batch = ()
        self._completed(s, done)
        infos = [self._fail(s, t, t.error) for t in failed] if failed else ()
        tasks = s._tasks
        if done < len(batch):  # (tested first: no slice on the common path)
            rest = batch[done:]
            if (s._refuse is None or s._refuse == "closing") and s._cut is None:
                tasks.extendleft(reversed(rest))  # not run yet: back to the head, in order
            else:
                self._completed(s, len(rest))      # the stream stopped: they are discarded
                if Hooks.profiler is not None:
                    Hooks.profiler.tasks_dropped(s, rest, dq.backend.now_ns())
        s._cut = None
        if s._after_running is not None:  # the records a discard dropped behind this batch
            records, s._after_running = s._after_running, None
            self._release_records(s, records)
        self._advance(s, ex)  # (with no task left, it marks the stream idle)
        if self._value_waits:
            self._check_values()
        prof = Hooks.profiler
        if prof is not None or infos:
            lock.release()
            try:  # (the caller holds the lock again whatever this raises: a redelivered Ctrl-C)
                if prof is not None:
                    try:
                        prof.tasks_done(s, batch[:done] if done < len(batch) else batch)
                    except BaseException:  # a failing profiler loses records, never an executor
                        _log.exception("ascentrt: the profiler failed to record a batch")
                self._report_failures(infos)
            finally:
                lock.acquire()

    @staticmethod
    def _report_later(infos) -> None:
        """Give failures found under the lock (a timed-out or a released wait) to the
        exception-info callbacks from a thread of their own: the program's code must not run
        under the lock, nor hold the watchdog up (a callback may block, even on a timed wait
        the watchdog is to end)."""
        if infos and Hooks.exception_callbacks:
            forksafe.start_thread(Engine._report_failures, "ascentrt-exception-callbacks", (infos,))

    @staticmethod
    def _report_failures(infos) -> None:
        """Give each failure to the exception-info callbacks (called without the lock)."""
        for info in infos:
            for cb in list(Hooks.exception_callbacks):
                try:
                    cb(info)
                except BaseException as exc:  # SystemExit included: executors must live on
                    _log.exception("ascentrt: exception-info callback %r raised",
                                   getattr(cb, "__wrapped__", None) or cb)  # (the program's, not a hook's)
                    interrupts.give_back(exc)  # (a simulated device's main thread)

    # ---- timed device-side waits -----------------------------------------------------------

    def _arm_deadline(self, s, t: Task) -> None:
        """Start the clock of a timed wait now that it blocks (not when it was submitted)."""
        if t.timeout is None:
            return
        heap = self._deadlines
        if len(heap) > 256:  # drop entries of waits that ended early, so the heap stays small
            heap[:] = [e for e in heap if pending(e)]
            heapq.heapify(heap)
        deadline = s._dq.backend.now_ns() + int(t.timeout * 1e9)
        heapq.heappush(heap, (deadline, next(self._seq), s, t))
        if not s._dq.virtual:  # (virtual time: the simulator fires it: ExecutorQueue.fire_deadlines)
            self._wake_watchdog()

    def _wake_watchdog(self) -> None:
        """Start the watchdog thread, or have it look again at its deadlines and value waits."""
        if not self._watchdog:
            if sys.is_finalizing():
                return  # (no thread can begin: a wait on what it would fire ends at once)
            self._watch_stop = False
            forksafe.start_thread(self._watch, "ascentrt-watchdog")
            self._watchdog = True  # (a start cut before this starts another: see _watch)
        else:
            self._watchdog_cv.notify()

    def _watch(self) -> None:
        """Fail device-side waits whose timeout passed (the stream goes on, or stops in STOP mode)."""
        with self.lock:
            if self._watching:
                return  # (started again after a start an exception cut: one watches)
            self._watching = True
            self._watchdog = True
            while True:
                if self._watch_stop:  # (the exit: see _stop_executors_at_exit)
                    self._watching = self._watchdog = False
                    self._exit_cv.notify_all()
                    return
                now = self.devices[0].backend.now_ns()
                self._report_later(self._fire_due(now))
                timeout = (self._deadlines[0][0] - now) / 1e9 if self._deadlines else None
                if any(not s._dq.virtual for s in self._value_waits):
                    # (the host may write a word a value wait watches: look every millisecond;
                    # in virtual time only the device's work and the host's waits look)
                    self._check_values()
                    timeout = VALUE_POLL_S if timeout is None else min(timeout, VALUE_POLL_S)
                self._watchdog_cv.wait(timeout)

    def _fire_due(self, now: int) -> list:
        """Fail the timed waits whose deadline is at or before `now` (under the lock); returns
        their failures, for the exception-info callbacks (which the caller calls without it)."""
        infos = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, s, t = heapq.heappop(self._deadlines)
            if t.kind == EVENT_RECORD:  # a virtual record whose time has come (see _control)
                if not t.marker.done:
                    released: list = []
                    self._mark_done(t.marker, released)
                    for w in released:
                        self._advance(w, None)
                continue
            if s._blocked is t:
                self._unblock(s)
                s._tasks.popleft()
                self._completed(s)
                what = "value wait for " + t.args[0] if t.kind == VALUE_WAIT else \
                    "wait on an event" if t.kind == EVENT_WAIT else "wait on a notify"
                with keeping_last_error():  # (a simulated device fires it on a host thread)
                    error = TimeoutError_(f"device-side {what} timed out on stream {s.id}",
                                          code=ErrorCode.RT_WAIT_TIMEOUT) \
                        if t.timeout_error is None else t.timeout_error(s, t)
                t.error = error  # (a profile shows the wait that failed, not only the call that said so)
                self._profile_control(t)
                if t.kind == VALUE_WAIT and Hooks.sanitizer is not None:  # (its stream goes on)
                    Hooks.sanitizer.value_wait_passed(s)
                infos.append(self._fail(s, t, error))
                if s._tasks:
                    self._advance(s, None)
                else:
                    s._active = False
                    s._dq.active.discard(s)
        return infos

    # ---- host-side waiting ------------------------------------------------------------------

    def wait_host(self, ev, timeout: float | None, streams, what: str,
                  timeout_code: ErrorCode, cancel) -> None:
        """Block the host until signal `ev` is set; raise on timeout or when `streams` can never finish."""
        task = current_task()
        if task is not None and task.stream in streams:
            with self.lock:
                cancel()
            raise StreamStateError(f"{what} called from a task of that same stream would wait "
                                   f"for itself", code=ErrorCode.RT_STREAM_SUBSCRIBE)
        # Streams that cannot go on until this thread acts: the one whose task it runs, and
        # (found again at each check) those whose blocking callback waits for this thread.
        own = [task.stream] if task is not None else []
        me = threading.get_ident()
        with self.lock:  # (a timed wait ends by itself: its thread may act after it)
            self._thread_waits[me] = (streams, timeout is None)
            if self.stopped_at_exit:
                self._start_again_after_exit(streams)
            if self._value_waits:
                self._check_values()  # (a word the host wrote since its last call: from now)
        try:
            return self._wait_host(ev, timeout, streams, what, timeout_code, cancel, own)
        finally:
            with self.lock:
                self._thread_waits.pop(me, None)
                for h in own:
                    self._host_waits.pop(h, None)

    def _start_again_after_exit(self, streams) -> None:
        """A wait after the exit stopped the executors (an atexit handler that ran after the
        runtime's): start them again for the devices it waits on, and the watchdog, while the
        interpreter can still run them (during finalization the wait ends at once instead)."""
        if sys.is_finalizing():
            return
        for dq in {s._dq for s in streams}:
            if not dq.started and not dq.virtual:
                dq.start()
        if self._deadlines or self._value_waits:
            self._wake_watchdog()

    def _claim_held(self, own: list, streams, what: str, cancel) -> None:
        """Add to `own` the streams that wait for this thread (registered as host waits on
        `streams`); raise DeadlockError when one of them is what this thread waits for."""
        me = threading.get_ident()
        held = [h for held_by in Hooks.thread_holds for h in held_by(me)]  # outside the lock
        with self.lock:
            for h in held:
                if h in streams:
                    cancel()
                    raise DeadlockError(f"{what} can never finish: stream {h.id} waits for a "
                                        f"blocking callback that this thread ({me}) must run first")
                if h not in own:
                    own.append(h)
            for h in own:  # they now depend on `streams`, which _why_stuck follows
                self._host_waits[h] = (me, streams, what)

    def _wait_host(self, ev, timeout, streams, what, timeout_code, cancel, own) -> None:
        check = config.get("ASCENTRT_DEADLOCK_CHECK_S")
        warn_after = config.get("ASCENTRT_STALL_WARN_S")
        backend = streams[0]._dq.backend
        clock = backend.now_ns

        def seconds() -> float:
            return clock() / 1e9

        deadline = None if timeout is None else seconds() + timeout
        seen, stalled_since, warned = self.progress, seconds(), False
        # In virtual time a wait checks nothing new between the device's events: each slice
        # that saw work running but no progress doubles (a 1e6 s task took 4 million slices,
        # 30 s of real time), and a timed wait that nothing but this thread could release
        # goes to its deadline at once; progress brings the slice back to `check`.
        virtual, step = streams[0]._dq.virtual, check
        self._claim_held(own, streams, what, cancel)
        while True:
            slice_ = step if deadline is None else max(0.0, min(step, deadline - seconds()))
            if backend.host_wait(ev, slice_):
                return
            if sys.is_finalizing():  # executors cannot run any more: waiting would hang the exit
                with self.lock:
                    cancel()
                if ev.is_set():
                    return
                raise StreamStateError(f"{what}: the interpreter is shutting down and the work "
                                       f"waited for can no longer run",
                                       code=ErrorCode.RT_STREAM_ABORT)
            now = seconds()
            if deadline is not None and now >= deadline:
                with self.lock:
                    cancel()
                    stuck = self.diagnose(streams, timed=True)  # why, when it can be told
                if ev.is_set():
                    return
                why = f": {stuck[1]}" if stuck is not None else ""
                raise TimeoutError_(f"{what} timed out after {timeout:.3g} s{why}", code=timeout_code)
            moved = self.progress != seen
            if moved:
                seen, stalled_since, step = self.progress, now, check
                if not virtual:  # (in virtual time the wait came back where the device went
                    continue     # idle, or a slice on: look now, a cycle costs no device time)
            self._claim_held(own, streams, what, cancel)
            with self.lock:
                if self._value_waits:  # (the host may have written a word one watches)
                    self._check_values()
                    if self.progress != seen:
                        continue
                report = self.diagnose(streams)
                # (what waits: the cycle's streams, or, waiting for the host, these streams)
                stuck = [*report[2], *streams] if report is not None else []
                fatal = report is not None and (report[0] in ("cycle", "never") or report[0] == "host"
                                                and timeout is None
                                                and self._no_host_can_act(stuck))
                if fatal and not any(o in stuck for o in own) and \
                        any(m in self._host_waits for m in stuck):
                    fatal = False  # a task waiting inside the cycle raises and so breaks it
                if fatal:
                    cancel()
            if report is None:
                if virtual and not moved:  # (work runs: in virtual time nothing moves until its next event)
                    step = min(2 * step, MAX_VIRTUAL_SLICE_S)
                continue
            kind, text, _ = report
            if virtual and not fatal:
                # Stuck and timed: nothing but the host could move it, and when no other code
                # can act (no thread, handler or task), nothing will before the deadline.
                with self.lock:
                    alone = self._no_host_can_act(stuck)
                step = (deadline - now if deadline is not None else check) if alone else check
                if alone and deadline is not None and _local.budget:
                    # (a teardown's budget is real time: spent, it would show as device time)
                    with self.lock:
                        cancel()
                    if ev.is_set():
                        return
                    raise TimeoutError_(f"{what} can make no progress, nothing left could move "
                                        f"it: {text}{self._sites_hint()}", code=timeout_code)
            if fatal:
                if kind == "host":
                    text += ", and this thread, the only one left that could, waits here"
                raise DeadlockError(f"{what} can never finish: {text}{self._sites_hint()}")
            if kind in ("stuck", "host") and not warned and now - stalled_since >= warn_after:
                warned = True
                unit = "s of virtual time" if virtual else "s"  # (on sim: the device's clock)
                # (at the user's call, whichever API it came through)
                warn_at_caller(f"ascentrt: {what} has made no progress for {now - stalled_since:.0f} "
                               f"{unit}: {text}{self._sites_hint()}", RuntimeWarning)

    def _sites_hint(self) -> str:
        """How to have a stuck-stream report name the program's lines, while it cannot."""
        return "" if self.sites else " (ASCENTRT_CALL_SITES=1 names the program lines that queued these tasks)"

    def _no_host_can_act(self, stuck_streams) -> bool:
        """Whether no code but the calling thread's could still record a notify (called under
        the lock, by a thread about to wait without end on `stuck_streams`, which only the
        host could move on): no other thread of the program lives (a main thread that
        returned does not), or each waits in the runtime itself for stuck streams (the
        runtime's own threads, named ascentrt-*, run only kernels and host functions); no
        kernel or host function is queued or running (any may record it) but one that waits
        for stuck streams too; and no signal handler of the program's is installed (one may
        record it)."""
        stuck = set(stuck_streams)
        grew = True
        while grew:  # a stream whose running task waits only for stuck streams is stuck too
            grew = False
            for s, (_, waited, _) in self._host_waits.items():
                if s not in stuck and all(w in stuck for w in waited):
                    stuck.add(s)
                    grew = True
        me = threading.current_thread()
        for t in threading.enumerate():
            # (a main thread that returned waits only to join the others: it acts no more; the
            # exit handlers run after that join)
            if t is me or t.name.startswith("ascentrt") or not t.is_alive():
                continue
            waited = self._thread_waits.get(t.ident)
            if waited is None or not waited[1] or not all(w in stuck for w in waited[0]):
                return False  # it may still act (or its wait ends, and then it may)
        for s in self._all_streams():  # (a blocked stream's tasks wait as this thread does)
            if s in stuck and s._running is not None and s in self._host_waits:
                continue  # its task waits inside the runtime for stuck streams
            work = [s._running] if s._running is not None else []
            if s._blocked is None:
                work += s._tasks
            if any(t.kind in (KERNEL, HOST_FUNC, DETACH) for t in work):
                return False
        return not _program_signal_handlers()

    def diagnose(self, streams, timed: bool = False):
        """Why `streams` cannot progress: ('cycle', text, streams in it), ('never', text, []) for
        a wait nothing can end (a destroyed notify's), ('host', text, []) for one only a host
        thread can end (a notify nothing queued records), ('stuck', text, []) or None.

        Called under the lock. A stream depends on what it waits for: an event's stream, the
        streams with a pending record of its notify, the streams a task of it synchronizes on
        the host, or, when it needs an executor that every worker holds, the streams holding them.
        """
        for s in streams:
            found = self._why_stuck(s, [], timed)
            if found is not None:
                return found
        return None

    def _why_stuck(self, s, path: list, timed: bool = False):
        if s in path:
            members = path[path.index(s):]
            if members == [s] and s._blocked is not None and s._blocked.kind == NOTIFY_WAIT:
                return "cycle", _behind_own_wait(s, s._blocked), members
            chain = " -> ".join(_describe_wait(x) for x in members)
            return "cycle", f"the streams wait on each other: {chain} -> back to stream {s.id}", members
        if s._running is not None:
            wait = self._host_waits.get(s)
            if wait is None:
                return None  # running: it will finish
            producers = list(wait[1])
        elif not s._tasks:
            return None  # idle
        elif s._blocked is None:
            producers = self._executor_holders(s)
            if producers is None:
                return None  # ready, and an executor will take it
        else:
            t = s._blocked
            if t.timeout is not None and not timed and not t.timeout_is_last_resort:
                return None  # its timeout will move it (timed=True: say what it waits on anyway)
            if t.kind == VALUE_WAIT:
                # (any work queued or running may write the word; the stream's own comes after)
                # Stuck when none of those can run: then only the host can write it (never a
                # cycle: another thread of the program may write the word while this waits).
                producers = [p for p in self._all_streams() if p is not s and (
                    p._running is not None or any(x.executor is not None for x in list(p._tasks)))]
                results = [self._why_stuck(p, path + [s], timed) for p in producers]
                if any(r is None for r in results):
                    return None
                return "host", _value_wait_stuck(s, t, producers, results), []
            elif t.kind == EVENT_WAIT:
                if t.marker.stream is None:
                    needs_host = t.marker.needs_host
                    if needs_host is not None and needs_host():
                        return "host", f"{_describe_wait(s)}; only a call of a thread of this program can end it", []
                    return "stuck", f"{_describe_wait(s)}", []
                producers = [t.marker.stream]
            else:
                # (copies of the queues: a signal handler of the program's may record meanwhile,
                # on this thread, under the lock this holds)
                producers = [p for p in self._all_streams() if any(
                    x.kind == NOTIFY_RECORD and x.notify is t.notify for x in list(p._tasks))]
                if not producers:
                    text = f"{_describe_wait(s)}, and no stream has a pending record of notify {t.notify.id}"
                    if getattr(t.notify, "_destroyed", False):  # not even the host can record it
                        return "never", f"{text}; it was destroyed: nothing can record it now", []
                    return "host", f"{text}; only the host can record it now", []
        results = [self._why_stuck(p, path + [s], timed) for p in producers]
        if any(r is None for r in results):
            return None
        cycles = [r for r in results if r[0] == "cycle"]
        return cycles[0] if cycles else results[0]

    def _executor_holders(self, s):
        """The streams holding every executor the head task of ready `s` needs; None if one frees up."""
        ex = s._tasks[0].executor
        dq = s._dq
        if ex is None or not dq.started or dq.idle[ex]:
            return None
        holders = [r for r in list(dq.streams.values())
                   if r._running is not None and r._running.executor == ex]
        # (a simulated device's kernels occupy several units each: one may hold them all)
        units_of = getattr(dq.backend, "units_of", None)
        need = 1 if units_of is None else units_of(s._tasks[0])
        held = sum(r._running.units or 1 for r in holders)
        if held + need <= dq.sizes[ex] or any(r not in self._host_waits for r in holders):
            return None  # a worker is between tasks, or runs a task that will end by itself
        return holders

    def _all_streams(self):
        for dq in self.devices:
            yield from list(dq.streams.values())


def _at(t: Task) -> str:
    """' (queued at prog.py:12)' where ASCENTRT_CALL_SITES noted where the program queued `t`."""
    return "" if t.site is None else f" (queued at {site_text(t.site)})"


def _describe_wait(s) -> str:
    t = s._blocked
    if t is None:
        wait = ENGINE._host_waits.get(s)
        if s._running is not None and wait is not None:
            r = s._running
            return (f"stream {s.id} (device {s.device.id}) runs task {r.id} ({r.label}){_at(r)} on "
                    f"a {EXECUTOR_NAMES[r.executor]} executor, and that task waits in {wait[2]}")
        if s._running is None and s._tasks and s._tasks[0].executor is not None:
            h = s._tasks[0]
            return (f"stream {s.id} (device {s.device.id}) waits at task {h.id}{_at(h)} for a "
                    f"{EXECUTOR_NAMES[h.executor]} executor (all {s._dq.sizes[h.executor]} busy)")
        return f"stream {s.id}"
    named = (f" ({t.name})" if t.name else "") + _at(t)
    if t.kind == EVENT_WAIT:
        m = t.marker
        if m.stream is not None and not m.position:
            return (f"stream {s.id} (device {s.device.id}) waits at task {t.id}{named} for a "
                    f"record on stream {m.stream.id} not submitted yet{_time_left(s, t)}")
        if m.stream is None:
            return (f"stream {s.id} (device {s.device.id}) waits at task {t.id}{named} for "
                    f"{m.note() if m.note is not None else 'a record not submitted yet'}"
                    f"{_time_left(s, t)}")
        record = next((x for x in list(m.stream._tasks) if x.kind == EVENT_RECORD and x.marker is m), None)
        queued = "" if record is None or record.site is None else \
            f" (its record queued at {site_text(record.site)})"
        return (f"stream {s.id} (device {s.device.id}) waits at task {t.id}{named} for an event "
                f"recorded on stream {m.stream.id} after its task {m.position - 1}{queued}"
                f"{_time_left(s, t)}")
    if t.kind == VALUE_WAIT:
        return f"stream {s.id} (device {s.device.id}) waits at task {t.id}{_at(t)} for {t.args[0]}{_time_left(s, t)}"
    return (f"stream {s.id} (device {s.device.id}) waits at task {t.id}{_at(t)} for notify "
            f"{t.notify.id}{_time_left(s, t)}")


def _value_wait_stuck(s, t: Task, producers: list, results: list) -> str:
    """Why value wait `t` of stream `s` cannot end, no queued work being able to run: where a
    write of its word is queued behind a wait that comes back to `s`, the cycle with every edge;
    else that no queued work can write it. Either way only the host can end it now."""
    word = t.value[0] if t.value is not None else None
    writes = {p: x for p in producers for x in list(p._tasks)
              if x.name == "value_write" and x.value is not None and x.value[0] == word}
    for p, r in zip(producers, results):
        if p not in writes or r[0] != "cycle" or s not in r[2]:
            continue
        i = r[2].index(s)
        members = r[2][i:] + r[2][:i]  # (the cycle from s: s waits for the next, and so on)
        if len(members) > 1 and members[1] is p:
            x = writes[p]
            at = "" if x.site is None else f", queued at {site_text(x.site)}"
            chain = " -> ".join(_describe_wait(m) for m in members)
            return (f"the streams wait on each other: {chain} -> back to stream {s.id}: the "
                    f"write of its word is queued on stream {p.id} (task {x.id}{at}) behind "
                    f"that stream's wait; only the host can write it now")
    return (f"{_describe_wait(s)}, and no work queued on any stream can run to write it; only "
            f"the host can write it now")


def _behind_own_wait(s, t: Task) -> str:
    """Why stream `s` waits for itself: the records of the notify its wait `t` needs are all
    queued on `s`, behind that wait (a wait only a later task of its own stream could end)."""
    n = t.notify.id
    records = [x for x in list(s._tasks) if x.kind == NOTIFY_RECORD and x.notify is t.notify]
    which = "; ".join(f"task {x.id}" + ("" if x.site is None else f", queued at {site_text(x.site)}")
                      for x in records)
    whose = f"its only record ({which}) is" if len(records) == 1 else f"its records ({which}) are"
    return (f"{_describe_wait(s)}, and {whose} queued on the same stream behind the wait that "
            f"needs it: stream {s.id} waits for itself. Record notify {n} on another stream, or "
            f"before the wait")


def _time_left(s, t) -> str:
    """' (the wait times out in N s)' for a blocked timed wait, else ''."""
    for deadline, _, ws, wt in ENGINE._deadlines:
        if ws is s and wt is t:
            left = max(0.0, (deadline - s._dq.backend.now_ns()) / 1e9)
            return f" (the wait times out in {left:.1f} s)"
    return ""


ENGINE = Engine()
# A Ctrl-C must not cut the engine's bookkeeping (a stream marked active but on no ready queue
# would never run again); the waits inside it may end.
interrupts.protect(Engine.submit, Engine.submit_locked, Engine.submit_all,
                   Engine.submit_all_locked, Engine._advance, Engine._control,
                   Engine.release_markers, Engine._discard, Engine._release_records,
                   Engine._completed, Engine._fail, Engine._unblock, Engine._profile_control)
interrupts.interruptible(Engine._wait_for_room, Engine._wait_for_lock, Engine.wait_host,
                         Engine._wait_host, Engine.wait_completed)


# The signal numbers, as plain ints, once: valid_signals() builds an enum member of each on
# every call, and a simulated timed wait asks once per slice of its virtual time (a 1836 s
# wait took 1.3 s of real time doing that under pytest, which installs handlers).
_SIGNALS = tuple(int(sig) for sig in signal.valid_signals())


def _program_signal_handlers() -> bool:
    """Whether the program installed a Python handler for any signal (Python's defaults and
    the runtime's own Ctrl-C deferral are none)."""
    for sig in _SIGNALS:
        try:
            handler = signal.getsignal(sig)
        except (ValueError, OSError):
            continue
        if callable(handler) and handler is not signal.default_int_handler \
                and getattr(handler, "__module__", "").split(".")[0] != "ascentrt":
            return True
    return False


def _stop_executors_at_exit() -> None:
    """At exit, before finalization: end every executor and the watchdog.

    Finalization freezes a daemon thread where it next needs the interpreter, and one frozen
    while it holds the engine lock (a thread switch can come anywhere; an executor ending a
    task, or woken, takes it) hangs every later call, such as a teardown in a __del__ during
    shutdown. Work still queued stays queued: a later submission or wait (an atexit handler
    registered before the runtime's) starts them again while threads can still run; during
    finalization a submission is refused with 207005 and a wait for that work ends with
    107023, at once and on every run.
    """
    engine = ENGINE
    with engine.lock:
        engine.stopped_at_exit = True
        stopping = [dq for dq in engine.devices if dq.started and not dq.virtual]
        for dq in stopping:  # (a running batch ends first: a task is never cut)
            dq.closing = True
            dq.started = False
            for parked in dq.idle:
                while parked:
                    parked.pop().release()
        engine._watch_stop = True
        engine._watchdog_cv.notify_all()
        # Wait (briefly: a long task keeps its thread) until they have ended.
        engine._exit_cv.wait_for(lambda: not engine._watching
                                 and not any(any(dq.queues) for dq in stopping), EXIT_WAIT_S)


atexit.register(_stop_executors_at_exit)


_FORKED = "the fork of this process"  # what dropped the parent's work, as a forked child sees it


def _after_fork_in_child() -> None:
    """A forked child has none of the parent's executor threads and may have inherited a held
    lock: give it a fresh lock and executors, and drop the work that was in flight at the fork
    (it belongs to the parent), so the child's own work runs instead of waiting forever."""
    engine = ENGINE  # (its lock and conditions: renewed by forksafe's hook, which runs first)
    engine._watchdog = False
    engine._watching = False
    engine._deadlines.clear()
    engine._host_waits.clear()
    with engine.lock:
        for dq in engine.devices:
            dq.started = False
            dq.queues = [[] for _ in dq.sizes]
            dq.idle = [[] for _ in dq.sizes]
            dq.busy = [0 for _ in dq.sizes]
            for s in list(dq.streams.values()):
                # The tasks a parent's executor ran (or had taken in its batch) end with it:
                # counted done here, or a synchronize of the stream would wait for them for ever.
                in_flight = (s._tasks[0].id - 1 if s._tasks else s._submitted) - s._completed
                running = s._running is not None
                first = s._running if running else s._tasks[0] if s._tasks else None
                s._running, s._cut, s._after_running, s._batch = None, None, None, ()
                s._sync_waiters = []
                engine._discard(s, _FORKED)
                if in_flight > 0:
                    engine._completed(s, in_flight)
                if first is not None:  # (its next synchronize says so: that work never ran here;
                    # nobody's last error: no call of the child's failed)
                    s._errors.append(ExceptionInfo(dq.device_id, s.id, first.id, int(ErrorCode.RT_STREAM_ABORT),
                                                   first.label, failure_of_a_task(
                        StreamStateError, (
                            f"stream {s.id}'s task {first.id} ({first.label}) was running when the "
                            f"process forked (the fork may be its own), and it and the stream's work "
                            f"queued after it are the parent's: they did not run to their end in this "
                            f"child, and their results are not here") if running else (
                            f"stream {s.id}'s work queued before the process forked never ran in "
                            f"this child (it is the parent's): its results are not here"),
                        ErrorCode.RT_STREAM_ABORT), first.thread))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _hand_over_gil() -> None:
    """Let a thread that waits for the GIL take it now (sleep(0) releases it)."""
    time.sleep(0)


def ordered_before(task: Task, waits: tuple) -> bool:
    """Whether running `task` comes before the (stream, position) pairs `waits` (a
    stream-ordered free's) through event waits queued on those streams before the positions,
    transitively: each is still to complete, so the free still waits for the task (a look at
    the queued work, when a task meets a buffer freed after it: not a hot path).

    Only waits that cannot end without their record count: one with a timeout may give up,
    and its stream then passes the free with the task still running. A non-blocking host
    function counts as itself alone: its stream went on at once, so a record after it there
    is not after it (a collective's step does count as the ranks' tasks it acts for)."""
    mine = [(task.stream, task.id)]
    if task.origin is None:
        mine += task.acting_for
    todo, seen = list(waits), set()
    with ENGINE.lock:
        while todo:
            s, pos = todo.pop()
            if any(s is other and tid <= pos for other, tid in mine):
                return True
            if (id(s), pos) in seen:
                continue
            seen.add((id(s), pos))
            blocked = s._blocked
            for t in itertools.chain((blocked,) if blocked is not None else (), s._tasks):
                if t.id > pos:
                    break
                m = t.marker if t.kind == EVENT_WAIT and t.timeout is None else None
                if m is not None and m.stream is not None and not m.done:
                    todo.append((m.stream, m.position))
    return False


@contextlib.contextmanager
def teardown_budget() -> Iterator[None]:
    """Inside the block, the calling thread's timed waits are a teardown's budget of real
    time (the runtime's own, not the program's): on a virtual device, one stuck with nothing
    left that could move it ends at once with its timeout error, moving no device time."""
    prev = _local.budget
    _local.budget = True
    try:
        yield
    finally:
        _local.budget = prev
