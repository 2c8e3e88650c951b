"""Recording one profile: device tasks from the engine, host API calls, ranges, memory."""

from __future__ import annotations

import dataclasses
import datetime
import os
import sys
import threading
import time
from collections.abc import Iterator
from operator import attrgetter
from typing import TYPE_CHECKING, NamedTuple
from .. import forksafe, interrupts
from . import clock
from .. import device as _device  # (its _devices: read as the module's, it is reassigned)

from ..callsite import site_text, user_code_site, user_site
from ..engine import ENGINE, Hooks
from ..engine.task import DETACH, EVENT_WAIT, KERNEL, KIND_NAMES, NOTIFY_WAIT, VALUE_WAIT
from ..errors import ErrorCode
from ..memory import leaks
from ..memory.stream_order import positions_reached
from ..memory.registry import REGISTRY
from . import memstats
from ..hccl.comm import groups as hccl_groups
from .data import (GRAPH_SEGMENT, QUEUE_FULL, VALUE_WRITE, Allocation, ApiCall, CollectiveRecord, DeviceInfo,
                   MarkRecord, MemorySample, RaceRecord, RangeRecord, StreamInfo, TaskRecord, REAL, VIRTUAL)
from .hostapi import CallSites, Instrumentation, ThreadNames, by_start
from .profile import Profile

if TYPE_CHECKING:
    from ..device import Device

_FRAGMENTATION_EVERY_NS = 10_000_000  # measure free-range layout at most every 10 ms (it is O(n))
_OOM_CODES = (int(ErrorCode.RT_MEMORY_ALLOCATION), int(ErrorCode.RT_DEVICE_OOM))
SEGMENT = None  # the kind filed for a graph segment's task (an engine kind is an int)
_OPEN = float("inf")  # the end of a window that is still open
_NO_FUNCTION = object()  # (no task's function: see tasks_done)


class Checkpoint(NamedTuple):
    """A point in a recording: where a session's window on it begins or ends."""

    ns: int          # the profiler's clock (virtual time on sim)
    host_ns: int     # perf_counter_ns, which every process on the machine shares
    races: int       # sanitizer reports so far
    wall: str        # the wall clock (ISO 8601, seconds)


def _wall_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


class _PendingFree:
    """A buffer freed after queued work: its bytes stay in use until that work is done."""

    __slots__ = ("rec", "key", "addr", "nbytes", "device", "waits", "when")

    def __init__(self, rec, alloc, waits: tuple):
        self.rec, self.addr, self.nbytes, self.device = rec, alloc.addr, alloc.nbytes, alloc.device
        self.key = -1 if alloc.device is None else alloc.device.id  # (as `allocated`'s keys)
        self.waits: dict = {}     # stream -> the task id it must complete
        for s, pos in waits:
            self.waits[s] = max(pos, self.waits.get(s, 0))
        self.when = 0             # the latest end of the work done so far

    def reached(self) -> bool:
        """Whether the streams are past the work it waits for (run, or discarded unrun: a
        destroyed stream's work never runs)."""
        return all(s._refuse == "destroyed" or positions_reached(((s, pos),))
                   for s, pos in self.waits.items())


def _blocks(task) -> int:
    """The block_dim a task's kernel asked for (0: none said)."""
    cost = task.cost
    return 0 if cost is None else cost.block_dim or 0


def _drained(items: list) -> Iterator:
    """The items of a list in order, each removed as it is handed out (the order matters: tasks
    that tie on start and end keep their completion order through the stable sort after)."""
    items.reverse()
    while items:
        yield items.pop()

