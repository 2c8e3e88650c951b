"""Metrics and diagnosis of a profile: utilization, latency, and the classic runtime problems."""

from __future__ import annotations

import bisect
import heapq
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from operator import attrgetter

from ..backends import presets
from ..errors import ErrorCode
from ..units import format_bytes, format_ms
from .critical import capacities, critical_path, executor_holders
from .data import (COMPUTE_KINDS, COPY_DIRECTIONS, EXIT_MARK, GRAPH_SEGMENT, QUEUE_FULL, WORK_KINDS, ProfileData,
                   calls_made)
from .hosttime import attribute
from .intervals import gaps, intersection, total, union

# Thresholds of the diagnosis (named so that a finding can say what it compared against).
MIN_WORK_TASKS = 20           # fewer device tasks than this: too little to judge utilization
MIN_WINDOW_NS = 5_000_000     # ... or a busy window shorter than 5 ms
STARVED_UTILIZATION = 0.5     # device busy less than half the time
MIN_GAP_NS = 20_000           # idle stretches shorter than 20 us are scheduling noise ...
MIN_GAP_VIRTUAL_NS = 1_000    # ... where time is real; in virtual time (sim) none is noise
SMALL_TASK_NS = 50_000        # median device task under 50 us ...
MIN_SMALL_TASKS = 100         # ... over at least this many tasks
STREAMS_PER_EXECUTOR = 2      # more streams than 2 per executor ...
FEW_TASKS_PER_STREAM = 8      # ... each with a handful of tasks: overhead, not concurrency
MIN_STREAM_CHURN = 10         # streams created and destroyed ...
STREAM_CHURN_SHARE = 0.1      # ... costing over 10% of the device work they carried
MIN_STREAM_CHURN_NS = 100_000  # ... and at least 0.1 ms in all (0 >= 10% of 0 once fired on sim,
                               # where making a stream is modelled as free)
MIN_DEVICE_SYNCS = 5          # device-wide synchronizations between submissions
MIN_NEEDLESS_SYNCS = 10       # synchronizations that found the work already done ...
LONG_DONE_NS = 5_000_000      # ... work complete for at least 5 ms before the call
OVERLAP_SHARE = 0.1           # copies and compute overlapping less than 10% of the smaller
MIN_STAGE_SHARE = 0.1         # ... when each takes at least 10% of the device's busy time
COPY_BOUND_SHARE = 0.5        # copies over half the critical path: the run is copy-bound
PEAK_SHARE = 0.9              # peak allocation at 90% of capacity
FRAGMENTED = 0.5              # largest free range under half of the free memory
MIN_FRAGMENT_FREE = 1 << 20   # ... with at least 1 MiB free
CACHED_SHARE = 0.5            # a pool caching free blocks worth half the device (less is
                              # what a caching pool is for)

SUBMIT_APIS = ("launch", "launch_host_func", "memcpy_async", "memcpy2d_async", "memset_async",
               "Graph.launch", "hccl.all_reduce", "hccl.broadcast", "hccl.all_gather",
               "hccl.reduce_scatter", "hccl.all_to_all", "hccl.send", "hccl.recv")


@dataclass
class Finding:
    """One diagnosed problem: what, why (with figures and task ids), and what to try."""

    kind: str          # host_bound, dispatch_bound, host_func_bound, held_by_full_queue,
                       # small_tasks, straggler, too_many_streams, device_sync_in_loop, stream_sync_in_loop,
                       # needless_sync, needless_wait, no_overlap, copy_bound, memory_peak, fragmentation,
                       # pool_cache, never_freed, failed_tasks, never_finished
    title: str
    cause: str
    advice: str
    evidence: dict = field(default_factory=dict)
    task_ids: list = field(default_factory=list)   # "device/stream/task" of example tasks
    impact_ns: int = 0  # estimated time it cost (0: not a time cost)

    def __str__(self) -> str:
        ev = "; ".join(f"{k}: {v}" for k, v in self.evidence.items())
        tasks = f"\n  tasks (device/stream/task): {', '.join(self.task_ids[:10])}" if self.task_ids else ""
        return f"{self.title}\n  cause: {self.cause}\n  evidence: {ev}{tasks}\n  try: {self.advice}"

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {"kind": self.kind, "title": self.title, "cause": self.cause, "advice": self.advice,
                "evidence": self.evidence, "task_ids": self.task_ids, "impact_ns": self.impact_ns}


def _pct(values, q: float) -> int:
    if not values:
        return 0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def _us(ns: float) -> str:
    return f"{ns / 1e3:.1f} us"


