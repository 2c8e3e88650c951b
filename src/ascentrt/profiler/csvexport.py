"""CSV summaries in the manner of msprof: per-task times, kernel statistics, API statistics."""

from __future__ import annotations

import csv
import os
from collections import defaultdict

from .data import ProfileData


def _us(ns: float) -> str:
    return f"{ns / 1000:.3f}"


def task_rows(profile: ProfileData) -> list[list]:
    """task_time.csv: one row per task. queued_us is enqueue to start; wait_us is msprof's
    "waiting": the gap since the previous task of the same stream ended (0 for its first)."""
    rows: list[list] = [["device", "stream", "task_id", "kind", "name", "enqueue_us", "start_us",
                         "duration_us", "queued_us", "wait_us", "bytes", "failed"]]
    previous_end: dict[tuple[int, int], int] = {}
    gap = [0] * len(profile.tasks)  # per row: a replayed graph's nodes share their task id
    order = sorted(range(len(profile.tasks)), key=lambda i: (
        profile.tasks[i].device, profile.tasks[i].stream, profile.tasks[i].task_id,
        profile.tasks[i].start_ns))
    for i in order:
        t = profile.tasks[i]
        key = (t.device, t.stream)
        end = previous_end.get(key)
        gap[i] = 0 if end is None else max(0, t.start_ns - end)
        previous_end[key] = max(t.end_ns, end or 0)
    for t, waited in zip(profile.tasks, gap):
        rows.append([t.device, t.stream, t.task_id, t.kind, t.name, _us(t.enqueue_ns),
                     _us(t.start_ns), _us(t.duration_ns), _us(t.queued_ns), _us(waited),
                     t.nbytes, int(t.failed)])
    return rows


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
    for t in profile.tasks:
        if t.kind in ("kernel", "copy", "memset", "host_func"):
            groups[f"{t.kind}:{t.name}"].append(t.duration_ns)
    rows = _stats_rows(groups, "name")
    rows[0].insert(1, "kind")
    for r in rows[1:]:
        kind, _, name = r[0].partition(":")
        r[0:1] = [name, kind]
    return rows


def api_rows(profile: ProfileData) -> list[list]:
    """api_statistic.csv: per runtime API, host time statistics."""
    groups = defaultdict(list)
    for c in profile.api_calls:
        groups[c.name].append(c.duration_ns)
    return _stats_rows(groups, "api")


def memory_rows(profile: ProfileData) -> list[list]:
    """memory.csv: allocated / reserved bytes over time per device (-1: pinned host memory)."""
    rows: list[list] = [["time_us", "device", "allocated_bytes", "reserved_bytes", "free_bytes",
                         "largest_free_bytes"]]
    for s in profile.memory:
        rows.append([_us(s.ts_ns), s.device, s.allocated, s.reserved, s.free, s.largest_free])
    return rows


FILES = {"task_time.csv": task_rows, "kernel_statistic.csv": kernel_rows,
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
