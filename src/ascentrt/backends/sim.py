"""The simulated NPU: every task starts and ends in virtual time from a hardware model (a
preset); kernels, copies and fills still compute their results on the CPU (memory is this
machine's, as on the cpu backend), so results are bit-identical to it.

One timeline serves every simulated device of the process (cross-device waits share it). It is
a discrete-event simulation driven by the host threads themselves, not by a thread of its own:
  - A host API call first charges its modelled cost (host_call): the simulation runs every
    event up to the host's new time, then the host acts at exactly that time, so a submit, a
    record or a query sees the device as it is at that moment.
  - A host wait (host_wait) runs the simulation until the awaited signal is set, and the host
    clock moves to that completion; a synchronize then charges its cost (the return path) once.
  - A task is taken from the engine when a unit of its executor class is free (strict
    priority: a compute kernel that does not fit blocks the ones behind it; copies go to the
    first free engine of their direction, a graph segment of copies one of its direction),
    runs at once, and ends after its modelled cost.
  - Running tasks share what they use, with max-min fair rates (a fluid model): a task that
    moves memory needs its share of the memory bandwidth at its full rate, and on a preset
    with shared_processors (a model of a cpu backend, whose engines are threads on a few
    cores) each running task needs one of that many processors. So a
    task's end moves whenever another one starts or ends. A task held back (an event's
    release, the hand-over of a stream's work to another executor class) shares nothing
    until then; its dispatch comes after its shared work; a replayed graph's segment runs at
    its full rate (its nodes' times are fixed as they run).
A program with one host thread therefore gives the same timeline on every run, however busy
the machine is. With several host threads the semantics hold, but the interleaving of their
calls (and so the timeline) follows the real threads.
"""

from __future__ import annotations

import atexit
import bisect
import collections
import dataclasses
import heapq
import itertools
import math
import os
import signal as signals
import sys
import threading
import time
from typing import Any, Final

from .. import forksafe
from .base import COPY, HOST, KERNEL, SUBMITTED, BackendProperties, MemHandle, Op
from .cpu import CpuBackend
from .presets import Preset, identity

# (Final: compiled, they are constants, not lookups in this module's globals)
_COMPUTE: Final = 0                        # the engine's executor classes
_COPY: Final = 1
_HOST: Final = 2
H2D: Final = 0                             # copy directions (one engine pool each)
D2H: Final = 1
D2D: Final = 2
_PAGEABLE = (0, 0, "pageable", None)       # what an address outside every allocation is in
_GRACE_S = 0.005  # idle and alone: wait this long for a thread that may just be starting
_REAL_PACE_S = 0.05  # idle while others may act: look again this often (real seconds)
_STRANGER_PATIENCE_S = 2.0  # stuck, and only threads that never used the runtime may act: how
                            # long one wait lets them (real seconds) before time goes on
# Who besides the calling thread may move things on (Timeline.others_may_act)
_NOBODY, _STRANGERS, _CALLERS = 0, 1, 2
# Virtual time waits this long (real seconds) for a running host function before going on
# without it: host functions that return sooner keep the timeline deterministic, and one
# that blocks on the simulating thread (a gate it sets later) cannot hang it.
HOST_FUNC_PATIENCE_S = 0.5
# The device moves on by itself when pending work meets a host that made no runtime call for
# this long (real seconds): a host blocked outside the runtime (on a threading.Event that a
# host function sets, in time.sleep polling) must not hang. Programs that call the runtime
# more often keep a timeline that depends on nothing but their calls.
IDLE_HOST_S = 0.2
# A host thread that computes meanwhile (its own code, or the runtime's between its calls) is
# not blocked: it will call again, and moving on without it would make the timeline depend on
# how fast this machine runs that code. Busy means it ran, or waited in the run queue for a
# core, at least BUSY_SHARE of the last IDLE_HOST_S or so (several looks: a loaded machine
# gives it no core for some); a host that wakes often for a moment (a short sleep in a loop)
# may read as busy too, which only makes the device wait longer in real time; while every
# host thread is busy, the device waits up to BUSY_HOST_S (a host that spins on a flag a host
# function sets, without calling the runtime, must not hang for good); one blocked outside the
# runtime lets it move on after IDLE_HOST_S, as before.
BUSY_SHARE = 0.1
BUSY_HOST_S = 5.0
# A kernel, copy or fill runs on the host thread whose call stepped the simulation to it: one
# that runs this long (real seconds) is reported, since it may wait for that thread itself.
LONG_STEP_S = 10.0
# How long the exit waits for the pump to end (it is woken at once, but a step it runs holds
# the timeline lock until the step returns).
STOP_PUMP_S = 5.0
POLL_MISS = "poll_miss"  # the host_call of a query that found the work not done, followed by
                         # what it queried, e.g. "poll_miss stream 3" (see _poll_missed)


def _say_long_step(task: Any) -> None:
    """The report of a task that has run LONG_STEP_S on the host thread that stepped it."""
    label = getattr(task, "label", "") or getattr(task.fn, "__name__", "task")
    print(f"ascentrt: {label} has run for {LONG_STEP_S:g} s of real time on the sim backend, "
          f"which runs kernels on the host thread whose call reached them: a kernel that waits "
          f"for that thread (an event it sets later), or for another thread's runtime call, "
          f"never returns (a host function may wait; a second Ctrl-C ends it)",
          file=sys.stderr, flush=True)


def _cpu_ns(thread: threading.Thread) -> int:
    """The time a thread of this process has run so far, or waited in the run queue for a core
    (ns): a thread that computes is always doing one or the other, one blocked neither; -1
    where it cannot be read (an ended thread, a system without /proc's per-thread figures)."""
    try:
        with open(f"/proc/self/task/{thread.native_id}/schedstat", "rb") as f:
            ran, waited = f.read().split()[:2]
            return int(ran) + int(waited)
    except (OSError, ValueError):
        return -1


def _say_unattended() -> None:
    """The report, once per process, that the device moved on without the host."""
    print(f"ascentrt: the host made no runtime call while work was pending, blocked outside "
          f"the runtime for {IDLE_HOST_S:g} s of real time (or computing for {BUSY_HOST_S:g} s), "
          f"so the simulated device moved on without it: virtual time now depends on how fast "
          f"this machine ran the program; the same program on a faster or quieter machine may "
          f"give other times", file=sys.stderr, flush=True)


class _Frame:
    """A task the simulation is running on this thread: when it started, and the time its
    nested operations (graph nodes) took so far."""

    __slots__ = ("task", "start", "offset", "own", "mem", "link", "link_ns", "latency", "peer",
                 "tail", "last_ns", "units", "until", "stack")

    def __init__(self, task: Any, start: int):
        self.task, self.start, self.offset, self.own, self.mem = task, start, 0, 0, 0.0
        self.link: Any = None    # the link its bytes cross (a copy over the host or a peer
                                 # link, a kernel's link_bytes over a peer link)
        self.link_ns = 0.0       # the ns they take on it at its full bandwidth
        self.latency = 0         # the ns of `own` no bandwidth paces (the link's latency)
        self.peer: Any = None    # (key, ns at its bandwidth) of the other device's memory its
                                 # bytes cross (a peer copy's or link read's other end)
        self.tail = 0            # a kernel with a last partial wave: the units that wave holds
                                 # (its blocks beyond the last whole wave; 0: none) ...
        self.last_ns = 0         # ... and the ns of `own` it takes (the units the others held
                                 # are free from its start: see SimBackend._end)
        self.units = 0           # a step alone's task: the units it holds (see begin_alone)
        self.until = 0           # ... and the time the step runs to
        self.stack: list | None = None  # ... and its thread's frames list (see end_alone)


class _HostThread:
    """A real thread that runs host functions for the simulation (as CANN's callback thread),
    so thread-local state and blocking on other host threads behave as on hardware."""

    def __init__(self, name: str, job: tuple):
        """A thread that begins with `job` (an exception a signal handler of the program
        raises meanwhile comes once it has begun: the job runs all the same)."""
        self.cv = forksafe.condition()
        self.job: Any = job  # (backend, queue, task, frame) handed to this thread to run
        forksafe.start_thread(self._loop, name)

    def start(self, job: tuple) -> None:
        """Run job = (backend, queue, task, frame) on this thread; its end is scheduled when it returns."""
        with self.cv:
            self.job = job
            self.cv.notify_all()

    def _loop(self) -> None:
        while True:
            with self.cv:
                self.cv.wait_for(lambda: self.job is not None)
                job = self.job
                self.job = None
            self._run(job)
            job = None  # (none kept while parked: a task holds its function's globals)

    def _run(self, job: tuple) -> None:
        backend, queue, task, frame = job
        frames = TIMELINE.frames()
        frames.append(frame)  # the API calls it makes act at the task's virtual time
        try:
            queue.run(task)
        finally:
            frames.pop()
            backend.host_task_returned(self, job)


# Per host thread: the tasks it runs for the simulation (innermost last), whether it was noted
# as a caller, and where its wait was last told the device idle (_host_wait). Class defaults:
# reading them unset raises nothing. (Made with type(): a class statement compiled by mypyc
# would keep the attributes per object, not per thread.)
_ThreadFrames: Any = type("_ThreadFrames", (threading.local,),
                          {"frames": None, "noted": False, "idle_told": None, "__module__": __name__})


class _Signal:
    """A completion the host can block on (the contract's Signal). The host threads waiting
    for it in host_wait wait on the timeline, not on it: setting it wakes them too, so one set
    by a thread outside the simulation (a host function handing a callback to its report
    thread, say) ends their wait at once."""

    __slots__ = ("flag", "event")

    def __init__(self, event: threading.Event) -> None:
        self.flag = False
        self.event = event  # (for wait(): made by new_signal, whose signals a fork drops)

    def set(self) -> None:
        """Mark it reached, and wake the threads waiting on it or in host_wait."""
        self.flag = True
        self.event.set()
        TIMELINE.wake()

    def is_set(self) -> bool:
        """Whether it was set."""
        return self.flag

    def wait(self, timeout: float | None = None) -> bool:
        """Block (in real time) until it is set or `timeout` s passed; whether it is set."""
        return self.event.wait(timeout)