def task_ref(t) -> str:
    """A task's reference as printed in findings: device/stream/task."""
    return f"{t.device}/{t.stream}/{t.task_id}"


# ---- metrics -------------------------------------------------------------------------------

def _work_by_device(profile: ProfileData) -> dict[int, list]:
    out = defaultdict(list)
    for t in profile.tasks:
        if t.kind in WORK_KINDS:
            out[t.device].append(t)
    return out


def _window(tasks) -> tuple[int, int]:
    return min(t.enqueue_ns for t in tasks), max(t.end_ns for t in tasks)


DISPATCHED_KINDS = ("kernel", "copy", "memset")  # what "dispatch latency" is measured on
# The share of a starved device's idle time during which a task was ready but not started,
# from which on its dispatch, not the host's calls, is what starved it (below it, a modelled
# dispatch latency that comes with every task is part of the host's gap, not the cause).
DISPATCH_BOUND_SHARE = 0.75
# The time the other ranks of a collective wait for the last one (each, on average) from
# which on, as a share of the profile, that rank is a straggler worth a finding.
STRAGGLER_SHARE = 0.05
_DEVICE, _STREAM, _TASK_ID = attrgetter("device"), attrgetter("stream"), attrgetter("task_id")
_DURATION = attrgetter("duration_ns")


def dispatch_latencies(profile: ProfileData, device: int | None = None) -> list[int]:
    """Ready-to-start of device tasks (kernels, copies, memsets) whose stream had nothing
    else to run: the dispatch latency alone, with no queueing behind earlier work of their
    stream, and none for an executor of their class that another stream's task held (ready
    is then when the last such task before it ended: contention, not dispatch). Of one
    device's tasks when `device` is given."""
    holder = executor_holders(profile.tasks, capacities(profile))
    last_end: dict = {}
    out = []
    tasks = profile.tasks if device is None else [t for t in profile.tasks if t.device == device]
    ordered = sorted(tasks, key=_TASK_ID)  # by (device, stream, task id): three stable
    ordered.sort(key=_STREAM)                      # sorts, no key tuple per task
    ordered.sort(key=_DEVICE)
    for t in ordered:
        key = (t.device, t.stream)
        if t.kind in DISPATCHED_KINDS and last_end.get(key, -1) <= t.enqueue_ns:
            ready = t.enqueue_ns
            held = holder(t)
            if held is not None and held.end_ns > ready:
                ready = held.end_ns
            out.append(max(0, t.start_ns - ready))
        last_end[key] = t.end_ns
    return out


def _spread(values) -> dict:
    """count, p50, p90, p99 and max of ns figures (one percentile rule for every report)."""
    return {"count": len(values), "p50": _pct(values, 0.5), "p90": _pct(values, 0.9),
            "p99": _pct(values, 0.99), "max": max(values, default=0)}


