"""The critical path of a profile: the chain of tasks (through stream order and event/notify
waits) that ended last, and what its time went to."""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from .data import (EXECUTOR_OF_KIND, GRAPH_SEGMENT, NONBLOCKING, QUERY_APIS, SYNC_APIS, WAIT_KINDS,
                   WORK_KINDS, ProfileData)

WORK = WORK_KINDS


def executor_holders(tasks, capacity: dict | None = None) -> Callable[[Any], Any]:
    """holder(t): the task of t's executor class on t's device that ended last before t
    started (not t itself), when the units in use just before it ended left too few for t
    (`capacity`: (device, class) -> units; without it, any such task); else None: nothing
    held what t needed (a kernel on one of 24 AI cores is no holder of another's, nor an
    H2D copy of a D2H copy where each direction has engines of its own)."""
    ends: dict = defaultdict(list)  # (device, executor class) -> [(end, id, task)], sorted
    steps: dict = defaultdict(list)  # (device, class) -> [(time, units change)]
    for t in tasks:
        if not t.units:
            continue  # (it held no unit: a value write the stream's scheduler does)
        for cls in _classes_of(t, capacity):
            ends[(t.device, cls)].append((t.end_ns, id(t), t))
            tail = t.tail_units  # (a last partial wave holds only its own blocks' units)
            steps[(t.device, cls)] += [(t.start_ns, t.units), (t.end_ns - t.tail_ns, tail - t.units),
                                       (t.end_ns, -tail)] if tail else \
                [(t.start_ns, t.units), (t.end_ns, -t.units)]
    for items in ends.values():
        items.sort(key=lambda e: (e[0], e[1]))
    busy: dict = {}  # (device, class) -> (times, units in use from each time on)
    for key, changes in steps.items():
        changes.sort()
        times: list[int] = []
        levels: list[int] = []
        level = 0
        for at, delta in changes:
            level += delta
            if times and times[-1] == at:
                levels[-1] = level
            else:
                times.append(at)
                levels.append(level)
        busy[key] = (times, levels)

    def in_use(key, at: int) -> int:
        times, levels = busy[key]
        i = bisect.bisect_right(times, at) - 1
        return levels[i] if i >= 0 else 0

    def holder(t):
        classes = _classes_of(t, capacity) if t.units else ()
        if not classes:
            return None
        key = (t.device, classes[-1])  # (the narrowest: a copy's own direction where it has one)
        items = ends.get(key)
        if not items:
            return None
        i = bisect.bisect_right(items, (t.start_ns, float("inf"))) - 1
        while i >= 0 and items[i][2] is t:
            i -= 1
        if i < 0:
            return None
        last = items[i][2]
        units = capacity.get(key) if capacity else None
        if units is not None and in_use(key, last.end_ns - 1) + t.units <= units:
            return None  # there was room for t before that task ended
        return last
    return holder


# A copy's direction from its name (what memcpy and memcpy_async call it), as the engines of a
# device whose directions have engines of their own count it: host to host runs on an H2D one.
_COPY_DIRECTIONS = {"host_to_device": "copy h2d", "host_to_host": "copy h2d",
                    "device_to_host": "copy d2h", "device_to_device": "copy d2d"}


def _classes_of(t, capacity: dict | None) -> tuple:
    """The executor classes a task contends for, widest first: its class, and for a copy on a
    device whose directions have engines of their own, its direction's (a copy whose direction
    its name does not say, a pitched one, counts against every engine, as before)."""
    cls = EXECUTOR_OF_KIND.get(t.kind)
    if cls is None:
        return ()
    if cls == "copy" and capacity and (t.device, "copy h2d") in capacity:
        lane = _COPY_DIRECTIONS.get(t.name)
        if lane is not None:
            return (cls, lane)
    return (cls,)


def capacities(profile: ProfileData) -> dict:
    """(device, executor class) -> the units it has, from the profile's devices (a device whose
    copy directions have engines of their own: per direction, and none for copies as a whole,
    since a copy of unknown direction may wait for any)."""
    out = {}
    for d in profile.devices:
        out[(d.id, "compute")] = d.compute_units
        out[(d.id, "host")] = d.host_func_threads
        if d.copy_engines_per_direction:
            for lane, n in zip(("copy h2d", "copy d2h", "copy d2d"), d.copy_engines_per_direction):
                out[(d.id, lane)] = n
        else:
            out[(d.id, "copy")] = d.copy_engines
    return out


