"""Findings of the host's synchronization: synchronizes in a loop, needless waits, copies that
block the host."""

from __future__ import annotations

import bisect
import statistics
from collections import Counter, defaultdict

from ..backends import presets
from ..units import format_ms
from .data import QUEUE_FULL, WORK_KINDS, calls_made, submitting_calls, top_sites
from .hosttime import attribute
from .intervals import gaps, intersection, total, union
from .finding import (
    Finding, LONG_DONE_NS, MIN_DEVICE_SYNCS, MIN_GAP_NS, MIN_GAP_VIRTUAL_NS, MIN_NEEDLESS_SYNCS,
    SUBMIT_APIS, min_window_ns)
from .metrics import within


def _submit_calls(profile):
    return [c for c in profile.api_calls if c.name in SUBMIT_APIS]


def submit_costs(profile) -> list[int]:
    """Each submitting call's own time: less what it spent waiting for room in a full stream
    queue (waiting on the device, which doing more per task would not save)."""
    return [own for c, own in calls_made(profile.api_calls) if c.name in SUBMIT_APIS]


# The host blocked in full queues this share of the run (or of a range's windows) or more.
FULL_QUEUE_SHARE = 0.5


def full_queue(profile, windows=None) -> list[Finding]:
    """The host spent most of the run blocked in submits, waiting for room in a stream's full
    queue (a simulated device's queue_depth): the device runs behind the host, which does
    nothing else meanwhile. (Where that starved another device, held_by_full_queue says so.)"""
    waits: defaultdict[str, list] = defaultdict(list)
    for c in profile.api_calls:
        if c.name == QUEUE_FULL:
            waits[c.target].append(c)
    if not waits:
        return []
    target, full = max(waits.items(), key=lambda kv: sum(c.duration_ns for c in kv[1]))
    blocked = total(within(union((c.start_ns, c.end_ns) for c in full), windows))
    run = profile.duration_ns if windows is None else total(windows)
    if blocked < min_window_ns(profile.devices) or blocked < FULL_QUEUE_SHARE * run:
        return []
    return [Finding(
        "full_queue", f"The host spends {blocked / max(run, 1):.0%} of the run blocked on the full "
                      f"queue of {target}",
        f"{len(full)} submits to {target} waited {format_ms(blocked)} of the {format_ms(run)} for "
        f"room in its queue, full of work not done yet: the device runs behind the host, and the "
        f"host thread can do nothing else while it waits",
        "the device's work bounds this run: make that work shorter, or spread it over more "
        "streams or devices where it is independent; host work that does not need the device "
        "(preparing the next batch) can go before the blocking submits or on a thread of its own. "
        "A deeper queue only moves the wait",
        {"blocked in full queues": format_ms(blocked), "run": format_ms(run),
         "blocked submits": len(full), "submitted at": top_sites(full)},
        [], 0)]  # (time the host lost, not the device: no saving the profile can promise)


def pinned_saving(staged, staged_ns: int, profile) -> int:
    """What copying `staged` (pageable copies) from pinned memory would save, in ns, where the
    simulated device's model is known and the copies ran at its pageable rate; else 0."""
    dev = next((d for d in profile.devices if d.backend == "sim" and d.preset), None)
    if dev is None or not staged_ns:
        return 0
    try:
        model = presets.load(dev.preset)
    except Exception:
        return 0
    rate = sum(t.nbytes for t in staged) / staged_ns * 1e9
    pageable, pinned = model.pageable_bandwidth, model.host_link_bandwidth
    if not pageable < pinned or abs(rate - pageable) > 0.2 * pageable:
        return 0  # (a model varied for the run, or copies not at its pageable rate)
    return int(staged_ns * (1 - pageable / pinned))


ASYNC_COPY_CALLS = ("memcpy_async", "memcpy2d_async")


def synchronous(copies, profile) -> list:
    """The copies that finished inside the memcpy_async that submitted them (pageable host
    memory: staged by the host, which the call blocks until the copy is done)."""
    return [t for t, made in zip(copies, submitting_calls(copies, profile, ASYNC_COPY_CALLS))
            if made and t.end_ns <= made[0].end_ns]


def staged_sites(staged, profile) -> str:
    """Where the program submitted the copies `staged` (see synchronous): the memcpy calls'
    sites, the most frequent first, with their counts."""
    return top_sites(c for made in submitting_calls(staged, profile, ASYNC_COPY_CALLS) for c in made)


