"""Interval arithmetic on (start, end) pairs of ns: merge, measure, intersect, complement."""

from __future__ import annotations


def union(intervals) -> list[tuple[int, int]]:
    """Merge (start, end) intervals into sorted, disjoint ones."""
    merged: list[list[int]] = []
    for a, b in sorted(intervals):
        if b < a:
            continue
        if merged and a <= merged[-1][1]:
            if b > merged[-1][1]:
                merged[-1][1] = b
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def total(merged) -> int:
    """Length covered by disjoint intervals."""
    return sum(b - a for a, b in merged)


def intersection(x, y) -> list[tuple[int, int]]:
    """Intersection of two sorted disjoint interval lists."""
    out, i, j = [], 0, 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if a < b:
            out.append((a, b))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def gaps(merged, start: int, end: int, min_len: int = 0) -> list[tuple[int, int]]:
    """The stretches of [start, end) not covered by `merged`, at least `min_len` long."""
    out, cursor = [], start
    for a, b in merged:
        if a - cursor >= max(min_len, 1):
            out.append((cursor, a))
        cursor = max(cursor, b)
    if end - cursor >= max(min_len, 1):
        out.append((cursor, end))
    return out