class _Returned:
    """What ends a wait for the running host functions: one returned since it began, or the
    signal the waiting host waits for was set meanwhile (a host function that handed a
    blocking callback to this very thread waits for it to return)."""

    __slots__ = ("timeline", "seen", "signal")

    def __init__(self, timeline: Any, signal: Any) -> None:
        self.timeline, self.seen, self.signal = timeline, timeline.returned, signal

    def __call__(self) -> bool:
        """Whether the wait is over."""
        signal = self.signal
        return self.timeline.returned != self.seen or signal is not None and signal.is_set()


class Timeline:
    """The virtual clock, the pending task ends, and who runs the simulation (one per process)."""

    def __init__(self):
        self.lock = forksafe.rlock()   # held while a thread runs the simulation
        self.moved = forksafe.condition(self.lock)
        self.now = 0                    # ns: the device time, and the host's when it acts
        self.ends: list = []            # heap of (end ns, seq, backend, queue, task, units)
        self.seq = itertools.count()
        self.backends: list[SimBackend] = []
        self.local = _ThreadFrames()
        self.generation = 0             # bumps whenever a host call acts (wakes idle waiters)
        self.memory: list = []          # sorted (start, end, where, device) of simulated allocations
        self.owed_ns = 0                # host cost incurred where the simulation cannot run
                                        # (a driver allocation inside the pool): charged next
        self.inflight = 0               # host functions running on their threads
        self.returned = 0               # host functions that returned so far
        self.patience_spent = -1        # `returned` when the wait for running ones last expired
        self.pumping = False   # the pump thread was started (or a start was tried and cut)
        self.pump_runs = False  # a pump thread runs (it says so itself, as it begins)
        self.pump_stop = forksafe.event()   # set at exit: the pump ends, none starts again
        self.pump_ended = forksafe.event()  # set as the pump thread returns
        self.attending = 0              # host threads inside host_wait (they move time themselves)
                                        # or waiting in a step for a host function
        self.callers: dict = {}          # ident -> thread of host threads that used the runtime
        self.sharing = 0                # running tasks whose end moves with others' (see _share)
        self.deadlines: list = []       # the engine's heap of timed waits (see attach)
        self.fire_deadlines: Any = None  # the engine's fire_deadlines(now) (see attach)
        self.acting_for: Any = None     # the engine's acting_for(): see acting_frame
        self.host_wait_timed: Any = None  # the engine's host_wait_timed(): see _host_wait
        self.look_at_values: Any = None  # the engine's look_at_values(): see SimBackend.execute
        self.drop_ended_deadlines: Any = None  # the engine's, through its queue: see _unattended_work
        self.host_frames: dict = {}     # task -> frame of each host function running
        self.interrupted = False        # a signal held back while the main thread stepped (below)
        self.held: list[int] = []       # which ones, in the order they came
        self.deliver: Any = None        # the runtime's deliver(signums): runs their handlers
        self.graced: Any = None         # the signal whose wait last had its grace (_host_wait)
        self.engine: Any = None         # the engine (its `progress`: see attach)
        self.stranger_wait: Any = None  # the signal whose wait waits for strangers, since when
        self.stranger_since = 0.0
        self.step: Any = None           # the task a host thread runs for the simulation now
        self.step_frame: Any = None     # and its frame (execute finds it here: see there)
        self.polled = -2                # `generation` at the last query that found work not done
        self.missed: set[str] = set()   # what the queries missed since then, in a row
        self.queries = 0                # queries so far (host calls "query")
        self.polled_queries = 0         # `queries` at the last query that found work not done
        self.unattended = 0             # times the pump moved the device without the host
        self.submitted = 0              # tasks queued while a host thread waited (SUBMITTED)

    def start_pump(self) -> None:
        """Start the thread that moves an unattended device on (once per process)."""
        if not self.pumping and not self.pump_stop.is_set():
            forksafe.start_thread(self._pump, "ascentrt-sim-pump")
            self.pumping = True  # (a start cut before this starts another: see _pump)

    def _unattended_work(self) -> bool:
        """Whether the device has work to move on without its host, once what the host wrote
        meanwhile has released the value waits it meets (as its next call would) and the
        deadlines of waits that ended are gone: a jump must not land on one of those."""
        if self.look_at_values is not None:
            self.look_at_values()
        if self.drop_ended_deadlines is not None:
            self.drop_ended_deadlines()
        return self._pending()

    def _pending(self) -> bool:
        return bool(self.ends or self.next_end() is not None or self.inflight or self.next_deadline() is not None
                    or any(r.count for b in self.backends for r in b.ready))

    def stop_pump(self) -> None:
        """At exit, before finalization: end the pump thread.

        Finalization freezes a daemon thread where it next needs the interpreter, and the pump
        takes the timeline lock every few ms: frozen holding it, it would hang every later call
        (a teardown in a __del__ as the interpreter shuts down). Calls after this move the
        device themselves, as any host wait does."""
        self.pump_stop.set()  # (wakes it from its sleep)
        if self.pumping:
            # Until it has returned: a pump that started late and blocked on the lock while
            # the exit held it would take the lock inside the interpreter, be frozen as it
            # came back for it, and hold the lock for ever, though reading as unlocked.
            self.pump_ended.wait(STOP_PUMP_S)

    def _pump(self) -> None:
        with self.lock:
            if self.pump_runs:
                return  # (started again after a start an exception cut: one pumps)
            self.pump_runs = self.pumping = True
        try:
            self._pump_until_stopped()
        finally:
            self.pump_ended.set()

    def _pump_until_stopped(self) -> None:
        seen, since = -1, time.monotonic()
        step, step_since, said = None, since, None
        # (time of a look, ident -> CPU ns of each host thread then) of the last looks: a
        # thread's share is taken over about IDLE_HOST_S, not one look, since on a loaded
        # machine a thread that computes may get no core for a look or two (it was taken for
        # blocked, and the device moved on without it)
        looks: collections.deque = collections.deque(maxlen=4)
        while not self.pump_stop.wait(IDLE_HOST_S / 4):
            # (read without the lock: a host thread that computes is not an idle host)
            looked = time.monotonic()
            # (every host thread computing: one blocked outside the runtime may be waiting for
            # the device, as a lone host thread blocked there is)
            computing, blocked = 0, 0
            then, before = looks[0] if looks else (looked, {})
            ran = {}
            for ident, thread in list(self.callers.items()):
                cpu = ran[ident] = _cpu_ns(thread)
                last = before.get(ident, -1)
                if cpu >= 0 and last >= 0:
                    if cpu - last >= BUSY_SHARE * (looked - then) * 1e9:
                        computing += 1
                    elif thread.is_alive():
                        blocked += 1
            looks.append((looked, ran))
            busy = computing > 0 and not blocked
            # (read without the lock, which the step holds) A task that has run this long on
            # the host thread that stepped it may wait for that very thread: say so, once.
            if self.step is not step:
                step, step_since = self.step, time.monotonic()
            elif step is not None and step is not said and time.monotonic() - step_since >= LONG_STEP_S:
                _say_long_step(step)
                said = step
            if not self.lock.acquire(False):  # a host thread steps: the device is attended
                continue
            first_move = False
            try:
                if self.pump_stop.is_set():
                    pass  # (the exit stopped it meanwhile: the loop's test ends it)
                elif self.generation != seen or self.attending:
                    # (a host that waits moves time itself, at the real world's pace while other
                    # threads may still act: jumping to a deadline would skip what they do)
                    seen, since = self.generation, time.monotonic()
                elif time.monotonic() - since >= (BUSY_HOST_S if busy else IDLE_HOST_S) \
                        and self._unattended_work():
                    # Unattended: run one instant of device time, as a waiting host would.
                    nxt = self.next_event()
                    self.run(self.now if nxt is None else max(nxt, self.now))
                    self.moved.notify_all()
                    self.unattended += 1
                    first_move = self.unattended == 1
            finally:
                self.lock.release()
            if first_move:  # (said outside the lock: a full stderr pipe must not stop the device)
                _say_unattended()

    def frames(self) -> list:
        """The tasks the calling thread is running for the simulation, innermost last."""
        local = self.local
        f = local.frames
        if f is None:
            f = local.frames = []
        return f

    def where(self, addr: int) -> str:
        """'device', 'pinned' or 'pageable': what memory `addr` is in."""
        return self._entry(addr)[2]

    def device_of(self, addr: int):
        """The simulated device whose memory `addr` is in (None for host memory)."""
        return self._entry(addr)[3]

    def _entry(self, addr: int) -> tuple:
        i = bisect.bisect_right(self.memory, (addr, math.inf, "")) - 1
        if i >= 0:
            entry = self.memory[i]
            if entry[0] <= addr < entry[1]:
                return entry
        return _PAGEABLE

    # ---- running the simulation (callers hold self.lock) -------------------------------------

    def next_end(self) -> int | None:
        """When the next running task ends (None: none runs)."""
        nxt = self.ends[0][0] if self.ends else None
        if not self.sharing:
            return nxt
        for b in self.backends:
            e = b.next_shared_end()
            if e is not None and (nxt is None or e < nxt):
                nxt = e
        return nxt

    def run(self, until: float, signal=None) -> bool:
        """Run events up to time `until` (or until `signal` is set); True when it is set."""
        ends = self.ends
        backends = self.backends
        while True:
            if self.interrupted:  # (between events: a signal held back is delivered here)
                self.raise_interrupt()
            for b in backends:
                compute, copy, host = b.ready
                if compute.count or copy.count or host.count:
                    b.dispatch()
            if signal is not None and signal.is_set():
                return True
            nxt = self.next_end() if self.sharing else ends[0][0] if ends else None
            if self.inflight and self.inflight > self._own_host_tasks() \
                    and (nxt is None or nxt > self.now) and self.patience_spent != self.returned:
                # Time may not move while a host function runs (its end is not known yet).
                self.attending += 1  # (a host call waits here: the pump must not take it for idle)
                try:
                    returned = self.moved.wait_for(_Returned(self, signal), HOST_FUNC_PATIENCE_S)
                finally:
                    self.attending -= 1
                if returned:
                    continue
                self.patience_spent = self.returned  # it blocks: let time go on without it
            heap = self.deadlines
            if heap and (nxt is None or heap[0][0] < nxt):
                deadline = heap[0][0]
                if deadline > until:
                    return False
                self.now = max(self.now, deadline)
                self.fire_deadlines(self.now)
                continue
            if nxt is None or nxt > until:
                return False
            self.now = nxt
            if self.sharing:
                for b in self.backends:
                    b.shared_work_done(nxt)  # (their ends join the heap)
            while ends and ends[0][0] == nxt:  # every end at this instant, then dispatch
                _, _, backend, queue, task, units = heapq.heappop(ends)
                backend.ended(queue, task, units)

    def _any_ready(self) -> bool:
        """Whether a stream of any simulated device waits for an executor."""
        for b in self.backends:
            compute, copy, host = b.ready
            if compute.count or copy.count or host.count:
                return True
        return False

    def acts_as_host(self) -> bool:
        """Whether the calling thread acts as the host: not inside a task (a host function's),
        nor for one (its blocking callback's report thread)."""
        return not self.local.frames and (not self.inflight or self.acting_frame() is None)

    def note_caller(self) -> None:
        """Remember the calling host thread (one that uses the runtime); once per thread."""
        me = threading.current_thread()
        self.callers[me.ident] = me
        self.local.noted = True

    def note_thread(self, thread: threading.Thread) -> None:
        """Count `thread` among the host threads that use the runtime before its first call
        (a daemon thread made to call it, as acl.util.start_thread's: virtual time must not
        run ahead of it while it prepares)."""
        if thread.ident is not None:
            self.callers[thread.ident] = thread

    def others_may_act(self) -> int:
        """Who else may move things on: _CALLERS (a running host function, or another live host
        thread that has used the runtime), _STRANGERS (only live non-daemon threads that never
        did: they may yet, as the interpreter waits for them, or be a timer or an idle pool
        worker that never will) or _NOBODY."""
        if self.inflight and self.inflight > self._own_host_tasks():
            return _CALLERS
        me = threading.get_ident()
        for ident, t in list(self.callers.items()):
            if ident != me:
                if t.is_alive():
                    return _CALLERS
                del self.callers[ident]
        if any(not t.daemon and t.ident != me and t.is_alive() for t in threading.enumerate()):
            return _STRANGERS
        return _NOBODY

    def patient_with_strangers(self, signal) -> bool:
        """Whether a wait for `signal`, stuck (nothing scheduled to end) with only threads that
        never used the runtime left to act, still lets them: one may be about to record what it
        waits for (a timer the program set for that), so time passes at the real world's pace,
        for _STRANGER_PATIENCE_S of real time per wait. Not longer where a timed wait's deadline
        is due next, and not while work runs (it moves time on itself): an unrelated timer or an
        idle pool worker held device-side timeouts (a collective's 1836 s) to the real pace."""
        now = time.monotonic()
        if self.stranger_wait is not signal:
            self.stranger_wait, self.stranger_since = signal, now
        return now - self.stranger_since < _STRANGER_PATIENCE_S

    def _own_host_tasks(self) -> int:
        """How many of the running host functions are the calling thread itself (or one it
        acts for: see acting_frame)."""
        return sum(1 for f in self.frames() if f.task.kind == HOST) + \
            (self.acting_frame() is not None)

    def acting_frame(self) -> Any:
        """The frame of the running host function the calling thread acts for, a report thread
        running the function's blocking callback (the function waits for it): its calls act
        at the function's virtual time, as the function's own calls do. None otherwise (a
        look only while a host function runs: every API call asks)."""
        if not self.inflight or self.acting_for is None or self.local.frames:
            return None
        task = self.acting_for()
        return None if task is None else self.host_frames.get(task)

    def next_deadline(self) -> int | None:
        """The engine's earliest timed-wait deadline, or None."""
        return self.deadlines[0][0] if self.deadlines else None

    def next_event(self) -> int | None:
        """When the device next changes by itself: a running task's end or a timed wait's
        deadline, whichever comes first (None: neither)."""
        nxt, deadline = self.next_end(), self.next_deadline()
        return deadline if deadline is not None and (nxt is None or deadline < nxt) else nxt

    def wake(self) -> None:
        """A signal was set: the host threads waiting on the timeline look again, at once
        where its lock is free (its holder, stepping, sees the signal itself or notifies as
        it waits or advances; a waiter left asleep looks again within _REAL_PACE_S)."""
        if self.moved._waiters and self.lock.acquire(False):  # type: ignore[attr-defined]  # Condition's own list; typeshed omits it
            try:
                self.moved.notify_all()
            finally:
                self.lock.release()

    def attach(self, queue) -> None:
        """Learn, from the first executor queue, where the engine keeps its timed waits."""
        if self.fire_deadlines is None:
            self.deadlines = queue.engine._deadlines   # a heap of (deadline ns, ...)
            self.fire_deadlines = queue.fire_deadlines
            self.acting_for = queue.acting_for
            self.host_wait_timed = queue.host_wait_timed
            self.look_at_values = queue.engine.look_at_values
            self.drop_ended_deadlines = queue.drop_ended_deadlines
            self.engine = queue.engine

    def advance_host(self, cost_ns: int) -> None:
        """The host spends `cost_ns`: run what happens meanwhile, then it is at the new time."""
        until = self.now + cost_ns
        if self.owed_ns:
            until += self.owed_ns
            self.owed_ns = 0
        if self.ends or self.sharing or self.inflight or self.deadlines:
            self.run(until)
        elif len(self.backends) == 1:  # (the common case: one device, its ready counts inline)
            b = self.backends[0]
            compute, copy, host = b.ready
            if (compute.count or copy.count or host.count) and not b.run_alone(until):
                self.run(until)
        elif self._any_ready():
            self.run(until)
        if self.now < until:
            self.now = until
        self.generation += 1
        # (a host thread idles in host_wait: let it look again)
        if self.moved._waiters:  # type: ignore[attr-defined]  # Condition's own list; typeshed omits it
            self.moved.notify_all()
        if self.interrupted:
            self.raise_interrupt()

    def raise_interrupt(self) -> None:
        """Run the program's handlers of the signals held back while a step ran (the step is
        whole now: a Ctrl-C's KeyboardInterrupt, or whatever they raise, comes out here), on
        the main thread only, the one handlers run on, and not while it runs a task for the
        simulation (a kernel that synchronizes steps too): the outermost step delivers them."""
        if threading.current_thread() is threading.main_thread() and not self.local.frames:
            held = self.held
            self.held = []
            self.interrupted = False
            if self.deliver is not None:
                self.deliver(held)
            elif _SIGINT in held:  # (none registered: Python's own Ctrl-C)
                raise KeyboardInterrupt

    def hold_back(self, signum: int) -> None:
        """Keep `signum` to deliver once the step is whole."""
        if signum not in self.held:
            self.held.append(signum)
        self.interrupted = True

    def held_back(self) -> None:
        """Where the main thread let the lock go after holding it outside a step (a wait's
        end): raise a Ctrl-C held back meanwhile, unless a step still runs further out."""
        if self.interrupted and not self.lock._is_owned():  # type: ignore[attr-defined]  # RLock has it; typeshed omits it
            self.raise_interrupt()


