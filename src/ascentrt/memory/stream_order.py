"""Stream-ordered frees: the positions of the streams' work a free must wait for, and frees held until then."""

from __future__ import annotations

from typing import Any

from .. import forksafe
from .links import Links


def busy_positions(streams) -> tuple:
    """(stream, submitted) for each stream that still has queued or running work, and the
    positions of the work it queued on other streams that has not run yet (`_spawned`: it was
    queued before the free too): the waits of a free that must come after that work."""
    busy: tuple = ()
    for s in streams:  # a loop, not a generator: the common answer (nothing busy) costs ~nothing
        if s._completed < s._submitted:
            busy += ((s, s._submitted),)
        for other, pos in s._spawned:
            if other._completed < pos:
                busy += ((other, pos),)
    return busy


def positions_reached(waits: tuple) -> bool:
    """Whether every stream of `waits` has completed its work up to the position given, and
    the work it queued on other streams so far (`_spawned`: a host function it handed off
    only after the free, when it reached it) too."""
    for s, pos in waits:
        if s._completed < pos:
            return False
        for other, p in s._spawned:
            if other._completed < p:
                return False
    return True


def furthest_positions(waits: Any) -> tuple:
    """The (stream, position) pairs of several frees' waits, one per stream (its furthest)
    and only those not reached yet: what all those frees wait for together."""
    furthest: dict[Any, int] = {}
    for stream_waits in waits:
        for s, pos in stream_waits:
            for w, p in ((s, pos), *s._spawned):
                if w._completed < p and p > furthest.get(w, -1):
                    furthest[w] = p
    return tuple(furthest.items())


class DeferredFrees:
    """Frees without a pool (its own mapping, or a range of the plain arena) that wait for the
    work queued before them: (what, waits), released once every wait is reached."""

    def __init__(self) -> None:
        self.entries: list[tuple[Any, tuple]] = []
        self.lock = forksafe.lock()

    def add(self, what: Any, waits: tuple) -> None:
        """Hold `what` until `waits` are reached."""
        with self.lock:
            self.entries.append((what, waits))

    def wait_for(self, release: Any) -> bool:
        """Wait until the work the held frees wait for is done, then release them as reap()
        does; False when none were held, or the calling thread may not wait (Links.wait_reached)."""
        with self.lock:
            waits = furthest_positions([waits for _, waits in self.entries])
        if not waits or not Links.wait_reached(waits):
            return False
        self.reap(release)
        return True

    def reap(self, release: Any) -> None:
        """release(what) for each entry whose waits were reached since it was added."""
        with self.lock:
            done = [what for what, waits in self.entries if positions_reached(waits)]
            if done:
                self.entries = [e for e in self.entries if not positions_reached(e[1])]
        for what in done:
            release(what)
