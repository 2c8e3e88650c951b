"""First-fit ranges of one address space: the pool's chunks (and, with the pool off, buffers)."""

from __future__ import annotations

import bisect

from .. import forksafe
from ..errors import InvalidArgumentError, OutOfMemoryError

ALIGNMENT = 64   # every allocation starts 64-byte aligned (CANN and CUDA guarantee at least this)
GRANULE = 32     # sizes round up to 32 bytes, as CANN does


def round_size(nbytes: int) -> int:
    """The size actually reserved for a request: rounded up to the 64-byte start alignment."""
    return -(-nbytes // ALIGNMENT) * ALIGNMENT


class Arena:
    """First-fit over a sorted free list with coalescing; offsets are relative to the mapping."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._lock = forksafe.lock()
        self._free_offsets = [0]      # sorted
        self._free_sizes = {0: capacity}
        self._used: dict[int, int] = {}
        self.used_bytes = 0

    def try_alloc(self, nbytes: int) -> int | None:
        """Reserve `nbytes` (already a multiple of 64); return its offset, or None when nothing fits."""
        with self._lock:
            for off in self._free_offsets:
                size = self._free_sizes[off]
                if size >= nbytes:
                    self._take(off, size, nbytes)
                    return off
        return None

    def try_alloc_high(self, nbytes: int, align: int) -> int | None:
        """Reserve `nbytes` (a multiple of 64) starting at a multiple of `align` (one of 64),
        as high as possible in the highest free range that holds them (its start stays where
        it was); return their offset, or None."""
        with self._lock:
            for off in reversed(self._free_offsets):
                size = self._free_sizes[off]
                start = (off + size - nbytes) // align * align
                if start < off:
                    continue
                end = off + size
                i = bisect.bisect_left(self._free_offsets, off)
                if start == off:
                    del self._free_offsets[i]
                    del self._free_sizes[off]
                else:
                    self._free_sizes[off] = start - off  # (the free range keeps its start)
                    i += 1
                if start + nbytes < end:  # (what alignment left above it stays free)
                    self._free_offsets.insert(i, start + nbytes)
                    self._free_sizes[start + nbytes] = end - start - nbytes
                self._used[start] = nbytes
                self.used_bytes += nbytes
                return start
        return None

    def alloc(self, nbytes: int) -> int:
        """Reserve `nbytes` (already a multiple of 64); return its offset or raise OutOfMemoryError."""
        off = self.try_alloc(nbytes)
        if off is not None:
            return off
        with self._lock:
            largest = max(self._free_sizes.values(), default=0)
            free = self.capacity - self.used_bytes
        raise OutOfMemoryError(
            f"cannot allocate {nbytes} bytes: capacity {self.capacity}, in use {self.used_bytes}, "
            f"free {free}, largest free range {largest}"
            + (" (free memory is fragmented)" if free >= nbytes else "")
            + "; free buffers you no longer need or raise ASCENTRT_DEVICE_MEMORY")

    def _take(self, off: int, size: int, nbytes: int) -> None:
        i = bisect.bisect_left(self._free_offsets, off)
        del self._free_offsets[i]
        del self._free_sizes[off]
        if size > nbytes:
            rest = off + nbytes
            self._free_offsets.insert(i, rest)
            self._free_sizes[rest] = size - nbytes
        self._used[off] = nbytes
        self.used_bytes += nbytes

    def shrink(self, off: int, nbytes: int) -> None:
        """Keep the first `nbytes` (a multiple of 64, > 0) of the range at `off`; free the rest."""
        with self._lock:
            size = self._used[off]
            if not 0 < nbytes < size:
                raise InvalidArgumentError(f"cannot shrink a range of {size} bytes to {nbytes}")
            self._used[off] = nbytes
            self._used[off + nbytes] = size - nbytes
            self._free_locked(off + nbytes)

    def free(self, off: int) -> None:
        """Return a range to the free list, merging it with free neighbours."""
        with self._lock:
            self._free_locked(off)

    def _free_locked(self, off: int) -> None:
        nbytes = self._used.pop(off)
        self.used_bytes -= nbytes
        i = bisect.bisect_left(self._free_offsets, off)
        end = off + nbytes
        if i < len(self._free_offsets) and self._free_offsets[i] == end:  # merge right
            nbytes += self._free_sizes.pop(end)
            del self._free_offsets[i]
        if i > 0:
            left = self._free_offsets[i - 1]
            if left + self._free_sizes[left] == off:                       # merge left
                self._free_sizes[left] += nbytes
                return
        self._free_offsets.insert(i, off)
        self._free_sizes[off] = nbytes

    def free_bytes(self) -> int:
        """Bytes not handed out."""
        return self.capacity - self.used_bytes

    def largest_free(self) -> int:
        """The largest contiguous free range."""
        with self._lock:
            return max(self._free_sizes.values(), default=0)

    def free_ranges(self) -> list[tuple[int, int]]:
        """The free ranges as (offset, size), by offset."""
        with self._lock:
            return [(off, self._free_sizes[off]) for off in self._free_offsets]
