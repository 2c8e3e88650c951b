"""Interval arithmetic on (start, end) pairs of ns: merge, measure, intersect, complement."""

from __future__ import annotations

from operator import itemgetter


def union(intervals) -> list[tuple[int, int]]:
    """Merge (start, end) intervals into sorted, disjoint ones."""
    merged: list[tuple[int, int]] = []
    # (by start alone: which of two equal starts comes first does not change the union)
    for iv in sorted(intervals, key=itemgetter(0)):
        a, b = iv
        if b < a:
            continue
        if merged and a <= merged[-1][1]:
            if b > merged[-1][1]:
                merged[-1] = (merged[-1][0], b)
        else:  # (an interval that merges with none is kept as it is: 50k tasks, 50k tuples)
            merged.append(iv if type(iv) is tuple else (a, b))
    return merged


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