def sync_in_loop(profile, windows) -> list[Finding]:
    """Device-wide synchronizations, synchronizations of one stream, and event
    synchronizations that alternate with submissions: the host waits out the work every
    iteration instead of queueing ahead."""
    by_device, by_stream, event_syncs = defaultdict(list), defaultdict(list), []
    for c in profile.api_calls:
        if c.name in ("synchronize", "Device.synchronize"):
            by_device[c.target].append(c)
        elif c.name == "Stream.synchronize":
            by_stream[c.target].append(c)
        elif c.name == "Event.synchronize":
            event_syncs.append(c)
    if not any(len(syncs) >= MIN_DEVICE_SYNCS for syncs in
               [*by_device.values(), *by_stream.values(), event_syncs]):
        return []  # (the usual case: nothing below to sort or merge)
    submits = sorted(c.start_ns for c in _submit_calls(profile))
    work = [t for t in profile.tasks if t.kind in WORK_KINDS]
    device_of = {f"stream {t.stream}": t.device for t in work}
    timelines: dict[int | None, tuple] = {}

    def timeline_of(device: int | None) -> tuple:
        """The device's tasks' timeline (None: every device's), made once."""
        if device not in timelines:
            timelines[device] = _timeline([t for t in work if device is None or t.device == device])
        return timelines[device]
    out: list[Finding] = []
    # (each synchronized device's own idle time: another device busy meanwhile hides nothing)
    for target, syncs in sorted(by_device.items()):
        if len(syncs) < MIN_DEVICE_SYNCS:
            continue
        device = int(target.split()[1]) if target.startswith("device ") else None
        found = _syncs_in_loop(syncs, submits, timeline_of(device), windows, profile)
        if found:
            between, idle_after, evidence = found
            out.append(Finding(
                "device_sync_in_loop", "Device-wide synchronization inside the loop"
                + (f" ({target})" if len(by_device) > 1 else ""),
                f"{len(syncs)} device-wide synchronizations alternate with submissions: each "
                f"one drains every stream, so the device runs dry until the host submits again",
                "synchronize only the stream or event whose results the host needs, and only "
                "where it reads them; let several iterations queue up before waiting",
                {"device synchronizations": len(syncs), "called at": top_sites(syncs),
                 "with submissions in between": between, **evidence}, [], idle_after))
    groups = [(f"Synchronization of {target}", target, syncs) for target, syncs in sorted(by_stream.items())]
    if event_syncs:
        groups.append(("Event synchronization", "", event_syncs))
    virtual = any(d.backend == "sim" for d in profile.devices)
    for title, target, syncs in groups:
        if len(syncs) < MIN_DEVICE_SYNCS:
            continue
        # (events: their streams are not named in the calls, so every device's idle counts)
        found = _syncs_in_loop(syncs, submits, timeline_of(device_of.get(target)), windows,
                               profile)
        # Worth a finding only where the device ran dry: more than scheduling noise per wait
        # and 1% of the loop (a double-buffered loop that waits for the batch before the one
        # it just queued leaves only dispatch gaps).
        floor = (MIN_GAP_VIRTUAL_NS if virtual else MIN_GAP_NS) * len(syncs)
        if found and found[1] >= max(floor, 0.01 * (syncs[-1].end_ns - syncs[0].start_ns)):
            between, idle_after, evidence = found
            what = target or "events"
            out.append(Finding(
                "stream_sync_in_loop", f"{title} inside the loop",
                f"{len(syncs)} synchronizations of {what} alternate with submissions: the host "
                f"waits for the work every iteration, so nothing of the next iteration is "
                f"queued while this one runs and the device runs dry in between",
                "wait only where the host reads results, and queue the next iteration before "
                "waiting (double-buffer so copies of batch n+1 overlap batch n)",
                {"synchronizations": len(syncs), "called at": top_sites(syncs),
                 "with submissions in between": between, **evidence}, [], idle_after))
    return out


# Stream synchronizations that kept independent streams apart cost this share of the run.
SERIALIZING_SHARE = 0.1


