"""Diagnosis of a profile: every finding, the most costly first, and the device-side ones
(starved devices, small tasks, streams, overlap, copy-bound runs)."""

from __future__ import annotations

import bisect
import heapq
import statistics
from collections import Counter, defaultdict

from ..units import format_bytes, format_ms
from .critical import critical_path
from .data import COMPUTE_KINDS, GRAPH_SEGMENT, NONBLOCKING, QUEUE_FULL, ProfileData
from .hosttime import attribute
from .intervals import gaps, intersection, total, union
from .diagnose_failures import failed_tasks, never_finished, stragglers
from .diagnose_host import (
    full_queue, needless_syncs, pinned_saving, serializing_syncs, staged_sites, submit_costs,
    sync_in_loop, synchronous)
from .diagnose_memory import memory_findings
from .diagnose_priority import priority_inversion
from .diagnose_waves import tail_waves
from .finding import (
    COPY_BOUND_SHARE, DISPATCH_BOUND_SHARE, FEW_TASKS_PER_STREAM, Finding, MIN_GAP_NS,
    MIN_GAP_VIRTUAL_NS, MIN_SMALL_TASKS, MIN_STAGE_SHARE, MIN_STREAM_CHURN, MIN_STREAM_CHURN_NS,
    MIN_WORK_TASKS, OVERLAP_SHARE, SMALL_TASK_NS, STARVED_UTILIZATION, STREAMS_PER_EXECUTOR,
    STREAM_CHURN_SHARE, format_us, min_window_ns, percentile, task_ref)
from .metrics import DISPATCHED_KINDS, DURATION, dispatch_latencies, within, work_by_device, work_window


# ---- diagnosis -----------------------------------------------------------------------------

def diagnose(profile: ProfileData, windows: list[tuple[int, int]] | None = None,
             whole: dict | None = None, spans: list[tuple[int, int]] | None = None) -> list[Finding]:
    """Every problem the profile shows evidence of, the most costly first. With `windows`
    (sorted, disjoint; see scope.within) idle device time counts only inside them, `whole`
    maps id() of each piece of a task cut to them to the task it was cut from (how long a
    task is, it judges whole), and `spans` are the range's instances (what one does, the
    next need not repeat)."""
    findings: list[Finding] = []
    devices = {d.id: d for d in profile.devices}
    for dev_id, work in sorted(work_by_device(profile).items()):
        findings += _host_bound(dev_id, work, windows, profile)
        findings += _small_tasks(dev_id, work, profile, whole or {})
        findings += _too_many_streams(dev_id, work, devices.get(dev_id), profile)
        findings += _no_overlap(dev_id, work, profile)
    findings += _copy_bound(profile, windows)
    findings += tail_waves(profile, whole)
    findings += stragglers(profile)
    findings += priority_inversion(profile)
    findings += sync_in_loop(profile, windows)
    findings += serializing_syncs(profile, windows, spans)
    findings += needless_syncs(profile)
    findings += memory_findings(profile, devices)
    if not any(f.kind == "held_by_full_queue" for f in findings):  # (it names the queue)
        findings += full_queue(profile, windows)
    findings.sort(key=lambda f: -f.impact_ns)
    # (work that never finished, then failures, before any speed finding)
    return never_finished(profile) + failed_tasks(profile) + findings


