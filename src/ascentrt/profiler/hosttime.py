"""Where the host's time went while a device sat idle: its own code, runtime calls, or waiting."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from operator import attrgetter

from ..units import format_ms
from .data import ranked_sites, waits
from .intervals import gaps, intersection, total, union

_START, _END = attrgetter("start_ns"), attrgetter("end_ns")
ADVISED_SHARE = 0.2   # a runtime call taking a fifth of the time gets advice of its own
LISTED_CALLS = 5      # runtime calls named in a finding's text

_REUSE_PINNED = ("pinning host memory (mlock) is slow: allocate the pinned buffers once before "
                 "the loop and reuse them")
_REUSE_DEVICE = ("allocate the buffers once before the loop and reuse them, or take them from "
                 "the stream-ordered pool (malloc_async / free_async)")
_SUBMIT = ("submitting is the cost: do more per task (fuse kernels, merge small copies) and "
           "capture the repeated sequence into a graph so that one call submits it")
_BLOCKING_COPY = ("a synchronous copy or fill holds the host: use the _async form from pinned "
                  "memory (malloc_host, allocated once) so the host queues it and goes on")
_CREATE = "create streams, events and notifies once before the loop and reuse them"
# What to do about a runtime call that keeps the device waiting, by API name.
CALL_ADVICE = {
    "malloc_host": _REUSE_PINNED, "HostBuffer.free": _REUSE_PINNED,
    "malloc": _REUSE_DEVICE, "Device.malloc": _REUSE_DEVICE, "free": _REUSE_DEVICE,
    "DeviceBuffer.free": _REUSE_DEVICE,
    **{name: _SUBMIT for name in ("launch", "launch_host_func", "memcpy_async", "memcpy2d_async",
                                  "memset_async", "Stream.record", "Stream.wait", "Event.record")},
    **{name: _BLOCKING_COPY for name in ("memcpy", "memcpy2d", "memset")},
    **{name: _CREATE for name in ("Device.create_stream", "Stream.destroy", "Device.create_event",
                                  "Event.destroy", "Device.create_notify", "Notify.destroy")},
    "set_device": "call set_device once per thread, before the loop",
    "empty_cache": "do not empty the pool's cache inside the loop: every allocation after it is "
                   "a fresh (slow) one",
}
OWN_CODE_ADVICE = ("move host-side preparation out of the loop (precompute, vectorize) or onto "
                   "another thread, and queue work ahead (several iterations in flight) so the "
                   "device has work while the host prepares the next")


@dataclass
class HostTime:
    """The host's time over some stretches, in three parts that add up to their length."""

    stretch_ns: int           # the stretches' total length
    waiting_ns: int           # blocked in a synchronization: waiting on the device
    calls: dict = field(default_factory=dict)  # other runtime call -> (ns, calls), costliest first
    sites: dict = field(default_factory=dict)  # runtime call -> {its call site: calls}
    # device allocation call -> (driver allocations, calls told apart) of those counted: see
    # driver_allocations
    drivers: dict = field(default_factory=dict)

    def sites_text(self, name: str, top: int = 3) -> str:
        """Where the program made the `name` calls counted here, the most frequent first:
        'prog.py:21 (30 calls), ...' ('' where no site was recorded)."""
        return ranked_sites(self.sites.get(name, {}), top)

    @property
    def runtime_ns(self) -> int:
        """In runtime calls other than synchronizations."""
        return sum(ns for ns, _ in self.calls.values())

    @property
    def own_ns(self) -> int:
        """In the program's own code between runtime calls."""
        return self.stretch_ns - self.waiting_ns - self.runtime_ns

    @property
    def largest(self) -> str:
        """The part that took the most time: 'own', 'runtime' or 'waiting'."""
        parts = {"own": self.own_ns, "runtime": self.runtime_ns, "waiting": self.waiting_ns}
        return max(parts, key=lambda k: parts[k])

    def calls_text(self, top: int = LISTED_CALLS) -> str:
        """'malloc_host 456.00 ms in 36 calls, launch ...' (the costliest `top`)."""
        if not self.calls:
            return "none"
        listed = [f"{name} {self._spent(name)}" for name in list(self.calls)[:top]]
        more = len(self.calls) - top
        return ", ".join(listed) + (f", and {more} more" if more > 0 else "")

    def breakdown(self) -> str:
        """The three parts in one sentence, with their shares."""
        return (f"the program's own code between runtime calls {self._part(self.own_ns)}, "
                f"runtime calls {self._part(self.runtime_ns, self.calls_text())}, waiting on the "
                f"device {self._part(self.waiting_ns)}")

    def evidence(self, when: str) -> dict:
        """The split as evidence entries ('host's own code <when>': '2636.00 ms (97%)', ...)."""
        out = {f"host's own code {when}": self._part(self.own_ns),
               f"host in runtime calls {when}": self._part(self.runtime_ns),
               f"host waiting on the device {when}": self._part(self.waiting_ns),
               f"runtime calls {when}": self.calls_text()}
        first = next(iter(self.calls), None)
        sites = self.sites_text(first) if first is not None else ""
        if sites:
            out[f"call sites of {first} {when}"] = sites
        for name in list(self.calls)[:LISTED_CALLS]:
            if name in self.drivers:
                out[f"{name} calls {when}"] = self._split(name)
        return out

    def advice(self) -> str:
        """What to try, led by the largest part: the own code, or the costliest runtime call
        (named); any other part taking a fifth of the time gets its advice after it."""
        costly = ADVISED_SHARE * self.stretch_ns
        tips = [f"{name} ({self._spent(name)}{self._at(name)}): {call_advice(name)}"
                for i, (name, (ns, n)) in enumerate(self.calls.items())
                if ns >= costly or (i == 0 and self.largest == "runtime")]
        if self.largest == "own":
            tips.insert(0, f"the program's own code: {OWN_CODE_ADVICE}")
        elif self.own_ns >= costly:
            tips.append(f"the program's own code: {OWN_CODE_ADVICE}")
        return "; ".join(tips)

    def _spent(self, name: str) -> str:
        """'10.86 ms in 1499 calls' (with the driver allocations among them, where told)."""
        ns, n = self.calls[name]
        split = f" ({self._split(name)})" if name in self.drivers else ""
        return f"{format_ms(ns)} in {n} call{'s' if n > 1 else ''}{split}"

    def _split(self, name: str) -> str:
        """'1499 driver allocations, 0 from the pool's cache' for allocation call `name`."""
        driver, told = self.drivers[name]
        rest = self.calls[name][1] - told
        return (f"{driver} driver allocation{'s' if driver != 1 else ''}, {told - driver} from the "
                f"pool's cache" + (f", {rest} not told apart" if rest else ""))

    def _at(self, name: str) -> str:
        sites = self.sites_text(name, 2)
        return f", at {sites}" if sites else ""

    def _part(self, ns: int, detail: str = "") -> str:
        share = f"{ns / max(self.stretch_ns, 1):.0%}"
        return f"{format_ms(ns)} ({share}: {detail})" if detail else f"{format_ms(ns)} ({share})"


