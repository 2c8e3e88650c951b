"""The Chrome trace-event JSON export (loads in Perfetto and chrome://tracing).

A process for the host and one per device; a track per host thread and per stream; complete
("X") slices that nest per track (a slice that would overlap its neighbour goes to an overflow
track of the same stream rather than being dropped); flow arrows from each API call to the task
it submitted and from each event record to the waits it released; memory counters. With the
parts of child processes, one timeline of them all: each process's host and devices by its pid.
"""

from __future__ import annotations

import bisect
import json
from collections import defaultdict
from collections.abc import Callable, Iterator
from json.encoder import encode_basestring_ascii as _str  # a str as json.dumps writes it
from operator import attrgetter, itemgetter
from typing import NamedTuple, TextIO

from .data import QUEUE_FULL, ApiCall, ProfileData, compact_json, joined, own_clock, us

HOST_PID = 0
OWN_TIMELINE = "its own timeline, from its start"  # (a simulated process's, in a merged trace)
OVERFLOW_TID = 1_000_000  # overflow tracks of a stream: stream id + k * OVERFLOW_TID
PID_STRIDE = 1 << 22      # Linux's largest pid + 1
_START, _END = attrgetter("start_ns"), attrgetter("end_ns")


def device_pid(device: int) -> int:
    """The trace process id of a device (the host is 0)."""
    return device + 1


def merged_pid(pid: int, local_pid: int) -> int:
    """The trace process id, in a merged trace, of process `pid`'s host (local_pid 0: the pid
    itself) or of its device local_pid - 1 (above every pid Linux gives)."""
    return pid + local_pid * PID_STRIDE


class _Frame(NamedTuple):
    """Where one process's events go in the trace: as recorded when the trace is its alone;
    merged with the parts of child processes, its trace processes named by its pid, its
    times shifted by when it started, its flow ids apart from the other parts'."""

    pid: int | None = None  # None: the trace is this process's alone
    place: int = 0          # its place among the merged parts
    shift_us: float = 0.0
    timeline: str = ""      # "": placed at its start; else how it is on a timeline of its own

    def proc(self, local: int) -> int:
        """The trace process id of the process's host (0) or device d (d + 1)."""
        return local if self.pid is None else merged_pid(self.pid, local)

    def ts(self, ns: int | float) -> float:
        """A timestamp of the process's profile on the trace's timeline (us)."""
        return us(ns) if self.pid is None else round(us(ns) + self.shift_us, 3)


# The events of which a profile has one or more per task or API call are written by string
# formatting: the text json.dumps would give their dicts, at a fraction of the cost.

def _dur(start_ns: int | float, end_ns: int | float) -> float:
    """A slice's duration in us (float times, from a hand-made profile: rounded as its ends)."""
    if type(start_ns) is int and type(end_ns) is int:
        return us(max(0, end_ns - start_ns))
    return max(0.0, round(us(end_ns) - us(start_ns), 3))


def _slice(name: str, cat: str, pid: int, tid: int, start_ns, end_ns, args: str,
           ts: Callable) -> str:
    """A complete ("X") slice; `args` is JSON text already."""
    return (f'{{"name":{_str(name)},"cat":{_str(cat)},"ph":"X","pid":{pid},"tid":{tid},'
            f'"ts":{ts(start_ns)!r},"dur":{_dur(start_ns, end_ns)!r},"args":{args}}}')


_FATES = {"dropped": "dropped unrun (or, a wait, cut short) when its stream was destroyed or "
                      "stopped after a failure",
          "unfinished": "never finished while profiling: it still blocked, ran or waited for an "
                        "executor at the end, or was queued behind one that did"}


def _task_slice(t, pid: int, tid: int, ts: Callable) -> str:
    """A task's slice, with its id, kind, times queued and, when it has them, bytes and error."""
    extra = f',"bytes":{t.nbytes}' if t.nbytes else ""
    if t.failed:
        extra += f',"failed":true,"error":{_str(t.error)}'
    name = t.name
    if t.fate:  # (in the name too: the timeline shows where a stream stopped)
        extra += f',"fate":{_str(_FATES[t.fate])}'
        name = f"{name} ({t.fate})"
    kind = _str(t.kind)
    start, enqueue = t.start_ns, t.enqueue_ns
    return (f'{{"name":{_str(name)},"cat":{kind},"ph":"X","pid":{pid},"tid":{tid},'
            f'"ts":{ts(start)!r},"dur":{_dur(start, t.end_ns)!r},"args":{{"task id":'
            f'{t.task_id},"kind":{kind},"enqueue (us)":{us(enqueue)!r},'
            f'"queued (us)":{us(start - enqueue)!r}{extra}}}}}')