def critical_path(profile: ProfileData, windows: list | None = None) -> dict:
    """{'length_ns', 'by_kind' (ns per share of the path: a task kind for the time its tasks
    on it ran, 'host' for the gaps where the next task was not yet submitted, the time before
    its first task included, 'dispatch' for those where it was, waiting to be dispatched,
    'sync' for records and for waits after what released them, 'blocked' for a wait nothing
    recorded released (a deadlock, a wait still blocked at the end, one the host let go) and
    'timeout' for a device-side wait that failed so), 'tasks' (work tasks on it), 'top' [(name,
    ns)]}; the path runs from the profile's start to its last task's end, and its parts add up
    to its length. With `windows` (sorted, disjoint: a range's, see scope.within) only the
    path's time inside them counts, its length included.

    Walks back from the task that ended last; each step goes to whichever of its predecessors
    ended latest: the stream's previous task (a non-blocking host function is none: its
    stream's next task did not wait for it), the record that released a wait, the task of its
    executor class on the device that ended last before it started (it may have held the
    executor this one waited for), the task whose end a synchronization (or a query) of the
    host thread that submitted it waited for (the host could not submit it before), and the
    host function that submitted it. A replayed graph's nodes share their task's id: tasks are
    told apart as objects, not by id. Each step accounts for the time back to where its
    predecessor ended (a task's time before then is its predecessor's), so no time counts twice.
    """
    tasks = [t for t in profile.tasks if t.kind != GRAPH_SEGMENT]
    if not tasks:
        return {"length_ns": 0, "by_kind": {}, "tasks": 0, "top": []}
    by_key = {t.key: t for t in tasks}
    per_stream = defaultdict(list)
    for t in tasks:
        per_stream[(t.device, t.stream)].append(t)
    holder = executor_holders(tasks, capacities(profile))
    prev = {}
    for items in per_stream.values():
        items.sort(key=lambda t: (t.task_id, t.start_ns))
        last = None
        for t in items:
            if last is not None:
                prev[id(t)] = last
            if t.kind != NONBLOCKING:  # (it ran beside its stream's later work)
                last = t

    latency = _event_latencies(profile)
    waited = host_waits(profile, tasks)
    launcher = host_launches(tasks)
    cur = max(tasks, key=lambda t: t.end_ns)
    end = frontier = cur.end_ns  # the path is accounted for from `frontier` to its end
    by_kind: dict[str, int] = defaultdict(int)
    names: dict[str, int] = defaultdict(int)
    count = 0
    seen = set()
    if windows is None:
        def measure(a: int, b: int) -> int:
            return b - a
    else:
        def measure(a: int, b: int) -> int:
            return sum(min(b, hi) - max(a, lo) for lo, hi in windows if lo < b and hi > a)
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        releaser = by_key.get(tuple(cur.released_by)) if cur.released_by else None
        # (predecessor, when cur could go on after it): a host function that submitted cur
        # held it up only until it did so
        preds = [(p, p.end_ns) for p in (prev.get(id(cur)), releaser, holder(cur), waited(cur))
                 if p is not None]
        parent = launcher(cur)
        if parent is not None:
            preds.append((parent, min(parent.end_ns, cur.enqueue_ns)))
        nxt, after = max(preds, key=lambda p: p[1]) if preds else (None, 0)
        floor = min(after, frontier)
        lo = min(frontier, max(cur.start_ns, floor))  # cur's own part: [lo, frontier]
        if frontier > lo:
            by_kind[_share(cur, releaser)] += measure(lo, frontier)
        if cur.kind in WORK:
            names[cur.name] += measure(lo, frontier)
            count += 1
        if lo > floor:  # nothing ran on the path: the host had not submitted cur, or it waited
            late = floor + max(0, min(lo - floor, cur.enqueue_ns - floor))  # (the first task too: from 0)
            by_kind["host"] += measure(floor, late)
            # (a released wait holds its stream's next task the event latency more: sync)
            held = late
            wait: Any = nxt if nxt is not None and nxt is prev.get(id(cur)) else None
            source = by_key.get(tuple(wait.released_by)) if wait is not None \
                and wait.kind in WAIT_KINDS and wait.released_by else None
            if source is not None:  # (from the release: a wait met long before holds nothing)
                held = min(lo, max(late, source.end_ns + latency.get(cur.device, 0)))
                by_kind["sync"] += measure(late, held)
            by_kind["dispatch"] += measure(held, lo)
        frontier = floor
        cur = nxt
    # (a cycle of predecessors, which no profile should hold: the rest is the host's)
    if frontier > 0:
        by_kind["host"] += measure(0, frontier)
    top = sorted(((n, v) for n, v in names.items() if v), key=lambda kv: -kv[1])[:3]
    return {"length_ns": measure(0, end), "by_kind": {k: v for k, v in by_kind.items() if v}, "tasks": count,
            "top": top}