def defer_in_step(signum: int) -> bool:
    """A signal's deferrer (the runtime registers it with ascentrt.interrupts for a simulated
    device): it takes the signal while the main thread runs a step of the simulation (it
    has taken a task, or started one), which an exception from its handler would leave half
    done: the device would then wait for ever for a task nobody runs, or a kernel would fail
    with the interrupt. The step ends (the next event boundary), then the handler runs; a
    second Ctrl-C before that is raised at once (a kernel that never returns).

    A step runs under the timeline's lock, and a task it runs is in the thread's frames (even
    while a kernel's own synchronize waits with the lock let go): that is what tells one (a
    frame's code would not: a compiled build runs without Python frames). The interrupt is
    raised at the end of the host call that stepped, or, where the lock was held outside a
    step (a driver allocation, a free, a wait's bookkeeping), at the next host call or wait's
    end: raised there, it would cut the pool's bookkeeping short."""
    tl = TIMELINE
    held = tl.held
    stepping = tl.lock._is_owned() or tl.local.frames  # type: ignore[attr-defined]  # RLock has it; typeshed omits it
    if stepping and (signum != _SIGINT or _SIGINT not in held):
        tl.hold_back(signum)
        return True
    if signum in held:  # (a second Ctrl-C, or none in a step: at once, standing for the one held)
        held.remove(signum)
        tl.interrupted = bool(held)
    return False


_SIGINT: Final = int(signals.SIGINT)


TIMELINE = Timeline()


def _after_fork_in_child() -> None:
    """A forked child has no pump thread and may have inherited a held timeline lock; the
    tasks the parent's simulation was running are the parent's (the engine counts them done
    in the child): their ends and the units they held go, or the child's work would wait
    behind them."""
    # (its lock and condition: renewed by forksafe's hook, which runs first)
    TIMELINE.local = _ThreadFrames()
    TIMELINE.pumping = TIMELINE.pump_runs = False
    TIMELINE.pump_stop.clear()
    TIMELINE.pump_ended.clear()
    TIMELINE.interrupted = False  # (the parent's signals, not the child's)
    TIMELINE.held = []
    TIMELINE.inflight = 0
    TIMELINE.host_frames = {}
    TIMELINE.attending = 0  # (a parent thread inside host_wait does not exist here)
    TIMELINE.ends = []
    TIMELINE.sharing = 0
    for b in TIMELINE.backends:
        b._host_threads = []
        b.sharing = []
        p = b.preset
        b.free_units = p.compute_units
        b.free_copy = [p.copy_engines_h2d, p.copy_engines_d2h, p.copy_engines_d2d]
        b.free_host = p.host_func_threads
    if TIMELINE.backends:
        TIMELINE.start_pump()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(TIMELINE.stop_pump)