def metrics(profile: ProfileData) -> dict:
    """Utilization per stream / executor / device, time queued and dispatch latency, host API
    time, bandwidth."""
    out: dict = {"duration_ns": profile.duration_ns,
                 "tasks": dict(Counter(t.kind for t in profile.tasks)), "devices": {},
                 "streams": {}, "executors": {}}
    devices = {d.id: d for d in profile.devices}
    for dev_id, work in sorted(_work_by_device(profile).items()):
        start, end = _window(work)
        span = max(end - start, 1)
        # (the device's own work: a host function holds its stream, but runs on the host)
        on_device = [t for t in work if t.kind in DISPATCHED_KINDS]
        busy = total(union((t.start_ns, t.end_ns) for t in on_device))
        out["devices"][dev_id] = {"window_ns": span, "busy_ns": busy, "utilization": busy / span,
                                  "tasks": len(on_device)}
        per_stream = defaultdict(list)
        for t in work:
            per_stream[t.stream].append(t)
        for sid, ts in sorted(per_stream.items()):
            # (a union: a non-blocking host function, filed under the stream that launched it,
            # may run beside the stream's later tasks)
            b = total(union((t.start_ns, t.end_ns) for t in ts))
            out["streams"][f"{dev_id}/{sid}"] = {"device": dev_id, "stream": sid, "tasks": len(ts),
                                                 "busy_ns": b, "utilization": b / span}
        info = devices.get(dev_id)
        units = {"compute": info.compute_units if info else 1,
                 "copy": info.copy_engines if info else 1,
                 "host": info.host_func_threads if info else 1}
        classes = (("compute", COMPUTE_KINDS), ("copy", ("copy",)), ("host", ("host_func",)))
        for ex, kinds in classes:  # (a task holds its units: a kernel on 24 AI cores, 24)
            b = sum(t.duration_ns * t.units for t in work if t.kind in kinds)
            out["executors"][f"{dev_id}/{ex}"] = {"device": dev_id, "executor": ex,
                                                  "units": units[ex], "busy_ns": b,
                                                  "utilization": b / (span * units[ex])}
        # Per copy direction (each has engines of its own): how long at least one of its
        # copies ran. A copy-bound pipeline shows here as one direction busy all the time,
        # though the copy class, pooled over every direction, looks a third used.
        directions = defaultdict(list)
        for t in work:
            if t.kind == "copy" and t.name in COPY_DIRECTIONS:  # (a 2D or collective copy's
                directions[t.name].append((t.start_ns, t.end_ns))  # name says no direction)
        for name, spans in sorted(directions.items()):
            b = total(union(spans))
            out["executors"][f"{dev_id}/copy {name}"] = {
                "device": dev_id, "executor": f"copy {name}", "units": "-", "busy_ns": b,
                "utilization": b / span}
    # Time queued in the stream (enqueue -> start, behind earlier work) is not a latency of
    # the runtime; the dispatch latency is that of tasks whose stream was idle.
    out["queued_ns"] = _spread([t.queued_ns for t in profile.tasks if t.kind in DISPATCHED_KINDS])
    out["dispatch_latency_ns"] = _spread(dispatch_latencies(profile))
    api = defaultdict(list)
    for call, own_ns in calls_made(profile.api_calls):
        api[call.name].append(own_ns)
    out["api"] = {name: {"count": len(d), "total_ns": sum(d), "mean_ns": sum(d) // len(d),
                         "max_ns": max(d)} for name, d in sorted(api.items())}
    out["api_total_ns"] = sum(v["total_ns"] for v in out["api"].values())
    copies: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for t in profile.tasks:
        if t.kind == "copy":
            c = copies[t.name]
            c[0] += 1
            c[1] += t.nbytes
            c[2] += t.duration_ns
    out["copy_bandwidth"] = {name: {"count": n, "bytes": b, "busy_ns": d,
                                    "gb_per_s": b / d if d else 0.0}
                             for name, (n, b, d) in sorted(copies.items())}
    mem: dict[int, dict[str, int]] = {}
    for s in profile.memory:
        m = mem.setdefault(s.device, {"peak_allocated": 0, "peak_reserved": 0})
        m["peak_allocated"] = max(m["peak_allocated"], s.allocated)
        m["peak_reserved"] = max(m["peak_reserved"], s.reserved)
    for dev_id, m in mem.items():
        m["capacity"] = devices[dev_id].capacity if dev_id in devices else 0
    out["memory"] = mem
    return out


# ---- diagnosis -----------------------------------------------------------------------------

def diagnose(profile: ProfileData, windows: list[tuple[int, int]] | None = None) -> list[Finding]:
    """Every problem the profile shows evidence of, the most costly first. With `windows`
    (sorted, disjoint; see scope.within) idle device time counts only inside them."""
    findings: list[Finding] = []
    devices = {d.id: d for d in profile.devices}
    for dev_id, work in sorted(_work_by_device(profile).items()):
        findings += _host_bound(dev_id, work, windows, profile)
        findings += _small_tasks(dev_id, work, profile)
        findings += _too_many_streams(dev_id, work, devices.get(dev_id), profile)
        findings += _no_overlap(dev_id, work, profile)
    findings += _copy_bound(profile)
    findings += _stragglers(profile)
    findings += _sync_in_loop(profile, windows)
    findings += _needless_syncs(profile)
    findings += _memory(profile, devices)
    findings.sort(key=lambda f: -f.impact_ns)
    # (work that never finished, then failures, before any speed finding)
    return _never_finished(profile) + _failed_tasks(profile) + findings