def _flow(name: str, cat: str, end: bool, flow_id: int, pid: int, tid: int, ts: float) -> str:
    """The start ("s") or end ("f", bound to the enclosing slice) of a flow arrow."""
    ph = '"ph":"f","bp":"e"' if end else '"ph":"s"'
    return (f'{{"name":{_str(name)},"cat":{_str(cat)},{ph},"id":{flow_id},"pid":{pid},'
            f'"tid":{tid},"ts":{ts!r}}}')


def _api_args(c: ApiCall, profile: ProfileData, plain: dict[tuple, str]) -> str:
    """An API call's slice arguments: its thread, call site and, when they apply, target,
    state, error (`plain`: (thread, site) -> the text of those of a call with only these,
    made once each)."""
    if not c.target and c.already_done is None and not c.error:
        text = plain.get((c.thread, c.site))
        if text is None:
            plain_args = {"thread": _thread(c, profile)}
            if c.site:
                plain_args["call site"] = c.site
            text = plain[(c.thread, c.site)] = compact_json(plain_args)
        return text
    args: dict = {"thread": _thread(c, profile)}
    if c.site:
        args["call site"] = c.site
    if c.target:
        args["target"] = c.target
    if c.already_done is not None:
        args["already complete"] = c.already_done
    if c.error:
        args["error code"] = c.error
        if c.task_error:
            args["error of"] = "a failed task, passed on"
    return compact_json(args)


def _thread(c: ApiCall, profile: ProfileData) -> str:
    return profile.threads.get(c.thread, str(c.thread))


def _lanes(items: list) -> Iterator[tuple]:
    """(lane, record) for records with start_ns and end_ns, so that slices in a lane nest
    properly; sorts `items` in place (by start, the longer first)."""
    stacks: list[list[int]] = []  # per lane: end times of the open slices
    items.sort(key=_END, reverse=True)  # (two stable sorts: no key tuple per item)
    items.sort(key=_START)
    for item in items:
        start, end = item.start_ns, item.end_ns
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or end <= stack[-1]:
                stack.append(end)
                yield lane, item
                break
        else:
            stacks.append([end])
            yield len(stacks) - 1, item


def _submitter(starts: list, ends: list, enqueue: int) -> int:
    """The index of the call that submitted a task enqueued at `enqueue`, among a thread's
    calls (which never overlap) sorted by start, of those starting together the longer first;
    -1 if none was running then. In virtual time a call enqueues at the instant it ends, and
    calls that take no time and the next call may start then: the call that contains the
    instant strictly wins, then one that ends at it, then one taking no time at it, last one
    that begins at it (a real clock's enqueue is strictly inside its call)."""
    lo = bisect.bisect_left(starts, enqueue)
    if lo:  # calls that began before: only the longest of the last to begin can reach it
        i = bisect.bisect_left(starts, starts[lo - 1])
        if ends[i] >= enqueue:
            return i
    hi = bisect.bisect_right(starts, enqueue)
    if lo == hi:
        return -1
    return hi - 1 if ends[hi - 1] == enqueue else lo  # (the longest comes first: see _lanes)


def trace_events(profile: ProfileData) -> list[dict]:
    """The trace as a list of trace-event dicts."""
    return [json.loads(text) for text in _event_texts(profile)]


