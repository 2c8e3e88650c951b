"""Findings of priority inversion: a high-priority stream's copies wait for copy engines that
every one run a lower-priority stream's copy (running tasks are never preempted)."""

from __future__ import annotations

from collections import defaultdict

from ..units import format_bytes, format_ms
from .data import COPY_DIRECTIONS, ProfileData, submitting_calls, top_sites
from .finding import Finding, MIN_GAP_NS, MIN_GAP_VIRTUAL_NS, task_ref
from .metrics import work_by_device, work_window

INVERSION_SHARE = 0.05  # inverted waits worth a finding: at least 5% of the device's work
                        # window (its first task's enqueue to its last one's end)


def priority_inversion(profile: ProfileData) -> list[Finding]:
    """Per device and copy-engine class: the time high-priority copies were ready (their
    stream's earlier work done, submitted) while every engine of their class ran a copy of a
    lower-priority stream, which a priority cannot preempt."""
    priority = {(s.device, s.id): s.priority for s in profile.streams}
    if len(set(priority.values())) < 2:
        return []  # (one priority: nothing can be inverted)
    devices = {d.id: d for d in profile.devices}
    per_stream: defaultdict[tuple, list] = defaultdict(list)
    for t in profile.tasks:
        if t.kind != "graph":
            per_stream[(t.device, t.stream)].append(t)
    copies: defaultdict[tuple, list] = defaultdict(list)  # (device, engine class) -> [(task, ready)]
    for key, items in per_stream.items():
        items.sort(key=lambda t: (t.task_id, t.start_ns))
        before = 0
        for t in items:
            if t.kind == "copy" and t.started and key in priority:
                copies[(t.device, _engine_class(t, devices.get(t.device)))].append(
                    (t, max(t.enqueue_ns, before)))
            before = max(before, t.end_ns)
    windows = {dev_id: end - start for dev_id, (start, end) in
               ((d, work_window(w)) for d, w in work_by_device(profile).items())}
    sim = any(d.backend == "sim" for d in profile.devices)
    min_gap = MIN_GAP_VIRTUAL_NS if sim else MIN_GAP_NS
    out = []
    for (dev_id, engine), items in sorted(copies.items()):
        engines = _engines(devices.get(dev_id), engine)
        waited: list = []
        holders: dict = {}
        for t, ready in items:
            if t.start_ns - ready < min_gap:
                continue
            mine = priority[(t.device, t.stream)]
            # (the lower-priority copies that ran while it was ready)
            lower = [h for h, _ in items if priority[(h.device, h.stream)] > mine
                     and h.start_ns < t.start_ns and h.end_ns > ready]
            blocked = _all_busy([(h.start_ns, h.end_ns) for h in lower], engines, ready, t.start_ns)
            if blocked >= min_gap:
                waited.append((t, blocked))
                holders.update((h.key, h) for h in lower)
        inverted = sum(ns for _, ns in waited)
        if not waited or inverted < INVERSION_SHARE * windows.get(dev_id, 0):
            continue
        out.append(_finding(dev_id, engine, engines, waited, list(holders.values()), priority,
                            profile))
    return out


def _engine_class(t, dev) -> str:
    """'copy' where any engine takes any copy, else 'copy <direction>' (sim: an engine each)."""
    if dev is not None and dev.copy_engines_per_direction and t.name in COPY_DIRECTIONS[:3]:
        return f"copy {t.name}"
    return "copy"


def _engines(dev, engine: str) -> int:
    """How many engines of class `engine` the device has."""
    if dev is None:
        return 1
    if engine != "copy":
        return dev.copy_engines_per_direction[COPY_DIRECTIONS.index(engine[5:])]
    return dev.copy_engines


def _all_busy(spans: list[tuple[int, int]], engines: int, start: int, end: int) -> int:
    """ns of [start, end) during which at least `engines` of `spans` ran at once."""
    edges = sorted([(max(a, start), 1) for a, b in spans if b > start and a < end]
                   + [(min(b, end), -1) for a, b in spans if b > start and a < end])
    busy, running, since = 0, 0, start
    for at, step in edges:
        if running >= engines:
            busy += at - since
        running += step
        since = at
    return busy


def _finding(dev_id, engine, engines, waited, holders, priority, profile) -> Finding:
    """The finding of one device's engine class: who waited, who held the engines."""
    inverted = sum(ns for _, ns in waited)
    high = sorted({(t.stream, priority[(t.device, t.stream)]) for t, _ in waited})
    by_stream: defaultdict[tuple, list] = defaultdict(list)
    for h in holders:
        by_stream[(h.stream, priority[(h.device, h.stream)])].append(h)
    held = "; ".join(
        f"stream {s} (priority {p}): {len(hs)} cop{'y' if len(hs) == 1 else 'ies'} of "
        f"{format_bytes(sum(h.nbytes for h in hs))}, {format_ms(sum(h.duration_ns for h in hs))}"
        for (s, p), hs in sorted(by_stream.items()))
    largest = max(holders, key=lambda h: h.nbytes)
    streams = ", ".join(f"stream {s} (priority {p})" for s, p in high)
    what = "copy engine" if engine == "copy" else f"{engine[5:].replace('_', ' ')} copy engine"
    low_streams = len(by_stream)
    evidence: dict[str, object] = {
        "high-priority copies that waited": len(waited),
        "their wait for an engine": format_ms(inverted),
        "longest wait": format_ms(max(ns for _, ns in waited)),
        f"{what}s": engines, "held by": held,
        "largest held copy": f"{format_bytes(largest.nbytes)} ({format_ms(largest.duration_ns)})",
        "held copies submitted at": top_sites(c for made in submitting_calls(holders, profile) for c in made)}
    return Finding(
        "priority_inversion",
        f"High-priority copies waited for {what}s busy with lower-priority copies on device {dev_id}",
        f"{len(waited)} copies of {streams} were ready but waited {format_ms(inverted)} in all "
        f"while every one of the {engines} {what}(s) ran a copy of a lower-priority stream: a "
        f"priority orders ready tasks, it never preempts a running one, so a high-priority copy "
        f"waits for the long low-priority copy ahead of it to finish",
        f"split the long low-priority copies into chunks (a few MiB each) so that an engine "
        f"frees up often and the high-priority copy goes first; use fewer concurrent "
        f"low-priority copy streams than {what}s (now {low_streams} for {engines}) so that one "
        f"stays free for the high-priority stream",
        evidence, [task_ref(t) for t, _ in waited[:5]] + [task_ref(h) for h in holders[:5]],
        inverted)