def _host_bound(dev_id, work, windows, profile) -> list[Finding]:
    host_funcs = [t for t in work if t.kind == "host_func"]
    work = [t for t in work if t.kind in DISPATCHED_KINDS]  # (the device's own: not host functions)
    if len(work) < MIN_WORK_TASKS:
        return []
    start, end = work_window(work)
    active = within([(start, end)], windows)
    span = total(active)
    dev = next((d for d in profile.devices if d.id == dev_id), None)
    if span <= 0 or span < min_window_ns([] if dev is None else [dev]):
        return []
    busy = union((t.start_ns, t.end_ns) for t in work)
    util = total(within(busy, windows)) / span
    min_gap = MIN_GAP_VIRTUAL_NS if dev is not None and dev.backend == "sim" else MIN_GAP_NS
    idle = [g for g in within(gaps(busy, start, end), windows) if g[1] - g[0] >= min_gap]
    idle_ns = total(idle)
    if util >= STARVED_UTILIZATION or idle_ns < 0.4 * span:
        return []
    held = _held_by_host_functions(dev_id, idle, idle_ns, util, span, host_funcs)
    if held:
        return held
    ready = _ready_not_started(dev_id, profile)
    waiting = total(intersection(idle, ready))
    if waiting >= DISPATCH_BOUND_SHARE * idle_ns:
        # Work was there to run: not the host's calls but its dispatch kept the device idle.
        return _dispatch_bound(dev_id, intersection(idle, ready), waiting, idle_ns, util, span, work, dev)
    # (the threads that gave this device its work: a synchronize on another thread, of
    # another device, says nothing of why this one starved)
    feeders = {t.thread for t in work}
    host = attribute(idle, [c for c in profile.api_calls if c.thread in feeders], profile.memory)
    if host.largest == "waiting":
        # The host was waiting on a device: this one's own work, or another's full queue,
        # which starves this one as surely as slow host code.
        return _held_by_a_full_queue(dev_id, idle, idle_ns, util, span, feeders, profile)
    starts = sorted(work, key=lambda t: t.start_ns)
    begins = [t.start_ns for t in starts]
    after = []
    for _, b in sorted(idle, key=lambda g: g[0] - g[1])[:5]:
        i = bisect.bisect_left(begins, b)
        if i < len(starts):
            after.append(task_ref(starts[i]))
    if host.largest == "own":
        title = f"Device {dev_id} is starved by the host's own code between runtime calls (host-bound)"
        slower = "the program's own code between calls took longer than the device needed"
    else:
        title = (f"Device {dev_id} is starved by the host's runtime calls, "
                 f"{next(iter(host.calls))} first (host-bound)")
        slower = "the runtime calls took longer than the device needed"
    return [Finding(
        "host_bound", title,
        f"device {dev_id} was busy {util:.0%} of the {format_ms(span)} it had work; in its "
        f"{len(idle)} idle stretches ({format_ms(idle_ns)}) the host's time went to {host.breakdown()}: "
        f"{slower} to run the work it was given",
        host.advice(),
        {"device utilization": f"{util:.0%}", "window": format_ms(span), "idle stretches": len(idle),
         "idle time": format_ms(idle_ns), "longest idle": format_ms(max(b - a for a, b in idle)),
         **host.evidence("while idle"), "device tasks": len(work)},
        after, idle_ns)]


def _ready_not_started(dev_id, profile) -> list[tuple[int, int]]:
    """When device `dev_id` had a task ready that had not started: from its submit, or the end
    of what came before it on its stream (a wait included), whichever was later, to its start."""
    per_stream: defaultdict[int, list] = defaultdict(list)
    for t in profile.tasks:
        if t.device == dev_id and t.kind != GRAPH_SEGMENT:
            per_stream[t.stream].append(t)
    spans = []
    for items in per_stream.values():
        items.sort(key=lambda t: (t.task_id, t.start_ns))
        before = 0
        for t in items:
            ready = max(t.enqueue_ns, before)
            if t.kind in DISPATCHED_KINDS and t.start_ns > ready:
                spans.append((ready, t.start_ns))
            before = max(before, t.end_ns)
    return union(spans)