class SimBackend(CpuBackend):
    """A device that follows a preset in virtual time (memory and results as on cpu)."""

    def __init__(self, name: str, memory_bytes: int, executors: tuple[int, int, int],
                 preset: Preset):
        p = self.preset = preset
        self.timeline = TIMELINE
        memory = memory_bytes or p.memory_bytes
        self._properties = BackendProperties(
            "sim", name, memory, (p.compute_units, p.copy_engines_h2d + p.copy_engines_d2h
                                  + p.copy_engines_d2d, p.host_func_threads),
            preset=p.name, preset_source=identity(p), virtual=True, queue_depth=p.queue_depth,
            max_streams=p.max_streams,
            max_events=p.max_events, max_notifies=p.max_notifies, dispatch_ns=int(p.dispatch_ns),
            release_ns=int(p.event_latency_ns),
            copy_engines_per_direction=(p.copy_engines_h2d, p.copy_engines_d2h, p.copy_engines_d2d))
        self.queues: list[Any] = [None, None, None]   # the engine's ExecutorQueue per class
        self.ready: list[Any] = [_NONE_READY] * 3   # their ready streams (.count), per class
        self.free_units = p.compute_units
        self.free_copy = [p.copy_engines_h2d, p.copy_engines_d2h, p.copy_engines_d2d]
        self.free_host = p.host_func_threads
        self._host_threads: list[_HostThread] = []   # idle ones, started on first use
        self._name = name
        self.processors = p.shared_processors  # 0: engines are hardware of their own
        # On shared processors every engine is a thread: each running task needs one.
        self._on_processors = bool(p.shared_processors)
        # More tasks than whole processors: they deliver crowded_processors in all.
        self._crowd_at = math.ceil(p.shared_processors)
        self._crowded = p.crowded_processors or p.shared_processors
        self._units = p.compute_units
        self._default_units = p.default_block_dim or p.compute_units
        self._dispatch_ns = int(p.dispatch_ns)
        self._event_latency_ns = int(p.event_latency_ns)
        self._handoff_ns = int(p.executor_handoff_ns)
        # A synchronous copy or fill goes the way of an asynchronous one the host waits for:
        # its launch and dispatch before its bytes move (the wait's return after them).
        self._sync_op_ns = int(p.host_launch_ns) + self._dispatch_ns
        self.sharing: list[list] = []   # running tasks that share (see _share)
        self._alone_frame = _Frame(None, 0)  # the frame of run_alone's task (see there)
        self._alone_until = 0           # the horizon of the step alone being begun (run_alone)
        self.shared_since = 0           # when `sharing`'s work was last brought up to date
        self.uncosted: dict[str, int] = {}  # kernels that declared no cost: label -> count
        self._last_lane = 0             # the copy engine's direction _fits_copy found
        self._last_units = 0            # the compute units _fits_compute found
        self._link_bytes = 0.0          # the last kernel's link_bytes and link_src (_kernel_ns)
        self._link_src = 0
        self._tail_units = 0            # ... the units its last partial wave holds (0: none)
        self._last_share = 0.0          # ... and that wave's share of its time
        # The Cost object of the last costed kernel and (ns, memory ns, link_bytes, link_src,
        # tail units, last wave's share) it gave (see _kernel_ns)
        self._known_cost: Any = None
        self._known_ns: tuple[float, float, float, int, int, float] = (0.0, 0.0, 0.0, 0, 0, 0.0)
        self._host_cost = {what: int(ns) for what, ns in {
            "kernel": p.host_launch_ns, "copy": p.host_launch_ns, "memset": p.host_launch_ns,
            "host_func": p.host_launch_ns, "host_func_nonblocking": p.host_launch_ns,
            "event_record": p.host_record_ns, "event_wait": p.host_record_ns,
            "notify_record": p.host_record_ns, "notify_wait": p.host_record_ns,
            "value_wait": p.host_record_ns,
            "graph_launch": p.host_graph_launch_ns, "synchronize": p.host_sync_ns,
            "malloc": p.host_malloc_pool_ns, "malloc_driver": p.host_malloc_driver_ns,
            "free": p.host_free_ns, "query": p.host_query_ns,
            "settle": 0,  # (costs nothing itself: charges what the host owes, see alloc)
        }.items()}
        with TIMELINE.lock:
            TIMELINE.backends.append(self)
            TIMELINE.start_pump()

    # ---- the contract ------------------------------------------------------------------------

    def properties(self) -> BackendProperties:
        """Kind 'sim', with the preset's executors, memory and limits."""
        return self._properties

    def alloc(self, nbytes: int, host: bool = False) -> MemHandle:  # type: ignore[override]  # sets cpu's `reserve` itself
        """As on cpu (device memory reserved without backing); a driver allocation of pinned
        memory costs the host the preset's host_malloc_driver_ns, charged at its next call
        (malloc_host makes one as it returns). (A device allocator charges its own, with
        host_call("malloc_driver"), where its pool grew.)"""
        handle = super().alloc(nbytes, host, reserve=not host)
        tl = self.timeline
        with tl.lock:  # (a Ctrl-C meanwhile waits for the next host call: see defer_in_step)
            bisect.insort(tl.memory, self._memory_entry(handle))
            if host and not tl.frames():  # (the pool's lock is held now: charged after it)
                tl.owed_ns += int(self.preset.host_malloc_driver_ns)
        return handle

    def free(self, handle: MemHandle, offset: int = 0, nbytes: int | None = None) -> None:
        """As on cpu; the address range stops counting as simulated memory when freed whole."""
        if nbytes is None:
            tl = self.timeline
            with tl.lock:
                entry = self._memory_entry(handle)
                i = bisect.bisect_left(tl.memory, entry)
                if i < len(tl.memory) and tl.memory[i] == entry:
                    del tl.memory[i]
        super().free(handle, offset, nbytes)

    def _memory_entry(self, handle: MemHandle) -> tuple:
        """The timeline's (start, end, where, device) of a simulated allocation."""
        return (handle.addr, handle.addr + max(handle.nbytes, 1),
                "pinned" if handle.host else "device", None if handle.host else self._name)

    def start_queue(self, name: str, queue: Any) -> None:
        """Keep the queue: the simulation steps it (no thread; several units share one queue)."""
        self.queues[queue.executor] = queue
        self.ready[queue.executor] = queue.ready
        self.timeline.attach(queue)

    def execute(self, op: Op) -> None:
        """Do what `op` does (through the cpu backend) and account its modelled time: a task of
        the simulation ends after it; a graph segment's node or a synchronous copy inside a
        host function takes its own time after what its task did so far; a synchronous
        operation of the host moves the host clock. The duration is found first, so a kernel
        that fails still held its units that long; the running task's frame also gathers the
        ns its bytes take at the device's memory bandwidth (a node's add to its segment's). A
        run of operations (a graph segment, whose Cost is 0) adds the time of each of its nodes
        as they run."""
        tl = self.timeline
        p = self.preset
        kind = op.kind
        kernel = op.fn if kind == KERNEL else None
        mem = 0.0
        link: Any = None
        link_ns = 0.0
        latency = 0
        peer: Any = None
        ns: float  # (declared: mypyc keeps ints and floats apart)
        if kernel is not None:
            args = op.args if op.resolve is None else op.resolve(op.args)
            ns, mem = self._kernel_ns(op, kernel, args)
            link_bytes = self._link_bytes
            if link_bytes:  # (read from another device's memory: over the peer link, as a
                # peer copy's bytes, sharing it with them)
                source = tl.device_of(self._link_src) if self._link_src else None
                link = (D2H, id(source), 0) if p.peer_over_host_link and source is not None \
                    else (D2D, id(source), id(self._name))
                link_ns = link_bytes / p.peer_link_bandwidth * 1e9
                latency = int(p.peer_link_latency_ns)
                peer = self._peer_memory(source, link_bytes)
        elif op.fn is not None and (kind != HOST or getattr(op, "dispatches_nodes", False)):
            ns = 0.0  # a run of operations (a graph segment): its nodes add their own time
        elif kind == HOST:
            ns = p.host_func_ns
        elif kind == COPY:
            dst, dpitch, src, spitch, width, height = op.args
            # (a pitched copy is no single memmove on a cpu backend: no small-copy rate for it)
            direction = self.direction(dst, src)
            nbytes = width * height
            ns, mem = self.copy_ns(direction, nbytes, dst, src,
                                   height == 1 or dpitch == spitch == width)
            link = self.link_of(direction, dst, src)
            if link is not None:  # (its bytes' time on the link at the link's bandwidth: the
                # share of it the copy needs; a pageable copy, staged slower, needs less)
                link_ns = nbytes / (p.peer_link_bandwidth if direction == D2D
                                    else p.host_link_bandwidth) * 1e9
                latency = int(p.peer_link_latency_ns if direction == D2D else p.host_link_latency_ns)
                if direction == D2D:  # a peer copy: it reads one device's memory, writes the other's
                    here = tl.device_of(dst)
                    peer = self._peer_memory(tl.device_of(src) if here is self._name else here,
                                             nbytes)
        else:  # FILL
            dst, _, nbytes = op.args
            on_device = tl.where(dst) == "device"
            # (on the device it holds one compute unit: it writes at what one unit can draw, as
            # a kernel on one unit does)
            ns = nbytes / (self._reach(1) if on_device else p.pageable_bandwidth) * 1e9
            if on_device or p.unified_memory:
                mem = nbytes / p.memory_bandwidth * 1e9
            if on_device and p.copy_engine_bandwidth:  # (an engine writes as fast as it copies)
                ns = max(ns, nbytes / p.copy_engine_bandwidth * 1e9)
        took = int(ns)
        # (typed: a compiled build then sets its fields natively)
        frame: _Frame | None
        if op is tl.step:
            # The task a step runs, on the thread that steps (only _run_in_frame sets it, just
            # before it runs it here): its frame is that thread's innermost, without a look at
            # the thread's own state (a thread-local read costs a tenth of a noop's step).
            frame = tl.step_frame
        else:
            frames: list | None = tl.local.frames
            frame = frames[-1] if frames else tl.acting_frame() if tl.inflight else None
        nested = False  # a node of a segment, or an operation a host function makes
        if frame is None:  # a synchronous memcpy / memset of the host: the path of an
            # asynchronous one that it waits for (launched and dispatched, then its bytes move)
            with tl.lock:
                tl.advance_host(self._sync_op_ns)
        else:
            frame.mem += mem
            if frame.task is op:
                frame.own = took
                frame.tail = self._tail_units if kernel is not None else 0
                if frame.tail:
                    frame.last_ns = int(ns * self._last_share)
                frame.link, frame.link_ns, frame.latency, frame.peer = link, link_ns, latency, peer
            else:  # (dispatched first: now_ns() inside it reads its start, as a profile does)
                nested = True
                frame.offset += self._dispatch_ns
        try:
            if kernel is not None:
                kernel(*args)
            else:
                CpuBackend.execute(self, op)
        except BaseException:
            if nested and frame is not None:  # (a node that fails adds no time, as before)
                frame.offset -= self._dispatch_ns
            raise
        if frame is None:  # synchronous memcpy / memset from the host
            with tl.lock:
                if link is not None or mem:
                    self._host_moves(took, mem, link, link_ns, latency, peer)
                else:
                    tl.advance_host(took)
            if tl.look_at_values is not None:  # (a word it wrote lets a value wait go now)
                tl.look_at_values()
            with tl.lock:
                tl.advance_host(self._host_cost["synchronize"])  # (the wait's return path)
        elif nested:
            frame.offset += took

    def new_signal(self) -> Any:
        """A Signal whose set() also wakes the host threads waiting in host_wait."""
        return _Signal(threading.Event())

    def host_wait(self, signal, timeout_s: float | None) -> bool:
        """Run the simulation until `signal` is set (True; the host is then at that time) or
        `timeout_s` of virtual time passed with nothing left to do (False); False at once, time
        unmoved, where nothing is left to simulate (the caller checks for a deadlock; a call
        again with no task done since waits on). The call that waits
        charges its own cost (a synchronize its return path, after this) once, so the host's
        time is continuous in the work's end."""
        tl = self.timeline
        with tl.lock:
            if not tl.local.noted and tl.acts_as_host():
                tl.note_caller()  # (not a host function's thread: inflight counts those)
            tl.generation += 1  # the host is attending: the pump leaves the device to it
            tl.attending += 1
            try:
                done = self._host_wait(tl, signal, timeout_s)
            finally:
                tl.attending -= 1
        tl.held_back()  # (one that came after the last step, while the wait went on)
        return done

    def _host_wait(self, tl, signal, timeout_s) -> bool:
        """host_wait, under the timeline lock."""
        until = math.inf if timeout_s is None else tl.now + math.ceil(timeout_s * 1e9)
        while True:
            done = tl.run(until, signal)
            if tl.interrupted:
                tl.raise_interrupt()
            if done:
                return True
            # Nothing left to simulate before `until`.
            if tl.next_end() is None and not (tl.inflight and tl.inflight > tl._own_host_tasks()):
                # Idle: from here only time passing (or another thread) moves anything. The
                # caller looks for a deadlock first, at this instant: its check interval is
                # real time, never the device's (it cost 0.25 virtual s); asked again with no
                # task done, none queued and no other host thread gone since, the wait goes on
                # as before (a cycle another thread completes, or a wait its end leaves with
                # nobody to end it, is found where that happened, not a check slice later).
                told = (signal, -1 if tl.engine is None else tl.engine.progress, tl.submitted,
                        tl.others_may_act())
                if tl.local.idle_told != told:
                    tl.local.idle_told = told  # (per thread: two waiting threads took turns)
                    return False
            seen = tl.generation
            who = tl.others_may_act()
            if who == _STRANGERS and tl.next_end() is None:
                # Stuck, with only threads that never used the runtime: one may be about to
                # record what this waits for, so they may act (see patient_with_strangers),
                # unless their patience is over and a deadline is what moves things next (a
                # device-side timed wait's, or this host wait's own): time jumps there. With no
                # deadline, time keeps the real pace: jumping would only run the clock away in
                # a loop of empty slices.
                deadline = bool(tl.deadlines) or tl.host_wait_timed is not None and tl.host_wait_timed()
                who = _CALLERS if tl.patient_with_strangers(signal) or not deadline else _NOBODY
            if who == _CALLERS:
                # A host function still runs, or another host thread may record or launch (one
                # that used the runtime, or, stuck, any for a while): time passes at the pace of
                # the real world until it does.
                t0 = time.monotonic()
                tl.moved.wait(min(_REAL_PACE_S, (until - tl.now) / 1e9))
                if tl.generation != seen or signal.is_set():
                    continue
                # (never past an end: a host function that returned meanwhile scheduled one)
                nxt = tl.next_end()
                tl.now = min(until, tl.now + int((time.monotonic() - t0) * 1e9),
                             math.inf if nxt is None else max(tl.now, nxt))
                if tl.now < until:
                    continue
                return False
            # Only this thread can act (or threads that never used the runtime: see
            # patient_with_strangers). With nothing scheduled to end, one starting now may still
            # act: a moment's grace before the jump. With a task running, time moves on by
            # itself: no grace (the engine's stall checks wait in slices of 0.25 virtual s, and
            # 5 ms of real time per slice made a long task's simulation take minutes). One grace
            # per wait: its later slices jump (a 1836 s timed wait took 7000 slices of 5 ms of
            # real time each).
            if tl.next_end() is None and (until == math.inf or tl.graced is not signal):
                tl.moved.wait(_GRACE_S)
                if tl.generation != seen or signal.is_set() or until == math.inf:
                    continue
                tl.graced = signal
            tl.now = max(tl.now, until)
            return False

    def host_call(self, what: str) -> int:
        """Charge the modelled cost of host call `what`, running what the device does meanwhile,
        and return 0; from inside a task (a host function acts at its device time) charge
        nothing and return that time: what it submits starts no earlier."""
        tl = self.timeline
        lock = tl.lock
        lock.acquire()  # (not `with`: every API call of the host comes here)
        try:
            mine: dict = tl.local.__dict__  # (the thread's own state, looked up once: see execute)
            inside = mine.get("frames") or tl.inflight and tl.acting_frame() is not None  # (acts_as_host, inlined: hot)
            if not inside:
                if not mine.get("noted"):
                    tl.note_caller()
                cost = self._host_cost.get(what)
                if cost is not None:
                    tl.advance_host(cost)
                    if what == "query":
                        tl.queries += 1  # (a poll loop's other queries: see _poll_missed)
                elif what.startswith(POLL_MISS):
                    self._poll_missed(tl, what)
                elif what == SUBMITTED:
                    tl.submitted += 1  # (a stalled wait looks again: see _host_wait)
                    tl.advance_host(0)
                else:
                    tl.advance_host(0)
        finally:
            lock.release()
        return self.now_ns() if inside else 0

    def _poll_missed(self, tl: Timeline, what: str) -> None:
        """A query found the work not done. A second miss of the same stream or event, with
        nothing but queries since the first, is a host polling: real time passes
        between its polls (it sleeps, or spins) that virtual time does not see, so the host
        moves on to the device's next event (a task's end, a timed wait's deadline) instead
        of polling it a host_query_ns at a time: a loop of `while not ev.query():
        time.sleep(0.1)` would otherwise take (remaining device time / host_query_ns) real
        sleeps. Misses of different streams or events in a row (a program that looks at
        each once) are not polling, until one of them comes round again. Deterministic: it
        depends on the sequence of calls only."""
        if tl.generation - tl.polled != tl.queries - tl.polled_queries:
            tl.missed = set()  # (a call other than a query came between: a fresh run)
        elif what in tl.missed:
            nxt = tl.next_event()
            if nxt is not None and nxt > tl.now:
                tl.advance_host(nxt - tl.now)
            tl.missed = set()
        tl.missed.add(what)
        tl.polled, tl.polled_queries = tl.generation, tl.queries

    def now_ns(self) -> int:
        """The virtual time (inside a task: its start as a profile records it, once dispatched
        and released, plus the time of its nested operations so far)."""
        tl = self.timeline
        frames = tl.local.frames
        frame = frames[-1] if frames else tl.acting_frame() if tl.inflight else None
        if frame is None:
            return tl.now
        t = frame.task
        if t is None or t.dispatches_nodes:  # (a segment's offset holds its latencies already)
            return tl.now + frame.offset
        return tl.now + frame.offset + self._dispatch_of(t) + self._held_back(t, frame.start)

    def _dispatch_of(self, t) -> int:
        """The dispatch latency task `t` pays: none for work the stream's scheduler does itself
        (a value write, which holds no unit: stamped as an event record is, when its stream
        reaches it), else dispatch_ns."""
        cost = t.cost
        if cost is not None and cost.block_dim == 0 and t.kind == KERNEL:
            return 0
        return self._dispatch_ns

    # ---- the model ---------------------------------------------------------------------------

    def _host_moves(self, took: int, mem: float, link: Any, link_ns: float, latency: int,
                    peer: Any) -> None:
        """The host waits while a synchronous copy or fill moves its bytes: they share the
        memory and the link with the tasks running meanwhile, as an asynchronous one's do (it
        took `took` ns alone and passed everything by); the host is back at its end."""
        tl = self.timeline
        latency = latency if latency < took else 0
        paced = took - latency
        if paced <= 0:
            tl.advance_host(took)
            return
        tl.advance_host(0)  # (the device at the host's time first)
        done = threading.Event()
        self._settle(tl.now)
        # (no queue: `ended` sets `done`; no engine, no processor of the device's own)
        self.sharing.append([float(paced), latency, None, done, 0, min(1.0, mem / paced), 1.0,
                             False, link, min(1.0, link_ns / paced), _demand(peer, paced), None])
        tl.sharing += 1
        self._share()
        tl.run(math.inf, done)

    def ended(self, queue, task, units) -> None:
        """A task ended: its executor units are free again, and the engine completes it (a
        synchronous operation of the host's: its waiting host goes on)."""
        if queue is None:
            task.set()
            return
        executor = queue.executor
        if executor == _COMPUTE:
            self.free_units += units
        elif executor == _COPY:
            self.free_copy[units] += 1
        else:
            self.free_host += 1
        queue.finish(task)

    def run_alone(self, until: int) -> bool:
        """The common step of a device that keeps up with its host, without the generic loop:
        nothing runs anywhere and only this device's compute class has ready work, so its
        first ready task starts now on the idle units; when nothing else becomes ready
        meanwhile and it ends by `until`, it also ends here, with the heap untouched. False
        when the step did not finish the work before `until` (Timeline.run goes on from where
        it left things: the same events, in the same order). The engine's queue takes, runs
        and finishes the task in one call (ExecutorQueue.step_alone), asking begin_alone and
        end_alone for the model's part."""
        compute, copy, host = self.ready
        if copy.count or host.count or self.free_units != self._units:
            return False
        self._alone_until = until  # (begin_alone puts it in the task's frame)
        if not self.queues[_COMPUTE].step_alone(self):
            return False
        return not (compute.count or copy.count or host.count)

    def begin_alone(self, t: Any) -> _Frame | None:
        """run_alone's task `t`, just taken (all units free: it fits): hold its units and make
        it the calling thread's innermost task; its frame, or None when more tasks start at
        this instant (it started the generic way: see dispatch)."""
        units = t.units = self.units_of(t)
        self.free_units -= units
        if self.free_units and self.ready[_COMPUTE].count:  # more start at this instant
            self._start(self.queues[_COMPUTE], t, units)
            return None
        tl = self.timeline
        # One frame object serves every step alone (creating one is ~4% of a simulated launch):
        # nothing keeps it once the step is over, and a step that starts while it is in use (a
        # kernel that waits on the host lets another thread step) gets a fresh one.
        frame = self._alone_frame
        if frame.task is None:
            frame.task, frame.start, frame.offset, frame.own, frame.mem = t, tl.now, 0, 0, 0.0
            frame.link, frame.link_ns, frame.latency, frame.peer = None, 0.0, 0, None
            frame.tail = 0
        else:
            frame = _Frame(t, tl.now)
        frame.units, frame.until = units, self._alone_until
        if t.dispatches_nodes:
            frame.offset = self._held_back(t, frame.start)
        frames: list | None = tl.local.frames  # (what _run_in_frame does before the run)
        if frames is None:
            frames = tl.frames()
        frames.append(frame)
        frame.stack = frames  # (end_alone pops it there: no second look at the thread's state)
        tl.step = t  # (for the pump: a step that never returns is said, see Timeline._pump)
        tl.step_frame = frame
        return frame

    def end_alone(self, t: Any, frame: _Frame, failed: bool) -> bool:
        """run_alone's task `t` ran in `frame` (begin_alone's), and `failed` or not: True when
        it ended by the step's `until` with nothing else to simulate meanwhile (its units are
        free again: the engine's queue finishes it now); False when its end joined the
        timeline's events."""
        tl = self.timeline
        units = frame.units
        try:
            stack = frame.stack  # (what _run_in_frame does after the run)
            if stack is not None:
                stack.pop()
            frame.stack = None
            tl.step = tl.step_frame = None
            if failed and type(t.error) is KeyboardInterrupt and threading.current_thread() is threading.main_thread():
                tl.hold_back(_SIGINT)  # (see _run_in_frame)
            end = self._end(self.queues[_COMPUTE], t, frame, units)
        finally:
            frame.task = None
        if end is None:
            return False
        compute, copy, host = self.ready
        # (this is the only device: its ready counts are what _any_ready() would ask)
        if end > frame.until or tl.ends or tl.sharing or tl.deadlines or tl.inflight \
                or compute.count or copy.count or host.count:
            # (what it did moved the simulation on itself, or made work ready: the generic way)
            heapq.heappush(tl.ends, (end, next(tl.seq), self, self.queues[_COMPUTE], t,
                                     frame.tail or units))
            return False
        tl.now = end
        self.free_units += units  # (ended(), whose finish() the engine's queue does)
        return True

    def dispatch(self) -> None:
        """Start every ready task that a free unit can take now (called under the timeline lock)."""
        compute, copy, host = self.ready
        if compute.count and self.free_units:
            q = self.queues[_COMPUTE]
            while True:
                if self.free_units == self._units:  # all free: any task fits (no test per task)
                    t = q.take(None, True)
                    if t is None:
                        break
                    units = self.units_of(t)
                else:
                    t = q.take(self._fits_compute, True)
                    if t is None:
                        break
                    units = self._last_units  # what _fits_compute found for the task it accepted
                self.free_units -= units
                t.units = units  # (a profile counts the units it held)
                self._start(q, t, units)
                if not (self.free_units and compute.count):
                    break
        if compute.count and not self.free_units:
            # Every unit held: a task that holds none (a value write) still goes, unless a
            # kernel ahead of it waits for units (strict priority).
            q = self.queues[_COMPUTE]
            while compute.count:
                t = q.take(self._holds_no_unit, True)
                if t is None:
                    break
                t.units = 0
                self._start(q, t, 0)
        if copy.count:
            q = self.queues[_COPY]
            while any(self.free_copy) and copy.count:
                t = q.take(self._fits_copy, False)
                if t is None:
                    break
                lane = self._last_lane  # what _fits_copy found for the task it accepted
                self.free_copy[lane] -= 1
                self._start(q, t, lane)
        if host.count:
            q = self.queues[_HOST]
            while self.free_host and host.count:
                t = q.take(None, True)
                if t is None:
                    break
                self.free_host -= 1
                self._start(q, t, 1)

    def _block_dim(self, declared: int | None) -> int:
        """The compute units a kernel occupies: its blocks (what it declared, else the preset's
        default), at most the device's units (more blocks run in waves on them); 0 declared,
        none (work the stream's scheduler does itself: a value write)."""
        return self._default_units if declared is None else min(declared, self._units)

    def units_of(self, t) -> int:
        """The compute units `t` occupies (a memset occupies one)."""
        if t.kind == KERNEL:
            cost = t.cost
            return self._default_units if cost is None else self._block_dim(cost.block_dim)
        return 1

    def _holds_no_unit(self, t) -> bool:
        """Whether `t` runs on no compute unit (see _block_dim)."""
        return self.units_of(t) == 0

    def _fits_compute(self, t) -> bool:
        """Whether the compute units `t` occupies are free."""
        units = self._last_units = self.units_of(t)
        return units <= self.free_units

    def _fits_copy(self, t) -> bool:
        """Whether an engine of the copy's direction is free; a graph segment of copies, one of
        its nodes' direction (as its copies would take eagerly: a segment that took any free
        engine ran an H2D copy on the D2H engine beside another H2D one); another run of
        operations on the copy class (a collective's), a D2D engine."""
        free = self.free_copy
        lane: int | None
        if t.fn is None:
            lane = self.direction(t.args[0], t.args[2])
            self._last_lane = lane
            return free[lane] > 0
        if t.dispatches_nodes:
            lane = self._last_lane = self._segment_lane(t)
            return free[lane] > 0
        # (another run of operations, a collective's steps between devices: a D2D engine, as
        # its peer copies take; any free one only on a device without D2D engines: taking the
        # H2D engine held the device's host-to-device copies up)
        if self.preset.copy_engines_d2d:
            if not free[D2D]:
                return False
            lane = D2D
        else:
            lane = next((i for i, n in enumerate(free) if n), None)
            if lane is None:
                return False
        self._last_lane = lane
        return True

    def _segment_lane(self, t) -> int:
        """The copy direction a graph segment's nodes move (a lane is cut where it changes: its
        first node says it; its task's first argument holds (op, node) per node); a node that
        is no plain copy takes H2D's."""
        op = t.args[0][0][0]
        args = op.args
        return self.direction(args[0], args[2]) if op.fn is None and len(args) == 6 else H2D

    def direction(self, dst: int, src: int) -> int:
        """H2D, D2H or D2D from where the two addresses are (host to host counts as H2D)."""
        where = self.timeline.where
        d, s = where(dst) == "device", where(src) == "device"
        return D2D if d and s else D2H if s else H2D

    def _start(self, queue, t, units) -> None:
        """Run a taken task now and schedule its end (the timeline lock is held)."""
        tl = self.timeline
        frame = _Frame(t, tl.now)
        if t.dispatches_nodes:
            frame.offset = self._held_back(t, frame.start)
        # A host function runs on a host thread of its own and ends when it returns; as the
        # interpreter shuts down no thread can begin (nor a parked one run), and it runs like
        # any other task, on the thread that stepped here, the one left.
        if queue.executor == _HOST and not sys.is_finalizing():
            job = (self, queue, t, frame)
            tl.inflight += 1
            tl.host_frames[t] = frame
            if self._host_threads:
                self._host_threads.pop().start(job)
            else:  # (a new one begins with the job: see _HostThread)
                _HostThread(f"ascentrt-{self._name}-host"
                            f"{self.preset.host_func_threads - self.free_host - 1}", job)
            return
        self._run_in_frame(queue, t, frame)
        self._schedule_end(queue, t, frame, units)

    def _run_in_frame(self, queue, t, frame: _Frame) -> None:
        """Run taken task `t` on the calling thread, as the innermost task it runs for the
        simulation (its nested operations and now_ns() read the frame)."""
        tl = self.timeline
        frames: list | None = tl.local.frames
        if frames is None:
            frames = tl.frames()
        frames.append(frame)
        tl.step = t  # (for the pump: a step that never returns is said, see Timeline._pump)
        tl.step_frame = frame
        try:
            queue.run(t)
        finally:
            frames.pop()
            tl.step = tl.step_frame = None
        if type(t.error) is KeyboardInterrupt and threading.current_thread() is threading.main_thread():
            # A second Ctrl-C cut the task short (it failed with it): the program still gets
            # its interrupt, once the step is whole.
            tl.hold_back(_SIGINT)

    def host_task_returned(self, worker: _HostThread, job) -> None:
        """A host function returned on `worker`: schedule its end and free the thread."""
        _, queue, t, frame = job
        tl = self.timeline
        with tl.lock:
            self._schedule_end(queue, t, frame, 1)
            self._host_threads.append(worker)
            tl.host_frames.pop(t, None)
            tl.inflight -= 1
            tl.returned += 1
            tl.moved.notify_all()

    def _schedule_end(self, queue, t, frame: _Frame, units) -> None:
        """Push the end of a task that ran (the timeline lock is held); a kernel with a last
        partial wave frees only that wave's units there (_end frees the others before)."""
        end = self._end(queue, t, frame, units)
        if end is not None:
            tl = self.timeline
            heapq.heappush(tl.ends, (end, next(tl.seq), self, queue, t, frame.tail or units))

    def _held_back(self, t, start: int) -> int:
        """How long after `start` (when it was taken) task `t`'s stream lets it go: the release
        of a wait it follows takes event_latency_ns, a hand-over from another executor class
        executor_handoff_ns."""
        ready = t.ready_ns  # (one a host function submitted: not before its time)
        if t.released_ns:  # the first task after a wait
            ready = max(ready, t.released_ns + self._event_latency_ns)
        if self._handoff_ns and t.handed_ns:  # its stream's last task ran on another class
            ready = max(ready, t.handed_ns + self._handoff_ns)
        return ready - start if ready > start else 0

    def _end(self, queue, t, frame: _Frame, units) -> int | None:
        """When a task that ran ends; None when it joined the sharing tasks instead (its end
        moves with theirs)."""
        tl = self.timeline
        start = frame.start
        work = frame.offset + frame.own  # (own is 0 for a graph segment: its nodes add their time)
        # A graph segment's latencies came first, in its offset, and each node was dispatched
        # as it ran: it adds nothing after its nodes.
        nodes = t.dispatches_nodes
        held = 0 if nodes else self._held_back(t, start)
        fixed = 0 if nodes else self._dispatch_of(t) + held
        # It runs once dispatched (and released): a profile shows its work alone, the fixed
        # latencies before it as time queued. (A segment keeps its start: its nodes' times
        # were taken from it as they ran.)
        t.t_start = start + fixed
        computes = self._on_processors
        if work and not frame.offset and (frame.mem or computes or frame.link is not None):
            # It shares memory bandwidth or processors: its end moves with the others'. (Not a
            # graph segment or a host function whose nested operations took time: their nodes'
            # times were fixed at full rate as they ran.)
            # (a copy's link latency is no bandwidth: it passes alike however many share the
            # link, after its bytes moved)
            latency = frame.latency if frame.latency < work else 0
            paced = work - latency
            wave = None
            if frame.tail:  # (its last partial wave begins when that wave's work is left)
                if 0 < frame.last_ns < paced:
                    wave = _Wave(self, t, units - frame.tail, frame.last_ns)
                else:
                    frame.tail = 0
            entry = [float(paced), fixed - held + latency, queue, t, frame.tail or units,
                     min(1.0, frame.mem / paced), 1.0, computes, frame.link,
                     min(1.0, frame.link_ns / paced), _demand(frame.peer, paced), wave]
            begin = start + held
            if begin > tl.now:
                # Held back (a wait's release, a hand-over): it shares nothing before then, so
                # its work joins the others' at that instant (an event of the timeline's).
                heapq.heappush(tl.ends, (begin, next(tl.seq), self, None, _Begin(self, entry), 0))
            else:
                self.begin_sharing(entry)
            return None
        now = tl.now
        t.t_end = end = (now if now > start else start) + work + fixed
        if frame.tail:
            # Its last partial wave holds only its own blocks' units: the others are free from
            # that wave's start (an event of the timeline's), for other kernels' blocks.
            if 0 < frame.last_ns < frame.own:
                wave = _Wave(self, t, units - frame.tail, 0)
                heapq.heappush(tl.ends, (end - frame.last_ns, next(tl.seq), self, None, wave, 0))
            else:
                frame.tail = 0
        return end

    # ---- sharing (the timeline lock is held) -------------------------------------------------
    # A running task that moves memory needs `demand` of the memory bandwidth at its full rate
    # (its bytes over the bandwidth, per ns of its duration); on a preset with shared_processors
    # each running task (a kernel, copy, fill or host function: every engine is a thread
    # there) needs one processor at its full rate. Rates are max-min fair (every task's
    # rate rises alike until a resource it uses is full, as in a fluid network model);
    # A copy over the host link (one per direction) or a peer link (one per pair and direction) needs
    # that link at its full rate too: copies crossing one link share its bandwidth, however
    # many engines move them.
    # A kernel's link_bytes cross a peer link as a peer copy's bytes do, and a peer copy (or
    # such a read) needs the other device's memory too, at its bandwidth.
    # `sharing` holds [work ns left at full rate, fixed ns after it, queue, task, units (its
    # end frees), demand, rate, uses a processor, link, link demand, (the other device's memory
    # key, demand) or None, the _Wave of a last partial wave not begun or None] and is brought
    # up to date (_settle) whenever it changes.

    def _settle(self, now: int) -> None:
        """Bring the sharing tasks' work left up to `now` at the rates they had since."""
        elapsed = now - self.shared_since
        if elapsed:
            for entry in self.sharing:
                entry[0] -= elapsed * entry[6]
        self.shared_since = now

    def _share(self) -> None:
        """Give the sharing tasks their max-min fair rates (progressive filling, _share_across);
        with tasks sharing on several devices at once, all of them together (a peer link joins
        two)."""
        busy = [b for b in self.timeline.backends if b.sharing]
        # (every busy device: one whose last task left still frees what it shared with the
        # others, a link or another device's memory)
        _share_across(busy or [self], self.timeline.now)

    def begin_sharing(self, entry: list) -> None:
        """A task's work joins the sharing tasks now (see the layout of `sharing` above)."""
        self._settle(self.timeline.now)
        self.sharing.append(entry)
        self.timeline.sharing += 1
        self._share()

    def next_shared_end(self) -> int | None:
        """When the first of the sharing tasks finishes its work at the present rates."""
        if not self.sharing:
            return None
        return self.shared_since + max(0, min(math.ceil((e[0] - _before_wave(e[11])) / e[6])
                                              for e in self.sharing))

    def shared_work_done(self, now: int) -> None:
        """At `now`: tasks whose work is done leave the sharing; each ends after its fixed part."""
        if not self.sharing:
            return
        self._settle(now)
        tl = self.timeline
        left = []
        for entry in self.sharing:
            wave = entry[11]
            if wave is not None and wave.left and entry[0] - wave.left <= 0.5 * entry[6]:
                # Its last partial wave's work is what is left: the wave begins once the fixed
                # part that comes after the work (its dispatch) is past too, as its end does.
                wave.left = 0
                heapq.heappush(tl.ends, (now + entry[1], next(tl.seq), self, None, wave, 0))
            if entry[0] <= 0.5 * entry[6] or entry[0] <= 1e-6:  # (within half a ns of done)
                fixed, queue, t, units = entry[1], entry[2], entry[3], entry[4]
                t.t_end = end = now + fixed
                if wave is not None and wave.at >= 0:  # (from its last wave's start to its end)
                    t.tail_ns = end - wave.at
                heapq.heappush(tl.ends, (end, next(tl.seq), self, queue, t, units))
                tl.sharing -= 1
            else:
                left.append(entry)
        if len(left) != len(self.sharing):
            self.sharing = left
            self._share()

    def copy_ns(self, direction: int, nbytes: int, dst: int, src: int,
                contiguous: bool = True) -> tuple[float, float]:
        """(latency + bytes / bandwidth of the path a copy takes, the ns its bytes take at the
        device memory's bandwidth). Pageable host memory is staged; with unified memory the
        host side of a copy is in the device's memory too; a contiguous copy under
        small_copy_bytes moves at small_copy_bandwidth."""
        p = self.preset
        mem = nbytes / p.memory_bandwidth * 1e9
        if direction == D2D:
            device_of = self.timeline.device_of
            if device_of(dst) != device_of(src):  # a peer copy: over the link between the two
                return p.peer_link_latency_ns + nbytes / p.peer_link_bandwidth * 1e9, mem
            ns = 2 * mem  # read and written once each; one engine moves at most its own rate
            engine = self._copy_rate(nbytes, p.copy_engine_bandwidth, contiguous)
            if engine:
                ns = max(ns, nbytes / engine * 1e9)
            return ns, 2 * mem
        host = src if direction == H2D else dst
        bw = self._copy_rate(nbytes, p.host_link_bandwidth, contiguous) \
            if self.timeline.where(host) == "pinned" else p.pageable_bandwidth
        return p.host_link_latency_ns + nbytes / bw * 1e9, mem * (2 if p.unified_memory else 1)

    def link_of(self, direction: int, dst: int, src: int) -> Any:
        """The link a copy's bytes cross: the host link of its direction (pinned or pageable
        host memory) of the device whose memory it moves (each device has its own: a PCIe
        x16 link per NPU), the peer link to the other device (with peer_over_host_link,
        where no such link exists, the source device's device-to-host link: the bytes leave
        it through the host's root complex), or None (a copy inside the device). With
        unified memory (a cpu backend's devices) one host link per direction serves them all:
        the host copies of every device cross one machine's memory."""
        device_of = self.timeline.device_of
        if direction == D2D:
            a, b = device_of(src), device_of(dst)
            if a is b:
                return None
            if self.preset.peer_over_host_link and a is not None:  # (out over the source's
                return (D2H, id(a), 0)                             # host link: see link_of)
            return (D2D, id(a), id(b))  # (one link each way per pair)
        if self.preset.unified_memory:
            return (direction, 0, 0)
        device = device_of(dst if direction == H2D else src)
        return (direction, id(self._name if device is None else device), 0)

    def _peer_memory(self, name: Any, nbytes: float) -> Any:
        """(key, ns at its memory bandwidth) of `nbytes` crossing the memory of the simulated
        device named `name` (None: none, or an unknown one, or this device itself)."""
        if name is None or name is self._name:
            return None
        for b in self.timeline.backends:
            if b._name is name:
                return (id(b), nbytes / b.preset.memory_bandwidth * 1e9)
        return None

    def _copy_rate(self, nbytes: int, rate: float, contiguous: bool) -> float:
        """`rate`, or small_copy_bandwidth for a contiguous copy under small_copy_bytes."""
        p = self.preset
        if nbytes < p.small_copy_bytes and contiguous:
            return float(p.small_copy_bandwidth)
        return rate

    def _reach(self, units: int) -> float:
        """The memory bandwidth (B/s) work on `units` compute units can draw: the preset's
        memory_bandwidth_per_unit each, at most the whole, and the whole on every unit (few
        cores draw less than the whole memory; all of them reach all of it)."""
        p = self.preset
        per_unit = p.memory_bandwidth_per_unit
        if not per_unit or units >= self._units or units * per_unit >= p.memory_bandwidth:
            return float(p.memory_bandwidth)
        return units * per_unit

    def _kernel_ns(self, op, kernel: Any, args) -> tuple[float, float]:
        """(Declared duration, or roofline of declared flops and bytes, or the built-in
        kernel's cost function, or the preset's default (and the kernel is listed as uncosted);
        the ns its declared bytes take at the memory bandwidth)."""
        p = self.preset
        cost = op.cost
        known = self._known_cost
        self._link_bytes = 0.0
        self._tail_units = 0
        if cost is None or cost is not known and (cost.seconds is None and not (
                cost.flops or cost.bytes or cost.link_bytes)):
            block_dim = None if cost is None else cost.block_dim  # launch(block_dim=) alone
            fn_cost = getattr(kernel, "cost", None)  # (kernel: op.fn, read once by execute)
            if fn_cost is not None:
                cost = fn_cost(*args)
                if block_dim is not None:
                    cost = dataclasses.replace(cost, block_dim=block_dim)
            if cost is None or cost is not known and (cost.seconds is None and not (
                    cost.flops or cost.bytes or cost.link_bytes)):
                label = getattr(op, "label", "") or getattr(op.fn, "__name__", "kernel")
                self.uncosted[label] = self.uncosted.get(label, 0) + 1
                if block_dim:  # (its waves alike: the last one takes its share of the time)
                    waves, self._tail_units = self._waves(block_dim)
                    self._last_share = 1.0 / waves
                return p.default_kernel_ns, 0.0
        if cost is known:
            # The very Cost object the last costed kernel had (one held as a constant: a cost
            # function that returns the same object for any arguments, as noop's, or one
            # passed to every launch): a Cost is frozen and the preset fixed, so its figures
            # are the ones found then (the cache holds the object: its id is never reused).
            ns, mem, self._link_bytes, self._link_src, self._tail_units, self._last_share = \
                self._known_ns
            return ns, mem
        ns, mem = self._costed_ns(cost)
        self._known_cost = cost
        self._known_ns = (ns, mem, self._link_bytes, self._link_src, self._tail_units,
                          self._last_share)
        return ns, mem

    def _waves(self, blocks: int) -> tuple[int, int]:
        """(waves, units of the last one when it is partial, else 0) of `blocks` blocks on the
        units they occupy (_block_dim): as CANN and CUDA schedule blocks, the cores run them a
        wave at a time, and in a last partial wave only its blocks hold cores."""
        units = self._units
        if blocks <= units:
            return 1, 0
        return -(-blocks // units), blocks % units

    def _costed_ns(self, cost: Any) -> tuple[float, float]:
        """_kernel_ns of a kernel with a Cost that declares its duration or work."""
        p = self.preset
        seconds = cost.seconds
        memory = cost.bytes / p.memory_bandwidth
        units = self._block_dim(cost.block_dim)
        blocks = cost.block_dim or units
        # The blocks run `units` at a time, in waves (the last one partial where `tail`).
        waves, tail = self._waves(blocks)
        self._tail_units = tail
        if seconds is not None:
            self._last_share = 1.0 / waves  # (waves alike: nothing else is known of them)
            return seconds * 1e9, (memory if memory < seconds else seconds) * 1e9
        # A roofline per wave: each unit runs one block's flops, and the wave's blocks move
        # their share of the bytes at what the units they hold draw (a last partial wave's few
        # cores draw less than the whole memory) and of the link bytes over the link; the
        # link's latency is paid once, as the whole kernel's transfer starts.
        compute = cost.flops / blocks / p.compute_flops_per_unit  # (one wave's)
        link_bytes = cost.link_bytes
        link = link_bytes / p.peer_link_bandwidth if link_bytes else 0.0
        self._link_bytes, self._link_src = link_bytes, cost.link_src
        last = 0.0  # the last partial wave's time
        if waves == 1:
            ns = max(compute, cost.bytes / self._reach(units), link)
        else:
            full = units / blocks  # (a whole wave's share of the blocks)
            ns = (waves - (1 if tail else 0)) * max(
                compute, cost.bytes * full / self._reach(units), link * full)
            if tail:
                last = max(compute, cost.bytes * tail / blocks / self._reach(tail),
                           link * tail / blocks)
                ns += last
        if link_bytes:
            ns = max(ns, link + p.peer_link_latency_ns / 1e9)
        if tail and ns > 0:
            self._last_share = last / ns
        return ns * 1e9, memory * 1e9



def _demand(peer: Any, paced: float) -> Any:
    """A sharing entry's (key, demand) of the other device's memory a task's bytes cross,
    from _peer_memory's (key, ns) (None: none)."""
    return None if peer is None else (peer[0], min(1.0, peer[1] / paced))


def _share_across(backends: list, now: int) -> None:
    """SimBackend._share over the sharing tasks of several devices: each device's memory and
    processors are its own, a link is one whoever's engine moves the copy (a peer link from
    device 0 to 1 carries both device 0's pushes and device 1's pulls)."""
    rising: list = []
    mem_left: dict = {}
    procs_of: dict = {}
    procs_left: dict = {}
    for b in backends:
        b._settle(now)  # (each at the rates it had until now)
        entries = b.sharing
        procs = b.processors
        if procs and sum(e[7] for e in entries) > b._crowd_at:
            procs = b._crowded
        key = id(b)
        mem_left[key], procs_of[key], procs_left[key] = 1.0, procs, float(procs)
        for e in entries:
            e[6] = 0.0
            rising.append((key, e))
    links_left: dict = {e[8]: 1.0 for _, e in rising if e[8] is not None}
    for _, e in rising:  # (a peer copy's other end: that device's memory, busy or not)
        if e[10] is not None and e[10][0] not in mem_left:
            mem_left[e[10][0]] = 1.0
    while rising:
        step = min(1.0 - e[6] for _, e in rising)
        load: dict = {}
        users: dict = {}
        link_load: dict = {}
        for key, e in rising:
            load[key] = load.get(key, 0.0) + e[5]
            users[key] = users.get(key, 0) + e[7]
            if e[8] is not None:
                link_load[e[8]] = link_load.get(e[8], 0.0) + e[9]
            if e[10] is not None:
                other = e[10][0]
                load[other] = load.get(other, 0.0) + e[10][1]
        for key, mload in load.items():
            if mload > 0:
                step = min(step, mem_left[key] / mload)
            if procs_of.get(key) and users.get(key):
                step = min(step, procs_left[key] / users[key])
        for link, lload in link_load.items():
            if lload > 0:
                step = min(step, links_left[link] / lload)
        for _, e in rising:
            e[6] += step
        for key, mload in load.items():
            mem_left[key] -= step * mload
            if key in procs_left:
                procs_left[key] -= step * users.get(key, 0)
        for link, lload in link_load.items():
            links_left[link] -= step * lload
        rising = [(key, e) for key, e in rising if e[6] < 1.0 - 1e-12
                  and not (procs_of[key] and procs_left[key] <= 1e-12 and e[7])
                  and not (mem_left[key] <= 1e-12 and e[5] > 0)
                  and not (e[10] is not None and mem_left[e[10][0]] <= 1e-12)
                  and not (e[8] is not None and e[9] > 0 and links_left[e[8]] <= 1e-12)]
    for b in backends:
        for e in b.sharing:
            e[6] = max(e[6], 1e-9)  # (never stalled for good: float dust)


class _Wave:
    """The start of a kernel's last partial wave, which frees the units its other waves held
    (an end of the timeline's heap with no queue, or met by a sharing task's work: set())."""

    __slots__ = ("backend", "task", "units", "left", "at")

    def __init__(self, backend: SimBackend, task: Any, units: int, left: int):
        self.backend, self.task, self.units = backend, task, units
        # a sharing task's: the work left (ns at full rate) when it begins (0: its start is
        # known, pushed on the heap; a task whose end is fixed has it from the first)
        self.left = left
        self.at = -1      # when it began (-1: not yet)

    def set(self) -> None:
        """Its units beyond the wave's own are free now (the profile learns how long it ran)."""
        backend = self.backend
        backend.free_units += self.units
        self.at = now = backend.timeline.now
        if self.task.t_end > now:  # (a sharing task's end is not known yet: set as it ends)
            self.task.tail_ns = self.task.t_end - now


def _before_wave(wave: Any) -> int:
    """The work left (ns at full rate) at which a sharing task's last partial wave begins
    (0: none is still to begin)."""
    return 0 if wave is None else wave.left


class _Begin:
    """A held-back task whose work joins the sharing ones when the timeline reaches its release
    (an end of the timeline's heap with no queue: SimBackend.ended calls set())."""

    __slots__ = ("backend", "entry")

    def __init__(self, backend: SimBackend, entry: list):
        self.backend, self.entry = backend, entry

    def set(self) -> None:
        """Its work begins now."""
        self.backend.begin_sharing(self.entry)


class _NoneReady:
    """The ready streams of an executor class not started yet: none."""

    count = 0


_NONE_READY = _NoneReady()


__all__ = ["D2D", "D2H", "H2D", "HOST_FUNC_PATIENCE_S", "IDLE_HOST_S", "SimBackend", "TIMELINE",
           "Timeline"]
