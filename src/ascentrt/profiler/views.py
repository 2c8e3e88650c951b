"""What the HTML report draws, as compact JSON-ready arrays: the timeline's tracks (host threads,
streams, graph segments), memory over time, and each allocation with its call site."""

from __future__ import annotations

import os
from collections import defaultdict

from .data import GRAPH_SEGMENT, ProfileData, us

MAX_SLICES = 200_000     # beyond this the timeline keeps the longest slices (the tables keep all)
MAX_ALLOCATIONS = 2_000  # per device: the largest are drawn one by one, the rest as one area

# One colour per kind, each distinct (the report's key shows those present).
KIND_COLORS = {"kernel": "#4e79a7", "copy": "#f28e2b", "memset": "#76b7b2",
               "host_func": "#59a14f", "host_func_nonblocking": "#a0cbe8",
               "event_record": "#e15759", "event_wait": "#edc948", "notify_record": "#ff9da7",
               "notify_wait": "#8c6d31", GRAPH_SEGMENT: "#bab0ac", "api": "#9c755f",
               "range": "#b07aa1"}
_KINDS = list(KIND_COLORS)


def program_name(command: list) -> str:
    """The profiled program's name from its command line: 'train.py', 'pytest', 'python -c'."""
    if not command:
        return ""
    first = str(command[0])
    if first == "-c":
        return "python -c"
    base = os.path.basename(first)
    if base == "__main__.py":  # python -m package: the package is the program
        return os.path.basename(os.path.dirname(first)) or base
    return base


def _tracks(profile: ProfileData) -> list[dict]:
    """Host threads (API calls, ranges), then each device's streams, a stream's graph segments
    on a track of their own under it (its nodes' tasks stay on the stream's track)."""
    tracks: list[dict] = []
    per_thread: defaultdict[tuple, list[tuple]] = defaultdict(list)
    for c in profile.api_calls:
        per_thread[(c.thread, "api")].append((c.start_ns, c.end_ns, c.name, "api"))
    for r in profile.ranges:
        per_thread[(r.thread, "range")].append((r.start_ns, r.end_ns, r.name, "range"))
    for (th, what), items in sorted(per_thread.items()):
        name = profile.threads.get(th, f"thread {th}")
        tracks.append({"id": f"host-{th}-{what}", "group": "host",
                       "label": f"{name} " + ("ranges" if what == "range" else "API"),
                       "items": items})
    info = profile.stream_info()
    per_stream: defaultdict[tuple, list[tuple]] = defaultdict(list)
    for t in profile.tasks:
        per_stream[(t.device, t.stream, t.kind == GRAPH_SEGMENT)].append(
            (t.start_ns, t.end_ns, t.name, t.kind, t.task_id))
    for (dev, sid, segments), items in sorted(per_stream.items()):
        role = info.get((dev, sid))
        label = f"stream {sid}" + (f" ({role.role})" if role is not None and role.role else "")
        tracks.append({"id": f"d{dev}-s{sid}" + ("-graph" if segments else ""),
                       "group": f"device {dev}",
                       "label": label + (" graph segments" if segments else ""), "items": items})
    return tracks


def _allocations(profile: ProfileData, site_id) -> dict:
    """{device: {'rows': [[alloc us, free us or None (live at the end), bytes, site, address]],
    'hidden': how many smaller ones are left to the 'allocated' area}}; rows in allocation order."""
    per_device: defaultdict[int, list] = defaultdict(list)
    for a in profile.allocations:
        per_device[a.device].append(a)
    out = {}
    for dev, allocs in sorted(per_device.items()):
        shown = sorted(allocs, key=lambda a: -a.nbytes)[:MAX_ALLOCATIONS]
        shown.sort(key=lambda a: a.alloc_ns)
        out[str(dev)] = {"rows": [[us(a.alloc_ns), None if a.free_ns is None else us(a.free_ns),
                                   a.nbytes, site_id(a.site), a.addr] for a in shown],
                         "hidden": len(allocs) - len(shown)}
    return out


def view_data(profile: ProfileData) -> dict:
    """Everything the report's script draws (times in us, strings in `names`)."""
    names: dict[str, int] = {}

    def name_id(n: str) -> int:
        return names.setdefault(n, len(names))

    tracks = _tracks(profile)
    total = sum(len(t["items"]) for t in tracks)
    cutoff = 0
    if total > MAX_SLICES:  # keep the longest slices: they are the ones that show at any zoom
        durations = sorted((it[1] - it[0] for t in tracks for it in t["items"]), reverse=True)
        cutoff = durations[MAX_SLICES - 1]
    kind_index = {k: i for i, k in enumerate(_KINDS)}
    out_tracks = []
    for t in tracks:
        rows = []
        for it in t["items"]:
            if it[1] - it[0] < cutoff:
                continue
            row = [us(it[0]), us(it[1] - it[0]), name_id(it[2]), kind_index.get(it[3], 0)]
            if len(it) > 4:
                row.append(it[4])
            rows.append(row)
        out_tracks.append({"id": t["id"], "group": t["group"], "label": t["label"], "s": rows})
    memory = defaultdict(list)
    for s in profile.memory:
        memory[str(s.device)].append([us(s.ts_ns), s.allocated, s.reserved])
    allocations = _allocations(profile, name_id)  # (before `names` is read: it adds the sites)
    return {"duration_us": us(profile.duration_ns), "names": list(names), "kinds": _KINDS,
            "colors": [KIND_COLORS[k] for k in _KINDS], "tracks": out_tracks, "memory": memory,
            "capacity": {str(d.id): d.capacity for d in profile.devices},
            "allocations": allocations, "dropped": total - sum(len(t["s"]) for t in out_tracks)}