def _dispatch_bound(dev_id, stretches, waiting, idle_ns, util, span, work, dev) -> list[Finding]:
    """Device `dev_id` idled while tasks it could run were ready: they waited to be dispatched."""
    on_cpu = dev is None or dev.backend == "cpu"
    why = ("its executor threads, woken for them, waited for the GIL that the submitting thread "
           "held while it ran Python (the interpreter hands it over once per switch interval)"
           if on_cpu else "the dispatch latencies of the model held them")
    starts = sorted(work, key=lambda t: t.start_ns)
    begins = [t.start_ns for t in starts]
    after = [task_ref(starts[i]) for i in (bisect.bisect_left(begins, b) for _, b in
                                           sorted(stretches, key=lambda g: g[0] - g[1])[:5])
             if i < len(starts)]
    return [Finding(
        "dispatch_bound", f"Device {dev_id} idles with work ready to run (dispatch-bound)",
        f"device {dev_id} was busy {util:.0%} of the {format_ms(span)} it had work; for "
        f"{format_ms(waiting)} of its {format_ms(idle_ns)} idle a task was queued and ready, not "
        f"yet started: {why}",
        "give each task more work, or replay the sequence as a graph (one dispatch for many "
        "tasks)" + ("; a smaller sys.setswitchinterval hands the GIL over sooner" if on_cpu else ""),
        {"device utilization": f"{util:.0%}", "window": format_ms(span),
         "idle with work ready": format_ms(waiting), "idle time": format_ms(idle_ns),
         "device tasks": len(work)},
        after, waiting)]


def _held_by_host_functions(dev_id, idle, idle_ns, util, span, host_funcs) -> list[Finding]:
    """Device `dev_id` idled while host functions on its streams ran: each holds its stream
    until it returns, so the device work queued behind it waits for the host."""
    spans = union((t.start_ns, t.end_ns) for t in host_funcs)
    held = total(intersection(idle, spans))
    if not host_funcs or held < 0.5 * idle_ns:
        return []
    names = Counter(t.name for t in host_funcs)
    name, count = names.most_common(1)[0]
    longest = max(host_funcs, key=DURATION)
    return [Finding(
        "host_func_bound",
        f"Device {dev_id} waits for host functions on its streams ({name} first)",
        f"device {dev_id} was busy {util:.0%} of the {format_ms(span)} it had work; for "
        f"{format_ms(held)} of its {format_ms(idle_ns)} idle its streams were held by "
        f"{len(host_funcs)} host functions ({', '.join(f'{n} x{c}' for n, c in names.most_common(3))}), "
        f"which run on the host and hold their stream until they return",
        "take the host function's work off the stream (do it on the host before or after, or "
        "launch it as a non-blocking callback), make it shorter (a copy from pinned memory with "
        "memcpy_async instead of a synchronous one inside it), or give the device work that "
        "does not wait for it a stream of its own",
        {"device utilization": f"{util:.0%}", "window": format_ms(span),
         "held by host functions": format_ms(held), "idle time": format_ms(idle_ns),
         "host functions": len(host_funcs), f"{name} calls": count,
         "longest": f"{longest.name} {format_ms(longest.duration_ns)}"},
        [task_ref(t) for t in sorted(host_funcs, key=DURATION, reverse=True)[:5]], held)]


def _held_by_a_full_queue(dev_id, idle, idle_ns, util, span, feeders, profile) -> list[Finding]:
    """Device `dev_id` idled while the threads that feed it waited for room in a full queue
    of another device's stream (its submits queued behind that device's work)."""
    full = [c for c in profile.api_calls if c.name == QUEUE_FULL and c.thread in feeders
            and not c.target.endswith(f"of device {dev_id}")]
    held = total(intersection(idle, union((c.start_ns, c.end_ns) for c in full)))
    if held < 0.5 * idle_ns:
        return []
    where = Counter(c.target for c in full).most_common(1)[0][0]
    return [Finding(
        "held_by_full_queue",
        f"Device {dev_id} is starved while the host waits for room in the full queue of {where}",
        f"device {dev_id} was busy {util:.0%} of the {format_ms(span)} it had work; for "
        f"{format_ms(held)} of its {format_ms(idle_ns)} idle the host thread that feeds it was "
        f"blocked in a submit to {where}, whose queue was full of work not done yet",
        f"submit to each device from a host thread of its own, or order the submits so that "
        f"{where.split(' of ')[-1]}'s queue does not hold the host while this device waits; a "
        f"deeper submission queue lets the host run further ahead",
        {"device utilization": f"{util:.0%}", "idle time": format_ms(idle_ns),
         "held by the full queue": format_ms(held), "blocked submits": len(full)},
        [], held)]