def _stragglers(profile: ProfileData) -> list[Finding]:
    """A rank that reaches its collectives last while the others wait in them, idle: the time
    they waited, and the work its stream did before it arrived."""
    tasks = {t.key: t for t in profile.tasks}
    shared = {k for k, n in Counter(t.key for t in profile.tasks).items() if n > 1}  # (graph replays)
    waited: defaultdict[tuple, int] = defaultdict(int)   # (comm, late rank) -> ns the others waited
    late: defaultdict[tuple, list] = defaultdict(list)   # (comm, late rank) -> [(collective, its part)]
    ranks: dict[int, int] = {}                           # comm -> how many ranks
    submitted_late: defaultdict[tuple, int] = defaultdict(int)  # ... of the waits: the host's
    for coll in profile.collectives:
        keys = [tuple(p[1:]) for p in coll.parts]
        if any(k in shared for k in keys):
            continue  # (a replayed graph's parts share their task's id: which replay is whose?)
        parts = [(p[0], tasks[k]) for p, k in zip(coll.parts, keys) if k in tasks]
        if len(parts) < 2 or coll.state != "done":
            continue
        rank, last = max(parts, key=lambda rp: rp[1].start_ns)
        key = (coll.comm, rank)
        waited[key] += sum(last.start_ns - t.start_ns for _, t in parts)
        # (of that, what the late part would have waited for however fast its stream's work
        # before it: it was not even enqueued before the others had started theirs)
        arrived = min(last.enqueue_ns, last.start_ns)
        submitted_late[key] += sum(max(0, arrived - t.start_ns) for _, t in parts)
        late[key].append((coll, last))
        ranks[coll.comm] = len(parts)
    sim = any(d.backend == "sim" for d in profile.devices)
    out = []
    for (comm, rank), ns in waited.items():
        others = ranks[comm] - 1
        each = ns / others  # what each other rank waited, on average
        if each < max(MIN_GAP_VIRTUAL_NS if sim else MIN_GAP_NS, STRAGGLER_SHARE * profile.duration_ns):
            continue
        colls = late[(comm, rank)]
        coll, part = colls[0]
        before = _work_before(profile, part, {tuple(p[1:]) for c in profile.collectives for p in c.parts})
        names: Counter[str] = Counter()
        for t in before:
            names[t.name] += t.duration_ns
        top = ", ".join(f"{n} {format_ms(d)}" for n, d in names.most_common(3)) or "none recorded"
        host_ns = submitted_late[(comm, rank)]
        evidence = {"collectives": len(colls), "ranks": others + 1,
                    "waited per other rank": format_ms(each), "late rank's device": part.device,
                    "late rank's stream": part.stream}
        if 2 * host_ns >= ns:  # the host, not the rank's stream, held it back
            evidence["of it, before the late part was submitted"] = format_ms(host_ns / others)
            out.append(Finding(
                "straggler", f"Rank {rank} (device {part.device}) of communicator {comm} arrives last "
                             f"at its collectives: the host submits its work late",
                f"in {len(colls)} collective(s) ({coll.op} #{coll.seq} first) rank {rank} reached the "
                f"collective last; the other {others} rank(s) waited {format_ms(each)} each on average, "
                f"their devices idle in it, {format_ms(host_ns / others)} of it before the host had "
                f"even submitted rank {rank}'s part (its stream ran {top} before it): the host was "
                f"still in the other ranks' calls",
                "submit every rank's work before any rank's collective, or each rank from a thread "
                "of its own, so that no rank's collective waits for the host to reach the others",
                evidence, [task_ref(t) for t in sorted(before, key=_DURATION, reverse=True)[:5]], int(ns)))
            continue
        out.append(Finding(
            "straggler", f"Rank {rank} (device {part.device}) of communicator {comm} arrives last "
                         f"at its collectives: the other ranks wait for it",
            f"in {len(colls)} collective(s) ({coll.op} #{coll.seq} first) rank {rank} reached the "
            f"collective last; the other {others} rank(s) waited {format_ms(each)} each on average, "
            f"their devices idle in it; before it, rank {rank}'s stream ran {top}",
            f"balance the work between the ranks (rank {rank}'s stream has more, or slower, work "
            f"before the collective), or overlap it: queue the collective's inputs first and the "
            f"rest after it",
            evidence, [task_ref(t) for t in sorted(before, key=_DURATION, reverse=True)[:5]], int(ns)))
    return out


def _work_before(profile: ProfileData, part, part_keys: set) -> list:
    """The work tasks of `part`'s stream between its previous collective part (`part_keys`:
    every collective's parts), or the start, and `part`."""
    same = sorted((t for t in profile.tasks if t.device == part.device and t.stream == part.stream),
                  key=lambda t: (t.task_id, t.start_ns))
    out: list = []
    for t in same:
        if t is part:
            break
        if t.key in part_keys:
            out = []
        elif t.kind in WORK_KINDS:
            out.append(t)
    return out


def _within(intervals, windows) -> list[tuple[int, int]]:
    """Sorted disjoint `intervals` cut to the analysed windows (None: the whole profile)."""
    return intervals if windows is None else intersection(intervals, windows)


_WAITS = ("event_wait", "notify_wait", "value_wait")
# (not 107019, RT_WAIT_TIMEOUT: a device-side wait's own failure, which a host call only passes
# on; the failed wait is a failed task of the profile)
_GAVE_UP = {ErrorCode.RT_STREAM_SYNC_TIMEOUT: "timed out", ErrorCode.RT_EVENT_SYNC_TIMEOUT: "timed out",
            ErrorCode.RT_DEADLOCK: "found a deadlock"}