class Recorder:
    """Collects raw records cheaply while running; `finish()` turns them into a Profile.

    The engine calls task_done(task) on executor threads (Hooks.profiler); list.append is
    atomic under the GIL, so no lock is taken on any recording path.
    """

    def __init__(self):
        clock.choose()
        self.t0 = clock.now_ns()
        self.per_stream: dict = {}  # stream -> [task tuples]
        self.calls: list[tuple] = []
        self.ranges: list[tuple] = []
        self.marks: list[tuple] = []
        self.memory: list[MemorySample] = []
        # id(buffer) -> [device, addr, nbytes, t_alloc, t_free, site]
        self.allocations: dict[int, list] = {}
        self.done_allocations: list[list] = []
        self.allocated: dict[int, int] = {}      # device id (-1 host) -> live bytes
        # Frees whose memory queued work still uses (the pool hands it on once that work is
        # done, or at once to a later allocation on the freeing stream); with `allocated`,
        # changed under the lock (executor threads settle them as their tasks end).
        self.pending_frees: list[_PendingFree] = []
        self._memory_lock = forksafe.lock()
        self.devices: dict[int, Device] = {}
        # thread ident -> name, noted when a thread is first seen: it may have ended by finish()
        self.thread_names = ThreadNames()
        self._last_layout_ns = 0
        self._instrumentation = Instrumentation(self.calls, self.thread_names, self._api_error)
        self._sanitizer = None  # the sanitizer, when it is on too
        self.value_waits = False  # whether a value wait was recorded (see finish)
        self.origin = Checkpoint(self.t0, time.perf_counter_ns(), 0, _wall_now())

    # ---- engine hook ---------------------------------------------------------------------

    def task_done(self, task, error: str = "") -> None:
        """Called by the engine for every finished task (stamped with its device's clock);
        `error`: why it failed, where its failure is decided after it ended (a wait released
        by a record that never ran)."""
        # Plain values only, filed per stream: such tuples drop out of the garbage collector's
        # view at its first pass, and the task itself may be reused (graph replays).
        released = _released_by(task)
        if task.kind == VALUE_WAIT:
            self.value_waits = True  # (finish() looks for the writes that released them)
        stream, task_id, kind = _filed_as(task)
        bucket = self.per_stream.get(stream)
        if bucket is None:  # setdefault is atomic: a racing first task of the stream shares it
            bucket = self.per_stream.setdefault(stream, [])
        bucket.append((task_id, kind, task.name or getattr(task.fn, "__name__", None), task.nbytes,
                       task.t_enqueue, task.t_start, task.t_end, task.thread,
                       error or _error_text(task), released, "dropped" if task.dropped else "",
                       task.units, _blocks(task), task.tail_ns))
        if self.pending_frees:
            self._settle(task.stream, (task,))

    def tasks_done(self, stream, tasks) -> None:
        """A batch of finished tasks of one stream (one call per executor batch, not per task)."""
        if stream._dq.detached is stream:  # non-blocking host functions: see task_done
            for task in tasks:
                self.task_done(task)
            return
        bucket = self.per_stream.get(stream)
        if bucket is None:
            bucket = self.per_stream.setdefault(stream, [])
        append = bucket.append
        # (a batch's tasks mostly run one function: its name is looked up once per run of it)
        last_fn: object = _NO_FUNCTION
        fn_name = None
        for task in tasks:  # executor tasks: no waits among them, rarely an error
            kind = SEGMENT if task.graph_segment else task.kind
            cost = task.cost
            fn = task.fn
            if fn is not last_fn:
                last_fn, fn_name = fn, getattr(fn, "__name__", None)
            append((task.id, kind, task.name or fn_name, task.nbytes,
                    task.t_enqueue, task.t_start, task.t_end, task.thread,
                    "" if task.error is None else _error_text(task), task.value, "", task.units,
                    0 if cost is None else cost.block_dim or 0, task.tail_ns))
        if self.pending_frees:
            self._settle(stream, tasks)

    def tasks_dropped(self, stream, tasks, now: int) -> None:
        """Tasks of `stream` dropped unrun at `now` (an abort, a destroy, a reset, a STOP-mode
        failure): filed as dropped, taking no time (the records a drop lets go are filed as
        they release their waiters)."""
        bucket = self.per_stream.setdefault(stream, [])
        for t in tasks:
            stream_, task_id, kind = _filed_as(t)
            (bucket if stream_ is stream else self.per_stream.setdefault(stream_, [])).append(
                (task_id, kind, t.name or getattr(t.fn, "__name__", None), t.nbytes, t.t_enqueue,
                 now, now, t.thread, "", None, "dropped", t.units, _blocks(t), 0))

    def now_ns(self) -> int:
        """The profile's clock (virtual time on a simulated device)."""
        return clock.now_ns()

    def waited_for_room(self, stream, t0: int) -> None:
        """A submit waited from `t0` until now for room in `stream`'s full queue: recorded as a
        waiting call inside it (the submit's own cost is what is left of it)."""
        thread = threading.get_ident()
        self.calls.append((QUEUE_FULL, t0, clock.now_ns(), thread, user_site(), 0,
                           (f"stream {stream.id} of device {stream.device.id}", False, 0)))

    def _settle(self, stream, tasks) -> None:
        """Tasks of `stream` ended: the frees that waited for no more than them release their
        bytes, at the end of the last task they waited for (work discarded unrun, which no
        task end reports, counts as done by then)."""
        end = max(t.t_end for t in tasks)

        def done(p: _PendingFree) -> bool:
            pos = p.waits.get(stream)
            if pos is not None:
                for t in tasks:
                    if t.id >= pos:
                        del p.waits[stream]
                        p.when = max(p.when, t.t_end)
                        break
            if p.waits and p.reached():
                p.when = max(p.when, end)
                return True
            return not p.waits
        for p in self._take_pending(done):
            self._released(p.rec, p.key, p.nbytes, p.device, p.when)

    def _settle_reached(self, now: int) -> None:
        """Release, as of `now`, the pending frees whose work is done or was discarded (an
        abort, a destroy, a reset or a stopped stream drops tasks no task end reports)."""
        for p in self._take_pending(_PendingFree.reached):
            self._released(p.rec, p.key, p.nbytes, p.device, max(p.when, now))

    def _take_pending(self, which) -> list[_PendingFree]:
        """Remove and return the pending frees for which which(p) holds (under the lock)."""
        with self._memory_lock:
            taken = [p for p in self.pending_frees if which(p)]
            for p in taken:
                self.pending_frees.remove(p)
        return taken

    # ---- start / stop --------------------------------------------------------------------

    def start(self) -> None:
        """Attach to the engine, the public API and the memory registry."""
        for dev in _device._devices or []:
            self._note_device(dev)
            self.allocated[dev.id] = memstats.live_device_bytes(dev)
            self._sample(dev, measure_layout=True)
        self.allocated[-1] = memstats.live_host_bytes(REGISTRY)  # (as the devices': live before)
        self._instrumentation.install()
        REGISTRY.observe(self)
        leaks.reclaim_observers.append(self.buffers_reclaimed)
        self._sanitizer = Hooks.sanitizer  # races found from now on go into the profile too
        self.origin = self.origin._replace(races=self._races())
        Hooks.profiler = self

    def stop(self) -> None:
        """Detach everything; the recorded data stays (with the work that never finished)."""
        self.detach()
        self.t_end = clock.now_ns()
        self._settle_reached(self.t_end)
        # Freed by the program, its work still not done: in use up to the end (not a leak).
        for p in self._take_pending(lambda p: True):
            if p.rec is not None:
                p.rec[4] = self.t_end
                self.done_allocations.append(p.rec)
        for stream, record in self._unfinished(self.t_end):
            self.per_stream.setdefault(stream, []).append(record)
        self._sample_devices()

    @staticmethod
    def _unfinished(now: int) -> list[tuple]:
        """(stream, task record) of each task of a stream with work left, as unfinished at
        `now`: the one that holds the stream up (a wait that still blocks, a task that still
        runs, or the head waiting for an executor) from when it blocked, started or was
        queued, and every task queued behind it, which never started (start and end: `now`).
        A hang, a deadlock or a program that ended early then shows where each stream stopped
        and what it never got to. A non-blocking host function's is filed as it is when it
        ends (see task_done)."""
        with ENGINE.lock:
            heads: list = []
            behind: list = []
            for dq in ENGINE.devices:
                for s in list(dq.streams.values()):
                    running = s._running
                    queued = list(s._tasks)
                    if running is not None:  # (then the rest of its executor's batch, not cut off)
                        cut = s._cut
                        queued[:0] = [t for t in s._batch if t.id > running.id
                                      and (cut is None or t.id <= cut)]
                        head = running
                    elif queued:
                        head = queued.pop(0)
                    else:
                        continue
                    if head.id:
                        heads.append(head)
                    behind.extend(t for t in queued if t.id)
        out = []
        for t, at in [(t, t.t_start or t.t_enqueue or now) for t in heads] + [(t, now) for t in behind]:
            stream, task_id, kind = _filed_as(t)
            out.append((stream, (task_id, kind, t.name or getattr(t.fn, "__name__", None), t.nbytes,
                                 t.t_enqueue, min(at, now), now, t.thread, "", None,
                                 "unfinished", t.units, _blocks(t), 0)))
        return out

    def detach(self) -> None:
        """Stop being told anything (the engine, the API, the registry); touches no device."""
        if Hooks.profiler is self:
            Hooks.profiler = None
        REGISTRY.unobserve(self)
        if self.buffers_reclaimed in leaks.reclaim_observers:
            leaks.reclaim_observers.remove(self.buffers_reclaimed)
        self._instrumentation.uninstall()

    def edge(self, closing: bool = False) -> Checkpoint:
        """Now, as an edge of a session's window; each device's memory is sampled inside the
        window (after an opening edge, before a closing one)."""
        if closing:
            self._sample_devices()
        point = Checkpoint(clock.now_ns(), time.perf_counter_ns(), self._races(), _wall_now())
        if not closing:
            self._sample_devices()
        return point

    def _sample_devices(self) -> None:
        for dev in list(self.devices.values()):
            self._sample(dev, measure_layout=True)

    def _races(self) -> int:
        return len(self._sanitizer.reports()) if self._sanitizer is not None else 0

    # ---- user ranges and marks ---------------------------------------------------------------

    def add_range(self, name: str, t0: int, t1: int, thread: int) -> None:
        """Record a finished user range (called on its thread)."""
        self._note_thread(thread)
        self.ranges.append((name, t0, t1, thread))

    def add_mark(self, name: str, ts: int, thread: int) -> None:
        """Record a user mark (called on its thread)."""
        self._note_thread(thread)
        self.marks.append((name, ts, thread))

    def _note_thread(self, ident: int) -> None:
        if ident not in self.thread_names:
            self.thread_names.see(ident)

    # ---- memory ----------------------------------------------------------------------------

    def buffer_used_on(self, alloc, stream) -> None:
        """record_stream: nothing to record."""

    def buffer_viewed(self, alloc, lo: int, hi: int, what: str, write: bool, rows: tuple | None = None) -> None:
        """A host access to a buffer: nothing to record."""

    def buffer_allocated(self, alloc) -> None:
        """A buffer was allocated (told by the address registry); a registration of the
        program's own host memory (pyACL's numpy_to_ptr, register_host) is none: the runtime
        allocated nothing, and nothing of it is the program's to free."""
        if alloc.kind == "pageable":
            return
        dev = alloc.device
        key = -1 if dev is None else dev.id
        now = clock.now_ns()
        self.allocations[id(alloc)] = [key, alloc.addr, alloc.nbytes, now, None,
                                       user_code_site(3), ""]
        if self.pending_frees:  # (the pool handed on memory a free left to queued work)
            self._settle_reached(now)
            self._handed_on(key, alloc.addr, alloc.nbytes, now)
        with self._memory_lock:
            self.allocated[key] = self.allocated.get(key, 0) + alloc.nbytes
        self._sample(dev)

    def buffers_reclaimed(self, buffers: list, when: str) -> None:
        """Buffers the program never freed are about to be reclaimed `when` (a device reset,
        acl.finalize, exit): the frees that follow are no frees of the program's."""
        for buf in buffers:
            rec = self.allocations.get(id(buf))
            if rec is not None:
                rec[6] = when

    def buffer_freed(self, alloc, stream=None) -> None:
        """A buffer was freed (told by the address registry): after `stream`'s queued work (None:
        all of the device's), which may still use its bytes: they are live until it is done."""
        if alloc.kind == "pageable":  # (a registration ended: see buffer_allocated)
            return
        dev = alloc.device
        key = -1 if dev is None else dev.id
        rec = self.allocations.pop(id(alloc), None)
        late = getattr(alloc, "_late", None)  # (mem, waits): what the pool's free waits for
        now = clock.now_ns()
        if late is not None and late[1]:
            with self._memory_lock:
                self.pending_frees.append(_PendingFree(rec, alloc, late[1]))
            self._settle_reached(now)  # (its work may have ended meanwhile: no task end left)
            return
        if self.pending_frees:
            self._settle_reached(now)
        self._released(rec, key, alloc.nbytes, dev, now)

    def reserved_changed(self, dev) -> None:
        """A pool trim gave memory of `dev` back (told by the address registry): sample it."""
        self._sample(dev)

    def _handed_on(self, key: int, addr: int, nbytes: int, now: int) -> None:
        """A new allocation took memory of a pending free (its stream reuses it at once):
        that free's bytes were released by now."""
        for p in self._take_pending(lambda p: p.key == key and p.addr < addr + nbytes
                                    and addr < p.addr + p.nbytes):
            self._released(p.rec, p.key, p.nbytes, p.device, now)

    def _released(self, rec, key: int, nbytes: int, dev, when: int) -> None:
        """A freed buffer's bytes are no longer in use from `when` on."""
        if rec is not None:
            rec[4] = when
            self.done_allocations.append(rec)
        with self._memory_lock:
            self.allocated[key] = max(0, self.allocated.get(key, 0) - nbytes)
        self._sample(dev, when=when)

    def _note_device(self, dev) -> None:
        if dev.id not in self.devices:
            self.devices[dev.id] = dev

    def _sample(self, dev, measure_layout: bool = False, when: int | None = None) -> None:
        """Sample `dev`'s memory now, or at `when` (a release settled by a task's end, maybe
        under the engine's lock: no layout then, which takes the pools' locks)."""
        now = clock.now_ns() if when is None else when
        if dev is None:
            pinned = self.allocated.get(-1, 0)
            self.memory.append(MemorySample(now - self.t0, -1, pinned, pinned))
            return
        self._note_device(dev)
        free = largest = -1
        if when is None and (measure_layout or now - self._last_layout_ns >= _FRAGMENTATION_EVERY_NS):
            self._last_layout_ns = now
            free, largest = memstats.free_ranges(dev)
        self.memory.append(MemorySample(now - self.t0, dev.id, self.allocated.get(dev.id, 0),
                                        memstats.reserved_bytes(dev), free, largest))

    def _api_error(self, name: str, code: int, device: int | None) -> None:
        if code in _OOM_CODES and device is not None:  # a device OOM: its free-range layout then
            self._sample(_device.Device(device), measure_layout=True)

    # ---- the result ------------------------------------------------------------------------

    def finish(self, command=None, consume: bool = False,
               window: tuple[Checkpoint, Checkpoint | None] | None = None) -> Profile:
        """Convert the raw records into a Profile (times relative to the start). `consume`: the
        recorder has stopped and is not read again, so each raw task record is let go as it is
        converted (at the end of a long run, both at once would be the peak of its memory).
        `window` (since, until): only what began in it (until None: up to the end or now)."""
        since, until = window or (self.origin, None)
        t0 = since.ns
        end = until.ns if until is not None else getattr(self, "t_end", clock.now_ns())
        # A record is of the window it began in; both ends count (in virtual time a host call
        # and the edge after it can share a timestamp).
        last = until.ns if until is not None else _OPEN
        prof = Profile(duration_ns=end - t0, started_at=since.wall,
                       command=list(command or sys.argv), pid=os.getpid(),
                       origin_ns=since.host_ns,
                       clock=VIRTUAL if clock.now_ns is not time.perf_counter_ns else REAL)
        streams = {}
        ran = set()  # (device, stream) of the streams with tasks in the window
        # Every record of a thread holds the ident the engine or a wrapper got from
        # get_ident(): a new int each time. One object per thread instead (50k tasks: 1.6 MB).
        idents: dict[int, int] = {}
        book = self.thread_names
        owned = set(book.ended)  # idents of threads that ended (another may have had it since)
        tasks: list[TaskRecord] = []
        buckets = list(self.per_stream.items())
        if not hasattr(self, "t_end"):  # still recording: where each stream is held up now
            for stream, record in self._unfinished(min(end, clock.now_ns())):
                buckets.append((stream, [record]))
        writes = _value_writes(buckets) if self.value_waits else {}
        for s, bucket in buckets:
            dev = s.device
            self._note_device(dev)
            streams[(dev.id, s.id)] = s
            count = len(tasks)
            for (tid, kind, label, nbytes, t_enq, t_start, t_end, thread, error,
                 released, fate, units, blocks, tail) in (_drained(bucket) if consume else list(bucket)):
                if not t_end or t_start < t0 or t_start > last:
                    continue  # started before profiling (no complete timing) or after it
                kind_name = GRAPH_SEGMENT if kind is SEGMENT else KIND_NAMES[kind]
                if released is not None and type(released[0]) is not int:
                    released = _value_writer(released, t_end, writes)
                elif kind == KERNEL:
                    if released is not None:  # (a value write's word and value: see
                        kind_name = VALUE_WRITE  # _value_writes; no kernel: see VALUE_WRITE)
                    released = None
                enqueue = max(t_enq, t0) if t_enq else t_start
                if thread in owned:  # (an ident an ended thread had before: whose it was then)
                    thread = book.owner(thread, t_enq or t_start)
                tasks.append(TaskRecord(dev.id, s.id, tid, kind_name, label or kind_name, nbytes,
                                        enqueue - t0, t_start - t0, t_end - t0,
                                        idents.setdefault(thread, thread), bool(error), released,
                                        error, fate, units, blocks, tail))
            if len(tasks) > count:
                ran.add((dev.id, s.id))
        # By (start, end), ties in completion order: two stable sorts need no key tuples.
        tasks.sort(key=attrgetter("end_ns"))
        tasks.sort(key=attrgetter("start_ns"))
        prof.tasks = tasks
        calls = by_start(self.calls)
        if consume:
            self.calls.clear()
        sites = self._instrumentation.sites
        prof.api_calls = [ApiCall(c[0], c[1] - t0, c[2] - t0,
                                  idents.setdefault(c[3], c[3]) if c[3] not in owned
                                  else book.owner(c[3], c[1]), *_error_and_facts(c, sites))
                          for c in (_drained(calls) if consume else calls) if t0 <= c[1] <= last]
        prof.ranges = sorted((RangeRecord(n, a - t0, b - t0, book.owner(th, a))
                              for n, a, b, th in self.ranges if t0 <= a <= last),
                             key=lambda r: (r.start_ns, -r.end_ns))
        prof.marks = [MarkRecord(n, ts - t0, book.owner(th, ts))
                      for n, ts, th in self.marks if t0 <= ts <= last]
        shift = self.t0 - t0  # (samples are stamped relative to the recording's start)
        # (in time order: a free after queued work is sampled when that work ended)
        prof.memory = sorted((m if not shift else dataclasses.replace(m, ts_ns=m.ts_ns + shift)
                              for m in self.memory if t0 <= m.ts_ns + self.t0 <= last),
                             key=attrgetter("ts_ns"))
        if self._sanitizer is not None:
            prof.races = [RaceRecord(str(r), r.first.stream, r.first.task_id, r.second.stream,
                                     r.second.task_id, r.reused_from is not None, r.count)
                          for r in self._sanitizer.reports()[since.races:
                                                             None if until is None else until.races]]
        prof.collectives = _collectives(tasks)
        allocs = [(rec, True) for rec in self.done_allocations] + \
                 [(rec, False) for rec in self.allocations.values()] + \
                 [(p.rec, False) for p in list(self.pending_frees) if p.rec is not None]
        prof.allocations = sorted(
            (Allocation(d, addr, n, ta - t0, tf - t0 if freed and tf <= last else None,
                        site_text(site), reclaimed)
             for (d, addr, n, ta, tf, site, reclaimed), freed in allocs if t0 <= ta <= last),
            key=lambda a: a.alloc_ns)
        for dev in self.devices.values():
            p = dev.properties
            prof.devices.append(DeviceInfo(dev.id, p.name, p.compute_units, p.copy_engines,
                                           p.host_func_threads, p.total_memory, p.backend, p.preset,
                                           dict(getattr(dev._backend, "uncosted", {})),
                                           list(p.copy_engines_per_direction),
                                           p.preset_source, dev._backend.properties().release_ns))
            default, detached = dev._default_stream, dev._dq.detached
            live = list(dev._dq.streams.values())
            for s in live:
                streams.setdefault((dev.id, s.id), s)
            for (did, sid), s in sorted(streams.items(), key=lambda kv: kv[0]):
                if did != dev.id:
                    continue
                role = "default" if s is default else "host functions (non-blocking)" \
                    if s is detached else getattr(s, "role", "")
                if role and (did, sid) not in ran:
                    continue  # internal streams appear only when they ran something
                prof.streams.append(StreamInfo(did, sid, s.priority, role))
        prof.devices.sort(key=lambda d: d.id)
        names = book.names()  # threads that ended keep the name they had
        seen = {c.thread for c in prof.api_calls} | {r.thread for r in prof.ranges} | \
               {m.thread for m in prof.marks} | {t.thread for t in tasks}
        prof.threads = {th: names.get(th, f"thread {th}") for th in sorted(seen) if th}
        return prof


