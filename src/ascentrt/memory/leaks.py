"""Leak reports: device and pinned host memory still allocated when it is reclaimed anyway
(a device reset, acl.finalize, the end of the program), said as a leak checker would."""

from __future__ import annotations

import collections
import threading
import warnings
from typing import Any

from .. import config
from ..callsite import site_text, user_code_site, user_frame
from ..errors import warn_at_caller
from ..units import format_bytes


class _ThreadGathering(threading.local):
    """What the reports inside this thread's reclaiming() hold back (None: not gathering)."""

    buffers: list | None = None


_gathering = _ThreadGathering()

# fn() -> True while the program's own teardown may still come after exit (a pyACL program
# that has not finalized frees in a destructor, which runs after the exit handlers): the
# report at exit then says nothing.
teardown_pending: list[Any] = []

# fn(buffers, when): told of every buffer reclaimed unfreed (the profiler counts them as leaks
# whatever ASCENTRT_LEAK_CHECK says: it only silences the warning)
reclaim_observers: list[Any] = []


def exit_report_due() -> bool:
    """Whether the report at exit should be made (no teardown may still come)."""
    return not any(pending() for pending in teardown_pending)


class LeakWarning(UserWarning):
    """Memory the program never freed was reclaimed (ASCENTRT_LEAK_CHECK=off silences it)."""


def recording_sites() -> bool:
    """Whether allocations note where they were made (ASCENTRT_LEAK_CHECK=sites)."""
    return config.get("ASCENTRT_LEAK_CHECK") == "sites"


def note_site(buf: Any) -> None:
    """Remember on `buf` where the user's program allocated it (only while recording sites)."""
    buf.site = user_code_site(3)


class reclaiming:
    """Within it, this thread's reports gather into one, said as reclaimed at `occasion`
    (acl.finalize: its device resets and its pinned memory together); nested, the outer one
    says it. (A class, not a generator: the warning then points past it, at the user's call.)"""

    def __init__(self, occasion: str) -> None:
        self.occasion = occasion
        self.outer = False

    def __enter__(self) -> None:
        self.outer = _gathering.buffers is None
        if self.outer:
            _gathering.buffers = []

    def __exit__(self, *exc: object) -> None:
        if self.outer:
            buffers, _gathering.buffers = _gathering.buffers, None
            report(buffers or [], self.occasion)


def report(buffers: list, when: str) -> str | None:
    """Warn (LeakWarning) about `buffers` still allocated `when` they are reclaimed; returns the
    text (None when off, or held back for the reclaiming() around it)."""
    for observer in list(reclaim_observers):
        observer(buffers, when)
    if not buffers or config.get("ASCENTRT_LEAK_CHECK") == "off":
        return None
    gathered = _gathering.buffers
    if gathered is not None:
        gathered.extend(buffers)
        return None
    total = sum(b.nbytes for b in buffers)
    kinds = collections.Counter("pinned host" if b.kind == "host" else f"device {b.device.id}"
                                for b in buffers)
    text = (f"ascentrt: {len(buffers)} buffer(s), {format_bytes(total)}, never freed, reclaimed at "
            f"{when} ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))})")
    sites: collections.Counter[str] = collections.Counter()
    for b in buffers:
        sites[site_text(b.site or "?")] += b.nbytes
    if set(sites) != {"?"}:
        text += "; allocated at " + ", ".join(f"{site} ({format_bytes(n)})" for site, n in sites.most_common(5))
    else:
        text += "; set ASCENTRT_LEAK_CHECK=sites to see where they were allocated (off: silence)"
    if user_frame(1) is None:  # at exit: no call of the program to point at
        warnings.warn_explicit(text, LeakWarning, "sys", 1)
    else:
        warn_at_caller(text, LeakWarning)  # at the call that reclaimed them (reset, finalize)
    return text
