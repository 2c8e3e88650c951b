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
from collections.abc import Iterator
from operator import itemgetter
from typing import TextIO

from .data import ApiCall, ProfileData, us, write_json_array

HOST_PID = 0
OVERFLOW_TID = 1_000_000  # overflow tracks of a stream: stream id + k * OVERFLOW_TID
PID_STRIDE = 1 << 22      # Linux's largest pid + 1


def device_pid(device: int) -> int:
    """The trace process id of a device (the host is 0)."""
    return device + 1


def _slice(name, cat, pid, tid, start_ns, end_ns, args) -> dict:
    ts = us(start_ns)
    if type(start_ns) is int and type(end_ns) is int:
        dur = us(max(0, end_ns - start_ns))
    else:  # (float times, from a hand-made profile: rounded as the ends are)
        dur = max(0.0, round(us(end_ns) - ts, 3))
    return {"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def _api_args(c: ApiCall, profile: ProfileData) -> dict:
    """An API call's slice arguments: its thread and, when they apply, target, state, error."""
    args = {"thread": profile.threads.get(c.thread, str(c.thread))}
    if c.target:
        args["target"] = c.target
    if c.already_done is not None:
        args["already complete"] = c.already_done
    if c.error:
        args["error code"] = c.error
    return args


def _lanes(items: list) -> Iterator[tuple]:
    """(lane, start, end, payload) for (start, end, payload) items, so that slices in a lane
    nest properly; sorts `items` in place (by start, the longer first)."""
    stacks: list[list[int]] = []  # per lane: end times of the open slices
    items.sort(key=lambda x: -x[1])  # (two stable sorts: no key tuple per item)
    items.sort(key=itemgetter(0))
    for start, end, payload in items:
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or end <= stack[-1]:
                stack.append(end)
                yield lane, start, end, payload
                break
        else:
            stacks.append([end])
            yield len(stacks) - 1, start, end, payload


def trace_events(profile: ProfileData) -> list[dict]:
    """The trace as a list of trace-event dicts."""
    return list(iter_trace_events(profile))


def iter_trace_events(profile: ProfileData) -> Iterator[dict]:
    """The trace-event dicts one by one (a writer need not hold them all: 50k tasks make
    200k events). A profile with parts from child processes is one timeline of them all,
    each process's host the trace process of its pid (see merged_pid)."""
    if not profile.parts:
        yield from _events(profile)
        return
    for index, part in enumerate([profile, *profile.parts]):
        yield from _moved(part, index, us(part.origin_ns - profile.origin_ns))


def merged_pid(pid: int, local_pid: int) -> int:
    """The trace process id, in a merged trace, of process `pid`'s host (local_pid 0: the pid
    itself) or of its device local_pid - 1 (above every pid Linux gives)."""
    return pid + local_pid * PID_STRIDE


def _moved(part: ProfileData, index: int, shift_us: float) -> Iterator[dict]:
    """The events of `part` on the merged timeline: its processes renamed by pid, its times
    shifted by when it started, its flow ids apart from the other parts'."""
    yield {"name": "process_labels", "ph": "M", "pid": part.pid, "tid": 0,
           "args": {"labels": " ".join(part.command)}}
    flows = index << 32
    for e in _events(part):
        local = e["pid"]
        e["pid"] = merged_pid(part.pid, local)
        if "ts" in e:
            e["ts"] = round(e["ts"] + shift_us, 3)
        if "id" in e:
            e["id"] += flows
        if e["name"] == "process_name" and e["ph"] == "M":
            e["args"] = {"name": f"{e['args']['name']} (pid {part.pid})"}
        elif e["name"] == "process_sort_index" and e["ph"] == "M":
            e["args"] = {"sort_index": index * PID_STRIDE + local}
        yield e


def _events(profile: ProfileData) -> Iterator[dict]:
    """The events of one process's profile (its host is trace process 0, device d is d + 1)."""
    yield {"name": "process_name", "ph": "M", "pid": HOST_PID, "tid": 0, "args": {"name": "host"}}
    yield {"name": "process_sort_index", "ph": "M", "pid": HOST_PID, "tid": 0,
           "args": {"sort_index": 0}}
    threads = {th: i + 1 for i, th in enumerate(sorted(profile.threads))}
    for th, tid in threads.items():
        yield {"name": "thread_name", "ph": "M", "pid": HOST_PID, "tid": tid,
               "args": {"name": profile.threads[th]}}
        yield {"name": "thread_sort_index", "ph": "M", "pid": HOST_PID, "tid": tid,
               "args": {"sort_index": tid}}
    for d in profile.devices:
        pid = device_pid(d.id)
        yield {"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
               "args": {"name": f"device {d.id} ({d.name})"}}
        yield {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
               "args": {"sort_index": pid}}
    streams = profile.stream_info()

    # Host: API calls and user ranges per thread, marks as instants.
    host_items = defaultdict(list)  # (an API call's args are made as its slice is written)
    for c in profile.api_calls:
        host_items[c.thread].append((c.start_ns, c.end_ns, c))
    for r in profile.ranges:
        host_items[r.thread].append((r.start_ns, r.end_ns, r))
    api_slices = defaultdict(list)  # thread -> [(start, end, tid)] of API slices, for flows
    for th, items in host_items.items():
        base = threads.get(th, 0)
        for lane, start, end, item in _lanes(items):
            tid = base + lane * OVERFLOW_TID
            if isinstance(item, ApiCall):
                yield _slice(item.name, "api", HOST_PID, tid, start, end, _api_args(item, profile))
                api_slices[th].append((start, end, tid))
            else:
                yield _slice(item.name, "range", HOST_PID, tid, start, end, {})
    for m in profile.marks:
        yield {"name": m.name, "cat": "mark", "ph": "i", "s": "t", "pid": HOST_PID,
               "tid": threads.get(m.thread, 0), "ts": us(m.ts_ns)}

    # Devices: tasks per stream.
    per_stream = defaultdict(list)
    for t in profile.tasks:
        per_stream[(t.device, t.stream)].append((t.start_ns, t.end_ns, t))
    # Every task gets a slice on its stream's track, or an overflow track of it: only those
    # are kept (a map of all 50k tasks would be the largest thing the trace holds).
    overflow: dict[tuple, int] = {}  # task key -> its overflow track's tid
    used = set()                     # (pid, tid) of the tracks that have slices

    def where(t) -> tuple[int, int]:
        """(pid, tid) of the track that task t's slice is on."""
        return device_pid(t.device), overflow.get(t.key, t.stream) if overflow else t.stream

    for (dev, sid), items in sorted(per_stream.items()):
        pid = device_pid(dev)
        for lane, start, end, t in _lanes(items):
            tid = sid + lane * OVERFLOW_TID
            args = {"task id": t.task_id, "kind": t.kind, "enqueue (us)": us(t.enqueue_ns),
                    "queued (us)": us(t.queued_ns)}
            if t.nbytes:
                args["bytes"] = t.nbytes
            if t.failed:
                args["failed"] = True
                args["error"] = t.error
            yield _slice(t.name, t.kind, pid, tid, start, end, args)
            if lane:
                overflow[t.key] = tid
            used.add((pid, tid))
    for pid, tid in sorted(used):
        sid, lane = tid % OVERFLOW_TID, tid // OVERFLOW_TID
        info = streams.get((pid - 1, sid))
        label = f"stream {sid}"
        if info is not None and info.role:
            label += f" ({info.role})"
        elif info is not None:
            label += f" (priority {info.priority})"
        if lane:
            label += f" overflow {lane}"
        yield {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": label}}
        yield {"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
               "args": {"sort_index": tid}}

    # Flows: API call -> the task it submitted; event record -> the waits it released.
    flow_id = 0
    starts = {}
    for th, sl in api_slices.items():
        sl.sort()
        starts[th] = [s for s, _, _ in sl]
    for t in profile.tasks:
        slices = api_slices.get(t.thread)
        if not slices:
            continue
        i = bisect.bisect_right(starts[t.thread], t.enqueue_ns) - 1
        if i < 0 or slices[i][1] < t.enqueue_ns:
            continue
        flow_id += 1
        pid, tid = where(t)
        yield {"name": "submit", "cat": "launch", "ph": "s", "id": flow_id, "pid": HOST_PID,
               "tid": slices[i][2], "ts": us(t.enqueue_ns)}
        yield {"name": "submit", "cat": "launch", "ph": "f", "bp": "e", "id": flow_id,
               "pid": pid, "tid": tid, "ts": us(t.start_ns)}
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
        what = "notify" if t.kind == "notify_wait" else "event"
        rpid, rtid = where(rec)
        pid, tid = where(t)
        released = min(t.end_ns, max(t.start_ns, rec.end_ns, t.end_ns - 1000))
        yield _slice(f"released by {what} record", what, pid, tid, released, t.end_ns,
                     {"record": f"stream {rec.stream} task {rec.task_id}"})
        yield {"name": what, "cat": what, "ph": "s", "id": flow_id, "pid": rpid,
               "tid": rtid, "ts": us(rec.end_ns)}
        yield {"name": what, "cat": what, "ph": "f", "bp": "e", "id": flow_id,
               "pid": pid, "tid": tid, "ts": us(released)}

    # Collectives: each rank's part waited for the rank that arrived last. An arrow goes from
    # that part's start to a "collective" slice inside each other part, from then to its end.
    for coll in profile.collectives:
        parts = [by_key[k] for k in (tuple(p[1:]) for p in coll.parts) if k in by_key]
        if len(parts) < 2:
            continue
        last = max(parts, key=lambda t: t.start_ns)
        lpid, ltid = where(last)
        for t in parts:
            if t is last or t.end_ns < last.start_ns:
                continue
            flow_id += 1
            pid, tid = where(t)
            yield _slice(f"{coll.op} #{coll.seq}: every rank arrived", "collective", pid, tid,
                         last.start_ns, t.end_ns,
                         {"communicator": coll.comm, "last to arrive": f"stream {last.stream}"})
            yield {"name": "collective", "cat": "collective", "ph": "s", "id": flow_id,
                   "pid": lpid, "tid": ltid, "ts": us(last.start_ns)}
            yield {"name": "collective", "cat": "collective", "ph": "f", "bp": "e",
                   "id": flow_id, "pid": pid, "tid": tid, "ts": us(last.start_ns)}

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
        yield {"name": "reuse without ordering" if race.reuse else "race", "cat": "sanitizer",
               "ph": "i", "s": "t", "pid": pid, "tid": tid, "ts": us(hit.start_ns),
               "args": args}
        other = next((t for t in profile.tasks if (t.stream, t.task_id) == first), None)
        if other is not None:
            flow_id += 1
            opid, otid = where(other)
            yield {"name": "race", "cat": "sanitizer", "ph": "s", "id": flow_id, "pid": opid,
                   "tid": otid, "ts": us(other.start_ns)}
            yield {"name": "race", "cat": "sanitizer", "ph": "f", "bp": "e", "id": flow_id,
                   "pid": pid, "tid": tid, "ts": us(max(hit.start_ns, other.start_ns))}

    # Memory counters.
    for s in profile.memory:
        pid = HOST_PID if s.device < 0 else device_pid(s.device)
        name = "pinned host memory" if s.device < 0 else "device memory"
        yield {"name": name, "ph": "C", "pid": pid, "tid": 0, "ts": us(s.ts_ns),
               "args": {"allocated MiB": round(s.allocated / (1 << 20), 3),
               "reserved MiB": round(s.reserved / (1 << 20), 3)}}


def trace_json(profile: ProfileData) -> dict:
    """The whole trace document: {"traceEvents": [...], "displayTimeUnit": "ms", ...}."""
    return {"traceEvents": trace_events(profile), **_document_fields(profile)}


def _document_fields(profile: ProfileData) -> dict:
    return {"displayTimeUnit": "ms",
            "otherData": {"producer": "ascentrt profiler", "started_at": profile.started_at,
                          "command": " ".join(profile.command)}}


def write_trace(profile: ProfileData, fh: TextIO, chunk: int = 4096) -> None:
    """Write trace_json(profile) to the open text file `fh`, encoding the events a chunk at a
    time: the document is never held whole, as a list or as a string."""
    fh.write('{"traceEvents":')
    write_json_array(fh, iter_trace_events(profile), chunk)
    fh.write("," + json.dumps(_document_fields(profile), separators=(",", ":"))[1:])
