"""The chunk level: large segments reserved from backing memory (device mapping, fake space, pinned host)."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import threading

import numpy as np

from ..errors import OutOfMemoryError
from .arena import Arena

CHUNK = 2 << 20          # chunk granularity: 2 MiB (a transparent huge page)
_MADV_DONTNEED = 4
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.munlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def round_chunk(nbytes: int) -> int:
    """`nbytes` rounded up to the 2 MiB chunk granularity."""
    return -(-nbytes // CHUNK) * CHUNK


class Chunk:
    """One reserved segment: absolute address, size, uint8 view (None for fake space), and its blocks."""

    __slots__ = ("addr", "size", "view", "handle", "first", "pinned")

    def __init__(self, addr: int, size: int, view, handle, pinned: bool = False):
        self.addr, self.size, self.view, self.handle, self.pinned = addr, size, view, handle, pinned
        self.first = None  # the block at the chunk's start address (set by the pool)


class ArenaChunks:
    """Chunks carved (first-fit, 2 MiB granularity) from one address range; pages go back on release.

    With `view` None the range is fake address space: nothing is mapped, so a pool over it
    studies fragmentation of any capacity without using memory.
    """

    def __init__(self, capacity: int, base: int = 1 << 44, view: np.ndarray | None = None):
        self.capacity = capacity
        self.base = base
        self.view = view
        self.arena = Arena(capacity)

    def allocate(self, nbytes: int, stream=None) -> Chunk | None:
        """Reserve a chunk of round_chunk(nbytes) bytes, or None when the range has no room."""
        size = round_chunk(nbytes)
        if size > self.capacity:
            return None
        off = self.arena.try_alloc(size)  # no exception: a miss is not an error the caller sees
        if off is None:
            return None
        view = None if self.view is None else self.view[off:off + size]
        return Chunk(self.base + off, size, view, off)

    def deallocate(self, chunk: Chunk, stream=None) -> None:
        """Give a chunk back: its range returns to the arena and its pages to the OS."""
        if self.view is not None:
            # Touched pages would stay resident in the private mapping: drop them.
            _libc.madvise(ctypes.c_void_p(chunk.addr), ctypes.c_size_t(chunk.size), _MADV_DONTNEED)
        self.arena.free(chunk.handle)

    def unreserved_bytes(self) -> int:
        """Bytes of the range not held by any chunk."""
        return self.arena.free_bytes()

    def largest_unreserved(self) -> int:
        """The largest contiguous range not held by any chunk."""
        return self.arena.largest_free()


class HostChunks:
    """Pinned host chunks: one anonymous mapping each, mlocked once when the chunk is made."""

    def __init__(self, capacity: int = 1 << 62):
        self.capacity = capacity
        self._lock = threading.Lock()
        self.reserved = 0
        self.mlock_calls = 0

    def allocate(self, nbytes: int, stream=None) -> Chunk | None:
        """Map and lock a chunk of round_chunk(nbytes) bytes; None if the host cannot map it."""
        size = round_chunk(nbytes)
        with self._lock:
            if self.reserved + size > self.capacity:
                return None
            self.reserved += size
        try:
            mm = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except OSError:
            with self._lock:
                self.reserved -= size
            return None
        if hasattr(mmap, "MADV_HUGEPAGE"):
            try:  # before mlock populates it: huge pages make copies from/to it ~15% faster
                mm.madvise(mmap.MADV_HUGEPAGE)
            except OSError:
                pass  # transparent huge pages disabled: normal pages still work
        view = np.frombuffer(mm, dtype=np.uint8)
        addr = view.ctypes.data
        pinned = _libc.mlock(ctypes.c_void_p(addr), ctypes.c_size_t(size)) == 0
        self.mlock_calls += 1
        return Chunk(addr, size, view, mm, pinned)

    def deallocate(self, chunk: Chunk, stream=None) -> None:
        """Unlock and unmap a chunk (the mapping lives on while a user view still exports it)."""
        if chunk.pinned:
            _libc.munlock(ctypes.c_void_p(chunk.addr), ctypes.c_size_t(chunk.size))
            chunk.pinned = False
        # Stale user views may keep the mapping alive: its pages go back to the OS now anyway.
        _libc.madvise(ctypes.c_void_p(chunk.addr), ctypes.c_size_t(chunk.size), _MADV_DONTNEED)
        chunk.view = None
        try:
            chunk.handle.close()
        except BufferError:
            pass  # a user array still views it: unmapped when that array dies
        with self._lock:
            self.reserved -= chunk.size

    def unreserved_bytes(self) -> int:
        """Bytes this source may still map."""
        return self.capacity - self.reserved

    def largest_unreserved(self) -> int:
        """Host mappings are independent: the largest is everything left."""
        return self.capacity - self.reserved