def _never_finished(profile: ProfileData) -> list[Finding]:
    """Work that never finished: streams stopped at a task that never ended (still blocked or
    running when profiling ended, or a wait cut short when its stream was dropped), and the
    host calls that gave up waiting for it (a timeout, a deadlock)."""
    stuck = [t for t in profile.tasks if t.fate == "unfinished"
             or (t.fate == "dropped" and t.kind in _WAITS)]
    gave_up = [c for c in profile.api_calls if c.error in _GAVE_UP]
    if not stuck and not gave_up:
        return []
    # (the program's end: an uncaught exception cuts queued work off; it is not stuck)
    ended = next((m for m in profile.marks if m.name.startswith(EXIT_MARK)), None)
    where = []
    for t in stuck:
        if t.fate == "dropped":
            how = f"blocked from {_us(t.start_ns)} until its stream was dropped at {_us(t.end_ns)}"
        elif t.kind in _WAITS:
            how = f"blocked from {_us(t.start_ns)} to the end of the profile"
        else:
            how = f"had not finished (running or waiting for an executor) since {_us(t.start_ns)}"
        where.append(f"device {t.device} stream {t.stream}: {t.name} (task {t.task_id}) {how}")
    calls = [f"{c.name}{f' of {c.target}' if c.target else ''} {_GAVE_UP[c.error]} ({c.error}) "
             f"at {_us(c.end_ns)}" for c in gave_up]
    waits = sum(t.kind in _WAITS for t in stuck)
    cause = "; ".join(where + calls)
    advice = []
    if waits or gave_up:
        advice.append("a wait that never ends waits for a record nothing makes: check that the "
                      "event or notify each blocked stream waits on is recorded (and not another "
                      "one), and that no two streams wait for each other (a DeadlockError's "
                      "message names the cycle)")
    if len(stuck) > waits:
        advice.append("work still queued or running when the profile ended was cut off by the "
                      "program's end, not stuck, unless a kernel or host function never returns: "
                      "synchronize before the program ends" + (" and fix the exception that "
                                                               "ended it" if ended else ""))
    title = (f"Work never finished: {len(stuck)} stream(s) stopped at a task that did not end"
             if stuck else f"{len(gave_up)} wait(s) for the device gave up")
    evidence: dict[str, object] = {"streams stopped": len(stuck), "of them at a wait": waits,
                                   "host waits that gave up": len(gave_up)}
    if ended is not None:
        exception = ended.name[len(EXIT_MARK):]
        evidence["the program ended with"] = exception
        if stuck:  # (a wait among them may only have waited for work the end cut off too)
            title = (f"Work cut off: the program ended with an uncaught exception while "
                     f"{len(stuck)} stream(s) still had work")
            cause = f"{exception} at {_us(ended.ts_ns)} ended the program; {cause}"
            advice.reverse()  # (the end first: a wait's advice only if one had truly stuck)
    return [Finding("never_finished", title, cause, "; ".join(advice), evidence,
                    [task_ref(t) for t in stuck])]


def _failed_tasks(profile: ProfileData) -> list[Finding]:
    """Tasks that raised: which, where, and with what."""
    failed = [t for t in profile.tasks if t.failed]
    if not failed:
        return []
    first = failed[0]
    where = f"task {first.task_id} ({first.name}, a {first.kind}) on device {first.device} stream {first.stream}"
    kinds = Counter(t.error.split(":", 1)[0] or "error" for t in failed)
    return [Finding(
        "failed_tasks", f"{len(failed)} task(s) failed",
        f"{where} raised {first.error or 'an error'}",
        "the error was raised at the next synchronize of its stream (or event, or device) and "
        "is in get_last_error(); in failure mode STOP the stream refused later work",
        {"failed tasks": len(failed), "errors": dict(kinds)},
        [f"{t.device}/{t.stream}/{t.task_id}" for t in failed])]


def _host_bound(dev_id, work, windows, profile) -> list[Finding]:
    host_funcs = [t for t in work if t.kind == "host_func"]
    work = [t for t in work if t.kind in DISPATCHED_KINDS]  # (the device's own: not host functions)
    if len(work) < MIN_WORK_TASKS:
        return []
    start, end = _window(work)
    active = _within([(start, end)], windows)
    span = total(active)
    if span < MIN_WINDOW_NS:
        return []
    busy = union((t.start_ns, t.end_ns) for t in work)
    util = total(_within(busy, windows)) / span
    dev = next((d for d in profile.devices if d.id == dev_id), None)
    min_gap = MIN_GAP_VIRTUAL_NS if dev is not None and dev.backend == "sim" else MIN_GAP_NS
    idle = [g for g in _within(gaps(busy, start, end), windows) if g[1] - g[0] >= min_gap]
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
    host = attribute(idle, [c for c in profile.api_calls if c.thread in feeders])
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
    longest = max(host_funcs, key=_DURATION)
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
        [task_ref(t) for t in sorted(host_funcs, key=_DURATION, reverse=True)[:5]], held)]


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


