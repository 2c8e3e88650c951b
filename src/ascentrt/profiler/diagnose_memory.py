"""Findings of memory: peaks near capacity, fragmentation, pools caching much, buffers never freed."""

from __future__ import annotations

from collections import Counter, defaultdict

from ..units import format_bytes, format_ms
from .finding import CACHED_SHARE, FRAGMENTED, Finding, MIN_FRAGMENT_FREE, PEAK_SHARE


def memory_findings(profile, devices) -> list[Finding]:
    """Peaks near capacity and OOMs, fragmentation, a pool caching much, buffers never freed."""
    out = []
    by_dev = defaultdict(list)
    for s in profile.memory:
        by_dev[s.device].append(s)
    all_ooms = [c for c in profile.api_calls if c.error in (207001, 207018) and not c.task_error]
    for dev_id, samples in sorted(by_dev.items()):
        if dev_id < 0 or dev_id not in devices:
            continue
        ooms = [c for c in all_ooms if c.device == dev_id]  # (another device's are its own)
        cap = devices[dev_id].capacity
        peak = max(samples, key=lambda s: s.allocated)
        if peak.allocated >= PEAK_SHARE * cap or ooms:
            live = [a for a in profile.allocations if a.device == dev_id and
                    a.alloc_ns <= peak.ts_ns and (a.free_ns is None or a.free_ns > peak.ts_ns)]
            out.append(Finding(
                "memory_peak",
                f"Device {dev_id} memory peaked at {peak.allocated / cap:.0%} of capacity",
                f"at {format_ms(peak.ts_ns)} live buffers held {format_bytes(peak.allocated)} of {format_bytes(cap)}"
                + (f"; {len(ooms)} allocations failed for lack of memory" if ooms else ""),
                "free buffers as soon as their last task is queued (stream-ordered free), reuse "
                "buffers across iterations, process smaller batches, or raise "
                "ASCENTRT_DEVICE_MEMORY",
                {"peak allocated": format_bytes(peak.allocated), "capacity": format_bytes(cap),
                 "failed allocations": len(ooms), "live buffers at peak": len(live),
                 "largest holders": _sites(live)}, []))
        frag = [s for s in samples if s.largest_free >= 0 and s.free >= MIN_FRAGMENT_FREE
                and s.largest_free < FRAGMENTED * s.free]
        if frag:
            worst = min(frag, key=lambda s: s.largest_free / s.free)
            out.append(Finding(
                "fragmentation", f"Device {dev_id} memory is fragmented",
                f"at {format_ms(worst.ts_ns)} {format_bytes(worst.free)} were free but the largest contiguous "
                f"range was only {format_bytes(worst.largest_free)}: buffers of mixed sizes and lifetimes "
                f"left holes that a large request cannot use",
                "allocate long-lived buffers first and together, use a few fixed buffer sizes and "
                "reuse them, free short-lived buffers in the reverse order of allocation",
                {"free": format_bytes(worst.free), "largest free range": format_bytes(worst.largest_free),
                 "usable share": f"{worst.largest_free / worst.free:.0%}",
                 "failed allocations": len(ooms)}, []))
        # A large cache costs something only when it did not serve what came after: the pool
        # grew right after a sample that held it, or an allocation failed after it formed (a
        # cache at the end of a run, all freed, is what a caching pool is for).
        big = CACHED_SHARE * cap
        grew = next(((a, b) for a, b in zip(samples, samples[1:])
                     if a.reserved - a.allocated >= big and b.reserved > a.reserved), None)
        cached = grew[0] if grew is not None else max(samples, key=lambda s: s.reserved - s.allocated)
        failed = [c for c in ooms if c.start_ns >= cached.ts_ns]
        if cached.reserved - cached.allocated >= big and (grew is not None or failed):
            then = (f"yet at {format_ms(grew[1].ts_ns)} it reserved {format_bytes(grew[1].reserved)}"
                    if grew is not None else f"yet {len(failed)} allocation(s) failed after")
            out.append(Finding(
                "pool_cache", f"Device {dev_id}'s pool caches much more memory than is in use",
                f"at {format_ms(cached.ts_ns)} the allocator reserved {format_bytes(cached.reserved)} for "
                f"{format_bytes(cached.allocated)} of live buffers, {then}: the cached blocks did not "
                f"serve the requests that came after (they did not fit them, or the requests "
                f"went to another pool: a MemPool's cache serves only its own)",
                "trim the pool when the working set shrinks (ascentrt.empty_cache(), "
                "MemPool.trim_to(), a release threshold), keep buffer sizes uniform so cached "
                "blocks are reused",
                {"reserved": format_bytes(cached.reserved), "allocated": format_bytes(cached.allocated)}, []))
    live = [a for a in profile.allocations if a.free_ns is None and not a.reclaimed]
    reclaimed = [a for a in profile.allocations if a.reclaimed]
    leaked = live + reclaimed
    if leaked:
        parts = [f"{len(live)} still live when it ended"] if live else []
        for when, n in Counter(a.reclaimed for a in reclaimed).most_common():
            parts.append(f"{n} reclaimed at {when}, never freed by the program")
        out.append(Finding(
            "never_freed", f"{len(leaked)} allocation{'s were' if len(leaked) > 1 else ' was'} "
                           f"never freed",
            f"{len(leaked)} buffer(s) ({format_bytes(sum(a.nbytes for a in leaked))}) allocated while "
            f"profiling were never freed: {', '.join(parts)}",
            "free every buffer when done with it (buf.free()); a device reset or acl.finalize "
            "reclaims what is left but is no free (a leak in a loop ends in an out-of-memory error "
            "before it)",
            {"buffers": len(leaked), "bytes": format_bytes(sum(a.nbytes for a in leaked)),
             "device buffers": sum(a.device >= 0 for a in leaked),
             "pinned host buffers": sum(a.device < 0 for a in leaked),
             "reclaimed unfreed": len(reclaimed),
             "allocated at": _sites(leaked)}, []))
    return out


def _sites(allocs, top: int = 3) -> str:
    by_site: defaultdict[str, int] = defaultdict(int)
    for a in allocs:
        by_site[a.site] += a.nbytes
    ranked = sorted(by_site.items(), key=lambda kv: -kv[1])[:top]
    return ", ".join(f"{site} ({format_bytes(n)})" for site, n in ranked)
