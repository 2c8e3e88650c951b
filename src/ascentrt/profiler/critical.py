"""The critical path of a profile: the chain of tasks (through stream order and event/notify
waits) that ended last, and what its time went to."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from .data import EXECUTOR_OF_KIND, GRAPH_SEGMENT, SYNC_APIS, ProfileData

WORK = ("kernel", "copy", "memset", "host_func")


def executor_holders(tasks, capacity: dict | None = None) -> Callable[[Any], Any]:
    """holder(t): the task of t's executor class on t's device that ended last before t
    started (not t itself), when the units in use just before it ended left too few for t
    (`capacity`: (device, class) -> units; without it, any such task); else None: nothing
    held what t needed (a kernel on one of 24 AI cores is no holder of another's, nor an
    H2D copy of a D2H copy where each direction has engines of its own)."""
    ends: dict = defaultdict(list)  # (device, executor class) -> [(end, id, task)], sorted
    steps: dict = defaultdict(list)  # (device, class) -> [(time, units change)]
    for t in tasks:
        for cls in _classes_of(t, capacity):
            ends[(t.device, cls)].append((t.end_ns, id(t), t))
            steps[(t.device, cls)] += [(t.start_ns, t.units or 1), (t.end_ns, -(t.units or 1))]
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
        classes = _classes_of(t, capacity)
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
        if units is not None and in_use(key, last.end_ns - 1) + (t.units or 1) <= units:
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


def critical_path(profile: ProfileData) -> dict:
    """{'length_ns', 'by_kind' (ns per task kind on the path, plus 'host' for the gaps where
    the next task was not yet submitted, the time before its first task included, and
    'dispatch' for those where it was, waiting to be dispatched), 'tasks' (work tasks on it),
    'top' [(name, ns)]}; the path runs from the profile's start to its last task's end.

    Walks back from the task that ended last; each step goes to whichever of its predecessors
    ended latest: the stream's previous task, the record that released a wait, the task of
    its executor class on the device that ended last before it started (it may have held
    the executor this one waited for), and the task whose end a synchronization of the host
    thread that submitted it waited for (the host could not submit it before). A replayed
    graph's nodes share their task's id: tasks are told apart as objects, not by id.
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
        for a, b in zip(items, items[1:]):
            prev[id(b)] = a

    waited = host_waits(profile, tasks)
    cur = max(tasks, key=lambda t: t.end_ns)
    end = cur.end_ns
    by_kind: dict[str, int] = defaultdict(int)
    names: dict[str, int] = defaultdict(int)
    count = 0
    seen = set()
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if cur.kind in WORK:
            by_kind[cur.kind] += cur.duration_ns
            names[cur.name] += cur.duration_ns
            count += 1
        preds = [p for p in (prev.get(id(cur)), by_key.get(tuple(cur.released_by))
                             if cur.released_by else None, holder(cur), waited(cur)) if p is not None]
        nxt = max(preds, key=lambda p: p.end_ns) if preds else None
        if nxt is not None and cur.start_ns > nxt.end_ns:
            gap = cur.start_ns - nxt.end_ns
            late = max(0, min(gap, cur.enqueue_ns - nxt.end_ns))  # submitted after nxt ended
            by_kind["host"] += late
            by_kind["dispatch"] += gap - late
        start = cur.start_ns
        cur = nxt
    # Before the chain's first task the host had not submitted it yet (its setup, or a submit
    # held by a full queue): the path starts with the profile, so it explains the whole run.
    if start > 0:
        by_kind["host"] += start
        start = 0
    top = sorted(names.items(), key=lambda kv: -kv[1])[:3]
    return {"length_ns": end - start, "by_kind": dict(by_kind), "tasks": count, "top": top}


def host_waits(profile: ProfileData, tasks) -> Callable[[Any], Any]:
    """waited(t): the task whose end the last synchronization of a stream or a device by the
    host thread that submitted t, before it did, waited for (the last of that stream's or
    device's tasks to end while the call waited); None when that call found the work done,
    waited for something else (an event), or there was none."""
    syncs: dict = defaultdict(list)  # thread -> [(end, call)] of the synchronizations that waited
    for c in profile.api_calls:
        if c.name in SYNC_APIS and c.already_done is False and not c.error:
            syncs[c.thread].append((c.end_ns, id(c), c))
    for items in syncs.values():
        items.sort(key=lambda e: (e[0], e[1]))
    ends: dict = defaultdict(list)  # ("stream" | "device", id) -> [(end, id, task)], sorted
    for t in tasks:
        if t.kind in WORK:
            ends[("stream", t.stream)].append((t.end_ns, id(t), t))
            ends[("device", t.device)].append((t.end_ns, id(t), t))
    for items in ends.values():
        items.sort(key=lambda e: (e[0], e[1]))

    blocking = _blocking_copies(profile, tasks)

    def waited(t):
        copy = None
        held = blocking.get(t.thread)
        if held:  # (the last copy the host waited out in its call before submitting t)
            i = bisect.bisect_right(held, (t.enqueue_ns, float("inf"))) - 1
            copy = held[i][2] if i >= 0 and held[i][2] is not t else None
        found = _sync_waited(t, syncs, ends)
        if copy is None or (found is not None and found.end_ns >= copy.end_ns):
            return found
        return copy
    return waited


def _sync_waited(t, syncs: dict, ends: dict):
    """The task whose end the host's last synchronization before t was submitted waited for."""
    calls = syncs.get(t.thread)
    if not calls:
        return None
    i = bisect.bisect_right(calls, (t.enqueue_ns, float("inf"))) - 1
    if i < 0:
        return None
    call = calls[i][2]
    what, _, ident = call.target.partition(" ")
    if what not in ("stream", "device") or not ident.isdigit():
        return None
    items = ends.get((what, int(ident)))
    if not items:
        return None
    j = bisect.bisect_right(items, (call.end_ns, float("inf"))) - 1
    if j < 0 or items[j][0] < call.start_ns:
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
