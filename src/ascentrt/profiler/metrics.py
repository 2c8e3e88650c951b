"""A profile's figures: utilization per stream, executor and device, dispatch latency, API
time, bandwidth."""

from __future__ import annotations

from collections import Counter, defaultdict
from operator import attrgetter

from .critical import capacities, executor_holders
from .data import COMPUTE_KINDS, COPY_DIRECTIONS, NONBLOCKING, WORK_KINDS, ProfileData, calls_made, sync_copies
from .intervals import intersection, total, union
from .finding import percentile


def work_by_device(profile: ProfileData) -> dict[int, list]:
    """Each device's work tasks (kernels, copies, memsets, host functions, waits) by device
    id, those that never started left out (dropped unrun, or queued when profiling ended)."""
    out = defaultdict(list)
    for t in profile.tasks:
        if t.kind in WORK_KINDS and t.started:
            out[t.device].append(t)
    return out


def work_window(tasks) -> tuple[int, int]:
    """The first enqueue and last end of `tasks`."""
    return min(t.enqueue_ns for t in tasks), max(t.end_ns for t in tasks)


DISPATCHED_KINDS = ("kernel", "copy", "memset")  # what "dispatch latency" is measured on
_DEVICE, _STREAM, _TASK_ID = attrgetter("device"), attrgetter("stream"), attrgetter("task_id")
DURATION = attrgetter("duration_ns")


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
    return {"count": len(values), "p50": percentile(values, 0.5), "p90": percentile(values, 0.9),
            "p99": percentile(values, 0.99), "max": max(values, default=0)}


def metrics(profile: ProfileData) -> dict:
    """Utilization per stream / executor / device, time queued and dispatch latency, host API
    time, bandwidth."""
    out: dict = {"duration_ns": profile.duration_ns,
                 "tasks": dict(Counter(t.kind for t in profile.tasks)), "devices": {},
                 "streams": {}, "executors": {}}
    devices = {d.id: d for d in profile.devices}
    for dev_id, work in sorted(work_by_device(profile).items()):
        start, end = work_window(work)
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
        classes = (("compute", COMPUTE_KINDS), ("copy", ("copy",)), ("host", ("host_func", NONBLOCKING)))
        for ex, kinds in classes:  # (a task holds its units: a kernel on 24 AI cores, 24;
            # in a last partial wave, only that wave's own)
            b = sum(t.unit_ns for t in work if t.kind in kinds)
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
    out["queued_ns"] = _spread([t.queued_ns for t in profile.tasks
                                if t.kind in DISPATCHED_KINDS and t.started])
    out["dispatch_latency_ns"] = _spread(dispatch_latencies(profile))
    api = defaultdict(list)
    for call, own_ns in calls_made(profile.api_calls, waits=True):  # (a full queue's too)
        api[call.name].append(own_ns)
    out["api"] = {name: {"count": len(d), "total_ns": sum(d), "mean_ns": sum(d) // len(d),
                         "max_ns": max(d)} for name, d in sorted(api.items())}
    out["api_total_ns"] = sum(v["total_ns"] for v in out["api"].values())
    copies: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for t in profile.tasks:
        if t.kind == "copy" and t.started:  # (bytes that never moved make no bandwidth)
            c = copies[t.name]
            c[0] += 1
            c[1] += t.nbytes
            c[2] += t.duration_ns
    for call in sync_copies(profile.api_calls):  # (no task: the call is the copy)
        c = copies[call.target]
        c[0] += 1
        c[1] += call.nbytes
        c[2] += call.duration_ns
        c[3] += 1
    out["copy_bandwidth"] = {name: {"count": n, "bytes": b, "busy_ns": d,
                                    "gb_per_s": b / d if d else 0.0, "synchronous": sync}
                             for name, (n, b, d, sync) in sorted(copies.items())}
    mem: dict[int, dict[str, int]] = {}
    for s in profile.memory:
        m = mem.setdefault(s.device, {"peak_allocated": 0, "peak_reserved": 0})
        m["peak_allocated"] = max(m["peak_allocated"], s.allocated)
        m["peak_reserved"] = max(m["peak_reserved"], s.reserved)
    for dev_id, m in mem.items():
        m["capacity"] = devices[dev_id].capacity if dev_id in devices else 0
    out["memory"] = mem
    return out


def within(intervals, windows) -> list[tuple[int, int]]:
    """Sorted disjoint `intervals` cut to the analysed windows (None: the whole profile)."""
    return intervals if windows is None else intersection(intervals, windows)