def call_advice(name: str) -> str:
    """What to do about runtime call `name` on the host's path between device tasks."""
    return CALL_ADVICE.get(name, f"call {name} less often, or outside the loop: the device "
                                 f"waits while it runs")


def driver_allocations(calls, memory) -> dict[int, bool]:
    """id(call) -> whether the device allocation `call` (a malloc of device memory) made the
    allocator reserve more of the device's memory (a driver allocation: the pool had no
    cached block for it) or not (the pool's cache served it), told from the profile's `memory`
    samples taken during the call; calls with no device sample in them are left out."""
    samples: list = []  # (ts, grew) of each device sample
    before: dict[int, int] = {}  # device -> reserved at its previous sample
    for m in memory:
        if m.device >= 0:
            samples.append((m.ts_ns, m.reserved > before.get(m.device, 0)))
            before[m.device] = m.reserved
    samples.sort(key=lambda s: s[0])
    times = [ts for ts, _ in samples]
    out: dict[int, bool] = {}
    for c in calls:
        if "malloc" not in c.name:
            continue
        # (the call's own sample comes after its start: one at the start ended a call before;
        # a call that took no time has its sample at that instant)
        lo = bisect.bisect_right(times, c.start_ns) if c.end_ns > c.start_ns \
            else bisect.bisect_left(times, c.start_ns)
        hi = bisect.bisect_right(times, c.end_ns)
        if lo < hi:
            out[id(c)] = any(grew for _, grew in samples[lo:hi])
    return out


def attribute(stretches: list[tuple[int, int]], calls, memory=None) -> HostTime:
    """Split the host's time over `stretches` (sorted, disjoint) using the API `calls`.

    A moment inside a synchronization or a query that found the work not done (on any
    thread) is waiting; the rest of a moment inside
    runtime calls goes to the call that started first (calls of several threads at once, and
    calls nested in another, count once); whatever no call covers is the program's own code.
    With the profile's `memory` samples, device allocations counted are told apart as driver
    allocations or the pool's cache hits (HostTime.drivers).
    """
    if not stretches:
        return HostTime(0, 0)
    drivers = driver_allocations(calls, memory) if memory else {}
    split: dict[str, list[int]] = {}  # call -> [driver allocations, told apart]
    sync = union((c.start_ns, c.end_ns) for c in calls if waits(c))
    waiting = total(intersection(stretches, sync))
    free = intersection(stretches, gaps(sync, stretches[0][0], stretches[-1][1]))
    per: dict[str, list[int]] = {}
    sites: dict[str, dict[str, int]] = {}  # call -> {site: calls} of those counted
    covered = stretches[0][0]  # host time up to here is attributed already
    first = 0  # free[:first] end before the part of any call still to come
    ordered = sorted((c for c in calls if not waits(c)), key=_END, reverse=True)
    ordered.sort(key=_START)  # by start, the longer first (two stable sorts: no key tuples)
    for c in ordered:
        a, b = max(c.start_ns, covered), c.end_ns  # (a never decreases from call to call)
        covered = max(covered, b)
        while first < len(free) and free[first][1] <= a:
            first += 1
        ns, i = 0, first
        while i < len(free) and free[i][0] < b:
            lo, hi = free[i]
            ns += max(0, min(b, hi) - max(a, lo))
            i += 1
        if ns > 0:
            entry = per.setdefault(c.name, [0, 0])
            entry[0] += ns
            entry[1] += 1
            if c.site:
                at = sites.setdefault(c.name, {})
                at[c.site] = at.get(c.site, 0) + 1
            driver = drivers.get(id(c))
            if driver is not None:
                told = split.setdefault(c.name, [0, 0])
                told[0] += driver
                told[1] += 1
    ranked = sorted(per.items(), key=lambda kv: (-kv[1][0], kv[0]))
    return HostTime(total(stretches), waiting, {name: (ns, n) for name, (ns, n) in ranked},
                    sites, {name: (d, n) for name, (d, n) in split.items()})
