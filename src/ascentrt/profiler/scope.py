"""A profile cut to the windows of one named user range: what `diagnose(range=...)` looks at."""

from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass

from ..errors import InvalidArgumentError
from ..units import format_ms
from .analysis import diagnose
from .finding import Finding
from .data import ProfileData
from .intervals import total, union


@dataclass(frozen=True)
class Scope:
    """The windows of a user range (all its instances, any thread) and the records inside them."""

    name: str
    instances: int
    windows: list              # sorted, disjoint (start_ns, end_ns)
    profile: ProfileData       # tasks and API calls clipped to the windows, the rest filtered

    def diagnose(self) -> list[Finding]:
        """The diagnosis of what happened inside the windows only."""
        return diagnose(self.profile, self.windows)

    def label(self) -> str:
        """"range 'step' (12 instances, 340.00 ms)"."""
        return (f"range {self.name!r} ({self.instances} instance{'s' if self.instances > 1 else ''}, "
                f"{format_ms(total(self.windows))})")


def within(profile: ProfileData, name: str) -> Scope:
    """The records of `profile` inside the user ranges named `name`, cut to them.

    A task or API call that overlaps the windows keeps the part from the first window it
    overlaps to the end of the last; memory samples, allocations and marks are kept when they
    fall inside a window. Raises InvalidArgumentError naming the known ranges when no range
    is called `name`.
    """
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"a range name must be a non-empty str, got {name!r}")
    ranges = [r for r in profile.ranges if r.name == name]
    if not ranges:
        known = sorted({r.name for r in profile.ranges})
        raise InvalidArgumentError(
            f"the profile has no range {name!r}; its ranges: {', '.join(map(repr, known))}" if known
            else f"the profile has no range {name!r}: it has no user ranges (mark them with "
                 f"ascentrt.profiler.range(name))")
    windows = union((r.start_ns, r.end_ns) for r in ranges)
    span = _spanner(windows)
    tasks = []
    for t in profile.tasks:
        if (cut := span(t.start_ns, t.end_ns)) is not None:
            lo, hi = cut
            start, end = max(t.start_ns, lo), min(t.end_ns, hi)
            tasks.append(dataclasses.replace(t, enqueue_ns=min(max(t.enqueue_ns, lo), start),
                                             start_ns=start, end_ns=end))
    calls = [dataclasses.replace(c, start_ns=max(c.start_ns, cut[0]), end_ns=min(c.end_ns, cut[1]))
             for c in profile.api_calls if (cut := span(c.start_ns, c.end_ns)) is not None]

    def inside(ns: int) -> bool:
        return span(ns, ns) is not None
    data = dataclasses.replace(
        profile, tasks=tasks, api_calls=calls,
        ranges=[r for r in profile.ranges if span(r.start_ns, r.end_ns) is not None],
        marks=[m for m in profile.marks if inside(m.ts_ns)],
        memory=[s for s in profile.memory if inside(s.ts_ns)],
        allocations=[a for a in profile.allocations if inside(a.alloc_ns)])
    return Scope(name, len(ranges), windows, data)


def _spanner(windows: list[tuple[int, int]]):
    """A function giving, for an interval, the span (start of the first window it overlaps, end
    of the last) or None when it overlaps none; an instant counts inside a window or on its edge."""
    starts = [a for a, _ in windows]
    ends = [b for _, b in windows]

    def span(start: int, end: int) -> tuple[int, int] | None:
        if start < end:
            first = bisect.bisect_right(ends, start)   # the first window ending after start
            last = bisect.bisect_left(starts, end) - 1  # the last window starting before end
        else:
            first = last = bisect.bisect_left(ends, start)
            if first < len(windows) and windows[first][0] > start:
                return None
        if first >= len(windows) or first > last:
            return None
        return windows[first][0], windows[last][1]
    return span