def _small_tasks(dev_id, work, profile, whole: dict) -> list[Finding]:
    small = [t for t in work if t.kind not in ("host_func", NONBLOCKING)]
    # (a task cut to a range's windows is judged by its whole run: a 1 ms kernel whose first
    # microsecond falls inside the range is no small task; its time inside is the work)
    tasks = list({id(w): w for w in (whole.get(id(t), t) for t in small)}.values())
    if len(tasks) < MIN_SMALL_TASKS:
        return []
    d50 = statistics.median(t.duration_ns for t in tasks)
    if d50 >= SMALL_TASK_NS:
        return []
    submits = submit_costs(profile)  # (the host's: its calls are not told apart by device)
    launch50 = statistics.median(submits) if submits else 0
    disp50 = percentile(dispatch_latencies(profile, dev_id), 0.5)  # (this device's)
    overhead = launch50 + disp50
    if overhead < d50:
        return []
    work_ns = sum(t.duration_ns for t in small)
    examples = [task_ref(t) for t in heapq.nsmallest(5, tasks, key=DURATION)]
    return [Finding(
        "small_tasks", f"Tasks on device {dev_id} are too small: overhead dominates the work",
        f"the median task ran {format_us(d50)}, while submitting one costs {format_us(launch50)} on the host "
        f"and dispatching it {format_us(disp50)}: more time goes into handling tasks than into work",
        "do more work per task: fuse small kernels, process a whole batch per launch, merge "
        "small copies into one; replay repeated sequences as a graph",
        {"tasks": len(tasks), "median task": format_us(d50),
         "median submit call (the host's, all devices)": format_us(launch50),
         "median dispatch latency": format_us(disp50), "work in these tasks": format_ms(work_ns),
         "host time submitting (all devices)": format_ms(sum(submits))},
        examples, max(0, int(len(tasks) * overhead - work_ns)))]


def _max_concurrent_streams(work) -> int:
    """The most streams that had work queued or running at one time."""
    spans: defaultdict[int, list] = defaultdict(lambda: [None, 0])  # stream -> [first enqueue, last end]
    for t in work:
        span = spans[t.stream]
        span[0] = t.enqueue_ns if span[0] is None else min(span[0], t.enqueue_ns)
        span[1] = max(span[1], t.end_ns)
    edges = sorted([(a, 1) for a, _ in spans.values()] + [(b, -1) for _, b in spans.values()])
    most = live = 0
    for _, step in edges:
        live += step
        most = max(most, live)
    return most


