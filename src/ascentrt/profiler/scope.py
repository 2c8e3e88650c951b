"""A profile cut to the windows of one named user range: what `diagnose(range=...)` looks at."""

from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass, field

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
    profile: ProfileData       # tasks and API calls cut to the windows, the rest filtered
    whole: dict = field(default_factory=dict)  # id(piece of a task) -> the task it was cut from
    spans: list = field(default_factory=list)  # (start_ns, end_ns) of each instance, by start

    def diagnose(self) -> list[Finding]:
        """The diagnosis of what happened inside the windows only."""
        return diagnose(self.profile, self.windows, self.whole, self.spans)

    def label(self) -> str:
        """"range 'step' (12 instances, 340.00 ms)"."""
        return (f"range {self.name!r} ({self.instances} instance{'s' if self.instances > 1 else ''}, "
                f"{format_ms(total(self.windows))})")


def within(profile: ProfileData, name: str) -> Scope:
    """The records of `profile` inside the user ranges named `name`, cut to them.

    An instance is an outermost range of that name (one nested in another of its name on its
    thread is part of it). A task or API call is cut into its pieces inside the windows, one
    per window it overlaps (the time between instances does not count); memory samples,
    allocations and marks are kept when they fall inside a window. Raises
    InvalidArgumentError naming the known ranges when no range is called `name`.
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
    tasks: list = []
    whole: dict = {}
    for t in profile.tasks:
        for lo, hi in span(t.start_ns, t.end_ns):
            start, end = max(t.start_ns, lo), min(t.end_ns, hi)
            # (a later piece was running when its window opened: queued from then)
            # (and of a last partial wave, the part inside it: the wave ran at the task's end)
            piece = dataclasses.replace(t, enqueue_ns=min(max(t.enqueue_ns, lo), start),
                                        start_ns=start, end_ns=end, tail_ns=max(
                                            0, end - max(start, t.end_ns - t.tail_ns)) if t.tail_ns else 0)
            tasks.append(piece)
            whole[id(piece)] = t
    calls = [dataclasses.replace(c, start_ns=max(c.start_ns, lo), end_ns=min(c.end_ns, hi))
             for c in profile.api_calls for lo, hi in span(c.start_ns, c.end_ns)]

    def inside(ns: int) -> bool:
        return bool(span(ns, ns))
    data = dataclasses.replace(
        profile, tasks=tasks, api_calls=calls,
        ranges=[r for r in profile.ranges if span(r.start_ns, r.end_ns)],
        marks=[m for m in profile.marks if inside(m.ts_ns)],
        memory=[s for s in profile.memory if inside(s.ts_ns)],
        allocations=[a for a in profile.allocations if inside(a.alloc_ns)])
    spans = _outermost(ranges)
    return Scope(name, len(spans), windows, data, whole, spans)


def _outermost(ranges: list) -> list[tuple[int, int]]:
    """(start_ns, end_ns) of the instances among `ranges` (of one name), by start: those not
    inside another of them on their thread (a recursive step's inner ranges are part of the
    outer one). Instances that touch stay apart (on sim one may end at the instant the next
    begins), where the windows merge them."""
    spans = []
    ends: dict[int, int] = {}  # thread -> end of its open outermost range
    for r in sorted(ranges, key=lambda r: (r.start_ns, -r.end_ns)):
        end = ends.get(r.thread, -1)
        if r.start_ns < end and r.end_ns <= end:
            continue
        ends[r.thread] = r.end_ns
        spans.append((r.start_ns, r.end_ns))
    return spans


def _spanner(windows: list[tuple[int, int]]):
    """A function giving, for an interval, the windows it overlaps (an empty list: none); an
    instant counts inside a window or on its edge."""
    starts = [a for a, _ in windows]
    ends = [b for _, b in windows]

    def span(start: int, end: int) -> list[tuple[int, int]]:
        if start < end:
            first = bisect.bisect_right(ends, start)   # the first window ending after start
            last = bisect.bisect_left(starts, end) - 1  # the last window starting before end
        else:
            first = last = bisect.bisect_left(ends, start)
            if first < len(windows) and windows[first][0] > start:
                return []
        return windows[first:last + 1]
    return span