def _event_latencies(profile: ProfileData) -> dict[int, int]:
    """{device id: the event latency its model ran with} (a released wait holds its stream's
    next task that long), as recorded: a preset file or a what-if variant may differ from
    the stock preset of its name. Devices without one (cpu, profiles from before it was
    recorded) are left out (0)."""
    return {d.id: d.release_ns for d in profile.devices if d.release_ns}


def _share(t, releaser) -> str:
    """What the path's time inside task `t` is called (see critical_path)."""
    if t.kind in WORK:
        return "host_func" if t.kind == NONBLOCKING else t.kind
    if t.kind in WAIT_KINDS and releaser is None:
        return "timeout" if t.failed else "blocked"
    return "sync"


def host_launches(tasks) -> Callable[[Any], Any]:
    """launcher(t): the host function that submitted t (its thread submitted work only while
    host functions ran, and t was submitted while this one ran), else None."""
    funcs = sorted((t for t in tasks if t.kind in ("host_func", NONBLOCKING)),
                   key=lambda t: t.start_ns)
    if not funcs:
        return lambda t: None
    starts = [f.start_ns for f in funcs]
    reach: list[int] = []  # the latest end of the host functions that started up to each one
    for f in funcs:
        reach.append(max(f.end_ns, reach[-1]) if reach else f.end_ns)

    def during(at: int) -> bool:
        i = bisect.bisect_right(starts, at) - 1
        return i >= 0 and reach[i] >= at
    program = {t.thread for t in tasks if not during(t.enqueue_ns)}  # (a program thread's)

    def launcher(t):
        if t.thread in program:
            return None
        i = bisect.bisect_right(starts, t.enqueue_ns) - 1
        while i >= 0 and reach[i] >= t.enqueue_ns:
            f = funcs[i]
            if f.end_ns >= t.enqueue_ns and f is not t and f.thread != t.thread:
                return f
            i -= 1
        return None
    return launcher


_EVENT_TARGET = re.compile(r"event \d+ \(stream (\d+) task (\d+)\)")