def _error_and_facts(call: tuple, sites: CallSites) -> tuple:
    """(error, target, already_done, done_for_ns, device, task_error, site, nbytes) of a
    recorded call's tuple (name, start, end, thread, site[, error, facts[, device,
    task_error]]); facts: (target, already_done, done_for_ns[, nbytes])."""
    site = sites.text(call[4])
    if len(call) == 5:
        return (0, "", None, 0, None, False, site, 0)
    facts: tuple = call[6] or ("", None, 0)
    return (call[5],) + facts[:3] + (call[7] if len(call) > 7 else None,
                                     len(call) > 8 and call[8], site,
                                     facts[3] if len(facts) > 3 else 0)


def _collectives(tasks: list) -> list:
    """The collectives (from every communicator's flight recorder) whose parts ran in the
    profile (among `tasks`), ordered by communicator and sequence number."""
    out: list = []
    groups = hccl_groups()
    if not groups:
        return out
    keys = {t.key for t in tasks}
    for group in groups:
        for rec in group.flight.records():
            parts = [list(p) for p in rec.parts if tuple(p[1:]) in keys]
            if parts:
                out.append(CollectiveRecord(group.id, rec.seq, rec.op, rec.nbytes, rec.state, parts,
                                            [f"rank {c[0]}: {c[1]} at {c[2]}" for c in rec.calls],
                                            rec.error))
    return sorted(out, key=lambda c: (c.comm, c.seq, c.op))