def _submit_calls(profile):
    return [c for c in profile.api_calls if c.name in SUBMIT_APIS]


def _submit_costs(profile) -> list[int]:
    """Each submitting call's own time: less what it spent waiting for room in a full stream
    queue (waiting on the device, which doing more per task would not save)."""
    return [own for c, own in calls_made(profile.api_calls) if c.name in SUBMIT_APIS]


def _small_tasks(dev_id, work, profile) -> list[Finding]:
    small = [t for t in work if t.kind != "host_func"]
    if len(small) < MIN_SMALL_TASKS:
        return []
    d50 = statistics.median(t.duration_ns for t in small)
    if d50 >= SMALL_TASK_NS:
        return []
    submits = _submit_costs(profile)  # (the host's: its calls are not told apart by device)
    launch50 = statistics.median(submits) if submits else 0
    disp50 = _pct(dispatch_latencies(profile, dev_id), 0.5)  # (this device's)
    overhead = launch50 + disp50
    if overhead < d50:
        return []
    work_ns = sum(t.duration_ns for t in small)
    examples = [task_ref(t) for t in heapq.nsmallest(5, small, key=_DURATION)]
    return [Finding(
        "small_tasks", f"Tasks on device {dev_id} are too small: overhead dominates the work",
        f"the median task ran {_us(d50)}, while submitting one costs {_us(launch50)} on the host "
        f"and dispatching it {_us(disp50)}: more time goes into handling tasks than into work",
        "do more work per task: fuse small kernels, process a whole batch per launch, merge "
        "small copies into one; replay repeated sequences as a graph",
        {"tasks": len(small), "median task": _us(d50),
         "median submit call (the host's, all devices)": _us(launch50),
         "median dispatch latency": _us(disp50), "work in these tasks": format_ms(work_ns),
         "host time submitting (all devices)": format_ms(sum(submits))},
        examples, max(0, int(len(small) * overhead - work_ns)))]


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
    if any(t.kind == "host_func" for t in work):
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
    sync_copies = _synchronous_copies(copies, profile)
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
    if on_shared < len(copies) / 2 and sync_copies < len(copies) / 2 and not ping_pong:
        return []
    why = (f"copies and kernels are issued on the same stream ({', '.join(map(str, shared))}), "
           f"which runs them one after the other" if on_shared >= len(copies) / 2 else
           "the copies block the host until they finish, so nothing can be queued beside them"
           if sync_copies >= len(copies) / 2 else
           f"each copy waits for the kernel before it and each kernel for its copy (event waits "
           f"between streams {c_streams} and {k_streams}: one buffer, used in turn)")
    evidence: dict[str, object] = {"copy time": format_ms(c_ns), "compute time": format_ms(k_ns),
                                   "overlapped": format_ms(both), "copy streams": c_streams,
                                   "compute streams": k_streams, "could save up to": format_ms(smaller - both)}
    advice = ("put copies on their own stream(s) and order them with events, double-buffer so "
              "batch n+1 is copied while batch n computes")
    if sync_copies:
        evidence["copies that finished before memcpy_async returned"] = sync_copies
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