def serializing_syncs(profile, windows=None, spans=None) -> list[Finding]:
    """Stream synchronizations that blocked the host while other streams of the device sat
    empty, when the host then gave those streams work: queued before the wait, that work
    could have run beside the stream waited for (if it does not need its results). The time
    they cost is at most the run less its busiest stream's work."""
    syncs = [c for c in profile.api_calls if c.name == "Stream.synchronize" and not c.already_done]
    if len(syncs) < MIN_DEVICE_SYNCS:
        return []
    work = [t for t in profile.tasks if t.kind in WORK_KINDS and t.started]
    device_of = {f"stream {t.stream}": t.device for t in work}
    by_thread: defaultdict[int, list] = defaultdict(list)  # thread -> its tasks, by enqueue
    for t in work:
        by_thread[t.thread].append(t)
    for items in by_thread.values():
        items.sort(key=lambda t: t.enqueue_ns)
    enqueued = {th: [t.enqueue_ns for t in items] for th, items in by_thread.items()}
    busy_of: dict = {}  # (device, stream) -> merged busy intervals

    def busy(key) -> list:
        if key not in busy_of:
            busy_of[key] = union((t.start_ns, t.end_ns) for t in work if (t.device, t.stream) == key)
        return busy_of[key]
    waits = sorted(syncs, key=lambda c: c.start_ns)
    starts = [c.start_ns for c in waits]
    opens = [lo for lo, _ in spans] if spans else []
    costly, saved = [], 0
    for c in waits:
        device, stream = device_of.get(c.target), c.target.split()[-1]
        if device is None:
            continue
        # (the work the host queued after it, up to its next synchronization, in the same
        # instance of a range: a sync that ends one instance, the next queued in the next, is
        # no overlap lost, as the demo's timed pipelines, one stream then three, are not)
        i = bisect.bisect_right(starts, c.end_ns)
        until = starts[i] if i < len(starts) else 1 << 62
        if spans:  # (the instance the sync is in: the last to begin by its start)
            k = bisect.bisect_right(opens, c.start_ns) - 1
            until = min(until, spans[k][1]) if k >= 0 else -1
        queued = by_thread.get(c.thread, [])
        j = bisect.bisect_left(enqueued.get(c.thread, []), c.end_ns)
        after = [t for t in queued[j:] if t.enqueue_ns <= until and t.device == device
                 and str(t.stream) != stream]
        if not after:
            continue
        others = union(iv for key in {(t.device, t.stream) for t in after} for iv in busy(key))
        empty = total(gaps(others, c.start_ns, c.end_ns))  # (the streams it fed idle meanwhile)
        gain = min(empty, sum(t.duration_ns for t in after))
        if gain > 0:
            costly.append(c)
            saved += gain
    if len(costly) < MIN_DEVICE_SYNCS:
        return []
    run = profile.duration_ns if windows is None else total(windows)
    # (the run cannot be shorter than its busiest stream's work, nor than an executor class's
    # unit-time over its units: kernels that take every core cannot overlap)
    floor: defaultdict[tuple, float] = defaultdict(float)
    info = {d.id: d for d in profile.devices}
    for t in work:
        floor[(t.device, t.stream)] += t.duration_ns
        d = info.get(t.device)
        if d is not None and t.kind in ("kernel", "memset"):
            floor[(t.device, "compute")] += max(t.unit_ns, t.duration_ns) / d.compute_units
        elif d is not None and t.kind == "copy":
            floor[(t.device, "copy")] += t.duration_ns / d.copy_engines
    saved = min(saved, max(0, int(run - max(floor.values(), default=0))))
    if saved < SERIALIZING_SHARE * run:
        return []
    targets = Counter(c.target for c in costly)
    return [Finding(
        "serializing_sync", "Stream synchronizations keep independent streams from overlapping",
        f"{len(costly)} synchronizations of {', '.join(t for t, _ in targets.most_common(3))} "
        f"blocked the host while the device's other streams sat empty, and the host then queued "
        f"work on those streams: queued before the wait, it could have run beside the stream "
        f"waited for, which the host serialized instead",
        "where the work queued next does not need the results waited for, queue it before the "
        "synchronize (or synchronize once after both); where a stream needs another's results, "
        "order them on the device (record an event, make the other stream wait on it) instead "
        "of on the host",
        {"synchronizations": len(costly), "called at": top_sites(costly),
         "host blocked in them": format_ms(sum(c.duration_ns for c in costly)),
         "could save up to": format_ms(saved), "run": format_ms(run)},
        [], saved)]


def _timeline(work) -> tuple[list, list, list]:
    """(sorted starts, sorted ends, merged busy intervals) of these tasks."""
    return (sorted(t.start_ns for t in work), sorted(t.end_ns for t in work),
            union((t.start_ns, t.end_ns) for t in work))