def _filed_as(task) -> tuple:
    """(stream, task id, kind) a task is filed under: a non-blocking host function's are the
    program's stream's and the id its launch returned (not the hidden stream that ran it)."""
    if task.origin is not None:
        stream, task_id = task.origin
        return stream, task_id, DETACH  # (whose name is host_func_nonblocking)
    return task.stream, task.id, SEGMENT if task.graph_segment else task.kind


def _value_writes(buckets: list) -> dict:
    """(device, word address) -> [(end, value, (device, stream, task id))] by end: the value
    writes among the raw records (a kernel's record holds its task's (address, value) where a
    wait's holds its releaser)."""
    out: dict = {}
    for s, bucket in buckets:
        dev = s.device.id
        for r in list(bucket):
            if r[1] == KERNEL and r[9] is not None and r[6]:
                out.setdefault((dev, r[9][0]), []).append((r[6], r[9][1], (dev, s.id, r[0])))
    for items in out.values():
        items.sort(key=lambda e: e[0])
    return out


def _value_writer(wait: tuple, t_end: int, writes: dict):
    """(device, stream, task id) of the value write that let value wait `wait` (its raw
    ("value", device, address, condition)) go: the last write of the word to end by the wait's
    end with a value that meets the condition; None when none did (the host wrote it)."""
    _, dev, addr, met = wait
    for end, value, key in reversed(writes.get((dev, addr), ())):
        if end <= t_end:
            try:
                if met(value):
                    return key
            except BaseException as exc:  # (the program's condition: see Stream.wait_value)
                interrupts.give_back(exc)
                return None
    return None


def _released_by(task):
    """(device, stream, task id) of the record that let a wait go on, a value wait's word to
    find its write by at the end (see _value_writer), or None."""
    if task.kind == KERNEL:
        return task.value  # (a value write's (word address, value): see _value_writes)
    if task.kind == VALUE_WAIT:
        return None if task.value is None else ("value", task.stream.device.id) + task.value
    if task.kind == EVENT_WAIT:
        m = task.marker
        if m.stream is None:
            return None  # released by the host (a collective that gave up)
        return (m.stream.device.id, m.stream.id, m.position)
    if task.kind == NOTIFY_WAIT and task.releaser is not None:
        r = task.releaser
        return (r.stream.device.id, r.stream.id, r.id)
    return None


def _error_text(task) -> str:
    """'ExceptionType: message' of a failed task ('' when it did not fail)."""
    err = task.error
    return "" if err is None else f"{type(err).__name__}: {err}"