def _copy_bound(profile) -> list[Finding]:
    """Copies over half the critical path (the chain of work the run's length is made of):
    the run lasts as long as its transfers, however well the rest of it overlaps."""
    copies = [t for t in profile.tasks if t.kind == "copy"]
    if not copies:
        return []
    end = max(t.end_ns for t in profile.tasks)
    # (cheap first: the path's copies are at most all the time any copy ran)
    if end < MIN_WINDOW_NS or total(union((t.start_ns, t.end_ns) for t in copies)) < COPY_BOUND_SHARE * end:
        return []
    path = critical_path(profile)
    length, copy_ns = path["length_ns"], path["by_kind"].get("copy", 0)
    if length < MIN_WINDOW_NS or copy_ns < COPY_BOUND_SHARE * length:
        return []
    nbytes, busy = sum(t.nbytes for t in copies), sum(t.duration_ns for t in copies)
    evidence: dict[str, object] = {
        "critical path": format_ms(length), "copies on it": format_ms(copy_ns),
        "copies' share of it": f"{copy_ns / length:.0%}", "copies": len(copies),
        "bytes copied": format_bytes(nbytes), "copy throughput": f"{nbytes / max(1, busy):.2f} GB/s"}
    cause = (f"copies make {copy_ns / length:.0%} of the critical path ({format_ms(copy_ns)} of "
             f"{format_ms(length)}): the run lasts as long as its transfers")
    advice = ("move fewer bytes: keep data on the device across iterations and copy only what "
              "changed; put the copies on streams of their own so that they overlap the compute")
    impact = 0  # (a bound, not a cost: what moving fewer bytes saves the profile cannot say)
    staged = _synchronous(copies, profile)  # (pageable: staged inside the call)
    if 2 * len(staged) >= len(copies):
        staged_ns = sum(t.duration_ns for t in staged)
        evidence["copies from pageable host memory"] = f"{len(staged)} ({format_ms(staged_ns)})"
        cause += (f"; {len(staged)} of the {len(copies)} copies were from pageable host memory: "
                  f"staged by the host through a bounce buffer, each blocking the host until done")
        advice = ("copy from pinned memory (malloc_host): it is copied at the link's speed, "
                  "and memcpy_async returns at once; then " + advice)
        saving = _pinned_saving(staged, staged_ns, profile)
        if saving:
            evidence["pinned memory could save about"] = format_ms(saving)
            impact = saving
    examples = [task_ref(t) for t in sorted(copies, key=_DURATION, reverse=True)[:5]]
    return [Finding("copy_bound", "The run is copy-bound: copies make most of its critical path",
                    cause, advice + ".", evidence, examples, impact)]


def _pinned_saving(staged, staged_ns: int, profile) -> int:
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


def _synchronous_copies(copies, profile) -> int:
    return len(_synchronous(copies, profile))


def _synchronous(copies, profile) -> list:
    """The copies that finished inside the memcpy_async that submitted them (pageable host
    memory: staged by the host, which the call blocks until the copy is done)."""
    calls = defaultdict(list)
    for c in profile.api_calls:
        if c.name in ("memcpy_async", "memcpy2d_async"):
            calls[c.thread].append(c)
    out = []
    for t in copies:
        for c in calls.get(t.thread, ()):
            if c.start_ns <= t.enqueue_ns <= c.end_ns:
                if t.end_ns <= c.end_ns:
                    out.append(t)
                break
    return out


def _sync_in_loop(profile, windows) -> list[Finding]:
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
                {"device synchronizations": len(syncs), "with submissions in between": between,
                 **evidence}, [], idle_after))
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
                {"synchronizations": len(syncs), "with submissions in between": between,
                 **evidence}, [], idle_after))
    return out


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
    # loop of mostly such is no sync in the loop (_needless_syncs names those).
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
    after = _within(intersection(union(after), idle), windows)
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


def _needless_syncs(profile) -> list[Finding]:
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
             "host time in them": format_ms(cost),
             "examples": ", ".join(c.target for c, _ in done[:5])}, [], cost))
    own = [c for c in profile.api_calls if c.name == "Stream.wait" and "its own" in c.target]
    if own:
        out.append(Finding(
            "needless_wait", "Streams wait on their own events",
            f"{len(own)} stream waits were on events recorded on the waiting stream itself: a "
            f"stream already runs its tasks in order, so these waits order nothing",
            "remove waits on a stream's own events; wait only on events of other streams",
            {"needless waits": len(own), "examples": ", ".join(c.target for c in own[:5])},
            [], sum(c.duration_ns for c in own)))
    return out


