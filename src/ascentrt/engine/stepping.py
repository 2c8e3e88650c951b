"""The stepping interface of an executor class (ExecutorQueue), which a simulator drives task
by task (take, run, finish), and the completion of a batch that succeeded, which it shares
with the threaded executors: a simulated task pays this bookkeeping once per task, a threaded
executor once per batch.

(Python source only: compiled with mypyc it was slower, since nearly all it does is read and
write attributes of streams and tasks, Python objects, which the interpreter's specialized
attribute access reaches faster than compiled code's generic one.)
"""

from __future__ import annotations

import heapq
import threading
from typing import Any

from .. import forksafe
from .hooks import Hooks, _local, current_task
from .task import EVENT_RECORD, Task


class ExecutorQueue:
    """One executor class of one device, as the engine hands it to Backend.start_queue.

    A threaded backend calls it: the engine's dispatch loop, until the device closes. A
    simulator steps it instead: take() a task when a unit is free, run() it, finish() it when
    its modelled time is over (one task at a time, in virtual-time order).
    """

    revoked = False  # its place went to another queue (its thread never began in time): it
                     # must not serve if its thread begins after all (set under the engine lock)

    def __init__(self, engine: Any, dq: Any, executor: int):
        self.began = forksafe.event()  # its thread called in, or start_queue returned
        self.engine: Any = engine
        self.dq: Any = dq
        self.executor = executor
        self.ready: Any = dq.ready[executor]   # .count: streams waiting (read without the lock)
        self.lock: Any = engine.lock
        # (a forked child makes new queues with its new lists: see scheduler._after_fork_in_child)
        self.busy: list[int] = dq.busy
        self.active: set = dq.active
        self._execute: Any = dq.backend.execute  # (bound once: a simulator runs every task through run)

    def __call__(self) -> None:
        self.began.set()  # (first: the engine may be waiting to know whether the thread started)
        self.engine._worker(self)

    def take(self, fits: Any, first_only: bool) -> Any:
        """The head task of the first ready stream (priority, then FIFO) for which fits(task)
        holds (fits None: any task fits), now running; None when none fits (first_only: when
        the first does not). It carries when a wait last released its stream (released_ns),
        and when its stream's task before it ended on another executor class (handed_ns)."""
        lock = self.lock
        lock.acquire()  # (not `with`: a simulator calls this per task)
        try:
            ready = self.ready
            for level in ready.levels:
                for s in level:
                    t = s._tasks[0]
                    if fits is None or fits(t):
                        if level[0] is s:
                            level.popleft()
                        else:
                            level.remove(s)
                        ready.count -= 1
                        s._tasks.popleft()
                        self._taken(s, t)
                        return t
                    if first_only:
                        return None
            return None
        finally:
            lock.release()

    def run(self, task: Any) -> None:
        """Execute a taken task on the calling thread as its executor (errors kept in task.error)."""
        # (the thread's own dict of _local, read once: each attribute access of a thread-local
        # looks the thread up again, and a simulator pays three per task)
        mark = _local.__dict__
        prev = mark.get("stream")
        mark["stream"] = task.stream
        try:
            self._execute(task)
        except BaseException as e:  # a failing task must never kill the simulation
            task.error = e
        finally:
            mark["stream"] = prev

    def finish(self, task: Any) -> None:
        """A taken task ended (at its t_end): complete it and move its stream (and what it
        releases) on."""
        lock = self.lock
        lock.acquire()
        try:
            self._finished(task.stream, task)
        finally:
            lock.release()

    def _taken(self, s: Any, t: Any) -> None:
        """Head task `t`, popped from stream `s`, runs now (the lock held): what it carries of
        its stream's last release and hand-over."""
        s._running = t
        ex = self.executor
        self.busy[ex] += 1
        released = s._released_ns
        if released:
            t.released_ns = released
            s._released_ns = 0
        if s._ended_class != ex:  # (-1: none ended yet)
            t.handed_ns = s._ended_ns

    def _finished(self, s: Any, t: Any) -> None:
        """Taken task `t` of stream `s` ended (the lock held): complete it and move its stream
        (and what it releases) on."""
        engine = self.engine
        ex = self.executor
        s._ended_class = ex  # (what _taken needs to stamp a hand-over to another class)
        s._ended_ns = t.t_end
        if s._cut is None and t.error is None and Hooks.profiler is None:
            batch_succeeded(engine, self.busy, self.active, ex, s, 1)
        elif s._cut is not None and t.id > s._cut:  # discarded before it ran: not counted twice
            engine._batch_ended(self.dq, ex, s, [t], 0, ())
        else:
            engine._batch_ended(self.dq, ex, s, [t], 1, () if t.error is None else [t])

    def step_alone(self, sim: Any) -> bool:
        """take(None, True), run() and finish() of one task in one call, for a simulator's step
        on an otherwise idle device: `sim.begin_alone(task)` holds its units and returns its
        frame (None: it started the simulator's generic way instead), and
        `sim.end_alone(task, frame, failed)` whether it ended by the step's horizon, when it is
        finished here. True when it was; False when no stream was ready, or the simulation
        goes on from where it left things. (The same state transitions as the three calls:
        each one, from compiled code, paid a Python call and generic attribute access, about
        half of a simulated task's step.)"""
        lock = self.lock
        lock.acquire()
        try:  # take(None, True): the head task of the first ready stream
            ready = self.ready
            for level in ready.levels:
                if level:
                    s = level.popleft()
                    break
            else:
                return False
            ready.count -= 1
            t = s._tasks.popleft()
            self._taken(s, t)
        finally:
            lock.release()
        frame = sim.begin_alone(t)
        if frame is None:
            return False
        failed = False
        try:  # run(t)
            mark = _local.__dict__
            prev = mark.get("stream")
            mark["stream"] = s
            try:
                self._execute(t)
            except BaseException as e:  # a failing task must never kill the simulation
                t.error = e
                failed = True
            finally:
                mark["stream"] = prev
        finally:
            done = sim.end_alone(t, frame, failed)
        if not done:
            return False
        lock.acquire()
        try:  # finish(t)
            self._finished(s, t)
        finally:
            lock.release()
        return True

    def acting_for(self) -> Task | None:
        """The task the calling thread runs, or acts for (a report thread running a blocking
        callback while its host task holds the stream: see act_for_stream); None otherwise."""
        return current_task()

    def host_wait_timed(self) -> bool:
        """Whether the calling thread waits in wait_host with a timeout (a deadline of its own,
        which the engine passes as slices of it)."""
        waits = self.engine._thread_waits.get(threading.get_ident())
        return waits is not None and not waits[1]

    def next_deadline(self) -> int | None:
        """The earliest deadline of a timed device-side wait (backend clock ns), or None."""
        heap = self.engine._deadlines
        return heap[0][0] if heap else None

    def fire_deadlines(self, now: int) -> None:
        """Fail the timed waits whose deadline is at or before `now`."""
        with self.engine.lock:
            infos = self.engine._fire_due(now)
        self.engine._report_failures(infos)

    def drop_ended_deadlines(self) -> None:
        """Take the timed waits that ended early (met, or dropped) off the front of the
        deadline heap: a simulator looking for its next event must not take theirs for one."""
        with self.engine.lock:
            heap = self.engine._deadlines
            while heap and not pending(heap[0]):
                heapq.heappop(heap)


def batch_succeeded(engine: Any, busy: list[int], active: set, ex: int, s: Any, done: int) -> None:
    """Complete a batch of stream `s` whose `done` tasks all ran on executor class `ex` and
    succeeded, no profiler recording (the common case, in one call: a worker ends one per
    stream it visits, a simulator one per task); `busy` and `active` are the device's (the
    engine lock is held)."""
    busy[ex] -= 1
    s._running = None
    s._batch = ()
    s._completed += done  # (Engine._completed, inlined)
    engine.progress += done
    if s._sync_waiters:
        engine._wake_synchronizers(s)
    if s._tasks:
        engine._advance(s, ex)
    else:
        s._active = False
        active.discard(s)
    if engine._value_waits:  # (the work may have written a word a value wait watches)
        engine._check_values()


def pending(entry: tuple) -> bool:
    """Whether an entry (time, seq, stream, task) of the engine's deadline heap still has work
    to do at its time: a timed wait still blocking its stream, or a virtual record not done."""
    s, t = entry[2], entry[3]
    return not t.marker.done if t.kind == EVENT_RECORD else s._blocked is t
