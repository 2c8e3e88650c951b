"""The chunk level: large segments reserved from backing memory (device mapping, fake space, pinned host)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import forksafe
from ..errors import InvalidArgumentError
from ..handles import make_handles
from ..validate import check_size
from .arena import Arena


CHUNK = 2 << 20          # chunk granularity: 2 MiB (a transparent huge page)
PAGE = 4096              # the granularity of a chunk at the end of a range that is no whole chunk


def round_chunk(nbytes: int) -> int:
    """`nbytes` rounded up to the 2 MiB chunk granularity."""
    return -(-nbytes // CHUNK) * CHUNK


class Chunk:
    """One reserved segment: absolute address, size, uint8 view (None for fake space), and its blocks.

    The pool that holds the chunk keeps `starts` and `blocks` (its blocks' addresses, sorted,
    and the blocks) and `lock` (the pool's lock, held while it changes them): the address
    registry finds the buffer behind an interior pointer through them, so a malloc or free
    of a cached block touches no global index.
    """

    __slots__ = ("addr", "size", "view", "handle", "first", "pinned", "starts", "blocks", "lock",
                 "finder")

    def __init__(self, addr: int, size: int, view: np.ndarray | None, handle: Any, pinned: bool = False):
        self.addr, self.size, self.view, self.handle, self.pinned = addr, size, view, handle, pinned
        self.first: Any = None  # the block at the chunk's start address (set by the pool)
        self.starts: list[int] = []  # block start addresses, sorted (kept by the pool)
        self.blocks: list = []       # the blocks at those addresses
        self.lock: Any = None  # the holding pool's lock (None until one holds it)
        # The holding pool's find(chunk, addr, wait): the pool keeps the blocks, and types them
        # (compiled, read natively); called through here, chunks imports nothing of the pool.
        self.finder: Any = None

    @property
    def nbytes(self) -> int:
        """The chunk's size (the address registry's name for it)."""
        return self.size

    def find(self, addr: Any, wait: bool = True) -> Any:
        """The live buffer of this chunk that contains int address `addr`, or None (wait=False:
        without asking again under the pool's lock after a miss)."""
        finder = self.finder
        return None if finder is None or type(addr) is not int else finder(self, addr, wait)

    def buffers(self) -> list:
        """The live buffers of this chunk, by address."""
        lock = self.lock
        if lock is None:
            return []
        with lock:
            return [b.buf for b in self.blocks if b.buf is not None]


def _check_chunk(chunk: Any) -> None:
    """InvalidArgumentError unless `chunk` is a Chunk (what a chunk source hands out)."""
    if type(chunk) is not Chunk:
        raise InvalidArgumentError(f"a chunk source takes back a Chunk it made, got {type(chunk).__name__}")


class ArenaChunks:
    """Chunks carved (first-fit, 2 MiB granularity) from one address range; pages go back on release.

    With `view` None the range is fake address space: nothing is mapped, so a pool over it
    studies fragmentation of any capacity without using memory.
    """

    # (arguments typed Any where a caller's value may be bad: they are checked here, with
    # their codes; a compiled build would refuse a wrong type at the call with a bare TypeError)
    def __init__(self, capacity: Any, base: Any = 1 << 44, view: Any = None,
                 decommit: Callable[[int, int], None] | None = None, registry: Any = None):
        capacity = check_size(capacity, "capacity")
        self.capacity = capacity
        self.base = check_size(base, "base", allow_zero=True)
        if view is not None and not (isinstance(view, np.ndarray) and view.dtype == np.uint8
                                     and view.ndim == 1 and view.size >= capacity):
            raise InvalidArgumentError(f"view must be None (fake address space) or a 1-D uint8 "
                                       f"array of at least capacity ({capacity}) bytes")
        if decommit is not None and not callable(decommit):
            raise InvalidArgumentError("decommit must be a function (offset, nbytes) -> None")
        self.view = view
        self.decommit = decommit  # (offset, nbytes) -> None: the backend takes the pages back
        self.registry = registry  # an AddressRegistry the chunks are entered in (real memory)
        self.arena = Arena(capacity)

    def allocate(self, nbytes: Any, stream: Any = None) -> Chunk | None:
        """Reserve a chunk of round_chunk(nbytes) bytes, or None when the range has no room."""
        nbytes = check_size(nbytes)
        size = round_chunk(nbytes)
        # no exception: a miss is not an error the caller sees
        off = self.arena.try_alloc(size) if size <= self.capacity else None
        if off is None:
            if not self.capacity % CHUNK:
                return None
            # The range ends in less than a whole chunk (a capacity that is no multiple of
            # 2 MiB): a request that whole chunks cannot hold gets a chunk of its own pages,
            # at the end of the highest free range that holds it, so that free ranges keep
            # their starts for whole chunks (a 1 MiB device could allocate nothing).
            size = -(-nbytes // PAGE) * PAGE
            off = self.arena.try_alloc_high(size, PAGE)
            if off is None:
                return None
        view = None if self.view is None else self.view[off:off + size]
        chunk = Chunk(self.base + off, size, view, off)
        if self.registry is not None:
            self.registry.add(chunk)
        return chunk

    def deallocate(self, chunk: Any, stream: Any = None) -> None:
        """Give a chunk back: its range returns to the arena and its pages to the OS."""
        _check_chunk(chunk)
        if self.registry is not None:
            self.registry.remove(chunk)
        if self.decommit is not None:
            self.decommit(chunk.handle, chunk.size)  # touched pages would stay resident: drop them
        self.arena.free(chunk.handle)

    def shrink(self, chunk: Any, nbytes: Any) -> None:
        """Give back a chunk's end: keep its first `nbytes` (a multiple of 2 MiB, > 0); the
        caller has no block there."""
        _check_chunk(chunk)
        nbytes = check_size(nbytes)
        if nbytes % CHUNK or not 0 < nbytes < chunk.size:
            raise InvalidArgumentError(f"cannot shrink a chunk of {chunk.size} bytes to {nbytes}")
        tail = chunk.size - nbytes
        if self.registry is not None:
            self.registry.shrink_chunk(chunk, nbytes)  # (lookups in the part kept never miss)
        chunk.size = nbytes
        if chunk.view is not None:
            chunk.view = chunk.view[:nbytes]
        if self.decommit is not None:
            self.decommit(chunk.handle + nbytes, tail)
        self.arena.shrink(chunk.handle, nbytes)

    def unreserved_bytes(self) -> int:
        """Bytes of the range not held by any chunk."""
        return self.arena.free_bytes()

    def largest_unreserved(self) -> int:
        """The largest contiguous range not held by any chunk."""
        return self.arena.largest_free()

    def unreserved_ranges(self) -> list[tuple[int, int]]:
        """The ranges not held by any chunk, as (address, size), by address."""
        return [(self.base + off, size) for off, size in self.arena.free_ranges()]


class HostChunks:
    """Pinned host chunks from a backend: one allocation each, locked once when the chunk is made."""

    def __init__(self, backend: Any, capacity: Any = (1 << 62) - 1, registry: Any = None):
        if not all(callable(getattr(backend, m, None)) for m in ("alloc", "free", "host_view")):
            raise InvalidArgumentError(f"backend must be a Backend, got {type(backend).__name__}")
        self.backend = backend
        self.registry = registry  # an AddressRegistry the chunks are entered in
        self.capacity = check_size(capacity, "capacity")
        self._lock = forksafe.lock()
        self.reserved = 0
        self.mlock_calls = 0
        self.refusal = ""  # why the last chunk could not be mapped ("" once one could)

    def allocate(self, nbytes: Any, stream: Any = None) -> Chunk | None:
        """Map and lock a chunk of round_chunk(nbytes) bytes; None if the host cannot map it."""
        size = round_chunk(check_size(nbytes))
        with self._lock:
            if self.reserved + size > self.capacity:
                return None
            self.reserved += size
        try:
            handle = self.backend.alloc(size, host=True)
        except OSError as exc:
            with self._lock:
                self.reserved -= size
            self.refusal = f"the host could not map {size} bytes ({exc})"
            return None
        self.refusal = ""
        self.mlock_calls += 1
        view = np.frombuffer(self.backend.host_view(handle), dtype=np.uint8)
        chunk = Chunk(handle.addr, size, view, handle, handle.pinned)
        if self.registry is not None:
            self.registry.add(chunk)
        return chunk

    def deallocate(self, chunk: Any, stream: Any = None) -> None:
        """Unlock and unmap a chunk (stale user views keep the mapping, not its pages)."""
        _check_chunk(chunk)
        if self.registry is not None:
            self.registry.remove(chunk)
        chunk.view = None
        chunk.pinned = False
        self.backend.free(chunk.handle)
        with self._lock:
            self.reserved -= chunk.size

    def unreserved_bytes(self) -> int:
        """Bytes this source may still map."""
        return self.capacity - self.reserved

    def largest_unreserved(self) -> int:
        """Host mappings are independent: the largest is everything left."""
        return self.capacity - self.reserved


# (resources of this process: copies are themselves, pickling is refused)
make_handles(ArenaChunks, HostChunks)
