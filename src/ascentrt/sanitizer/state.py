"""The race sanitizer's state: vector clocks of streams and host threads, and the accesses seen
on each allocation's bytes; a task is checked when it is submitted, in submission order.

Happens-before comes from what the program submitted, not from what the machine happened to
do: stream order, event record -> wait, notify record -> wait, and host synchronizations
(stream, event and device synchronize, a query that found the work done), which order the
host thread, and through it every task it submits later, after the work it waited for.
Accesses: a kernel's declared reads / writes (launch(reads=, writes=), or its `.access`
letters), else every buffer argument (and numpy array over a known allocation) as read and
written; copies (only the bytes touched: a pitched copy's rows, as one strided access), memsets
and host functions' buffer arguments.
What a host function (a blocking callback) touches as it runs is checked as it arrives, which
may be after work ordered after it was checked: a pair races only if neither access is ordered
before the other by the clocks, whichever came first.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from .. import forksafe, interrupts
from ..callsite import Site, is_ours, site_text, user_code_site
from ..engine.hooks import _local as _executing  # .stream: what an executor thread runs
from ..engine.task import DETACH, EVENT_RECORD, EVENT_WAIT, HOST_FUNC, KERNEL, KIND_NAMES, \
    NOTIFY_RECORD, NOTIFY_WAIT, VALUE_WAIT
from ..graph.graph import segment_nodes
from .accesses import (InsideSite, access_info, access_of, declared_accesses, overlap, pitched_spans,
                       region_of, submit_site, task_accesses)
from .clocks import covered, join, meet
from .report import BEFORE_ENABLED, Race, RaceError, allocated

HOST = -1           # the host's actor in the clocks (stream ids are positive)
MAX_RECORDS = 64     # accesses kept per allocation past the redundant ones (then the oldest go)
_TRIM_AT = MAX_RECORDS + MAX_RECORDS // 2  # how many there are when the oldest past 64 go
_SCAN_ALL = 16  # kept accesses of an allocation past which a new one first looks for any it meets
MAX_DEAD = 256       # accesses of freed allocations kept per chunk (then the oldest go)
MAX_FREES = 64       # frees not yet reused kept per chunk (then merged into one, more ordered)
MAX_VALUE_WRITES = 64  # value writes kept per word (then the oldest go: a wait meets fewer)
_SYNC_KINDS = frozenset((EVENT_RECORD, EVENT_WAIT, NOTIFY_RECORD, NOTIFY_WAIT, VALUE_WAIT))  # no accesses


def _any_meets(recs: list, lo: int, hi: int) -> bool:
    """Whether any kept access shares bytes with [lo, hi) (or is empty): only those can race a
    new access or be covered by it (see _take_accesses)."""
    for r in recs:
        if r[1] > lo and r[0] < hi or r[0] >= r[1]:
            return True
    return False


def _meets(met, number: int) -> bool:
    """Whether a value wait's condition holds for `number` (one that raises: no; a Ctrl-C it
    took on the main thread goes back to the program)."""
    try:
        return bool(met(number))
    except BaseException as exc:  # (SystemExit too: the engine's thread that asks lives on)
        interrupts.give_back(exc)
        return False


class Sanitizer:
    """Checks each submitted task against the unordered accesses before it (see the module)."""

    def __init__(self, mode: str, on_race, on_found=None):
        self.mode = mode                 # warn, raise or log
        self.on_race = on_race           # fn(Race, new: bool), called outside our lock
        self.on_found = on_found         # fn(Race) as each new race is found (under our lock:
                                         # a refused one too, which raise mode never announces)
        # The (first, second) launch-site pairs warned of: one warning per pair, whatever the
        # buffers (reports() keeps a report per pair and buffer, with its count)
        self.warned: set[tuple[str, str]] = set()
        self.lock = forksafe.lock()
        self.streams: dict[int, dict] = {}   # stream id -> vector clock (actor -> time)
        # The host's vector clock. Host threads share it: they order each other by means the
        # sanitizer cannot see (start, join, locks, queues), so the order in which they act is
        # taken as it happened; races between host threads are not its business.
        self.host: dict = {}
        self.host_version = 0                 # bumped when the host's clock changes
        self.joined: dict[int, int] = {}      # stream id -> the host_version last joined into it
        # id(notify) -> clocks of its records submitted and not consumed by a wait: which one
        # releases the next wait is decided as they run (the first to run sets it)
        self.notifies: dict[int, list] = {}
        self.roles: dict[int, str] = {}  # stream id -> what an internal stream is for (its role)
        # id(allocation) -> [(lo, hi, write, actor, time, info, owner, assumed, rows, clock)]:
        # accesses by absolute address; info = (kind name, name, stream, task id, site,
        # non-blocking) of the task, as a report names it (see access_info) (shared by its accesses);
        # owner = (id, ptr, size, site) of the allocation they were made through (an earlier
        # owner of the same bytes, for the records a reused block inherits); clock: the
        # access's vector clock once accesses may arrive late (see late), else None.
        self.shadow: dict[int, list] = {}
        # Whether a host function or callback was tagged with a clock: what one touches arrives
        # as it runs, possibly after accesses ordered after it were kept, so from then on each
        # record keeps its clock, to tell such a late access ordered before it (no race).
        # (None on a record made before: nothing then was ordered after a tagged function.)
        self.late = False
        self.allocs: dict[int, object] = {}   # id(allocation) -> it (kept while tracked)
        self.dead: dict[int, list] = {}       # id(region) -> records of freed allocations
        self.regions: dict[int, object] = {}  # id(region) -> region (kept while tracked)
        self.owners: dict[int, tuple] = {}    # id(live allocation) -> its owner tuple
        self.made_for: dict[int, int] = {}    # id(allocation) -> stream id it was allocated for
        self.uses: dict[int, set] = {}        # id(allocation) -> streams from record_stream
        self.freed: dict[int, list] = {}      # id(region) -> [(lo, hi, clock)] of frees not reused
        self.races: dict[tuple, Race] = {}    # (site, site, allocation) -> the report
        self.latest: dict[int, int] = {}      # stream id -> its last time: the join of all clocks
        self.notify_waiters: dict[int, list] = {}  # id(notify) -> streams waiting for its record
        # stream id -> tasks held behind such a wait: (sid, task, accesses, site, task id)
        self.held: dict[int, list[tuple[int, Any, Any, Any, int]]] = {}
        # A wait on an event record not submitted yet (a collective's part waits for its lane,
        # which is queued when the last rank calls) holds its stream as a notify wait does:
        self.record_waiters: dict[int, list] = {}  # id(marker) -> streams held until its record
        self.held_records: set[int] = set()        # id(marker) of records sitting in a held list
        self.detached_of: dict[int, int] = {}  # stream id -> its device's hidden stream for
                                               # non-blocking host functions
        self.snapshots: dict[int, dict] = {}  # held stream id -> {tasks submitted: clock} that
                                              # synchronizes begun while it was held wait for
        # While a batch is checked in raise mode: id(allocation) -> its kept accesses before the
        # batch changed them (None: it had none), to go back to if the batch is refused
        self.undo: dict[int, list | None] | None = None
        self.saved: dict | None = None  # the open checkpoint whose logs that batch fills (see _checkpoint)
        # word address -> [(value, clock)] of the value writes submitted to it, oldest first: a
        # value wait comes after what every write that meets its condition comes after (which
        # of them lets it go shows only as they run, as for a notify's records)
        self.value_writes: dict[int, list] = {}
        # word address -> [(stream id, condition)] held behind a value wait that no write
        # submitted so far meets (nor the word as it is): released by the first that does
        self.value_waiters: dict[int, list] = {}
        # stream id -> the word address of the value wait it is held behind (until a value
        # write meets it, or the engine lets the wait go: value_wait_passed)
        self.value_held: dict[int, int] = {}
        # Reports found while the engine's lock was held (a held stream let go by it): said at
        # the next submit or host wait, outside any lock.
        self.unannounced: list = []
        # report thread id -> (self, clock, actor, (stream id, task id), name) of the non-blocking
        # callback it runs (see callback_began)
        self.callbacks: dict[int, tuple] = {}

    # ---- memory (as an observer of the address registry) -------------------------------------

    def _owner(self, alloc) -> tuple:
        owner = self.owners.get(id(alloc))
        if owner is None:  # allocated before the sanitizer was on: the allocator's site, if it noted one
            site = getattr(alloc, "site", None) or BEFORE_ENABLED
            owner = self.owners[id(alloc)] = (id(alloc), alloc.addr, alloc.nbytes, site)
        return owner

    def buffer_allocated(self, alloc) -> None:
        """Note where `alloc` was made; a block reused after a free comes after what that free
        was ordered after (for the stream it was allocated for, or else the host thread)."""
        site = user_code_site(3)
        block = getattr(alloc, "_block", None)
        stream = block.stream if block is not None else None
        with self.lock:
            key = id(alloc)
            self.owners[key] = (key, alloc.addr, alloc.nbytes, site)
            if stream is not None:
                self.made_for[key] = stream.id
            region = id(region_of(alloc))
            lo, hi = alloc.addr, alloc.addr + alloc.nbytes
            dead = self.dead.get(region)
            if dead:  # the accesses of earlier owners of these bytes: the new owner meets them
                self.shadow[key] = [r for r in dead if r[1] > lo and r[0] < hi]
                self.allocs[key] = alloc
                self.dead[region] = [r for r in dead if r[0] < lo or r[1] > hi]
            frees = self.freed.get(region)
            if not frees:
                return
            if stream is not None:
                into = self.streams.setdefault(stream.id, {stream.id: 0})
            else:
                into = self.host
                self.host_version += 1
            keep = []
            for f_lo, f_hi, clock in frees:
                if f_hi > lo and f_lo < hi:
                    join(into, clock)
                if f_lo < lo or f_hi > hi:
                    keep.append((f_lo, f_hi, clock))  # (parts outside may be reused later)
            self.freed[region] = keep

    def buffer_viewed(self, alloc, lo: int, hi: int, what: str = "a numpy view",
                      write: bool = True, rows: tuple | None = None) -> None:
        """A host thread touches bytes [lo, hi) (with `rows` (pitch, width): only those rows
        of them, a synchronous pitched copy): `what` (a numpy view, taken as reading and
        writing; a synchronous copy, which writes its destination and reads its source; a
        fill), ordered after what the thread synchronized with; inside a host function, an
        access of that function, at its place in its stream's order (inside a kernel: its
        declared buffers say what it touches)."""
        if rows is None:
            spans = [(alloc, lo, hi, None)]
        else:
            pitch, width = rows
            spans = pitched_spans(alloc, lo, pitch, width, (hi - lo - width) // pitch + 1)
        running = _executing.stream  # current_task(), inlined
        if running is not None:
            task = running._running
            tagged = task.clock if task is not None else None
            if tagged is None or tagged[0] is not self:
                return  # a kernel's own view, or a task submitted before the sanitizer ran
            self._function_accessed(task.id, task.label, tagged, spans, write,
                                    launch=tagged[4] if len(tagged) > 4 else "")
            return
        tid = threading.get_ident()
        if self.callbacks:
            running = self.callbacks.get(tid)
            if running is not None:  # a non-blocking callback's access, as its own
                self._function_accessed(0, running[4], running, spans, write, "callback", running[5])
                return
        actor = HOST  # (stream ids are positive)
        site = user_code_site(3)
        with self.lock:
            host = self.host
            accesses = [(a, b_lo, b_hi, write, False, "host", what, r) for a, b_lo, b_hi, r in spans]
            if self.mode == "raise":
                self._refuse_races(accesses, actor, host.get(actor, 0) + 1, tid, site, host,
                                   f"the host's {what[2:]}")
            time = host.get(actor, 0) + 1
            host[actor] = self.latest[actor] = time
            self.host_version += 1
            reports = self._take_accesses(accesses, actor, time, tid, site, host)
        for race, new in reports:
            self.on_race(race, new)

    def _function_accessed(self, task_id: int, label: str, tagged: tuple, spans: list, write: bool,
                           kind: str = "host function", launch: Site = "") -> None:
        """buffer_viewed() from inside a host function: its access, by the actor it runs as
        (its stream; the hidden stream of non-blocking ones), at its time; reported at the
        function's launch (`launch`: where the program queued it, which is where an event can
        be recorded after it), with the line inside it."""
        vc, actor, origin = tagged[1], tagged[2], tagged[3]
        inside = user_code_site(3)
        site: Site | InsideSite = InsideSite(launch, inside) if launch else inside
        accesses = [(a, lo, hi, write, False, kind, label, r) for a, lo, hi, r in spans]
        with self.lock:
            if self.mode == "raise":
                self._refuse_races(accesses, actor, vc[actor], task_id, site, vc, f"{kind} access", origin)
            reports = self._take_accesses(accesses, actor, vc[actor], task_id, site, vc, origin)
        for race, new in reports:
            self.on_race(race, new)

    def buffer_used_on(self, alloc, stream) -> None:
        """record_stream: the free of `alloc` also waits for `stream`."""
        with self.lock:
            self.uses.setdefault(id(alloc), set()).add(stream.id)

    def buffer_freed(self, alloc, stream=None) -> None:
        """Keep the accesses (the next owner of the bytes meets them) and what the free is
        ordered after: all work queued so far (no stream), or that of the streams the pool
        waits for (the freeing stream, the allocating one, record_stream's)."""
        with self.lock:
            key = id(alloc)
            made_for = self.made_for.pop(key, None)
            uses = self.uses.pop(key, ())
            self.owners.pop(key, None)
            if stream is None:
                clock = dict(self.latest)  # after everything queued so far
            else:
                clock = {}
                for i in {stream.id, *uses} | ({made_for} if made_for is not None else set()):
                    if i in self.streams:
                        join(clock, self.streams[i])
            region = region_of(alloc)
            frees = self.freed.setdefault(id(region), [])
            frees.append((alloc.addr, alloc.addr + alloc.nbytes, clock))
            if len(frees) > MAX_FREES:  # one merged entry: later reuse only gets more ordered
                merged: dict = {}
                for _, _, c in frees:
                    join(merged, c)
                self.freed[id(region)] = [(min(f[0] for f in frees), max(f[1] for f in frees),
                                           merged)]
            self.regions[id(region)] = region
            if self.value_writes:  # (the next owner's words start with no writes)
                lo, hi = alloc.addr, alloc.addr + alloc.nbytes
                for addr in [a for a in self.value_writes if lo <= a < hi]:
                    del self.value_writes[addr]
            records = self.shadow.pop(key, None)
            self.allocs.pop(key, None)
            if records:
                dead = self.dead.setdefault(id(region), [])
                dead += records
                if len(dead) > MAX_DEAD:
                    del dead[:len(dead) - MAX_DEAD // 2]  # the oldest can race least

    # ---- host synchronization ---------------------------------------------------------------

    def stream_clocks(self, streams) -> tuple:
        """The clocks of `streams` now (what a synchronize that starts now waits for). A held
        stream's tasks are only taken in once its wait's record comes, which the synchronize
        waits for: its entry is (stream id, tasks submitted), and its clock is the one it has
        once its held tasks up to that one are taken in."""
        with self.lock:
            out: list[tuple[int, int] | dict] = []
            for s in streams:
                if s.id in self.held:
                    self.snapshots.setdefault(s.id, {})[s._submitted] = None
                    out.append((s.id, s._submitted))
                elif s.id in self.streams:
                    out.append(dict(self.streams[s.id]))
            return tuple(out)

    def host_waited(self, clocks) -> None:
        """The calling host thread waited for the work these clocks cover (inside a host
        function: what the function does from now on comes after that work)."""
        if self.unannounced:
            self._say_unannounced()
        running = _executing.stream
        task = running._running if running is not None else None
        tagged = task.clock if task is not None else None
        if tagged is None and self.callbacks:
            tagged = self.callbacks.get(threading.get_ident())
        with self.lock:
            if tagged is not None and tagged[0] is self:
                host = tagged[1]  # (the function's own clock: its later accesses read it)
            else:
                host = self.host
            for c in clocks:
                if type(c) is tuple:  # a held stream's: the snapshot its release took
                    sid, upto = c
                    c = self.snapshots.get(sid, {}).pop(upto, None) or self.streams.get(sid, {})
                join(host, c)
            self.host_version += 1

    def _clock_of(self, holder):
        """The clock this sanitizer left on a marker or task, or None (none, or an earlier one's)."""
        tagged = holder.clock
        return tagged[1] if tagged is not None and tagged[0] is self else None

    def stream_waited(self, stream, marker) -> None:
        """`stream` waits on a record that already completed (no task queued): the edge holds."""
        clock = self._clock_of(marker)
        if clock is None:
            return
        with self.lock:
            vc = self.streams.setdefault(stream.id, {stream.id: 0})
            join(vc, clock)

    def host_function_began(self, task) -> None:
        """Host function `task` (or the callback its host task hands off) starts: its stream's
        earlier work is done. Host threads share one clock (the order they act in is taken as
        it happened), so what the host does from now on comes after that work (a thread that
        waits for a threading.Event the function sets, say); not after the function's own
        accesses, which come as it runs."""
        clock = self._clock_of(task)
        if clock is None:
            return
        sid = task.clock[2]
        before = dict(clock)
        before[sid] = clock[sid] - 1  # (its own time is the function's)
        with self.lock:
            join(self.host, before)
            self.host_version += 1

    def callback_began(self, task, name: str) -> None:
        """The calling thread (a report thread) runs a non-blocking callback that `task` (its
        host task) handed off: after its stream's earlier work, beside its later work. Until
        callback_ended() what the thread touches is the callback's, as its own actor (one per
        report thread: it runs its callbacks in turn), so that its stream's later work races it."""
        clock = self._clock_of(task)
        if clock is None or task.stream is None:
            return
        tid = threading.get_ident()
        actor = -2 - tid  # (stream ids are positive, the host is -1)
        with self.lock:
            vc = self.streams.setdefault(actor, {actor: 0})
            join(vc, clock)
            vc[actor] = self.latest[actor] = vc[actor] + 1
            launch = task.clock[4] if len(task.clock) > 4 else ""  # (its launch_callback's site)
            self.callbacks[tid] = (self, vc, actor, (task.stream.id, task.id), name, launch)
            self.late = True

    def callback_ended(self) -> None:
        """The callback the calling thread ran returned: host threads share one clock, so what
        they do next is taken as after it (the order it happened in)."""
        with self.lock:
            running = self.callbacks.pop(threading.get_ident(), None)
            if running is not None:
                join(self.host, running[1])
                self.host_version += 1

    def notify_reset(self, notify) -> None:
        """`notify`'s record was cleared before a wait consumed it (Notify.reset): the next
        wait is released by a later record, not by that one."""
        with self.lock:
            host = self.host
            records = self.notifies.get(id(notify))
            if records:  # (those the host is ordered after have run: the one reset is among them)
                self.notifies[id(notify)] = [c for c in records if not covered(c, host)]

    def marker_waited(self, marker) -> None:
        """The calling host thread waited for a record (event or graph launch) to complete."""
        clock = self._clock_of(marker)
        if clock is not None:
            self.host_waited((clock,))

    # ---- submission -------------------------------------------------------------------------

    def submitted(self, stream, task) -> list:
        """Check `task`, about to be queued on `stream`; record its accesses and edges; returns
        the reports [(race, new)] for announce(). In raise mode a race refuses the task
        (RaceError), changing nothing.

        A stream blocked (in submission order) on a notify wait whose record is not submitted
        yet holds its later tasks back here: they are checked once that record comes, after it.
        """
        if self.unannounced:
            self._say_unannounced()
        kind = task.kind  # (task_accesses and submit_site inlined for a launch: hot)
        site: Site = ""
        if kind in _SYNC_KINDS:
            accesses: Any = ()
        else:
            reads, writes = task.reads, task.writes
            if reads is not None or writes is not None:
                accesses = declared_accesses(reads, writes, KIND_NAMES[kind], task.name or task.fn)
            else:
                accesses = task_accesses(task)
            if accesses or kind in (HOST_FUNC, DETACH):  # (a host function: its body's accesses name it)
                # The caller of the API that submits (frame 1 is ENGINE.submit, 2 that API): the
                # user's code, unless a wrapper of ours lies between (then walk out).
                frame: Any = sys._getframe(3)
                while frame is not None and is_ours(frame.f_code.co_filename):
                    frame = frame.f_back
                site = (frame.f_code, frame.f_lasti) if frame is not None else "?"
        sid = stream.id
        lock = self.lock
        lock.acquire()  # (no batch's checkpoint is open outside it; not `with`: ~80 ns a launch)
        try:
            vc = self._stream_clock(stream, task, kind, sid, accesses, site)
            if vc is None:
                return []  # held behind a notify wait
            if accesses and kind != DETACH and not task.on_behalf and self.mode != "raise":
                vc[sid] = self.latest[sid] = time = vc[sid] + 1  # (_apply inlined: a launch)
                if kind == HOST_FUNC:  # what it accesses and submits itself comes after
                    task.clock = (self, dict(vc), sid, None, site)
                    self.late = True
                reports = self._take_accesses(accesses, sid, time, stream._submitted + 1, site, vc)
                if task.value is not None:
                    reports += self._value_written(task.value, vc)
            elif not accesses and kind != DETACH:  # (a record or wait)
                reports = self._apply_order(sid, task, self.mode == "raise", site)
            else:
                reports = self._apply(sid, task, accesses, site, stream._submitted + 1, self.mode == "raise")
        finally:
            lock.release()
        return reports

    def announce(self, reports: list) -> None:
        """Tell of the races submitted() or submitted_all() found, once their tasks are queued
        (a warning turned into an error must not leave the state holding work never queued)."""
        for race, new in reports:
            self.on_race(race, new)

    def _submitted(self, stream, task, accesses, site, raising: bool) -> list:
        """submitted() under our lock, for a batch's task: returns the reports [(race, new)]."""
        sid = stream.id
        if self.undo is not None:  # (a batch that may be refused: its first change saves the old)
            self._keep(sid)
        if self._stream_clock(stream, task, task.kind, sid, accesses, site) is None:
            return []  # held behind a notify wait
        return self._apply(sid, task, accesses, site, stream._submitted + 1, raising)

    def _stream_clock(self, stream, task, kind: int, sid: int, accesses, site) -> dict | None:
        """Under our lock: `stream`'s clock, brought up to what comes before `task` (what the
        host waited for, the host function or non-blocking callback submitting it); None when
        the stream is held behind a notify wait, and `task` with it."""
        vc = self.streams.get(sid)
        if vc is None:
            vc = self.streams[sid] = {sid: 0}
            if stream.role:  # (an internal stream: a report says what it is for)
                self.roles[sid] = stream.role
        if kind == DETACH:
            self.detached_of[sid] = stream._dq.detached.id
        host_version = self.host_version
        if self.joined.get(sid) != host_version:  # (the host's clock moved since)
            join(vc, self.host)  # what the host waited for comes before what it submits
            self.joined[sid] = host_version
        running = _executing.stream  # current_task(), inlined (hot)
        if running is not None:
            running = running._running
        if running is not None:
            clock = self._clock_of(running)
            if clock is not None:
                join(vc, clock)  # submitted from a host function: after its stream's past
        elif self.callbacks:
            callback = self.callbacks.get(threading.get_ident())
            if callback is not None:
                join(vc, callback[1])  # submitted from a non-blocking callback: after it
        held = self.held.get(sid)
        if held is not None:
            held.append((sid, task, accesses, site, stream._submitted + 1))
            if kind == EVENT_RECORD:
                self.held_records.add(id(task.marker))
            return None
        return vc

    def _apply(self, sid: int, task, accesses, site, task_id: int, raising: bool) -> list:
        """Take one task into the clocks and the accesses (under our lock); returns the reports
        [(race, new)]; with `raising`, a race raises RaceError instead, changing nothing."""
        kind = task.kind
        origin: tuple | None = None  # (see access_info)
        if kind == DETACH:
            # A non-blocking host function runs beside its stream's later work, after its
            # earlier work: as the device's hidden stream for them (which runs them in turn);
            # a report names the program's stream and task (`origin`), not the hidden one.
            origin = (sid, task_id)
            detached = self.detached_of[sid]
            if self.undo is not None:
                self._keep(detached)
            vc = self.streams.setdefault(detached, {detached: 0})
            join(vc, self.streams[sid])
            sid, task = detached, task.fn
        if not accesses and kind != DETACH:
            return self._apply_order(sid, task, raising, site)
        if self.undo is not None:  # (a held task released in the batch)
            self._keep(sid)
        vc = self.streams[sid]
        if task.on_behalf:  # (a lane step of a collective: reports name the rank's call)
            origin = (sid, task_id, task.on_behalf)
        if raising and accesses:
            self._refuse_races(accesses, sid, vc[sid] + 1, task_id, site, vc, "launch", origin)
        vc[sid] = self.latest[sid] = time = vc[sid] + 1
        if kind in (HOST_FUNC, DETACH):  # what it accesses and submits itself comes after
            if self.undo is not None:
                self.saved["marks"].append((task, task.clock))  # type: ignore[index]
            task.clock = (self, dict(vc), sid, origin, site)
            self.late = True
        reports = self._take_accesses(accesses, sid, time, task_id, site, vc, origin) if accesses else []
        if task.value is not None and kind == KERNEL:
            reports += self._value_written(task.value, vc)
        elif task.dispatches_nodes:  # (a replayed graph's value writes: as their eager form's)
            for node in segment_nodes(task) or ():
                if node.value is not None:
                    reports += self._value_written(node.value, vc)
        return reports

    def value_wait_passed(self, stream) -> None:
        """The engine let `stream`'s value wait go (its word met the condition, whoever wrote
        it, or its timeout failed it; called under the engine's lock): a stream held behind it,
        no value write seen to meet it, goes on after what the host has seen (a write of the
        host's, or of a plain task). Its reports are said at the next submit or host wait."""
        sid = stream.id
        with self.lock:
            addr = self.value_held.pop(sid, None)
            if addr is None:
                return
            waiters = [w for w in self.value_waiters.get(addr, ()) if w[0] != sid]
            if waiters:
                self.value_waiters[addr] = waiters
            else:
                self.value_waiters.pop(addr, None)
            join(self.streams[sid], self.host)
            self.unannounced += self._release(sid)

    def _say_unannounced(self) -> None:
        """Announce the reports value_wait_passed found (outside any lock)."""
        with self.lock:
            reports, self.unannounced = self.unannounced, []
        self.announce(reports)

    def _value_written(self, value: tuple, vc: dict) -> list:
        """A value write (`value`: its word's address and value; `vc`: its clock) was taken: kept
        for the value waits to come, and the streams held behind a wait it meets go on after it."""
        addr, number = value
        writes = self.value_writes.setdefault(addr, [])
        writes.append((number, dict(vc)))
        if len(writes) > MAX_VALUE_WRITES:
            del writes[0]
        reports: list = []
        waiters = self.value_waiters.get(addr)
        if waiters:
            for waiter in [w for w in waiters if _meets(w[1], number)]:
                waiters.remove(waiter)
                self.value_held.pop(waiter[0], None)
                if self.undo is not None:
                    self._keep(waiter[0])
                join(self.streams[waiter[0]], vc)
                reports += self._release(waiter[0])
            if not waiters:
                del self.value_waiters[addr]
        return reports

    def _refuse_races(self, accesses, actor: int, time: int, task_id: int, site, vc: dict, what: str,
                      origin: tuple | None = None) -> None:
        """Raise RaceError (raise mode) if any of `accesses` by `actor` at `time` races a kept
        access (`origin`: as _take_accesses)."""
        for alloc, lo, hi, write, assumed, kind_name, name, rows in accesses:
            base = alloc.addr
            lo += base
            hi += base
            for r in self.shadow.get(id(alloc), ()):
                if r[3] != actor and r[1] > lo and r[0] < hi and (write or r[2]) and vc.get(r[3], 0) < r[4] \
                        and (r[9] is None or r[9].get(actor, 0) < time):  # (neither ordered before the other)
                    both = overlap(lo, hi, rows, r) if rows is not None or r[8] is not None \
                        else (max(lo, r[0]), min(hi, r[1]))
                    if both is None:
                        continue  # only the gaps of pitched rows meet
                    new = (lo, hi, write, actor, 0, access_info(kind_name, name, actor, task_id, site, origin),
                           None, assumed, rows, None)
                    race, fresh = self._report(alloc, r, new, *both)
                    if fresh:
                        race.refused = True  # (its task id goes to the stream's next task)
                    raise RaceError(f"{what} refused: {race}", race)

    def _take_accesses(self, accesses, actor: int, time: int, task_id: int, site, vc: dict,
                       origin: tuple | None = None) -> list:
        """Check each access of `actor` (at `time` of its clock `vc`) against the kept ones, in
        one pass per allocation that also keeps it and drops the kept accesses it covers and
        makes redundant: its own actor's (a write covers both kinds, a read covers reads) and,
        for a write, those ordered before it; past MAX_RECORDS the oldest go. Returns the
        reports [(race, new)]. `origin`: (stream id, task id) a non-blocking host function was
        launched as, which its reports name (its actor is the device's hidden stream).

        A later access of the task meets the earlier ones as its own actor's: never a race; what
        an earlier one dropped as redundant was ordered before the task, so it could race none of
        it; and what the cap dropped meanwhile is still checked (`capped`), as if every access
        were checked before any is kept.

        An access may arrive after kept ones that are ordered after it (a host function's, made
        as it runs): a pair is a race only if neither is ordered before the other (the kept
        record's clock says whether it is ordered after the new one), and a kept access of the
        same actor is dropped only by a new one no earlier in its order."""
        found = []
        shadow, owners, allocs, undo = self.shadow, self.owners, self.allocs, self.undo
        capped: dict[int, list] | None = None  # id(allocation) -> other actors' records the cap
                                               # dropped during this call (oldest first)
        info = last_name = last_kind = None  # (what a task's accesses share: made once for all)
        clock = dict(vc) if self.late else None  # (see late)
        scan_all = _SCAN_ALL
        for alloc, lo, hi, write, assumed, kind_name, name, rows in accesses:
            key = id(alloc)
            base = alloc.addr
            lo += base
            hi += base
            if name is not last_name or kind_name is not last_kind:
                info = (kind_name, name, actor, task_id, site, False, ()) if origin is None \
                    else access_info(kind_name, name, actor, task_id, site, origin)  # (inlined: hot)
                last_name, last_kind = name, kind_name
            rec = (lo, hi, write, actor, time, info, owners.get(key) or self._owner(alloc), assumed, rows, clock)
            recs = shadow.get(key)
            if undo is not None and key not in undo:  # (a batch that may be refused)
                undo[key] = list(recs) if recs is not None else None
            if recs is None:
                shadow[key] = [rec]
                allocs[key] = alloc
                continue
            if capped is not None:
                for r in capped.get(key, ()):
                    if vc.get(r[3], 0) < r[4] and r[1] > lo and r[0] < hi and (write or r[2]) \
                            and (r[9] is None or r[9].get(actor, 0) < time):
                        both = overlap(lo, hi, rows, r)
                        if both is not None:
                            found.append((alloc, r, rec, *both))
            # (a long list, a buffer written in many pieces, is mostly disjoint from a new piece:
            # a first look for any access it meets spares the full pass when none does)
            i = 0 if len(recs) <= scan_all or _any_meets(recs, lo, hi) else len(recs)
            while i < len(recs):  # (in place, oldest first: most allocations keep one or two)
                r = recs[i]
                if r[3] == actor:  # (strided: its span does not cover the gaps between its rows)
                    redundant = (write or not r[2]) and r[4] <= time \
                        and (lo <= r[0] and r[1] <= hi and rows is None
                             or rows is not None and r[8] == rows and r[0] == lo and r[1] == hi)
                elif vc.get(r[3], 0) < r[4]:  # not ordered before this access
                    # (nor after it: r's clock, kept once accesses may come late, says)
                    if r[1] > lo and r[0] < hi and (write or r[2]) and (r[9] is None or r[9].get(actor, 0) < time):
                        if rows is None and r[8] is None:
                            found.append((alloc, r, rec, max(lo, r[0]), min(hi, r[1])))
                        else:
                            both = overlap(lo, hi, rows, r)
                            if both is not None:
                                found.append((alloc, r, rec, *both))
                    redundant = False
                else:
                    redundant = write and (lo <= r[0] and r[1] <= hi and rows is None
                                           or rows is not None and r[8] == rows and r[0] == lo and r[1] == hi)
                if redundant:
                    del recs[i]
                else:
                    i += 1
            recs.append(rec)
            if len(recs) > _TRIM_AT:  # (in batches: a cut costs a list copy, and the capped)
                cut = len(recs) - MAX_RECORDS  # the oldest can race least; the last 64 stay
                if capped is None:
                    capped = {}
                capped.setdefault(key, []).extend(r for r in recs[:cut] if r[3] != actor)
                del recs[:cut]
        return [self._report(*f) for f in found] if found else found  # (no comprehension: hot)

    def _apply_order(self, sid: int, task, raising: bool = False, site: Site = "") -> list:
        """_apply() for a task without accesses: records and waits (their edges), and host
        functions (the clock what they submit comes after). With `raising`, a notify record
        that releases a held stream whose tasks race is refused (RaceError), changing nothing;
        so is one whose release reaches such tasks through a held event record (under the
        notify record's or a batch's checkpoint, which undoes it). `site`: a host function's
        launch (see _function_accessed)."""
        undo = self.undo is not None  # (a batch that may be refused: log what changes)
        if undo:
            self._keep(sid)
        vc = self.streams[sid]
        kind = task.kind
        if kind == EVENT_RECORD:
            m = task.marker
            if undo:
                self.saved["marks"].append((m, m.clock))  # type: ignore[index]
            m.clock = (self, dict(vc))  # (tagged: an earlier session's means nothing)
            self.held_records.discard(id(m))
            reports = []
            for waiter in self.record_waiters.pop(id(m), ()):  # streams held for this record
                if undo:
                    self._keep(waiter)
                join(self.streams[waiter], vc)
                reports += self._release(waiter, raising and undo)  # (refusable only in a checkpoint)
            return reports
        if kind == EVENT_WAIT:
            m = task.marker
            clock = self._clock_of(m)
            if clock is not None:
                join(vc, clock)
            elif (m.position == 0 and not m.done) or id(m) in self.held_records:
                # its record is not submitted (or not checked) yet: hold the stream until it is
                self.record_waiters.setdefault(id(m), []).append(sid)
                self.held[sid] = []
            return []
        if kind == NOTIFY_RECORD:
            key = id(task.notify)
            waiters = self.notify_waiters.get(key)
            if waiters:  # a stream already waits for this record: it goes on after it
                if raising and self.undo is None:  # (in a batch: the batch's checkpoint undoes)
                    return self._release_or_refuse(key, vc, task)
                waiter = waiters.pop(0)
                if undo:
                    self._keep(waiter)
                join(self.streams[waiter], vc)
                return self._release(waiter, raising)
            self.notifies.setdefault(key, []).append(dict(vc))
            return []
        if kind == NOTIFY_WAIT:
            records = self.notifies.pop(id(task.notify), None)
            if records:
                # The record that runs first releases it (a later one finds it set already):
                # which that is shows only as they run, so the wait comes after what every
                # candidate comes after (on one stream: the first).
                join(vc, meet(records))
            else:  # its record is not submitted yet: hold the stream's later tasks back
                self.notify_waiters.setdefault(id(task.notify), []).append(sid)
                self.held[sid] = []
            return []
        if kind == VALUE_WAIT and task.value is not None:
            addr, met = task.value
            meeting = [clock for number, clock in self.value_writes.get(addr, ()) if _meets(met, number)]
            if meeting:
                join(vc, meet(meeting))
            elif not task.fn():  # (nor does the word as it is now: hold until a write that does)
                self.value_waiters.setdefault(addr, []).append((sid, met))
                self.value_held[sid] = addr
                self.held[sid] = []
            return []
        if kind == HOST_FUNC:  # (its own time: what it touches comes after the records before it)
            vc[sid] = self.latest[sid] = vc[sid] + 1
            if undo:
                self.saved["marks"].append((task, task.clock))  # type: ignore[index]
            task.clock = (self, dict(vc), sid, None, site)
            self.late = True
        return []

    def _release_or_refuse(self, key: int, vc: dict, task) -> list:
        """Raise mode: a notify record (`vc`: its stream's clock) releases the first stream
        waiting for notify `key`; if a held task of it races, refuse the record (RaceError) and
        go back to before it. The held tasks are queued, but they cannot run before a record:
        refusing this one leaves them waiting, as they did, and the sanitizer as it was."""
        saved = self._checkpoint()
        waiter = self.notify_waiters[key].pop(0)
        try:
            self._keep(waiter)
            join(self.streams[waiter], vc)
            return self._release(waiter, True)
        except RaceError as exc:
            self._rollback(saved, exc.race)
            raise RaceError(f"notify record refused: it would let stream {waiter}'s work held behind "
                            f"its wait go on, which completes a {exc.race}", exc.race) from None
        finally:
            self.undo = self.saved = None

    def _release(self, sid: int, raising: bool = False) -> list:
        """A held stream's record came: check its held tasks in order. They are queued already,
        so a race is reported, not raised, unless `raising` (the record that releases them may
        still be refused: a notify record in raise mode)."""
        reports = []
        held = self.held.pop(sid, [])
        wanted = self.snapshots.get(sid)
        for i, item in enumerate(held):
            reports += self._apply(*item, raising)
            if wanted:  # a synchronize that began before this task waits for up to it
                for upto, clock in wanted.items():
                    if clock is None and item[4] >= upto:
                        wanted[upto] = dict(self.streams[sid])
            if sid in self.held:  # held again, on a later notify wait
                self.held[sid] += held[i + 1:]
                break
        return reports

    def stream_destroyed(self, stream) -> None:
        """`stream` is gone: drop its clock (kept accesses of it stay, its time in other clocks
        too), so that what is kept per stream follows the live ones. A stream still held
        behind a wait keeps it: its held tasks are checked when the record comes."""
        sid = stream.id
        with self.lock:
            if sid in self.held:
                return
            self.streams.pop(sid, None)
            self.joined.pop(sid, None)
            self.roles.pop(sid, None)
            self.detached_of.pop(sid, None)
            self.snapshots.pop(sid, None)

    def markers_released(self, markers) -> None:
        """Records that will never come (a collective gave up): what waits for them goes on,
        after what the host has seen."""
        reports = []
        with self.lock:
            for m in markers:
                for waiter in self.record_waiters.pop(id(m), ()):
                    join(self.streams[waiter], self.host)
                    reports += self._release(waiter)
        for race, new in reports:
            self.on_race(race, new)

    def submitted_all(self, work) -> list:
        """submitted() for a batch of (stream, task) queued at once (a graph launch, a
        collective's parts or lane steps), in an order where each wait comes after the record
        it waits for: a batch may list a forked lane's wait before the record on the origin lane
        that releases it. In raise mode a race refuses the whole batch, changing nothing: none
        of it is queued, so what its earlier tasks did must not stay in the clocks. Returns
        the reports for announce()."""
        if len(work) == 1 and self.mode != "raise":  # (an event record: nothing to order or undo)
            ((s, t),) = work
            acc = task_accesses(t) if t.kind not in _SYNC_KINDS else ()
            site = submit_site(3) if acc else ""
            with self.lock:
                return self._submitted(s, t, acc, site, False)
        tasks = [(s, t, task_accesses(t) if t.kind not in _SYNC_KINDS else ()) for s, t in work]
        site = submit_site(3) if any(acc for _, _, acc in tasks) else ""
        reports: list = []
        with self.lock:
            raising = self.mode == "raise"
            undo = self._checkpoint() if raising else None
            try:
                for s, t, acc in self._batch_order(tasks):
                    reports += self._submitted(s, t, acc, site, raising)
            except RaceError as exc:
                if undo is not None:
                    self._rollback(undo, exc.race)
                raise
            finally:
                self.undo = self.saved = None
        return reports

    @staticmethod
    def _batch_order(tasks: list) -> list:
        """The batch's (stream, task, accesses) in an order where each wait comes after its
        record when the record is in the batch (each stream's own order kept)."""
        pending = {id(t.marker) for _, t, _ in tasks if t.kind == EVENT_RECORD}
        lanes: dict[int, list] = {}
        for item in tasks:
            lanes.setdefault(id(item[0]), []).append(item)
        heads = {key: 0 for key in lanes}
        recorded: set[int] = set()
        out = []
        while heads:
            progressed = False
            for key in list(heads):
                items, i = lanes[key], heads[key]
                while i < len(items):
                    t = items[i][1]
                    if t.kind == EVENT_WAIT and id(t.marker) in pending and id(t.marker) not in recorded:
                        break  # its record comes later in the batch
                    out.append(items[i])
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
                out.append(lanes[key][heads[key]])
                heads[key] += 1
                if heads[key] == len(lanes[key]):
                    del heads[key]
        return out

    def _checkpoint(self) -> dict:
        """Open a checkpoint (under our lock) for a batch that may be refused: the pending
        waits and held work (few) are copied; what else the batch changes is logged as it
        first changes it, so that its cost follows the batch, not every stream ever made:
        accesses per allocation (`undo`), each stream's clock (`_keep`), the clocks left on
        markers and tasks ("marks", in order) and the races' counts (see _report)."""
        self.undo = {}
        self.saved = {
            "shadow": self.undo, "clocks": {}, "marks": [], "races": {},
            "notifies": {k: list(v) for k, v in self.notifies.items()},
            "notify_waiters": {k: list(v) for k, v in self.notify_waiters.items()},
            "held": {k: list(v) for k, v in self.held.items()},
            "record_waiters": {k: list(v) for k, v in self.record_waiters.items()},
            "held_records": set(self.held_records),
            "value_writes": {k: list(v) for k, v in self.value_writes.items()},
            "value_waiters": {k: list(v) for k, v in self.value_waiters.items()},
            "value_held": dict(self.value_held),
            "snapshots": {k: dict(v) for k, v in self.snapshots.items()},
        }
        return self.saved

    def _keep(self, sid: int) -> None:
        """Before an open checkpoint's batch first changes stream `sid`: save its clock, last
        time, host join and hidden stream (None: absent) to go back to."""
        clocks = self.saved["clocks"]  # type: ignore[index]
        if sid not in clocks:
            vc = self.streams.get(sid)
            clocks[sid] = (dict(vc) if vc is not None else None, self.latest.get(sid),
                           self.joined.get(sid), self.detached_of.get(sid))

    def _rollback(self, saved: dict, refused: Race) -> None:
        """Go back to a checkpoint (a refused batch leaves no trace), but keep the report of the
        race that refused it (as a refused single task does)."""
        for key, recs in saved.pop("shadow").items():
            if recs is None:
                self.shadow.pop(key, None)
                self.allocs.pop(key, None)
            else:
                self.shadow[key] = recs
        for sid, (vc, latest, joined, detached) in saved.pop("clocks").items():
            for into, old in ((self.latest, latest), (self.joined, joined), (self.detached_of, detached)):
                if old is None:
                    into.pop(sid, None)
                else:
                    into[sid] = old
            if vc is None:
                self.streams.pop(sid, None)
            else:
                self.streams[sid] = vc
        for holder, clock in reversed(saved.pop("marks")):  # (the first change saved the oldest)
            holder.clock = clock
        for key, count in saved.pop("races").items():
            race = self.races.get(key)
            if race is None or race is refused:
                continue
            if count is None:
                del self.races[key]
            else:
                race.count = count
        for name, value in saved.items():
            setattr(self, name, value)

    def _report(self, alloc, rec, new, lo, hi) -> tuple[Race, bool]:
        """The (deduplicated) report of a race between a kept access and a new one (records)."""
        first, second = access_of(rec, self.roles, alloc), access_of(new, self.roles, alloc)
        key = (first.site, second.site, id(alloc))
        race = self.races.get(key)
        owner = self._owner(alloc)
        if race is None and not first.on_host and not second.on_host:
            # (the same two tasks on the same allocation: one race, one report, however many of
            # their accesses meet: a host function's arguments, then what it touched inside;
            # the host's own synchronous operations are no tasks: each is a race of its own; nor
            # is a refused one, whose id the next task of its stream took)
            pair = {(first.stream, first.task_id), (second.stream, second.task_id)}
            for k, r in self.races.items():
                if r.ptr == owner[1] and not r.refused and pair == {(r.first.stream, r.first.task_id),
                                                  (r.second.stream, r.second.task_id)}:
                    key, race = k, r
                    break
        if self.undo is not None and key not in self.saved["races"]:  # type: ignore[index]
            self.saved["races"][key] = race.count if race is not None else None  # type: ignore[index]
        if race is not None:
            race.count += 1
            if lo - owner[1] <= race.hi and hi - owner[1] >= race.lo:  # (the same bytes, or next
                race.lo = min(race.lo, lo - owner[1])                  # to them: one range)
                race.hi = max(race.hi, hi - owner[1])
            return race, False
        old = rec[6]
        reused_from = None
        if old[0] != owner[0]:
            reused_from = f"the {old[2]}-byte allocation at {old[1]:#x} ({allocated(site_text(old[3]))}), freed"
        race = self.races[key] = Race(owner[1], owner[2], site_text(owner[3]), lo - owner[1],
                                      hi - owner[1], first, second, reused_from=reused_from)
        if self.on_found is not None:
            self.on_found(race)
        return race, True

    def reports(self) -> list[Race]:
        """Every race found so far, in the order found."""
        with self.lock:
            return list(self.races.values())