def _useful_streams(work, info) -> int:
    """How many streams the device could run at once with tasks like these: kernels by the units
    each holds (one without block_dim takes every core of a sim device), copies by the engines,
    host functions by their threads; at least 1."""
    if info is None:
        return 2
    useful = 0
    units = [t.units for t in work if t.kind in COMPUTE_KINDS]
    if units:
        useful += max(1, info.compute_units // max(1, int(statistics.median(units))))
    if any(t.kind == "copy" for t in work):
        useful += info.copy_engines
    if any(t.kind in ("host_func", NONBLOCKING) for t in work):
        useful += info.host_func_threads
    return max(useful, 1)


def _too_many_streams(dev_id, work, info, profile) -> list[Finding]:
    per_stream = Counter(t.stream for t in work)
    useful = _useful_streams(work, info)
    per = statistics.median(per_stream.values())
    concurrent = _max_concurrent_streams(work)
    creates = sum(c.name == "Device.create_stream" for c in profile.api_calls)
    destroys = sum(c.name == "Stream.destroy" for c in profile.api_calls)
    manage_ns = sum(c.duration_ns for c in profile.api_calls
                    if c.name in ("Device.create_stream", "Stream.destroy"))
    work_ns = sum(t.duration_ns for t in work)
    crowded = concurrent > max(8, STREAMS_PER_EXECUTOR * useful) and per <= FEW_TASKS_PER_STREAM
    churn = (len(per_stream) >= MIN_STREAM_CHURN and manage_ns >= MIN_STREAM_CHURN_NS
             and manage_ns >= STREAM_CHURN_SHARE * work_ns)
    if not (crowded or churn):
        return []
    if crowded:
        cause = (f"up to {concurrent} streams had work at once where about {useful} of these tasks "
                 f"can run at once, a median of {per:g} tasks each: streams beyond what the executors "
                 f"can run at once add scheduling and synchronization cost without adding concurrency")
    else:
        made = f"{creates} stream(s) created and {destroys} destroyed" if destroys else \
            f"{creates} stream(s) created (none destroyed)"
        cause = (f"{made} while profiling, for {len(work)} tasks on {len(per_stream)} streams: "
                 f"creating and destroying took {format_ms(manage_ns)}, against {format_ms(work_ns)} "
                 f"of device work")
    return [Finding(
        "too_many_streams", f"Too many streams on device {dev_id} for the work they carry", cause,
        f"use about as many streams as can run these tasks at once ({useful}) and reuse them "
        "across iterations instead of creating a stream per task or per batch",
        {"streams with work": len(per_stream), "most at once": concurrent,
         "streams that can run at once": useful, "median tasks per stream": per,
         "stream create/destroy calls": creates + destroys,
         "time creating/destroying streams": format_ms(manage_ns), "device work": format_ms(work_ns)},
        [task_ref(t) for t in work[:5]], manage_ns)]


def _no_overlap(dev_id, work, profile) -> list[Finding]:
    copies = [t for t in work if t.kind == "copy"]
    compute = [t for t in work if t.kind in COMPUTE_KINDS]
    if len(copies) < 4 or len(compute) < 4:
        return []
    c_busy = union((t.start_ns, t.end_ns) for t in copies)
    k_busy = union((t.start_ns, t.end_ns) for t in compute)
    c_ns, k_ns = total(c_busy), total(k_busy)
    busy = total(union(c_busy + k_busy))
    if c_ns < MIN_STAGE_SHARE * busy or k_ns < MIN_STAGE_SHARE * busy:
        return []  # one of them is too small to be worth overlapping
    both = total(intersection(c_busy, k_busy))
    smaller = min(c_ns, k_ns)
    if both >= OVERLAP_SHARE * smaller:
        return []
    # Only copies and kernels that take turns could have overlapped (copy n+1 with kernel n);
    # all copies first and then all kernels is a dependency, not a missed overlap.
    turns = sorted((t.start_ns, t.kind == "copy") for t in copies + compute)
    runs = 1 + sum(a[1] != b[1] for a, b in zip(turns, turns[1:]))
    if runs < min(len(copies), len(compute)):
        return []
    c_streams = sorted({t.stream for t in copies})
    k_streams = sorted({t.stream for t in compute})
    shared = sorted(set(c_streams) & set(k_streams))
    staged = synchronous(copies, profile)  # (copies that finished before memcpy_async returned)
    on_shared = sum(t.stream in shared for t in copies)
    # Waits between the copy and the compute streams, both ways: each copy waits for the
    # kernel before it and each kernel for its copy (one buffer, ordered by events). Only
    # waits that blocked count, and only a copy stream that feeds the kernels waiting for
    # them: a D2H stream waiting for the kernel whose output it copies is a plain output
    # dependency, and an input stream's wait on a buffer's last use that was done long
    # before (double-buffering; a device-wide sync between batches) ordered nothing.
    c_set, k_set = set(c_streams), set(k_streams)
    records = {t.key: t for t in profile.tasks if t.device == dev_id and t.kind in ("event_record", "notify_record")}
    to_copy_from: list = []  # (copy stream) of each blocked copy-stream wait on a compute record
    feeders: set = set()     # copy streams whose records compute waited for (blocking)
    to_compute = 0
    for t in profile.tasks:
        if t.device == dev_id and t.released_by is not None and t.kind in ("event_wait", "notify_wait"):
            rec = tuple(t.released_by)
            src = records.get(rec)
            if src is not None and src.end_ns <= t.start_ns:
                continue  # (done when the wait began: it held nothing back)
            src_stream = rec[1] if rec[0] == dev_id else None
            if t.stream in c_set and src_stream in k_set:
                to_copy_from.append(t.stream)
            elif t.stream in k_set and src_stream in c_set:
                to_compute += 1
                feeders.add(src_stream)
    to_copy = sum(stream in feeders for stream in to_copy_from)
    ping_pong = min(to_copy, to_compute) >= min(len(copies), len(compute)) / 2
    # Structural causes only: a shared stream, blocking copies or waits both ways serialize
    # by construction; separate streams that take turns otherwise are host-bound (reported
    # by that finding).
    if on_shared < len(copies) / 2 and len(staged) < len(copies) / 2 and not ping_pong:
        return []
    why = (f"copies and kernels are issued on the same stream ({', '.join(map(str, shared))}), "
           f"which runs them one after the other" if on_shared >= len(copies) / 2 else
           "the copies block the host until they finish, so nothing can be queued beside them"
           if len(staged) >= len(copies) / 2 else
           f"each copy waits for the kernel before it and each kernel for its copy (event waits "
           f"between streams {c_streams} and {k_streams}: one buffer, used in turn)")
    evidence: dict[str, object] = {"copy time": format_ms(c_ns), "compute time": format_ms(k_ns),
                                   "overlapped": format_ms(both), "copy streams": c_streams,
                                   "compute streams": k_streams, "could save up to": format_ms(smaller - both)}
    advice = ("put copies on their own stream(s) and order them with events, double-buffer so "
              "batch n+1 is copied while batch n computes")
    if staged:
        evidence["copies that finished before memcpy_async returned"] = len(staged)
        evidence["their memcpy_async calls at"] = staged_sites(staged, profile)
        advice += "; copy from pinned memory (malloc_host) so memcpy_async does not block the host"
    examples = [task_ref(t) for t in copies[:3] + compute[:3]]
    # (what the compute is, by its kinds: a program of copies and memsets has no kernel)
    kernels = sum(t.kind == "kernel" for t in compute)
    what = "kernels" if kernels == len(compute) else "fills (memsets)" if not kernels else "kernels and fills"
    why = why.replace("kernel", "fill").replace("compute", "fill") if not kernels else why
    return [Finding(
        "no_overlap", f"Copies and compute do not overlap on device {dev_id}",
        f"{len(copies)} copies ({format_ms(c_ns)}) and {len(compute)} {what} ({format_ms(k_ns)}) overlapped "
        f"for only {format_ms(both)}: {why}", advice + ".", evidence, examples, smaller - both)]


# Copies that overlap this share of the compute already run beside it: more streams add nothing.
OVERLAP_ENOUGH = 0.5
# A copy engine (direction) busy this share of the run is saturated: the transfers' bound.
SATURATED = 0.8
_DIRECTION_WORDS = {"host_to_device": "H2D", "device_to_host": "D2H", "device_to_device": "D2D",
                    "host_to_host": "H2D"}  # (the engine that runs host to host: see critical)


def _busiest_engine(profile, copies, windows=None) -> tuple[str, float] | None:
    """('device 0's H2D copy engine', busy share of the run) for the most used copy engine
    class whose busy time (over its engines) is SATURATED of the run (its part inside
    `windows`) or more, else None."""
    start = min(t.start_ns for t in copies)
    end = max(t.end_ns for t in profile.tasks)
    run = end - start if windows is None else total(intersection(windows, [(start, end)]))
    if run <= 0:
        return None
    devices = {d.id: d for d in profile.devices}
    lanes: dict = defaultdict(list)
    for t in copies:
        direction = _DIRECTION_WORDS.get(t.name)
        info = devices.get(t.device)
        split = direction is not None and info is not None and info.copy_engines_per_direction
        lanes[(t.device, direction if split else None)].append((t.start_ns, t.end_ns))
    best = None
    for (dev, direction), spans in lanes.items():
        info = devices.get(dev)
        if direction is None or info is None:
            engines = max(1, info.copy_engines if info is not None else 1)
            what = f"device {dev}'s copy engines" if engines > 1 else f"device {dev}'s copy engine"
        else:
            engines = max(1, info.copy_engines_per_direction[("H2D", "D2H", "D2D").index(direction)])
            what = f"device {dev}'s {direction} copy engine" + ("s" if engines > 1 else "")
        busy = sum(b - a for a, b in spans) / engines if engines > 1 else total(union(spans))
        share = busy / run
        if share >= SATURATED and (best is None or share > best[1]):
            best = (what, share)
    return best


def _copy_bound(profile, windows=None) -> list[Finding]:
    """Copies over half the critical path (the chain of work the run's length is made of):
    the run lasts as long as its transfers, however well the rest of it overlaps (with
    `windows`, the path's part inside them)."""
    copies = [t for t in profile.tasks if t.kind == "copy" and t.started]
    if not copies:
        return []
    end = max(t.end_ns for t in profile.tasks)
    if windows is not None:
        end = total(intersection(windows, [(0, end)]))
    # (cheap first: the path's copies are at most all the time any copy ran)
    shortest = max(1, min_window_ns(profile.devices))
    if end < shortest or total(union((t.start_ns, t.end_ns) for t in copies)) < COPY_BOUND_SHARE * end:
        return []
    path = critical_path(profile, windows)
    length, copy_ns = path["length_ns"], path["by_kind"].get("copy", 0)
    if length < shortest or copy_ns < COPY_BOUND_SHARE * length:
        return []
    nbytes, busy = sum(t.nbytes for t in copies), sum(t.duration_ns for t in copies)
    evidence: dict[str, object] = {
        "critical path": format_ms(length), "copies on it": format_ms(copy_ns),
        "copies' share of it": f"{copy_ns / length:.0%}", "copies": len(copies),
        "bytes copied": format_bytes(nbytes), "copy throughput": f"{nbytes / max(1, busy):.2f} GB/s"}
    cause = (f"copies make {copy_ns / length:.0%} of the critical path ({format_ms(copy_ns)} of "
             f"{format_ms(length)}): the run lasts as long as its transfers")
    advice = ("move fewer bytes: keep data on the device across iterations and copy only what "
              "changed")
    # What else helps follows what the copies did: where they already overlap most of the
    # compute, more streams change nothing, and an engine busy most of the run is the bound.
    compute = [t for t in profile.tasks if t.kind in COMPUTE_KINDS and t.started]
    k_busy = union((t.start_ns, t.end_ns) for t in compute)
    k_ns = total(k_busy)
    overlap = total(intersection(union((t.start_ns, t.end_ns) for t in copies), k_busy)) / k_ns \
        if k_ns else 1.0
    if compute:
        evidence["compute time overlapped by copies"] = f"{overlap:.0%}"
    saturated = _busiest_engine(profile, copies, windows)
    if saturated is not None:
        engine, share = saturated
        evidence[f"{engine} busy"] = f"{share:.0%} of the run"
        cause += f"; {engine} is busy {share:.0%} of the run: its bandwidth is the bound"
        advice += f", or give the transfers more bandwidth than {engine}'s"
    if compute and overlap < OVERLAP_ENOUGH:
        advice += "; put the copies on streams of their own so that they overlap the compute"
    impact = 0  # (a bound, not a cost: what moving fewer bytes saves the profile cannot say)
    staged = synchronous(copies, profile)  # (pageable: staged inside the call)
    if 2 * len(staged) >= len(copies):
        staged_ns = sum(t.duration_ns for t in staged)
        evidence["copies from pageable host memory"] = f"{len(staged)} ({format_ms(staged_ns)})"
        evidence["pageable copies submitted at"] = staged_sites(staged, profile)
        cause += (f"; {len(staged)} of the {len(copies)} copies were from pageable host memory: "
                  f"staged by the host through a bounce buffer, each blocking the host until done")
        advice = ("copy from pinned memory (malloc_host): it is copied at the link's speed, "
                  "and memcpy_async returns at once; then " + advice)
        saving = pinned_saving(staged, staged_ns, profile)
        if saving:
            evidence["pinned memory could save about"] = format_ms(saving)
            impact = saving
    examples = [task_ref(t) for t in sorted(copies, key=DURATION, reverse=True)[:5]]
    return [Finding("copy_bound", "The run is copy-bound: copies make most of its critical path",
                    cause, advice + ".", evidence, examples, impact)]