def _event_texts(profile: ProfileData) -> Iterator[str]:
    """The trace events one by one, as JSON text (a writer need not hold them all: 50k tasks
    make 200k events). A profile with parts from child processes is one timeline of them
    all, each process's host the trace process of its pid (see merged_pid)."""
    if not profile.parts:
        yield from _events(profile, _Frame())
        return
    # Processes on real clocks share perf_counter_ns: each is placed at its start. A simulated
    # one runs a virtual clock of its own from its own start: it is placed there, at 0, and
    # labelled so (no offset of real time can order virtual times across processes).
    real = not own_clock(profile)
    for index, part in enumerate([profile, *profile.parts]):
        # (a process on a real clock beside a simulated first one: from its own start too)
        own = own_clock(part) or not real
        where = ("virtual time, " if own_clock(part) else "") + OWN_TIMELINE
        labels = " ".join(part.command) + (f" [{where}]" if own else "")
        yield compact_json({"name": "process_labels", "ph": "M", "pid": part.pid, "tid": 0,
                            "args": {"labels": labels}})
        shift = 0.0 if own else us(part.origin_ns - profile.origin_ns)
        yield from _events(part, _Frame(part.pid, index, shift, where if own else ""))


def _process(frame: _Frame, local: int, name: str) -> Iterator[str]:
    """The name and order of one trace process (merged: named and ordered by its pid too)."""
    order = local
    if frame.pid is not None:
        own = f"; {frame.timeline}" if frame.timeline else ""
        name, order = f"{name} (pid {frame.pid}{own})", frame.place * PID_STRIDE + local
    pid = frame.proc(local)
    yield compact_json({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                        "args": {"name": name}})
    yield compact_json({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                        "args": {"sort_index": order}})


def _track(pid: int, tid: int, name: str) -> Iterator[str]:
    """The name and order of one track (a thread of a trace process)."""
    yield compact_json({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                        "args": {"name": name}})
    yield compact_json({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                        "args": {"sort_index": tid}})


