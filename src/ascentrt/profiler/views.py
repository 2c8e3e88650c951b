"""What the HTML report draws, as compact JSON-ready arrays: the timeline's tracks (host threads,
streams, graph segments), memory over time, and each allocation with its call site."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterator
from typing import NamedTuple, TextIO

from .data import GRAPH_SEGMENT, ProfileData, compact_json, joined, us

MAX_SLICES = 200_000     # beyond this the timeline keeps the longest slices (the tables keep all)
MAX_ALLOCATIONS = 2_000  # per device: the largest are drawn one by one, the rest as one area

# One colour per kind, each distinct (the report's key shows those present).
KIND_COLORS = {"kernel": "#4e79a7", "copy": "#f28e2b", "memset": "#76b7b2",
               "host_func": "#59a14f", "host_func_nonblocking": "#a0cbe8",
               "event_record": "#e15759", "event_wait": "#edc948", "notify_record": "#ff9da7",
               "notify_wait": "#8c6d31", "value_wait": "#d37295", "value_write": "#fabfd2",
               GRAPH_SEGMENT: "#bab0ac", "api": "#9c755f",
               "range": "#b07aa1"}
_KINDS = list(KIND_COLORS)
# What became of a task that did not simply run to its end (a task row's 6th field: its index;
# the report draws these outlined, with the fate and the error in the slice's tooltip).
FATES = ("", "failed", "dropped", "unfinished")


def _fate(t) -> int:
    """The index in FATES of what became of task `t` (0: it ran to its end)."""
    if t.fate in FATES[2:]:
        return FATES.index(t.fate)
    return 1 if t.failed else 0


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
    own = base == "ascentrt" or base == "cli.py" and os.path.basename(os.path.dirname(first)) == "ascentrt"
    if own:  # (ascentrt's own command, the demo's run: by its name and subcommand)
        sub = next((str(a) for a in command[1:] if not str(a).startswith("-")), "")
        return f"ascentrt {sub}".rstrip()
    return base


class _Track(NamedTuple):
    """One timeline track: its records (API calls, ranges or tasks) and what they are."""

    id: str
    group: str
    label: str
    items: list     # records with name, start_ns and end_ns
    kind: str       # what its slices are: "api", "range" or "" (tasks: each its own kind)


def _tracks(profile: ProfileData) -> list[_Track]:
    """Host threads (API calls, ranges), then each device's streams, a stream's graph segments
    on a track of their own under it (its nodes' tasks stay on the stream's track)."""
    tracks: list[_Track] = []
    per_thread: defaultdict[tuple, list] = defaultdict(list)
    for c in profile.api_calls:
        per_thread[(c.thread, "api")].append(c)
    for r in profile.ranges:
        per_thread[(r.thread, "range")].append(r)
    for (th, what), items in sorted(per_thread.items(), key=lambda kv: kv[0]):
        name = profile.threads.get(th, f"thread {th}")
        tracks.append(_Track(f"host-{th}-{what}", "host",
                             f"{name} " + ("ranges" if what == "range" else "API"), items, what))
    info = profile.stream_info()
    per_stream: defaultdict[tuple, list] = defaultdict(list)
    for t in profile.tasks:
        per_stream[(t.device, t.stream, t.kind == GRAPH_SEGMENT)].append(t)
    for (dev, sid, segments), items in sorted(per_stream.items(), key=lambda kv: kv[0]):
        role = info.get((dev, sid))
        label = f"stream {sid}" + (f" ({role.role})" if role is not None and role.role else "")
        tracks.append(_Track(f"d{dev}-s{sid}" + ("-graph" if segments else ""), f"device {dev}",
                             label + (" graph segments" if segments else ""), items, ""))
    return tracks


def _fate_fields(t, names: dict) -> str:
    """',fate,error name id' of a task row ('' for a task that ran to its end; the error's id
    is -1 where it has none)."""
    fate = _fate(t)
    if not fate:
        return ""
    return f",{fate},{names[t.error] if t.error else -1}"


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
    return json.loads("".join(view_json(profile)))


def write_view_data(profile: ProfileData, fh: TextIO) -> None:
    """Write view_data(profile) as JSON into a <script> element of the open file `fh`, a
    piece at a time ("</" escaped: the text cannot end the element)."""
    for piece in view_json(profile):
        fh.write(piece.replace("</", "<\\/"))


def view_json(profile: ProfileData) -> Iterator[str]:
    """view_data(profile) as compact JSON text, piece by piece (50k tasks make tens of MB of
    rows as lists: each track's rows are made as they are written, a chunk at a time)."""
    tracks = _tracks(profile)
    total = sum(len(t.items) for t in tracks)
    cutoff = 0
    if total > MAX_SLICES:  # keep the longest slices: they are the ones that show at any zoom
        durations = sorted((r.end_ns - r.start_ns for t in tracks for r in t.items), reverse=True)
        cutoff = durations[MAX_SLICES - 1]
    # The names are listed before the tracks: ids in the order the rows first use them (the
    # rows kept), then the allocations' sites.
    names: dict[str, int] = {}
    kept = 0
    for t in tracks:
        for r in t.items:
            if r.end_ns - r.start_ns >= cutoff:
                names.setdefault(r.name, len(names))
                kept += 1
    for t in tracks:  # (the API calls' sites: names too, after the slices' own)
        if t.kind == "api":
            for r in t.items:
                if r.site and r.end_ns - r.start_ns >= cutoff:
                    names.setdefault(r.site, len(names))
    errors = [r.error for t in tracks if not t.kind for r in t.items
              if r.end_ns - r.start_ns >= cutoff and r.error]
    for e in errors:  # (after the slices' names: a task's error is a name too)
        names.setdefault(e, len(names))
    allocations = _allocations(profile, lambda n: names.setdefault(n, len(names)))
    memory = defaultdict(list)
    for s in profile.memory:
        memory[str(s.device)].append([us(s.ts_ns), s.allocated, s.reserved])
    yield (f'{{"duration_us":{compact_json(us(profile.duration_ns))},"names":'
           f'{compact_json(list(names))},"kinds":{compact_json(_KINDS)},"colors":'
           f'{compact_json([KIND_COLORS[k] for k in _KINDS])},"fates":{compact_json(list(FATES))},'
           f'"tracks":[')
    kind_index = {k: i for i, k in enumerate(_KINDS)}
    for i, t in enumerate(tracks):
        head = compact_json({"id": t.id, "group": t.group, "label": t.label,
                             **({"sites": 1} if t.kind == "api" else {})})
        yield f'{"," if i else ""}{head[:-1]},"s":['
        if t.kind == "api":  # (then the call site's name, where recorded)
            k = kind_index.get(t.kind, 0)
            rows = (f"[{us(r.start_ns)!r},{us(r.end_ns - r.start_ns)!r},{names[r.name]},{k}"
                    f"{f',{names[r.site]}' if r.site else ''}]"
                    for r in t.items if r.end_ns - r.start_ns >= cutoff)
        elif t.kind:
            k = kind_index.get(t.kind, 0)
            rows = (f"[{us(r.start_ns)!r},{us(r.end_ns - r.start_ns)!r},{names[r.name]},{k}]"
                    for r in t.items if r.end_ns - r.start_ns >= cutoff)
        else:  # tasks: each of its own kind, and its task id (then its fate and error, if any)
            rows = (f"[{us(r.start_ns)!r},{us(r.end_ns - r.start_ns)!r},{names[r.name]},"
                    f"{kind_index.get(r.kind, 0)},{r.task_id}{_fate_fields(r, names)}]"
                    for r in t.items if r.end_ns - r.start_ns >= cutoff)
        yield from joined(rows)
        yield "]}"
    yield (f'],"memory":{compact_json(memory)},"capacity":'
           f'{compact_json({str(d.id): d.capacity for d in profile.devices})},"allocations":'
           f'{compact_json(allocations)},"dropped":{total - kept}}}')