def _syncs_in_loop(syncs, submits, timeline, windows, profile):
    """(syncs with submissions in between, device idle after them, evidence) when at least
    MIN_DEVICE_SYNCS synchronizations mostly alternate with submissions; else None."""
    if len(syncs) < MIN_DEVICE_SYNCS:
        return None
    starts, ends, busy = timeline
    between = 0
    for a, b in zip(syncs, syncs[1:]):
        i = bisect.bisect_left(submits, a.end_ns)
        between += i < len(submits) and submits[i] < b.start_ns
    if between < 0.8 * (len(syncs) - 1):
        return None
    # A synchronization whose work was done before it began drained nothing (the device ran
    # dry, if it did, in an earlier one): the loop's idle is the blocking ones' alone, and a
    # loop of mostly such is no sync in the loop (needless_syncs names those).
    blocked = [c for c in syncs if not c.already_done]
    if 2 * len(blocked) < len(syncs):
        return None
    # Idle from the moment the device ran dry inside each synchronization (its last task
    # ended; not before the call began) to the next task's start: the synchronization's own
    # latency and the host's next submissions (returning from it alone left out the first).
    after = []
    for c in blocked:
        i = bisect.bisect_left(starts, c.end_ns)
        if i < len(starts):
            j = bisect.bisect_right(ends, c.end_ns) - 1
            dry = max(c.start_ns, ends[j]) if j >= 0 else c.start_ns
            after.append((min(dry, c.end_ns), starts[i]))
    # (only where no task ran: a stream's synchronization leaves the others running)
    idle = gaps(busy, busy[0][0], busy[-1][1]) + [(busy[-1][1], max(b for _, b in after))] \
        if busy and after else []
    after = within(intersection(union(after), idle), windows)
    host = attribute(after, profile.api_calls)
    # The idle the host spent in other runtime calls (a driver malloc, say) is theirs: the
    # host-bound finding names them; this finding claims the rest.
    others = sum(ns for name, (ns, _) in host.calls.items() if name not in SUBMIT_APIS)
    evidence = {"host blocked in them": format_ms(sum(c.duration_ns for c in syncs)),
                "device idle from running dry in them to the next task": format_ms(total(after)),
                **host.evidence("after them")}
    if others:
        evidence["of that idle, in other runtime calls (not counted here)"] = format_ms(others)
    if len(blocked) < len(syncs):
        evidence["of them, on work already complete (no wait)"] = len(syncs) - len(blocked)
    return between, total(after) - others, evidence


def _stream_done_for(profile) -> dict:
    """For already-complete Stream.synchronize calls: how long their stream had been idle."""
    ends = defaultdict(list)
    for t in profile.tasks:
        ends[f"stream {t.stream}"].append(t.end_ns)
    for v in ends.values():
        v.sort()
    out = {}
    for c in profile.api_calls:
        if c.name == "Stream.synchronize" and c.already_done and c.target in ends:
            v = ends[c.target]
            i = bisect.bisect_right(v, c.start_ns) - 1
            if i >= 0:
                out[id(c)] = c.start_ns - v[i]
    return out


def needless_syncs(profile) -> list[Finding]:
    """Host waits that found their work long done, and streams that wait on their own events."""
    out = []
    stream_ages = _stream_done_for(profile)
    done = []
    for c in profile.api_calls:
        if c.name in ("Stream.synchronize", "Event.synchronize") and c.already_done:
            age = c.done_for_ns or stream_ages.get(id(c), 0)
            if age >= LONG_DONE_NS:
                done.append((c, age))
    if len(done) >= MIN_NEEDLESS_SYNCS:
        cost = sum(c.duration_ns for c, _ in done)
        targets = Counter(c.target.split(" ")[0] for c, _ in done)
        out.append(Finding(
            "needless_sync", "Synchronizations on work that had long completed",
            f"{len(done)} stream/event synchronizations waited for work that had completed a "
            f"median {format_ms(statistics.median(a for _, a in done))} earlier: they ordered nothing "
            f"and cost host time; either the host runs far behind the device or the waits are "
            f"redundant",
            "drop synchronizations whose results are known to be ready, keep one where the host "
            "actually reads the results, or poll with query() when the host has other work",
            {"needless synchronizations": len(done),
             "on": ", ".join(f"{what}s ({n})" for what, n in targets.most_common()),
             "host time in them": format_ms(cost), "called at": top_sites(c for c, _ in done),
             "examples": ", ".join(c.target for c, _ in done[:5])}, [], cost))
    own = [c for c in profile.api_calls if c.name == "Stream.wait" and "its own" in c.target]
    if own:
        out.append(Finding(
            "needless_wait", "Streams wait on their own events",
            f"{len(own)} stream waits were on events recorded on the waiting stream itself: a "
            f"stream already runs its tasks in order, so these waits order nothing",
            "remove waits on a stream's own events; wait only on events of other streams",
            {"needless waits": len(own), "called at": top_sites(own), "examples": ", ".join(c.target for c in own[:5])},
            [], sum(c.duration_ns for c in own)))
    return out
