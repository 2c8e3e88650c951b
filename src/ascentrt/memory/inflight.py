"""Allocations that a host thread's synchronous copy or fill is using now: their frees wait.

A synchronous memcpy or memset runs on the calling thread, not on a stream, so the
stream-ordered rules of a free (after the work queued before it) do not cover it. A free that
lands while one runs marks the buffer freed at once (operations that start later are refused)
but gives its memory back only when the operation ends: nothing else is handed bytes that are
still being written, and a free never blocks (a thread it waited for might be waiting for it).

Protocol, with no lock (each step is one atomic deque or list operation under the GIL):
- an operation appends a tuple of what it uses (and a number of its own, so that no two are
  equal) to ACTIVE before it checks that the allocations are live, removes it once its bytes
  moved, and then, if DEFERRED holds anything, calls `run_deferred_releases()`;
- a free marks its allocation freed before it asks `defer_release`, so an operation that
  registered too late to be seen refuses the allocation when it checks it.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any, Callable

from ..interrupts import hold, release

ACTIVE: deque = deque()  # one tuple per running operation: what it uses, then its number
DEFERRED: list = []      # [alloc, release] items: frees whose memory an operation still used
number = itertools.count().__next__  # (an operation's own, last in its tuple)


def in_use(alloc: Any) -> bool:
    """Whether a running synchronous operation uses `alloc`."""
    return any(a is alloc for allocs in list(ACTIVE) for a in allocs)


def run_deferred_releases() -> None:
    """An operation ended: run the deferred releases that nothing uses any more (each item is
    taken by one thread, which releases it or defers it again; a Ctrl-C is held until the
    item taken is in one place or the other). Safe to call at any time."""
    held = hold()
    try:
        for _ in range(len(DEFERRED)):
            try:
                alloc, give_back = DEFERRED.pop(0)
            except IndexError:
                return
            if not defer_release(alloc, give_back):
                give_back()
    finally:
        release(held)


def give_back_when_unused(alloc: Any, give_back: Callable[[], Any]) -> None:
    """give_back() the memory of freed `alloc` now, or at the end of the synchronous
    operations that still use it."""
    if not (ACTIVE and defer_release(alloc, give_back)):
        give_back()


def defer_release(alloc: Any, give_back: Callable[[], Any]) -> bool:
    """If a synchronous operation uses `alloc` (already marked freed) now, leave give_back()
    to the end of the operations using it and return True; False: the caller gives it back now."""
    if not in_use(alloc):
        return False
    item = [alloc, give_back]
    DEFERRED.append(item)
    if in_use(alloc):
        return True  # its operation's end, after this, finds the item
    try:  # it ended meanwhile, and may have looked before the item was there: take it back
        DEFERRED.remove(item)
    except ValueError:
        return True  # an operation's end took it
    return False
