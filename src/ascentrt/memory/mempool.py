"""Stream-ordered memory pools: explicit MemPools, malloc_async/free_async, record_stream, pool settings."""

from __future__ import annotations

from types import EllipsisType
from typing import Any

from ..handles import Handle
from .. import interrupts
from ..errors import ErrorCode, InvalidArgumentError, InvalidHandleError
from .allocator import DeviceAllocator, check_stream
from ..validate import check_size
from .buffer import DeviceBuffer
from .links import Links
from .pool import BlockPool
from .registry import REGISTRY
from .trace import base_pool
from .policy import ReusePolicy
from .stats import pool_stats


def _device(device: Any) -> Any:
    return Links.resolve_device(device)


def _trimmed(device: Any, released: int) -> int:
    """Tell the memory observers that a trim gave `released` bytes of `device` back (the
    reserved figure changed with no allocation or free); returns `released`."""
    if released and REGISTRY.observers:
        REGISTRY.reserved_changed(device)
    return released


def _size_or_none(value: Any, what: str) -> int | None:
    """None, or `value` checked as a byte count and made a plain int."""
    return None if value is None else check_size(value, what, allow_zero=True)


class MemPool(Handle):
    """An explicit pool on one device: its own cached blocks, settings and statistics.

    Chunks come from the device's memory like the default pool's. `malloc_async` /
    `free_async` order allocation and reuse on streams; `trim_to` returns cached memory.
    """

    def __init__(self, device: Any = None, *, release_threshold: int | None = None,
                 split_limit: int | None = None, policy: ReusePolicy | None = None):
        dev = _device(device)
        # (Kept as the plain ints check_size returns: numpy integers are accepted too.)
        release_threshold = _size_or_none(release_threshold, "release_threshold")
        split_limit = _size_or_none(split_limit, "split_limit")
        if policy is not None and not isinstance(policy, ReusePolicy):
            raise InvalidArgumentError("policy must be a ReusePolicy")
        base = dev._memory
        self.device = dev
        self._pool = BlockPool(base.chunks, split_limit=split_limit,
                               release_threshold=release_threshold, policy=policy,
                               all_streams=Links.busy_streams, busy_sets=Links.active_sets,
                               name=f"MemPool on device {dev.id}")
        self._alloc = DeviceAllocator(dev, base.mem, base.base, base.capacity, pool=self._pool)
        self._destroyed = False
        base.explicit.append(self._alloc)

    def _check_alive(self) -> None:
        if self._destroyed:
            raise InvalidHandleError("memory pool was destroyed")

    def malloc_async(self, nbytes: int, stream: Any = None) -> DeviceBuffer:
        """A buffer usable on `stream` in stream order; raises InvalidArgumentError / OutOfMemoryError."""
        self._check_alive()
        return self._alloc.malloc(nbytes, stream)

    def free_async(self, buf: DeviceBuffer, stream: Any = None) -> None:
        """Free `buf`, one of this pool's buffers, after `stream`'s work so far (same as
        buf.free(stream)); InvalidArgumentError for another pool's buffer."""
        if isinstance(buf, DeviceBuffer) and buf._owner is not self._alloc:
            raise InvalidArgumentError(f"device buffer at {buf.addr:#x} was not allocated from "
                                       f"this pool ({self!r})")
        free_async(buf, stream)

    def trim_to(self, nbytes: int) -> int:
        """Return cached chunks until at most `nbytes` stay reserved; returns bytes released."""
        self._check_alive()
        return _trimmed(self.device, self._pool.trim_to(check_size(nbytes, "nbytes", allow_zero=True)))

    @property
    def release_threshold(self) -> int | None:
        """Reserved bytes above which wholly free chunks go back at once (None: keep all)."""
        return self._pool.release_threshold

    @release_threshold.setter
    def release_threshold(self, value: int | None) -> None:
        self._check_alive()  # (a destroyed pool keeps 0: its chunks go back as buffers are freed)
        self._pool.release_threshold = _size_or_none(value, "release_threshold")

    @property
    def reserved_current(self) -> int:
        """Bytes the pool holds from the device now."""
        return self._pool.reserved

    @property
    def reserved_high(self) -> int:
        """The most bytes the pool held at once."""
        return self._pool.peak_reserved

    @property
    def used_current(self) -> int:
        """Bytes in live buffers now."""
        return self._pool.allocated

    @property
    def used_high(self) -> int:
        """The most bytes in live buffers at once."""
        return self._pool.peak_allocated

    def reset_high(self) -> None:
        """Set the high-water marks to the current values."""
        p = self._pool
        p.peak_reserved, p.peak_allocated = p.reserved, p.allocated

    def stats(self) -> dict:
        """memory_stats() of this pool alone."""
        return pool_stats(self._pool)

    def destroy(self) -> None:
        """Refuse new allocations and release cached memory; live buffers stay valid until freed."""
        self._check_alive()
        self._destroyed = True
        self._pool.release_threshold = 0  # chunks go back as soon as their last buffer is freed
        _trimmed(self.device, self._pool.empty_cache())
        explicit = self.device._memory.explicit
        if self._pool.allocated == 0 and self._alloc in explicit:
            explicit.remove(self._alloc)  # nothing left to account for in the device's stats

    close = destroy

    def __enter__(self) -> "MemPool":
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._destroyed:
            self.destroy()

    def __repr__(self) -> str:
        return (f"MemPool(device={self.device.id}, reserved={self.reserved_current}, "
                f"used={self.used_current})")


