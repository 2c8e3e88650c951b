"""Leak reports: device and pinned host memory still allocated when it is reclaimed anyway
(a device reset, acl.finalize, the end of the program), said as a leak checker would."""

from __future__ import annotations

import collections
import warnings
import weakref

from .. import config
from ..callsite import user_site
from ..units import format_bytes

SITES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # buffer -> 'file.py:line'


class LeakWarning(UserWarning):
    """Memory the program never freed was reclaimed (ASCENTRT_LEAK_CHECK=off silences it)."""


def recording_sites() -> bool:
    """Whether allocations note where they were made (ASCENTRT_LEAK_CHECK=sites)."""
    return config.get("ASCENTRT_LEAK_CHECK") == "sites"


def note_site(buf: object) -> None:
    """Remember where the user's program allocated `buf` (only while recording sites)."""
    SITES[buf] = user_site(3)


def report(buffers: list, when: str) -> str | None:
    """Warn (LeakWarning) about `buffers` still allocated `when` they are reclaimed; returns the text."""
    if not buffers or config.get("ASCENTRT_LEAK_CHECK") == "off":
        return None
    total = sum(b.nbytes for b in buffers)
    kinds = collections.Counter("pinned host" if b.kind == "host" else f"device {b.device.id}"
                                for b in buffers)
    text = (f"ascentrt: {len(buffers)} buffer(s), {format_bytes(total)}, never freed, reclaimed at "
            f"{when} ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))})")
    sites: collections.Counter[str] = collections.Counter()
    for b in buffers:
        sites[SITES.get(b, "?")] += b.nbytes
    if set(sites) != {"?"}:
        text += "; allocated at " + ", ".join(f"{site} ({format_bytes(n)})" for site, n in sites.most_common(5))
    else:
        text += "; set ASCENTRT_LEAK_CHECK=sites to see where they were allocated (off: silence)"
    warnings.warn(text, LeakWarning, stacklevel=3)
    return text
