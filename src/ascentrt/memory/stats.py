"""Pool statistics and diagnostics: memory_stats, memory_summary, fragmentation, memory_snapshot."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgumentError
from ..units import format_bytes
from .chunks import Chunk
from .links import Links
from .block import ALLOCATED, PENDING, READY
from .pool import BlockPool
from .stream_order import positions_reached
from .trace import base_pool


def _pools(device: Any = None, pool: Any = None) -> list[BlockPool]:
    if pool is not None:  # a MemPool (its BlockPool), or a BlockPool itself
        inner = getattr(pool, "_pool", pool)
        if not isinstance(inner, BlockPool):
            raise InvalidArgumentError(f"pool must be a MemPool, got {type(pool).__name__}")
        return [inner]
    alloc = Links.resolve_device(device)._memory
    return [p for p in [base_pool(alloc.pool), *alloc.pools()] if p is not None]


def reserved_bytes(device: Any = None) -> int:
    """Bytes a device's pools hold from the device (read without walking blocks or locking:
    cheap enough for a reader that asks often)."""
    return sum(p.reserved for p in _pools(device))


def _free_now(b) -> bool:
    """Whether a free block can be handed out: ready, or pending on work that is done (the pool
    collects it at its next allocation; stats only look, see BlockPool.free_now)."""
    return b.state is not PENDING or positions_reached(b.waits)


def _chunk_figures(pool: BlockPool, chunk: Chunk) -> dict:
    free = largest = 0
    for b in pool.blocks(chunk):
        if b.state is not ALLOCATED:
            free += b.size
            if _free_now(b) and b.size > largest:
                largest = b.size
    return {"free": free, "largest_free": largest,
            "fragmentation": 1 - largest / free if free else 0.0}


def _largest_free_ratio(frag: dict, ready: int, done_largest: int) -> float:
    """1 - largest / free over the blocks that can be handed out (done pending ones too)."""
    largest = max(frag["largest_free_block"], done_largest)
    return 1 - largest / ready if ready else 0.0


def pool_stats(pool: BlockPool) -> dict:
    """Statistics of one pool: bytes current/peak, counts, fragmentation figures."""
    with pool._lock:
        ready, done, done_largest = pool._free_now()  # (frees whose work is done: free, not pending)
        inactive_split = 0
        for chunk in pool._chunks.values():
            first = chunk.first
            if first.state is READY and first.next is None:
                continue  # a wholly free chunk is cached, not split
            inactive_split += _chunk_figures(pool, chunk)["free"]
        c = pool.counts
        frag = pool._fragmentation()
        return {
            "allocated_bytes.current": pool.allocated, "allocated_bytes.peak": pool.peak_allocated,
            "reserved_bytes.current": pool.reserved, "reserved_bytes.peak": pool.peak_reserved,
            "active_bytes.current": pool.allocated + pool.pending_bytes,
            "active_bytes.peak": pool.peak_active,
            "inactive_split_bytes.current": inactive_split,
            "pending_free_bytes.current": pool.pending_bytes - done,
            "cached_free_bytes.current": pool._cached_bytes,
            "requested_bytes.current": pool.requested, "requested_bytes.peak": pool.peak_requested,
            "num_allocs": c["allocs"], "num_frees": c["frees"],
            "num_device_reserve": c["reserves"], "num_device_release": c["releases"],
            "num_alloc_retries": c["retries"], "num_ooms": c["ooms"],
            "num_pending_reuse": c["reused_pending"], "num_inserted_waits": c["inserted_waits"],
            "num_chunks": len(pool._chunks),
            "largest_free_block": max(frag["largest_free_block"], done_largest),
            "fragmentation.internal": frag["internal"],
            "fragmentation.external": frag["external"],
            "fragmentation.largest_free_ratio": _largest_free_ratio(frag, ready, done_largest),
        }


def plain_stats(alloc: Any) -> dict:
    """pool_stats' keys for an allocator with the pool off (ASCENTRT_MEM_POOL_ENABLE=0), as
    PyTorch keeps its keys with caching off: every malloc reserves from the device and every
    free gives back (once the work queued before it is done: until then pending, and reserved)."""
    c, arena = alloc.plain, alloc.arena
    used = arena.used_bytes  # live buffers and frees waiting for queued work
    largest = arena.largest_free()
    free = arena.free_bytes()
    return {
        "allocated_bytes.current": c["allocated"], "allocated_bytes.peak": c["peak_allocated"],
        "reserved_bytes.current": used, "reserved_bytes.peak": c["peak_reserved"],
        "active_bytes.current": used, "active_bytes.peak": c["peak_reserved"],
        "inactive_split_bytes.current": 0,
        "pending_free_bytes.current": max(used - c["allocated"], 0),
        "cached_free_bytes.current": 0,
        "requested_bytes.current": c["requested"], "requested_bytes.peak": c["peak_requested"],
        "num_allocs": c["allocs"], "num_frees": c["frees"],
        "num_device_reserve": c["allocs"], "num_device_release": c["frees"],
        "num_alloc_retries": 0, "num_ooms": c["ooms"],
        "num_pending_reuse": 0, "num_inserted_waits": 0,
        "num_chunks": 0,
        "largest_free_block": largest,
        "fragmentation.internal": 1 - c["requested"] / c["allocated"] if c["allocated"] else 0.0,
        "fragmentation.external": 0.0,
        "fragmentation.largest_free_ratio": 1 - largest / free if free else 0.0,
    }


def memory_stats(device: Any = None, pool: Any = None) -> dict:
    """Statistics of a device's pools (default: the current device), or of one pool.

    Byte figures are summed over the device's default pool and its MemPools; fragmentation
    figures are those of the default pool.
    """
    pools = _pools(device, pool)
    if not pools:  # the pool is off: the same keys, from the plain arena
        return plain_stats(Links.resolve_device(device)._memory)
    per = [pool_stats(p) for p in pools]
    out = dict(per[0])
    for extra in per[1:]:
        for k, v in extra.items():
            if not k.startswith(("fragmentation", "largest")):
                out[k] += v
    return out


def reset_peak_memory_stats(device: Any = None) -> None:
    """Set every peak figure of the device's pools to its current value."""
    for p in _pools(device):
        with p._lock:
            p.peak_allocated, p.peak_reserved = p.allocated, p.reserved
            p.peak_requested, p.peak_active = p.requested, p.allocated + p.pending_bytes


