"""What the profiler asks of a device's memory: the one place that knows the allocator's API.

Two shapes exist: the caching pool (DeviceAllocator.pool, over chunks of the device mapping,
plus explicit MemPools in DeviceAllocator.pools()) and, with the pool off, a plain first-fit arena.
"""

from __future__ import annotations


def _pools(mem) -> list:
    pools = [p for p in [mem.pool, *mem.pools()] if p]
    return list({id(p): p for p in pools}.values())


def _longest_run(ranges: list[tuple[int, int]]) -> int:
    """The largest size of adjacent (address, size) ranges joined (sorted by address)."""
    best = run = 0
    end = None
    for addr, size in ranges:
        run = run + size if addr == end else size
        end = addr + size
        best = max(best, run)
    return best


def reserved_bytes(device) -> int:
    """Bytes the allocator holds: live buffers plus cached free blocks (pool), or live (arena)."""
    mem = device._memory
    pools = _pools(mem)
    if pools:
        return sum(p.reserved for p in pools)
    return int(mem.used_bytes())


def free_ranges(device) -> tuple[int, int]:
    """(bytes a request could still get, the largest contiguous range of them), as one of the
    device's pools sees them: the pool where the two differ most (fragmentation is a pool's).

    A pool can hand out the unreserved memory and its own ready free blocks: not blocks freed
    after work not done yet, nor what another pool caches (a MemPool keeps its reserve, as the
    default pool keeps its cache). Its largest range is a free block of its own, or unreserved
    memory joined with its wholly free chunks beside it, which it gives back when a request
    needs the room (taken apart, they read as fragmentation that is not there)."""
    mem = device._memory
    pools = _pools(mem)
    if pools:
        chunks = mem.chunks
        unreserved = chunks.unreserved_bytes()
        spans = chunks.unreserved_ranges()
        views = []
        for p in pools:
            ready, done_largest = p.free_now()  # (frees whose work is done are free)
            free = unreserved + ready
            largest = max(p.largest_free_block(), done_largest,
                          _longest_run(sorted(spans + p.free_chunk_ranges())))
            views.append((largest / free if free else 1.0, free, largest))
        _, free, largest = min(views)
        return int(free), int(largest)
    arena = mem.arena
    return int(arena.free_bytes()), int(arena.largest_free())


def live_host_bytes(registry) -> int:
    """Bytes of the live host allocations the registry's observers are told of (pinned
    buffers, registered host memory): those of no device."""
    return sum(a.nbytes for a in registry.live() if getattr(a, "device", 0) is None)


def live_device_bytes(device) -> int:
    """Bytes in the device's live buffers right now, those of its MemPools too (each
    buffer's size, as the profiler counts the ones allocated while it runs)."""
    mem = device._memory
    return sum(b.nbytes for alloc in [mem, *mem.explicit] for b in alloc.live_buffers())