def malloc_async(nbytes: int, stream: Any = None, pool: MemPool | None = None) -> DeviceBuffer:
    """Allocate in `stream`'s order from `pool` (default: the stream's device pool)."""
    if pool is not None:
        if not isinstance(pool, MemPool):
            raise InvalidArgumentError(f"pool must be a MemPool, got {type(pool).__name__}")
        return pool.malloc_async(nbytes, stream)
    if stream is not None:
        check_stream(stream, getattr(stream, "device", None))
    device = stream.device if stream is not None else None
    return _device(device)._memory.malloc(nbytes, stream)


def free_async(buf: DeviceBuffer, stream: Any = None) -> None:
    """Free a device buffer after `stream`'s work so far; reusable at once on that stream."""
    if not isinstance(buf, DeviceBuffer):
        raise InvalidArgumentError(f"free_async takes a DeviceBuffer, got {type(buf).__name__}")
    buf.free(stream)


def record_stream(buf: DeviceBuffer, stream: Any) -> None:
    """Mark `buf` as used on `stream`: freeing it then also waits for that stream's work."""
    if not isinstance(buf, DeviceBuffer):
        raise InvalidArgumentError(f"record_stream takes a DeviceBuffer, got {type(buf).__name__}")
    if not buf.alive:
        raise InvalidHandleError(f"device buffer at {buf.addr:#x} was freed",
                                 code=ErrorCode.RT_MEMORY_FREE)
    buf._owner.record_stream(buf, stream)


def empty_cache(device: Any = None) -> int:
    """Return the device pool's wholly free cached chunks to the device; returns bytes released."""
    dev = _device(device)
    alloc = dev._memory
    return _trimmed(dev, sum(p.empty_cache() for p in [base_pool(alloc.pool), *alloc.pools()]
                             if p is not None))


def configure_pool(device: Any = None, *, split_limit: int | None | EllipsisType = ...,
                   release_threshold: int | None | EllipsisType = ...,
                   gc_threshold: float | EllipsisType = ..., policy: ReusePolicy | None = None) -> None:
    """Change the device pool's settings at run time (the ASCENTRT_MEM_POOL_* settings); a
    release threshold applies at once (cached whole chunks beyond it go back)."""
    dev = _device(device)
    pool = base_pool(dev._memory.pool)  # (not a recorder: the settings are the pool's)
    if pool is None:
        raise InvalidArgumentError("the memory pool is off (ASCENTRT_MEM_POOL_ENABLE=0)")
    if split_limit is not ...:
        split_limit = _size_or_none(split_limit, "split_limit")
    if release_threshold is not ...:
        release_threshold = _size_or_none(release_threshold, "release_threshold")
    if gc_threshold is not ... and (not isinstance(gc_threshold, (int, float)) or not 0 <= gc_threshold <= 1):
        raise InvalidArgumentError(f"gc_threshold must be a fraction in [0, 1], got {gc_threshold!r}")
    if policy is not None and not isinstance(policy, ReusePolicy):
        raise InvalidArgumentError("policy must be a ReusePolicy")
    with pool._lock:
        if split_limit is not ...:
            pool.split_limit = split_limit
        if release_threshold is not ...:
            pool.release_threshold = release_threshold
        if gc_threshold is not ...:
            pool.gc_threshold = float(gc_threshold)
        if policy is not None:
            pool.policy = policy
    if release_threshold is not ... and release_threshold is not None:
        # (what the pool cached under the old threshold: as a free over the new one would)
        _trimmed(dev, pool.trim_to(release_threshold))


# (a Ctrl-C as a new buffer is handed on would lose it: sent again once the call returned)
interrupts.protect(MemPool.malloc_async, malloc_async)