def memory_snapshot(device: Any = None, pool: Any = None) -> list[dict]:
    """Every chunk of the pool(s) and every block in it: address, size, state, requested, stream."""
    out = []
    for p in _pools(device, pool):
        with p._lock:
            for chunk in p.chunks():
                blocks = [{"address": b.addr, "size": b.size,
                           "state": READY if b.state is PENDING and _free_now(b) else b.state,
                           "requested": b.requested if b.state is ALLOCATED else 0,
                           "stream": None if b.stream is None else getattr(b.stream, "id", None)}
                          for b in p.blocks(chunk)]
                out.append({"pool": p.name, "address": chunk.addr, "size": chunk.size,
                            "pinned": chunk.pinned, "blocks": blocks,
                            "allocated": sum(b["size"] for b in blocks if b["state"] == ALLOCATED),
                            **_chunk_figures(p, chunk)})
    return out


def _mib(n: int) -> str:
    return f"{format_bytes(n):>10}"


def memory_summary(device: Any = None, pool: Any = None) -> str:
    """A readable table of memory_stats() and the per-chunk fragmentation."""
    s = memory_stats(device, pool)
    off = not _pools(device, pool)
    rows = [("allocated", "allocated_bytes"), ("reserved", "reserved_bytes"),
            ("active", "active_bytes"), ("requested", "requested_bytes")]
    title = "memory summary (pool off: ASCENTRT_MEM_POOL_ENABLE=0)" if off else "memory pool summary"
    lines = [title, f"{'':22}{'current':>15}{'peak':>15}"]
    for label, key in rows:
        lines.append(f"{label:22}{_mib(s[key + '.current']):>15}{_mib(s[key + '.peak']):>15}")
    lines.append(f"{'inactive split':22}{_mib(s['inactive_split_bytes.current']):>15}")
    lines.append(f"{'pending free':22}{_mib(s['pending_free_bytes.current']):>15}")
    lines.append(f"allocs {s['num_allocs']}  frees {s['num_frees']}  device reserves "
                 f"{s['num_device_reserve']}  releases {s['num_device_release']}  retries "
                 f"{s['num_alloc_retries']}  OOMs {s['num_ooms']}")
    # (in words: "external" is the free share of what is reserved, a fresh chunk's unused tail
    # included; what fragmentation costs is the free memory outside the largest block)
    lines.append(f"fragmentation: internal {s['fragmentation.internal']:.1%} (rounding of "
                 f"requests)  external {s['fragmentation.external']:.1%} (of reserved, free)  "
                 f"outside the largest free block {s['fragmentation.largest_free_ratio']:.1%} of "
                 f"free ({format_bytes(s['largest_free_block'])} largest)")
    snap = memory_snapshot(device, pool)
    if snap:
        lines.append(f"{len(snap)} chunks:")
        for c in snap[:32]:
            lines.append(f"  {c['address']:#x} {_mib(c['size'])}  blocks {len(c['blocks']):5}  "
                         f"allocated {_mib(c['allocated'])}  frag {c['fragmentation']:.1%}")
        if len(snap) > 32:
            lines.append(f"  ... {len(snap) - 32} more")
    return "\n".join(lines)
