"""The race sanitizer's state: vector clocks of streams and host threads, and the accesses seen
on each allocation's bytes; a task is checked when it is submitted, in submission order.

Happens-before comes from what the program submitted, not from what the machine happened to
do: stream order, event record -> wait, notify record -> wait, and host synchronizations
(stream, event and device synchronize, a query that found the work done), which order the
host thread, and through it every task it submits later, after the work it waited for.
Accesses: a kernel's declared reads / writes (launch(reads=, writes=), or its `.access`
letters), else every buffer argument as read and written; copies (only the bytes touched,
row by row for pitched copies), memsets and host functions' buffer arguments.
"""

from __future__ import annotations

import threading

from ..callsite import user_site
from ..engine.task import COPY, DETACH, EVENT_RECORD, EVENT_WAIT, HOST_FUNC, KERNEL, KIND_NAMES, \
    MEMSET, NOTIFY_RECORD, NOTIFY_WAIT
from ..graph.graph import segment_nodes
from ..memory.buffer import BufferSlice, DeviceBuffer, HostBuffer, TypedView
from ..memory.registry import REGISTRY
from .report import Access, Race, RaceError

_BUFFERS = (DeviceBuffer, HostBuffer, BufferSlice, TypedView)
MAX_ROWS = 4096      # a pitched copy of more rows is checked as one span (may over-report gaps)
GC_RECORDS = 64      # an allocation with this many records drops those every clock has passed


def _span(buf):
    """(allocation, lo, hi) of the bytes a buffer argument names."""
    if type(buf) is TypedView:
        alloc, lo, hi = _span(buf.buffer)
        if buf.shape is not None:
            n = buf.dtype.itemsize
            for d in (buf.shape if isinstance(buf.shape, (tuple, list)) else (buf.shape,)):
                n *= int(d)
            hi = min(hi, lo + n)
        return alloc, lo, hi
    if type(buf) is BufferSlice:
        return buf.base, buf.offset, buf.offset + buf.nbytes
    return buf, 0, buf.nbytes


def _address_spans(addr: int, pitch: int, width: int, height: int):
    """(allocation, lo, hi) of each row a (pitched) range touches, in live allocations only."""
    alloc = REGISTRY.find(addr)
    if alloc is None or not width or not height:
        return []  # pageable memory the registry does not know: nothing to track
    base = addr - alloc.addr
    if height == 1 or pitch == width:
        return [(alloc, base, base + width * height)]
    if height > MAX_ROWS:
        return [(alloc, base, base + (height - 1) * pitch + width)]
    return [(alloc, base + r * pitch, base + r * pitch + width) for r in range(height)]


def task_accesses(task) -> list:
    """(allocation, lo, hi, write, assumed, kind name, name) for each memory access of a task
    (of each node, for a replayed graph's run of nodes)."""
    nodes = segment_nodes(task)
    if nodes is not None:
        return [access for node in nodes for access in _op_accesses(node, node.label)]
    if task.kind == DETACH:
        return _op_accesses(task.fn, task.fn.label)
    return _op_accesses(task, task.label)


def _op_accesses(op, name: str) -> list:
    kind = op.kind
    what = KIND_NAMES[kind]
    out = []
    if kind == KERNEL:
        reads, writes = getattr(op, "reads", None), getattr(op, "writes", None)
        if reads is not None or writes is not None:
            for group, write in ((reads or (), False), (writes or (), True)):
                for buf in group:
                    out.append((*_span(buf), write, False, what, name))
            return out
        letters = getattr(op.fn, "access", None)
        for i, arg in enumerate(op.args):
            if isinstance(arg, _BUFFERS):
                mode = letters[i] if letters is not None and i < len(letters) else "rw"
                span = _span(arg)
                if "r" in mode:
                    out.append((*span, False, letters is None, what, name))
                if "w" in mode:
                    out.append((*span, True, letters is None, what, name))
        return out
    if kind == COPY:
        dst, dpitch, src, spitch, width, height = op.args
        out += [(*s, False, False, what, name) for s in _address_spans(src, spitch, width, height)]
        out += [(*s, True, False, what, name) for s in _address_spans(dst, dpitch, width, height)]
        return out
    if kind == MEMSET:
        dst, _, n = op.args
        return [(*s, True, False, what, name) for s in _address_spans(dst, n, n, 1)]
    if kind == HOST_FUNC:
        for arg in op.args:
            if isinstance(arg, _BUFFERS):
                span = _span(arg)
                out += [(*span, False, True, what, name), (*span, True, True, what, name)]
    return out