def _events(profile: ProfileData, frame: _Frame) -> Iterator[str]:
    """The events of one process's profile (its host is trace process 0, device d is d + 1,
    before `frame` places them)."""
    proc, flows = frame.proc, frame.place << 32
    ts = us if frame.pid is None else frame.ts  # (alone: the times as recorded)
    host = proc(HOST_PID)
    yield from _process(frame, HOST_PID, "host")
    threads = {th: i + 1 for i, th in enumerate(sorted(profile.threads))}
    for th, tid in threads.items():
        yield from _track(host, tid, profile.threads[th])
    for d in profile.devices:
        yield from _process(frame, device_pid(d.id), f"device {d.id} ({d.name})")
    streams = profile.stream_info()

    # Host: API calls and user ranges per thread, marks as instants.
    host_items = defaultdict(list)
    for c in profile.api_calls:
        host_items[c.thread].append(c)
    for r in profile.ranges:
        host_items[r.thread].append(r)
    # thread -> (starts, ends, tids) of its API slices in lane order, for the flows (three
    # lists of what exists already, not a tuple per call)
    api_slices: dict[int, tuple[list, list, list]] = {}
    plain_args: dict[tuple, str] = {}
    for th, items in host_items.items():
        base = threads.get(th, 0)
        starts, ends, tids = api_slices[th] = ([], [], [])
        for lane, item in _lanes(items):
            tid = base + lane * OVERFLOW_TID
            if isinstance(item, ApiCall):
                yield _slice(item.name, "api", host, tid, item.start_ns, item.end_ns,
                             _api_args(item, profile, plain_args), ts)
                if item.name != QUEUE_FULL:  # (a wait inside the submitting call: not one)
                    starts.append(item.start_ns)
                    ends.append(item.end_ns)
                    tids.append(tid)
            else:
                yield _slice(item.name, "range", host, tid, item.start_ns, item.end_ns, "{}", ts)
    for m in profile.marks:
        yield compact_json({"name": m.name, "cat": "mark", "ph": "i", "s": "t", "pid": host,
                            "tid": threads.get(m.thread, 0), "ts": ts(m.ts_ns)})

    # Devices: tasks per stream. Every task gets a slice on its stream's track, or an overflow
    # track of it: only those are kept (a map of all 50k tasks would be the largest thing the
    # trace holds). The tracks are chosen first: the slices drawn inside waits and collective
    # parts go on their tasks' tracks, each written in time order among the track's tasks.
    per_stream = defaultdict(list)
    for t in profile.tasks:
        per_stream[(t.device, t.stream)].append(t)
    overflow: dict[tuple, int] = {}  # task key -> its overflow track's tid
    used = set()                     # (device pid, tid) of the tracks that have slices
    for (dev, sid), items in per_stream.items():
        for lane, t in _lanes(items):  # (which sorts each stream's tasks by start)
            tid = sid + lane * OVERFLOW_TID
            if lane:
                overflow[t.key] = tid
            used.add((device_pid(dev), tid))

    def where(t) -> tuple[int, int]:
        """(pid, tid) of the track that task t's slice is on."""
        return proc(device_pid(t.device)), overflow.get(t.key, t.stream) if overflow else t.stream

    inner: dict[tuple, list] = defaultdict(list)  # (device, stream) -> [(start, slice text)]
    inner_flows: list[str] = []  # (their arrows: written after the slices)
    flow_id = 0
    # A wait that really waited starts before the record that released it: an arrow bound to
    # the wait slice would point back in time. It binds instead to a "released" slice inside
    # the wait, from the record (or the last microsecond) to the wait's end.
    wanted = {tuple(t.released_by) for t in profile.tasks if t.released_by is not None}
    wanted.update(tuple(p[1:]) for coll in profile.collectives for p in coll.parts)
    by_key = {t.key: t for t in profile.tasks if t.key in wanted} if wanted else {}
    for t in profile.tasks:
        if t.released_by is None:
            continue
        rec = by_key.get(tuple(t.released_by))
        if rec is None:
            continue
        flow_id += 1
        what = "notify" if t.kind == "notify_wait" else "value" if t.kind == "value_wait" else "event"
        noun = "value write" if what == "value" else f"{what} record"
        rpid, rtid = where(rec)
        pid, tid = where(t)
        released = min(t.end_ns, max(t.start_ns, rec.end_ns, t.end_ns - 1000))
        dropped = " (dropped unrun)" if rec.fate == "dropped" else ""
        # (a wait whose record was done before its stream reached it never blocked: the arrow
        # shows the order it kept, the slice that nothing had to release it)
        done_before = rec.end_ns <= t.start_ns and t.end_ns == t.start_ns
        label = f"{noun} done before: no wait" if done_before else f"released by {noun}{dropped}"
        inner[(t.device, t.stream)].append((released, _slice(
            label, what, pid, tid, released, t.end_ns,
            compact_json({"record": f"stream {rec.stream} task {rec.task_id}{dropped}",
                          "blocked": not done_before}), ts)))
        inner_flows.append(_flow(what, what, False, flow_id + flows, rpid, rtid, ts(rec.end_ns)))
        inner_flows.append(_flow(what, what, True, flow_id + flows, pid, tid, ts(released)))

    # Collectives: each rank's part waited for the rank that arrived last. An arrow goes from
    # that part's start to a "collective" slice inside each other part, from then to its end.
    for coll in profile.collectives:
        parts = [by_key[k] for k in (tuple(p[1:]) for p in coll.parts) if k in by_key]
        if len(parts) < 2:
            continue
        last = max(parts, key=lambda t: t.start_ns)
        rank = next(p[0] for p in coll.parts if tuple(p[1:]) == last.key)
        lpid, ltid = where(last)
        for t in parts:
            if t is last or t.end_ns < last.start_ns:
                continue
            flow_id += 1
            pid, tid = where(t)
            inner[(t.device, t.stream)].append((last.start_ns, _slice(
                f"{coll.op} #{coll.seq}: every rank arrived", "collective", pid, tid,
                last.start_ns, t.end_ns,
                compact_json({"communicator": coll.comm,
                              "last to arrive": f"rank {rank} (device {last.device}, "
                                                f"stream {last.stream})"}), ts)))
            inner_flows.append(_flow("collective", "collective", False, flow_id + flows, lpid,
                                     ltid, ts(last.start_ns)))
            inner_flows.append(_flow("collective", "collective", True, flow_id + flows, pid, tid,
                                     ts(last.start_ns)))

    for (dev, sid), items in sorted(per_stream.items(), key=lambda kv: kv[0]):
        pid = proc(device_pid(dev))
        extra = sorted(inner.get((dev, sid), ()), key=itemgetter(0))
        k = 0
        for t in items:  # (by start: a slice inside a task comes after it, before later ones)
            while k < len(extra) and extra[k][0] < t.start_ns:
                yield extra[k][1]
                k += 1
            yield _task_slice(t, pid, overflow.get(t.key, sid) if overflow else sid, ts)
        for _, text in extra[k:]:
            yield text
    for local, tid in sorted(used):
        sid, lane = tid % OVERFLOW_TID, tid // OVERFLOW_TID
        info = streams.get((local - 1, sid))
        label = f"stream {sid}"
        if info is not None and info.role:
            label += f" ({info.role})"
        elif info is not None:
            label += f" (priority {info.priority})"
        if lane:
            label += f" overflow {lane}"
        yield from _track(proc(local), tid, label)
    yield from inner_flows

    # Flows: API call -> the task it submitted.
    for t in profile.tasks:
        found = api_slices.get(t.thread)
        if not found or not found[0]:
            continue
        starts, ends, tids = found
        i = _submitter(starts, ends, t.enqueue_ns)
        if i < 0:
            continue
        flow_id += 1
        pid, tid = where(t)
        # (strictly inside the call where it can be: a viewer binds an arrow starting at the
        # instant one call ends and the next begins to the next one; never after the task
        # started, or the arrow would point back in time)
        at = t.enqueue_ns if ends[i] - starts[i] < 2 else \
            min(t.start_ns, max(starts[i] + 1, min(t.enqueue_ns, ends[i] - 1)))
        yield _flow("submit", "launch", False, flow_id + flows, host, tids[i], ts(at))
        yield _flow("submit", "launch", True, flow_id + flows, pid, tid, ts(t.start_ns))

    # Races the sanitizer found: an instant on the task (or host thread) that completed each,
    # and an arrow from the access it raced with.
    for race in profile.races:
        second = (race.second_stream, race.second_task)
        first = (race.first_stream, race.first_task)
        hit = next((t for t in profile.tasks if (t.stream, t.task_id) == second), None)
        if hit is None:
            continue  # a host view, or a task that was refused (raise mode): no slice to mark
        pid, tid = where(hit)
        args = {"report": race.text, "times": race.count}
        yield compact_json({"name": "reuse without ordering" if race.reuse else "race",
                            "cat": "sanitizer", "ph": "i", "s": "t", "pid": pid, "tid": tid,
                            "ts": ts(hit.start_ns), "args": args})
        other = next((t for t in profile.tasks if (t.stream, t.task_id) == first), None)
        if other is not None:
            flow_id += 1
            opid, otid = where(other)
            yield _flow("race", "sanitizer", False, flow_id + flows, opid, otid,
                        ts(other.start_ns))
            yield _flow("race", "sanitizer", True, flow_id + flows, pid, tid,
                        ts(max(hit.start_ns, other.start_ns)))

    # Memory counters.
    for s in profile.memory:
        pid = proc(HOST_PID if s.device < 0 else device_pid(s.device))
        name = "pinned host memory" if s.device < 0 else "device memory"
        yield compact_json({"name": name, "ph": "C", "pid": pid, "tid": 0, "ts": ts(s.ts_ns),
                            "args": {"allocated MiB": round(s.allocated / (1 << 20), 3),
                                     "reserved MiB": round(s.reserved / (1 << 20), 3)}})


def trace_json(profile: ProfileData) -> dict:
    """The whole trace document: {"traceEvents": [...], "displayTimeUnit": "ms", ...}."""
    return {"traceEvents": trace_events(profile), **_document_fields(profile)}


def _document_fields(profile: ProfileData) -> dict:
    other = {"producer": "ascentrt profiler", "started_at": profile.started_at,
             "command": " ".join(profile.command)}
    if profile.parts and any(own_clock(p) for p in [profile, *profile.parts]):
        other["timelines"] = ("each simulated process runs its own virtual clock from its own "
                              "start (its trace processes say so): times do not order events "
                              "across processes")
    return {"displayTimeUnit": "ms", "otherData": other}


def write_trace(profile: ProfileData, fh: TextIO, chunk: int = 1024) -> None:
    """Write trace_json(profile) to the open text file `fh`, a chunk of events at a time: the
    document is never held whole, as a list or as a string."""
    fh.write('{"traceEvents":[')
    fh.writelines(joined(_event_texts(profile), chunk))
    fh.write("]," + compact_json(_document_fields(profile))[1:])