def _memory(profile, devices) -> list[Finding]:
    out = []
    by_dev = defaultdict(list)
    for s in profile.memory:
        by_dev[s.device].append(s)
    all_ooms = [c for c in profile.api_calls if c.error in (207001, 207018)]
    for dev_id, samples in sorted(by_dev.items()):
        if dev_id < 0 or dev_id not in devices:
            continue
        ooms = [c for c in all_ooms if c.device == dev_id]  # (another device's are its own)
        cap = devices[dev_id].capacity
        peak = max(samples, key=lambda s: s.allocated)
        if peak.allocated >= PEAK_SHARE * cap or ooms:
            live = [a for a in profile.allocations if a.device == dev_id and
                    a.alloc_ns <= peak.ts_ns and (a.free_ns is None or a.free_ns > peak.ts_ns)]
            out.append(Finding(
                "memory_peak",
                f"Device {dev_id} memory peaked at {peak.allocated / cap:.0%} of capacity",
                f"at {format_ms(peak.ts_ns)} live buffers held {format_bytes(peak.allocated)} of {format_bytes(cap)}"
                + (f"; {len(ooms)} allocations failed for lack of memory" if ooms else ""),
                "free buffers as soon as their last task is queued (stream-ordered free), reuse "
                "buffers across iterations, process smaller batches, or raise "
                "ASCENTRT_DEVICE_MEMORY",
                {"peak allocated": format_bytes(peak.allocated), "capacity": format_bytes(cap),
                 "failed allocations": len(ooms), "live buffers at peak": len(live),
                 "largest holders": _sites(live)}, []))
        frag = [s for s in samples if s.largest_free >= 0 and s.free >= MIN_FRAGMENT_FREE
                and s.largest_free < FRAGMENTED * s.free]
        if frag:
            worst = min(frag, key=lambda s: s.largest_free / s.free)
            out.append(Finding(
                "fragmentation", f"Device {dev_id} memory is fragmented",
                f"at {format_ms(worst.ts_ns)} {format_bytes(worst.free)} were free but the largest contiguous "
                f"range was only {format_bytes(worst.largest_free)}: buffers of mixed sizes and lifetimes "
                f"left holes that a large request cannot use",
                "allocate long-lived buffers first and together, use a few fixed buffer sizes and "
                "reuse them, free short-lived buffers in the reverse order of allocation",
                {"free": format_bytes(worst.free), "largest free range": format_bytes(worst.largest_free),
                 "usable share": f"{worst.largest_free / worst.free:.0%}",
                 "failed allocations": len(ooms)}, []))
        # A large cache costs something only when it did not serve what came after: the pool
        # grew right after a sample that held it, or an allocation failed after it formed (a
        # cache at the end of a run, all freed, is what a caching pool is for).
        big = CACHED_SHARE * cap
        grew = next(((a, b) for a, b in zip(samples, samples[1:])
                     if a.reserved - a.allocated >= big and b.reserved > a.reserved), None)
        cached = grew[0] if grew is not None else max(samples, key=lambda s: s.reserved - s.allocated)
        failed = [c for c in ooms if c.start_ns >= cached.ts_ns]
        if cached.reserved - cached.allocated >= big and (grew is not None or failed):
            then = (f"yet at {format_ms(grew[1].ts_ns)} it reserved {format_bytes(grew[1].reserved)}"
                    if grew is not None else f"yet {len(failed)} allocation(s) failed after")
            out.append(Finding(
                "pool_cache", f"Device {dev_id}'s pool caches much more memory than is in use",
                f"at {format_ms(cached.ts_ns)} the allocator reserved {format_bytes(cached.reserved)} for "
                f"{format_bytes(cached.allocated)} of live buffers, {then}: the cached blocks did not "
                f"serve the requests that came after (they did not fit them, or the requests "
                f"went to another pool: a MemPool's cache serves only its own)",
                "trim the pool when the working set shrinks (ascentrt.empty_cache(), "
                "MemPool.trim_to(), a release threshold), keep buffer sizes uniform so cached "
                "blocks are reused",
                {"reserved": format_bytes(cached.reserved), "allocated": format_bytes(cached.allocated)}, []))
    live = [a for a in profile.allocations if a.free_ns is None and not a.reclaimed]
    reclaimed = [a for a in profile.allocations if a.reclaimed]
    leaked = live + reclaimed
    if leaked:
        parts = [f"{len(live)} still live when it ended"] if live else []
        for when, n in Counter(a.reclaimed for a in reclaimed).most_common():
            parts.append(f"{n} reclaimed at {when}, never freed by the program")
        out.append(Finding(
            "never_freed", f"{len(leaked)} allocation{'s were' if len(leaked) > 1 else ' was'} "
                           f"never freed",
            f"{len(leaked)} buffer(s) ({format_bytes(sum(a.nbytes for a in leaked))}) allocated while "
            f"profiling were never freed: {', '.join(parts)}",
            "free every buffer when done with it (buf.free()); a device reset or acl.finalize "
            "reclaims what is left but is no free (a leak in a loop ends in an out-of-memory error "
            "before it)",
            {"buffers": len(leaked), "bytes": format_bytes(sum(a.nbytes for a in leaked)),
             "device buffers": sum(a.device >= 0 for a in leaked),
             "pinned host buffers": sum(a.device < 0 for a in leaked),
             "reclaimed unfreed": len(reclaimed),
             "allocated at": _sites(leaked)}, []))
    return out


def _sites(allocs, top: int = 3) -> str:
    by_site: defaultdict[str, int] = defaultdict(int)
    for a in allocs:
        by_site[a.site] += a.nbytes
    ranked = sorted(by_site.items(), key=lambda kv: -kv[1])[:top]
    return ", ".join(f"{site} ({format_bytes(n)})" for site, n in ranked)
