"""The critical path of a profile: the chain of tasks (through stream order and event/notify
waits) that ended last, and what its time went to."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from .data import EXECUTOR_OF_KIND, GRAPH_SEGMENT, ProfileData

WORK = ("kernel", "copy", "memset", "host_func")


def executor_holders(tasks, capacity: dict | None = None) -> Callable[[Any], Any]:
    """holder(t): the task of t's executor class on t's device that ended last before t
    started (not t itself), when the units in use just before it ended left too few for t
    (`capacity`: (device, class) -> units; without it, any such task); else None: nothing
    held what t needed (a kernel on one of 24 AI cores is no holder of another's)."""
    ends: dict = defaultdict(list)  # (device, executor class) -> [(end, id, task)], sorted
    steps: dict = defaultdict(list)  # (device, class) -> [(time, units change)]
    for t in tasks:
        cls = _class_of(t)
        if cls is not None:
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
        key = (t.device, _class_of(t))
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


def _class_of(t) -> Any:
    """The executors a task contends for: its class (copies: how many engines each direction
    has is not recorded, and a copy's direction is not in every copy's name, so any copy
    that ended last before counts as the holder)."""
    return EXECUTOR_OF_KIND.get(t.kind)


def capacities(profile: ProfileData) -> dict:
    """(device, executor class) -> the units it has, from the profile's devices."""
    out = {}
    for d in profile.devices:
        out[(d.id, "compute")] = d.compute_units
        out[(d.id, "host")] = d.host_func_threads
    return out


def critical_path(profile: ProfileData) -> dict:
    """{'length_ns', 'by_kind' (ns per task kind on the path, plus 'host' for the gaps where
    the next task was not yet submitted, the time before its first task included, and
    'dispatch' for those where it was, waiting to be dispatched), 'tasks' (work tasks on it),
    'top' [(name, ns)]}; the path runs from the profile's start to its last task's end.

    Walks back from the task that ended last; each step goes to whichever of its predecessors
    ended latest: the stream's previous task, the record that released a wait, and the task
    of its executor class on the device that ended last before it started (it may have held
    the executor this one waited for). A replayed graph's nodes share their task's id: tasks
    are told apart as objects, not by id.
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
                             if cur.released_by else None, holder(cur)) if p is not None]
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


def describe(path: dict) -> str:
    """'3.3 ms: copy 89%, kernel 7%, host 4%' for a critical path."""
    length = path["length_ns"] or 1
    parts = sorted(path["by_kind"].items(), key=lambda kv: -kv[1])
    shares = ", ".join(f"{k} {v / length:.0%}" for k, v in parts if v)
    return f"{path['length_ns'] / 1e6:.3f} ms: {shares or 'empty'}"