def _join(into: dict, other: dict) -> None:
    for actor, t in other.items():
        if into.get(actor, 0) < t:
            into[actor] = t


class Sanitizer:
    """Checks each submitted task against the unordered accesses before it (see the module)."""

    def __init__(self, mode: str, on_race):
        self.mode = mode                 # warn, raise or log
        self.on_race = on_race           # fn(Race, new: bool), called outside our lock
        self.lock = threading.Lock()
        self.streams: dict[int, dict] = {}   # stream id -> vector clock (actor -> time)
        self.hosts: dict[int, dict] = {}     # host thread id -> vector clock
        self.notifies: dict[int, dict] = {}  # id(notify) -> clock of its last record
        self.shadow: dict[int, list] = {}    # id(allocation) -> [(lo, hi, write, actor, time, info)]
        self.allocs: dict[int, object] = {}  # id(allocation) -> the allocation (kept while tracked)
        self.sites: dict[int, str] = {}      # id(allocation) -> where it was allocated
        self.races: dict[tuple, Race] = {}   # (site, site, allocation) -> the report

    # ---- memory (as an observer of the address registry) -------------------------------------

    def buffer_allocated(self, alloc) -> None:
        """Note where the program allocated `alloc`."""
        with self.lock:
            self.sites[id(alloc)] = user_site(3)

    def buffer_freed(self, alloc) -> None:
        """Forget the accesses of a freed allocation."""
        with self.lock:
            key = id(alloc)
            self.shadow.pop(key, None)
            self.allocs.pop(key, None)
            self.sites.pop(key, None)

    # ---- host synchronization ---------------------------------------------------------------

    def stream_clocks(self, streams) -> tuple:
        """The clocks of `streams` now (what a synchronize that starts now waits for)."""
        with self.lock:
            return tuple(dict(self.streams[s.id]) for s in streams if s.id in self.streams)

    def host_waited(self, clocks) -> None:
        """The calling host thread waited for the work these clocks cover."""
        with self.lock:
            host = self.hosts.setdefault(threading.get_ident(), {})
            for c in clocks:
                _join(host, c)

    def stream_waited(self, stream, marker) -> None:
        """`stream` waits on a record that already completed (no task queued): the edge holds."""
        if marker.clock is None:
            return
        with self.lock:
            vc = self.streams.setdefault(stream.id, {stream.id: 0})
            _join(vc, marker.clock)

    # ---- submission -------------------------------------------------------------------------

    def submitted(self, stream, task) -> None:
        """Check `task`, about to be queued on `stream`; record its accesses and edges (under
        the engine lock). In raise mode a race refuses the task (RaceError), changing nothing."""
        kind = task.kind
        thread = threading.get_ident()
        accesses = task_accesses(task) if kind not in (EVENT_RECORD, EVENT_WAIT, NOTIFY_RECORD,
                                                       NOTIFY_WAIT) else ()
        with self.lock:
            sid = stream.id
            vc = self.streams.get(sid)
            if vc is None:
                vc = self.streams[sid] = {sid: 0}
            host = self.hosts.get(thread)
            if host:
                _join(vc, host)  # what the host waited for comes before what it submits now
            if kind == EVENT_RECORD:
                task.marker.clock = dict(vc)
                return
            if kind == EVENT_WAIT:
                if task.marker.clock is not None:
                    _join(vc, task.marker.clock)
                return
            if kind == NOTIFY_RECORD:
                self.notifies[id(task.notify)] = dict(vc)
                return
            if kind == NOTIFY_WAIT:
                clock = self.notifies.get(id(task.notify))
                if clock is not None:
                    _join(vc, clock)
                return
            if not accesses:
                return
            time = vc[sid] + 1
            site = user_site(3)
            task_id = stream._submitted + 1
            infos = [(write, kind_name, name, sid, task_id, site, assumed)
                     for _, _, _, write, assumed, kind_name, name in accesses]
            found = []
            for (alloc, lo, hi, write, _, _, _), info in zip(accesses, infos):
                for rec in self.shadow.get(id(alloc), ()):
                    if rec[1] <= lo or rec[0] >= hi or not (write or rec[2]) or rec[3] == sid:
                        continue
                    if vc.get(rec[3], 0) >= rec[4]:
                        continue  # ordered before this task
                    found.append((alloc, rec, info, max(lo, rec[0]), min(hi, rec[1])))
            if found and self.mode == "raise":
                race, _ = self._report(*found[0])
                raise RaceError(f"launch refused: {race}", race)
            vc[sid] = time
            for (alloc, lo, hi, write, _, _, _), info in zip(accesses, infos):
                self._add(alloc, (lo, hi, write, sid, time, info))
            reports = [self._report(*f) for f in found]
        for race, new in reports:
            self.on_race(race, new)

    def submitted_all(self, work) -> None:
        """submitted() for a batch of (stream, task) queued at once (a graph launch), in an order
        where each wait comes after the record it waits for: a batch may list a forked lane's
        wait before the record on the origin lane that releases it."""
        pending = [t.marker for _, t in work if t.kind == EVENT_RECORD]
        lanes: dict[int, list] = {}
        for s, t in work:
            lanes.setdefault(id(s), []).append((s, t))
        heads = {key: 0 for key in lanes}
        recorded: set[int] = set()
        waiting_on = {id(m) for m in pending}
        while heads:
            progressed = False
            for key in list(heads):
                items, i = lanes[key], heads[key]
                while i < len(items):
                    s, t = items[i]
                    if t.kind == EVENT_WAIT and id(t.marker) in waiting_on \
                            and id(t.marker) not in recorded:
                        break  # its record comes later in the batch
                    self.submitted(s, t)
                    if t.kind == EVENT_RECORD:
                        recorded.add(id(t.marker))
                    i += 1
                    progressed = True
                if i == len(items):
                    del heads[key]
                else:
                    heads[key] = i
            if not progressed:  # a wait whose record never comes first: take it as it is
                key = next(iter(heads))
                s, t = lanes[key][heads[key]]
                self.submitted(s, t)
                heads[key] += 1
                if heads[key] == len(lanes[key]):
                    del heads[key]

    def _add(self, alloc, rec: tuple) -> None:
        """Keep an access; drop the ones it makes redundant (same stream, covered, or covered by a
        write ordered after them) and, past GC_RECORDS, those every stream's clock has passed."""
        key = id(alloc)
        recs = self.shadow.get(key)
        if recs is None:
            self.shadow[key] = [rec]
            self.allocs[key] = alloc
            return
        lo, hi, write, sid, _, _ = rec
        vc = self.streams[sid]
        keep = [r for r in recs
                if not (lo <= r[0] and r[1] <= hi and (write or not r[2])
                        and (r[3] == sid or write and vc.get(r[3], 0) >= r[4]))]
        keep.append(rec)
        if len(keep) > GC_RECORDS:
            clocks = list(self.streams.values())
            keep = [r for r in keep if any(c.get(r[3], 0) < r[4] for c in clocks)]
        self.shadow[key] = keep

    def _report(self, alloc, rec, info, lo, hi) -> tuple[Race, bool]:
        """The (deduplicated) report of a race between a kept access and a new one."""
        first, second = Access(*rec[5]), Access(*info)
        key = (first.site, second.site, id(alloc))
        race = self.races.get(key)
        if race is not None:
            race.count += 1
            return race, False
        race = self.races[key] = Race(alloc.addr, alloc.nbytes, self.sites.get(id(alloc), "?"),
                                      lo, hi, first, second)
        return race, True

    def reports(self) -> list[Race]:
        """Every race found so far, in the order found."""
        with self.lock:
            return list(self.races.values())