def host_waits(profile: ProfileData, tasks) -> Callable[[Any], Any]:
    """waited(t): the task whose end the host thread that submitted t waited for last before
    it did: in a synchronization of a stream, a device or an event (the last of that stream's
    or device's tasks to end while the call waited; the event's record), or in a query that
    found that work done (a polling loop's last); or a copy it waited out in its call. None
    when there is none, or the synchronization found the work done already."""
    syncs: dict = defaultdict(list)  # thread -> [(end, id, call)] of the calls that waited
    for c in profile.api_calls:
        if c.error and not c.task_error:  # (one that passed on a task's error waited for it all)
            continue
        if (c.name in SYNC_APIS and c.already_done is False) or c.name in QUERY_APIS:
            syncs[c.thread].append((c.end_ns, id(c), c))
    for items in syncs.values():
        items.sort(key=lambda e: (e[0], e[1]))
    ends: dict = defaultdict(list)  # ("stream" | "device", id) -> [(end, id, task)], sorted
    records = {}  # (stream, task id) -> an event record
    for t in tasks:  # (every kind: a stream that only waits ends with its wait's release)
        ends[("stream", t.stream)].append((t.end_ns, id(t), t))
        ends[("device", t.device)].append((t.end_ns, id(t), t))
        if t.kind == "event_record":
            records[(t.stream, t.task_id)] = t
    later: dict = {}  # key -> the earliest enqueue of its tasks from each position on
    for key, items in ends.items():
        items.sort(key=lambda e: (e[0], e[1]))
        low, first = float("inf"), []
        for e in reversed(items):
            low = min(low, e[2].enqueue_ns)
            first.append(low)
        later[key] = first[::-1]

    blocking = _blocking_copies(profile, tasks)

    def waited(t):
        copy = None
        held = blocking.get(t.thread)
        if held:  # (the last copy the host waited out in its call before submitting t)
            i = bisect.bisect_right(held, (t.enqueue_ns, float("inf"))) - 1
            copy = held[i][2] if i >= 0 and held[i][2] is not t else None
        found = _sync_waited(t, syncs, ends, later, records)
        if copy is None or (found is not None and found.end_ns >= copy.end_ns):
            return found
        return copy
    return waited


def _sync_waited(t, syncs: dict, ends: dict, later: dict, records: dict):
    """The task whose end the host's last synchronization (or query) before t was submitted
    waited for."""
    calls = syncs.get(t.thread)
    if not calls:
        return None
    i = bisect.bisect_right(calls, (t.enqueue_ns, float("inf"))) - 1
    if i < 0:
        return None
    call = calls[i][2]
    if call.target.startswith("event "):
        m = _EVENT_TARGET.match(call.target)
        rec = records.get((int(m.group(1)), int(m.group(2)))) if m else None
        return rec if rec is not None and rec is not t and rec.end_ns <= call.end_ns else None
    what, _, ident = call.target.partition(" ")
    if what not in ("stream", "device") or not ident.isdigit():
        return None
    key = (what, int(ident))
    items = ends.get(key)
    if not items:
        return None
    j = bisect.bisect_right(items, (call.end_ns, float("inf"))) - 1
    if j < 0:
        return None
    if call.name in QUERY_APIS:  # (one that found all work queued before it done)
        first = later[key]
        if j + 1 < len(first) and first[j + 1] <= call.start_ns:
            return None
    elif items[j][0] < call.start_ns:
        return None  # nothing of it ended while the call waited
    return items[j][2]


# Calls that return only once their copy or memset is done when the host memory is pageable
# (the host stages it), or always: the host submits nothing more meanwhile.
_COPY_CALLS = ("memcpy", "memcpy_async", "memcpy2d", "memcpy2d_async", "memset", "memset_async")


def _blocking_copies(profile: ProfileData, tasks) -> dict:
    """thread -> [(call end, id, task)], sorted: the copies and memsets that ended inside the
    call that submitted them (a synchronous copy, a pageable one staged by the host): what
    the host waited for before it went on."""
    calls: dict = defaultdict(list)  # thread -> [(start, end)] of its copy calls
    for c in profile.api_calls:
        if c.name in _COPY_CALLS:
            calls[c.thread].append((c.start_ns, c.end_ns))
    if not calls:
        return {}
    for items in calls.values():
        items.sort()
    out: dict = defaultdict(list)
    for t in tasks:
        if t.kind not in ("copy", "memset") or t.thread not in calls:
            continue
        items = calls[t.thread]
        i = bisect.bisect_right(items, (t.enqueue_ns, float("inf"))) - 1
        if i >= 0 and items[i][1] >= t.end_ns:  # (in the call: it had not returned before)
            out[t.thread].append((items[i][1], id(t), t))
    for held in out.values():
        held.sort(key=lambda e: (e[0], e[1]))
    return out


def describe(path: dict) -> str:
    """'3.3 ms: copy 89%, kernel 7%, host 4%' for a critical path."""
    length = path["length_ns"] or 1
    parts = sorted(path["by_kind"].items(), key=lambda kv: -kv[1])
    shares = ", ".join(f"{k} {v / length:.0%}" for k, v in parts if v)
    return f"{path['length_ns'] / 1e6:.3f} ms: {shares or 'empty'}"
