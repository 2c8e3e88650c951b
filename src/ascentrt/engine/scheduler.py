"""The engine: stream queues, dependency tracking, executors, completion, deadlock detection.

One lock guards all stream and queue state; it is never held while user code (kernels, host
functions, callbacks) runs. Submission appends to the stream and, only when the stream was
idle, hands it to an executor class; a worker that finishes a task continues with the next
ready stream itself, so a busy stream costs no thread handoff per task.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import threading
import time
import warnings

from .. import config
from ..errors import (AscentError, DeadlockError, ErrorCode, ExceptionInfo, StreamStateError,
                      TimeoutError_, note_async_error)
from ..memory.buffer import BufferSlice, DeviceBuffer, TypedView
from .task import (COMPUTE, COPY_ENGINE, DETACH, EVENT_RECORD, EVENT_WAIT, EXECUTOR_NAMES, HOST,
                   KERNEL, NOTIFY_RECORD, NOTIFY_WAIT, Task)

BATCH = 64  # most tasks one executor takes from a stream per lock round trip
PRIORITY_LEVELS = 8  # 0 (highest) .. 7 (lowest), as CANN's create_stream_with_config

_ERROR_OF_KIND = {KERNEL: ErrorCode.RT_AICORE_EXCEPTION}
_BUFFER_TYPES = (DeviceBuffer, BufferSlice, TypedView)  # kernel arguments seen as numpy views
_local = threading.local()  # .task: the task this executor thread is running


class Hooks:
    """Observers the engine calls: a profiler (task timing) and exception-info callbacks."""

    profiler = None                 # object with task_done(task) when profiling is on
    exception_callbacks: list = []  # fn(ExceptionInfo), called outside the lock


class _ReadyQueue:
    """Streams whose head task waits for an executor of one class, by priority then FIFO."""

    __slots__ = ("levels", "count")

    def __init__(self):
        self.levels = [collections.deque() for _ in range(PRIORITY_LEVELS)]
        self.count = 0

    def push(self, stream) -> None:
        self.levels[stream.priority].append(stream)
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
        level = self.levels[stream.priority]
        if stream in level:
            level.remove(stream)
            self.count -= 1


class DeviceQueues:
    """The executors of one device: per class a ready queue, a condition and worker threads."""

    def __init__(self, engine: "Engine", device_id: int, backend, sizes: tuple[int, int, int]):
        self.engine = engine
        self.device_id = device_id
        self.backend = backend
        self.sizes = sizes
        self.ready = [_ReadyQueue() for _ in sizes]
        self.conds = [threading.Condition(engine.lock) for _ in sizes]
        self.idle = [0 for _ in sizes]
        self.busy = [0 for _ in sizes]
        self.threads: list[threading.Thread] = []
        self.started = False
        self.streams: dict[int, object] = {}   # id -> live stream, for diagnosis
        self.detached = None                    # hidden stream for non-blocking host functions

    def start(self) -> None:
        """Start the worker threads (called under the engine lock on first use)."""
        self.started = True
        for ex, n in enumerate(self.sizes):
            for i in range(n):
                t = threading.Thread(target=self.engine._worker, args=(self, ex), daemon=True,
                                     name=f"ascentrt-dev{self.device_id}-{EXECUTOR_NAMES[ex]}{i}")
                self.threads.append(t)
                t.start()


class Engine:
    """Process-wide scheduler state. Streams of every device share one lock (cross-device waits)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.progress = 0          # tasks completed so far: a stalled device stops moving it
        self._deadlines: list = []  # heap of (deadline, seq, stream, task) for timed waits
        self._seq = itertools.count()
        self._watchdog: threading.Thread | None = None
        self._watchdog_cv = threading.Condition(self.lock)

    # ---- submission (hot path) -------------------------------------------------------------

    def submit(self, stream, task: Task) -> int:
        """Append `task` to `stream` and start the stream if it was idle; returns the task id."""
        with self.lock:
            if stream._refuse is not None:
                raise stream._refusal()
            stream._submitted += 1
            task.id = stream._submitted
            task.stream = stream
            if Hooks.profiler is not None:
                task.t_enqueue = time.perf_counter_ns()
            stream._tasks.append(task)
            if not stream._active:
                stream._active = True
                self._advance(stream, None)
            return task.id

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
                        if dq.idle[ex]:
                            dq.conds[ex].notify()
                        elif not dq.started:
                            dq.start()
                    break
                if not self._control(s, t, work):
                    break  # blocked on a wait
                tasks.popleft()
                self._completed(s)
            else:
                s._active = False

    def _control(self, s, t: Task, work: list) -> bool:
        """Run a control task inline; False when the stream must block on it."""
        kind = t.kind
        if kind == EVENT_RECORD:
            m = t.marker
            if m.timing or Hooks.profiler is not None:
                m.ts_ns = time.perf_counter_ns()
                t.t_start = t.t_end = m.ts_ns
            m.done = True
            if m.waiters:
                for w in m.waiters:
                    w._blocked = None
                    work.append(w)
                m.waiters = []
            for ev in m.host_waiters:
                ev.set()
            m.host_waiters = []
            self._profile_control(t)
            return True
        if kind == EVENT_WAIT:
            if t.marker.done:
                self._profile_control(t)
                return True
            t.marker.waiters.append(s)
            s._blocked = t
            self._arm_deadline(s, t)
            return False
        if kind == NOTIFY_RECORD:
            n = t.notify
            if n._waiters:
                w = n._waiters.popleft()
                w._blocked = None
                work.append(w)
                w._tasks.popleft()      # the waiter's wait task completes here (consumed)
                self._completed(w)
            else:
                n._set = True
            self._profile_control(t)
            return True
        if kind == NOTIFY_WAIT:
            n = t.notify
            if n._set:
                n._set = False
                self._profile_control(t)
                return True
            n._waiters.append(s)
            s._blocked = t
            self._arm_deadline(s, t)
            return False
        if kind == DETACH:
            self.submit_locked(s._dq.detached, t.fn)
            return True
        raise AssertionError(f"not a control task: {t!r}")  # pragma: no cover

    def submit_locked(self, stream, task: Task) -> None:
        """Submit while already holding the lock (used to hand off non-blocking host functions)."""
        stream._submitted += 1
        task.id = stream._submitted
        task.stream = stream
        if Hooks.profiler is not None:
            task.t_enqueue = time.perf_counter_ns()
        stream._tasks.append(task)
        if not stream._active:
            stream._active = True
            self._advance(stream, None)

    def _profile_control(self, t: Task) -> None:
        prof = Hooks.profiler
        if prof is not None:
            if not t.t_start:
                t.t_start = t.t_end = time.perf_counter_ns()
            prof.task_done(t)

    def _completed(self, s, count: int = 1) -> None:
        """Count finished tasks of `s` and wake host threads synchronizing on it."""
        s._completed += count
        self.progress += count
        if s._sync_waiters:
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
        code = exc.code if isinstance(exc, AscentError) else _ERROR_OF_KIND.get(
            t.kind, ErrorCode.RT_AICPU_EXCEPTION if t.executor == HOST else ErrorCode.RT_COPY_DATA)
        info = ExceptionInfo(s.device.id, s.id, t.id, int(code), t.label, exc, t.thread)
        s._errors.append(info)
        note_async_error(t.thread, code)
        if s._stop_on_failure and s._refuse is None:
            s._refuse = "failed"
            s._failure = info
            self._discard(s)
        return info

    def _discard(self, s) -> int:
        """Drop the queued tasks of `s` (a batch already running finishes); release their waiters."""
        tasks = s._tasks
        dropped = 0
        while tasks:
            t = tasks.popleft()
            if t.kind == EVENT_RECORD:
                t.marker.done = True  # nothing will run before it any more: release its waiters
                for w in t.marker.waiters:
                    w._blocked = None
                    self._advance(w, None)
                t.marker.waiters = []
                for ev in t.marker.host_waiters:
                    ev.set()
                t.marker.host_waiters = []
            dropped += 1
        self._completed(s, dropped)
        if s._blocked is not None:
            self._unblock(s)
        for ready in s._dq.ready:
            ready.remove(s)
        if s._running is None:
            s._active = False
        return dropped

    def _unblock(self, s) -> None:
        """Take `s` off whatever marker or notify it waits on."""
        t = s._blocked
        s._blocked = None
        if t.kind == EVENT_WAIT and s in t.marker.waiters:
            t.marker.waiters.remove(s)
        elif t.kind == NOTIFY_WAIT and s in t.notify._waiters:
            t.notify._waiters.remove(s)

    # ---- executors -------------------------------------------------------------------------

    def _worker(self, dq: DeviceQueues, ex: int) -> None:
        """Executor loop: take the highest-priority ready stream and run its head tasks.

        Consecutive tasks of one stream for this executor class are taken in one batch (one
        lock round trip for many small tasks); the batch yields as soon as another stream is
        ready and no other worker is idle, so priorities and fairness hold between tasks.
        """
        lock = self.lock
        cond = dq.conds[ex]
        ready = dq.ready[ex]
        idle = dq.idle
        busy = dq.busy
        lock.acquire()
        while True:
            s = ready.pop()
            if s is None:
                idle[ex] += 1
                cond.wait()
                idle[ex] -= 1
                continue
            tasks = s._tasks
            batch = [tasks.popleft()]
            while tasks and len(batch) < BATCH and tasks[0].executor == ex:
                batch.append(tasks.popleft())
            stop_on_failure = s._stop_on_failure
            s._running = batch[0]  # under the lock: the stream is owned until this batch ends
            busy[ex] += 1
            lock.release()
            prof = Hooks.profiler
            failed = []
            done = 0
            for t in batch:
                s._running = t
                _local.task = t
                if prof is not None:
                    t.t_start = time.perf_counter_ns()
                try:
                    if t.translate:
                        t.fn(*[a.numpy() if isinstance(a, _BUFFER_TYPES) else a for a in t.args])
                    else:
                        t.fn(*t.args)
                except BaseException as e:  # a failing task must never kill its executor
                    t.error = e
                    failed.append(t)
                if prof is not None:
                    t.t_end = time.perf_counter_ns()
                done += 1
                if failed and stop_on_failure or ready.count and not idle[ex]:
                    break
            _local.task = None
            lock.acquire()
            busy[ex] -= 1
            s._running = None
            self._completed(s, done)
            infos = [self._fail(s, t, t.error) for t in failed]
            rest = batch[done:]
            if rest:
                if s._refuse is None:
                    tasks.extendleft(reversed(rest))  # not run yet: back to the head, in order
                else:
                    self._completed(s, len(rest))      # the stream stopped: they are discarded
            if tasks:
                self._advance(s, ex)
            else:
                s._active = False
            if prof is not None or infos:
                lock.release()
                if prof is not None:
                    for t in batch[:done]:
                        prof.task_done(t)
                for info in infos:
                    for cb in list(Hooks.exception_callbacks):
                        try:
                            cb(info)
                        except Exception:
                            pass  # a broken callback must not take the executor down
                lock.acquire()

    # ---- timed device-side waits -----------------------------------------------------------

    def _arm_deadline(self, s, t: Task) -> None:
        if t.deadline is None:
            return
        heapq.heappush(self._deadlines, (t.deadline, next(self._seq), s, t))
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=self._watch, daemon=True, name="ascentrt-watchdog")
            self._watchdog.start()
        else:
            self._watchdog_cv.notify()

    def _watch(self) -> None:
        """Fail device-side waits whose timeout passed (the stream goes on, or stops in STOP mode)."""
        with self.lock:
            while True:
                now = time.monotonic()
                while self._deadlines and self._deadlines[0][0] <= now:
                    _, _, s, t = heapq.heappop(self._deadlines)
                    if s._blocked is t:
                        self._unblock(s)
                        s._tasks.popleft()
                        self._completed(s)
                        what = "event" if t.kind == EVENT_WAIT else "notify"
                        self._fail(s, t, TimeoutError_(f"device-side wait on {what} timed out",
                                                       code=ErrorCode.RT_WAIT_TIMEOUT))
                        self._advance(s, None) if s._tasks else setattr(s, "_active", False)
                timeout = self._deadlines[0][0] - now if self._deadlines else None
                self._watchdog_cv.wait(timeout)

    # ---- host-side waiting ------------------------------------------------------------------

    def wait_host(self, ev: threading.Event, timeout: float | None, streams, what: str,
                  timeout_code: ErrorCode, cancel) -> None:
        """Block the host until `ev` is set; raise on timeout or when `streams` can never finish."""
        task = getattr(_local, "task", None)
        if task is not None and task.stream in streams:
            with self.lock:
                cancel()
            raise StreamStateError(f"{what} called from a task of that same stream would wait "
                                   f"for itself", code=ErrorCode.RT_STREAM_SUBSCRIBE)
        check = config.get("ASCENTRT_DEADLOCK_CHECK_S")
        warn_after = config.get("ASCENTRT_STALL_WARN_S")
        deadline = None if timeout is None else time.monotonic() + timeout
        seen, stalled_since, warned = self.progress, time.monotonic(), False
        while True:
            slice_ = check if deadline is None else max(0.0, min(check, deadline - time.monotonic()))
            if ev.wait(slice_):
                return
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                with self.lock:
                    cancel()
                if ev.is_set():
                    return
                raise TimeoutError_(f"{what} timed out after {timeout:g} s", code=timeout_code)
            if self.progress != seen:
                seen, stalled_since = self.progress, now
                continue
            with self.lock:
                report = self.diagnose(streams)
                if report is not None and report[0] == "cycle":
                    cancel()
            if report is None:
                continue
            kind, text = report
            if kind == "cycle":
                raise DeadlockError(f"{what} can never finish: {text}")
            if not warned and now - stalled_since >= warn_after:
                warned = True
                warnings.warn(f"ascentrt: {what} has made no progress for {now - stalled_since:.0f} s: "
                              f"{text}", RuntimeWarning, stacklevel=3)

    def diagnose(self, streams):
        """Why `streams` cannot progress: ('cycle', text), ('stuck', text) or None (under lock)."""
        for s in streams:
            found = self._why_stuck(s, [])
            if found is not None:
                return found
        return None

    def _why_stuck(self, s, path: list):
        if s in path:
            chain = " -> ".join(_describe_wait(x) for x in path[path.index(s):])
            return "cycle", f"the streams wait on each other: {chain} -> back to stream {s.id}"
        if not s._tasks or s._running is not None or s._blocked is None:
            return None  # idle, running, or ready for an executor: it will move
        t = s._blocked
        if t.deadline is not None:
            return None  # its timeout will move it
        if t.kind == EVENT_WAIT:
            producers = [t.marker.stream]
        else:
            producers = [p for p in self._all_streams()
                         if any(x.kind == NOTIFY_RECORD and x.notify is t.notify for x in p._tasks)]
            if not producers:
                return "stuck", (f"{_describe_wait(s)}, and no stream has a pending record of "
                                 f"notify {t.notify.id}; only the host can record it now")
        results = [self._why_stuck(p, path + [s]) for p in producers]
        if any(r is None for r in results):
            return None
        cycles = [r for r in results if r[0] == "cycle"]
        return cycles[0] if cycles else results[0]

    def _all_streams(self):
        from ..device import all_device_queues
        for dq in all_device_queues():
            yield from list(dq.streams.values())


def _describe_wait(s) -> str:
    t = s._blocked
    if t is None:
        return f"stream {s.id}"
    if t.kind == EVENT_WAIT:
        m = t.marker
        return (f"stream {s.id} (device {s.device.id}) waits at task {t.id} for an event recorded on "
                f"stream {m.stream.id} after its task {m.position - 1}")
    return f"stream {s.id} (device {s.device.id}) waits at task {t.id} for notify {t.notify.id}"


ENGINE = Engine()


def current_task() -> Task | None:
    """The task the calling executor thread is running (None on user threads)."""
    return getattr(_local, "task", None)
