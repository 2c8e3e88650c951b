"""What a pool's out-of-memory error says when free memory is fragmented: the live buffers that
pin it, and a setting only where it would make the request fit."""

from __future__ import annotations

import collections
from typing import Any

from ..callsite import site_text
from ..units import format_bytes
from .block import ALLOCATED, CACHED, READY

SHOWN = 3  # groups of pinning buffers named, the largest first


def fragmentation_hint(pool: Any, size: int, elsewhere: int) -> str:
    """The advice of an OOM of `size` bytes in `pool` (its lock held) whose free memory is
    enough in all but no piece of it holds `size`; `elsewhere`: bytes other pools reserve."""
    chunks = pool.chunks()
    partly, pinned_free = [], 0
    for c in chunks:
        blocks = list(pool.blocks(c))
        free = sum(b.size for b in blocks if b.state is READY or b.state is CACHED)
        if free and any(b.state is ALLOCATED for b in blocks):
            partly.append((c, blocks))
            pinned_free += free
    if partly:
        live = [b for _, blocks in partly for b in blocks if b.state is ALLOCATED]
        where = (f"{format_bytes(pinned_free)} of it lies in {len(partly)} chunk"
                 f"{'s' if len(partly) > 1 else ''} that live buffers pin")
    else:  # (the free pieces lie between chunks that are wholly in use)
        live = [b for c in chunks for b in pool.blocks(c) if b.state is ALLOCATED]
        where = "the free pieces lie between chunks that live buffers fill"
    hint = (f"free memory is fragmented (no free piece holds {format_bytes(size)}): {where}"
            f"{': ' + _groups(live) if live else ''}; allocate long-lived buffers first, or from "
            f"a MemPool of their own, so that what short-lived ones free comes back as whole chunks")
    if not elsewhere and _largest_span_without_chunks(pool) >= size:
        hint += ("; ASCENTRT_MEM_POOL_ENABLE=0 would fit it with the buffers where they are: "
                 "without chunks, the free pieces between them join")
    return hint


def _groups(live: list) -> str:
    """'40 of 3.0 MiB (allocated at prog.py:12), ...': the live blocks by size and site."""
    groups: collections.Counter = collections.Counter()
    sites_known = False
    for b in live:
        site = getattr(b.buf, "site", None) if b.buf is not None else None
        sites_known = sites_known or site is not None
        groups[(b.size, None if site is None else site_text(site))] += 1
    ranked = sorted(groups.items(), key=lambda kv: -kv[0][0] * kv[1])
    parts = [f"{n} of {format_bytes(sz)}" + (f" (allocated at {at})" if at else "")
             for (sz, at), n in ranked[:SHOWN]]
    if len(ranked) > SHOWN:
        rest = ranked[SHOWN:]
        parts.append(f"{sum(n for _, n in rest)} more of "
                     f"{format_bytes(sum(sz * n for (sz, _), n in rest))}")
    text = ", ".join(parts)
    if not sites_known:
        text += " (ASCENTRT_LEAK_CHECK=sites names where they were allocated)"
    return text


def _largest_span_without_chunks(pool: Any) -> int:
    """The largest free range were the pool's chunk boundaries gone (the plain allocator, the
    live and pending blocks where they are): free blocks and unreserved ranges, joined."""
    ranges = getattr(pool.upstream, "unreserved_ranges", None)
    if ranges is None:
        return 0
    free = list(ranges())
    for c in pool.chunks():
        free += [(b.addr, b.size) for b in pool.blocks(c) if b.state is READY or b.state is CACHED]
    best = run_start = run_end = 0
    for addr, n in sorted(free):
        if addr != run_end:
            run_start = addr
        run_end = addr + n
        best = max(best, run_end - run_start)
    return best
