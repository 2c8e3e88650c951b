"""CSV summaries in the manner of msprof: per-task times, kernel statistics, API statistics."""

from __future__ import annotations

import csv
import os
from collections import defaultdict
from collections.abc import Iterator

from .data import WORK_KINDS, ProfileData, calls_made, top_sites


def _us(ns: float) -> str:
    return f"{ns / 1000:.3f}"


def task_rows(profile: ProfileData) -> list[list]:
    """task_time.csv's rows, the header first (see iter_task_rows)."""
    return list(iter_task_rows(profile))


def iter_task_rows(profile: ProfileData) -> Iterator[list]:
    """task_time.csv: one row per task. queued_us is enqueue to start; wait_us is msprof's
    "waiting": the gap since the previous task of the same stream ended (0 for its first).
    The rows are made one by one (50k tasks: tens of MB as a list)."""
    yield ["device", "stream", "task_id", "kind", "name", "enqueue_us", "start_us",
           "duration_us", "queued_us", "wait_us", "bytes", "failed", "fate"]
    for t, waited in zip(profile.tasks, _waits(profile.tasks)):
        start = t.start_ns
        yield [t.device, t.stream, t.task_id, t.kind, t.name, f"{t.enqueue_ns / 1000:.3f}",
               f"{start / 1000:.3f}", f"{(t.end_ns - start) / 1000:.3f}",
               f"{(start - t.enqueue_ns) / 1000:.3f}", f"{waited / 1000:.3f}", t.nbytes,
               int(t.failed), t.fate]


def _waits(tasks: list) -> list:
    """Per task, in the order of `tasks`: the gap since the previous task of its stream (by
    task id, then start: a replayed graph's nodes share their task id) ended, 0 for its first."""
    per_stream: defaultdict[tuple, list[int]] = defaultdict(list)  # (device, stream) -> indexes
    for i, t in enumerate(tasks):
        per_stream[(t.device, t.stream)].append(i)
    gap = [0] * len(tasks)
    for order in per_stream.values():
        order.sort(key=lambda i: tasks[i].start_ns)  # (two stable sorts: no key tuples)
        order.sort(key=lambda i: tasks[i].task_id)
        end = None
        for i in order:
            t = tasks[i]
            gap[i] = 0 if end is None else max(0, t.start_ns - end)
            end = max(t.end_ns, end or 0)
    return gap


def _stats_rows(groups: dict, header_name: str, extra=None) -> list[list]:
    grand = sum(sum(v) for v in groups.values()) or 1
    rows: list[list] = [[header_name, "count", "total_us", "avg_us", "min_us", "max_us", "ratio_pct"]]
    for name, durations in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
        tot = sum(durations)
        rows.append([name, len(durations), _us(tot), _us(tot / len(durations)),
                     _us(min(durations)), _us(max(durations)), f"{100 * tot / grand:.2f}"])
    return rows


def kernel_rows(profile: ProfileData) -> list[list]:
    """kernel_statistic.csv: per kernel (and copy/memset/host function) name, time statistics."""
    groups = defaultdict(list)
    for t in profile.tasks:  # (runs that completed: a task cut off or dropped has no duration)
        if t.kind in WORK_KINDS and not t.fate:
            groups[f"{t.kind}:{t.name}"].append(t.duration_ns)
    rows = _stats_rows(groups, "name")
    rows[0].insert(1, "kind")
    for r in rows[1:]:
        kind, _, name = r[0].partition(":")
        r[0:1] = [name, kind]
    return rows


def api_rows(profile: ProfileData) -> list[list]:
    """api_statistic.csv: per runtime API, host time statistics and the call sites."""
    groups, made = defaultdict(list), defaultdict(list)
    for c, own_ns in calls_made(profile.api_calls, waits=True):  # (a full queue's too)
        groups[c.name].append(own_ns)
        made[c.name].append(c)
    rows = _stats_rows(groups, "api")
    rows[0].append("call_sites")  # (the program lines that made them, the most frequent first)
    for r in rows[1:]:
        r.append(top_sites(made[r[0]]))
    return rows


def memory_rows(profile: ProfileData) -> list[list]:
    """memory.csv: allocated / reserved bytes over time per device (-1: pinned host memory)."""
    rows: list[list] = [["time_us", "device", "allocated_bytes", "reserved_bytes", "free_bytes",
                         "largest_free_bytes"]]
    for s in profile.memory:
        rows.append([_us(s.ts_ns), s.device, s.allocated, s.reserved, s.free, s.largest_free])
    return rows


FILES = {"task_time.csv": iter_task_rows, "kernel_statistic.csv": kernel_rows,
         "api_statistic.csv": api_rows, "memory.csv": memory_rows}


def write_csvs(profile: ProfileData, folder: str) -> list[str]:
    """Write every CSV summary into `folder`; returns their paths."""
    paths = []
    for name, rows_of in FILES.items():
        path = os.path.join(folder, name)
        with open(path, "w", newline="", encoding="utf-8") as fh:
            csv.writer(fh).writerows(rows_of(profile))
        paths.append(path)
    return paths
