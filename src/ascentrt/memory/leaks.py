"""Leak reports: device and pinned host memory still allocated when it is reclaimed anyway
(a device reset, acl.finalize, the end of the program), said as a leak checker would."""

from __future__ import annotations

import collections
import functools
import os
import sys
import threading
import types
import warnings
from typing import Any

from .. import config
from ..callsite import site_text, user_code_site, user_frame
from ..errors import warn_at_caller
from ..units import format_bytes
from .registry import REGISTRY


class _ThreadGathering(threading.local):
    """What the reports inside this thread's reclaiming() hold back (None: not gathering)."""

    buffers: list | None = None


_gathering = _ThreadGathering()

# In a forked child: the allocations live at the fork, by id (held, so that no later one takes
# an id of theirs). They are the parent's, which reports them: the child's reports leave them out.
_inherited: dict[int, Any] = {}

# fn(buffers, when): told of every buffer reclaimed unfreed (the profiler counts them as leaks
# whatever ASCENTRT_LEAK_CHECK says: it only silences the warning)
reclaim_observers: list[Any] = []


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
    if _inherited:  # (a forked child's: the parent's buffers are not its own)
        buffers = [b for b in buffers if _inherited.get(id(b)) is not b]
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
        # (sorted here: most_common(5) imports heapq, which the interpreter refuses at its end)
        top = sorted(sites.items(), key=lambda item: -item[1])[:5]
        text += "; allocated at " + ", ".join(f"{site} ({format_bytes(n)})" for site, n in top)
    else:
        text += "; set ASCENTRT_LEAK_CHECK=sites to see where they were allocated (off: silence)"
    if user_frame(1) is None:  # at exit: no call of the program to point at
        warnings.warn_explicit(text, LeakWarning, "sys", 1)
    else:
        warn_at_caller(text, LeakWarning)  # at the call that reclaimed them (reset, finalize)
    return text


class _AtProcessEnd:
    """Reports the buffers of the exit report still unfreed as it is dropped: the interpreter
    drops it once the program's own teardown is over (see report_at_process_end)."""

    def __init__(self, buffers: list) -> None:
        self.buffers = buffers

    def __del__(self) -> None:
        report([b for b in self.buffers if b.alive], "exit")


def report_at_process_end(buffers: list) -> None:
    """From the runtime's exit handler: report `buffers` (still allocated then) as leaks at the
    process's end, after the program's own teardown that comes later (exit handlers registered
    before the runtime's, destructors run as the interpreter shuts down), leaving out those it
    freed: a teardown after the runtime's exit handlers is no leak."""
    # The report is the one value of a module made now, last in sys.modules: the interpreter,
    # as it shuts down, clears the modules still alive after its last garbage collection (which
    # ran the destructors of the program's objects) in reverse order of import, so this one
    # first, while every module the report needs still holds its globals. The fork hook keeps
    # the module alive until then (a module that nothing holds would be dropped unreported).
    end = types.ModuleType(f"{__name__}.<at process end>")
    end._report = _AtProcessEnd(buffers)  # type: ignore[attr-defined]
    sys.modules[end.__name__] = end
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=functools.partial(_forget_at_fork, end))


def _forget_at_fork(end: types.ModuleType) -> None:
    """In a child forked after the exit handlers: the report at the end is the parent's."""
    end._report.buffers = []


def _after_fork_in_child() -> None:
    _inherited.clear()
    _inherited.update((id(a), a) for a in REGISTRY.live())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
