"""A pool's blocks: ranges of a chunk, their size classes, and finding the live buffer of an address."""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Any, Final

from .chunks import CHUNK, Chunk

if TYPE_CHECKING:
    from .buffer import _ByteRange  # (typed: a compiled build reads its fields natively)

# Final: a compiled build inlines them instead of looking each up in the module per use.
ALLOCATED: Final = "allocated"
READY: Final = "free"
PENDING: Final = "pending"
CACHED: Final = "cached"
SMALL_LIMIT: Final = 1 << 20        # requests up to 1 MiB share 2 MiB chunks ...
MEDIUM_LIMIT: Final = 10 << 20      # ... those under 10 MiB share 20 MiB ones; larger get their own
MEDIUM_CHUNK: Final = 20 << 20      # (as PyTorch's caching allocator: 3 MiB blocks in chunks of
                                    # their own would leave a quarter of each 4 MiB chunk unusable)
MAX_CLASS_STEP: Final = 512 << 10   # size classes above 8 MiB are 512 KiB apart
# (Final: a compiled build calls them from C statics, not through the bisect module's attributes)
_bisect_left: Final = bisect.bisect_left
_bisect_right: Final = bisect.bisect_right


def size_class(nbytes: int, align: int = 64) -> int:
    """The block size for a request: 64-byte steps up to 1 KiB, then 16 classes per power of two
    (steps of at most 512 KiB, so a huge request wastes little)."""
    if nbytes <= 1024:
        size = (nbytes + 63) & ~63
    else:
        step = min(1 << (nbytes.bit_length() - 5), MAX_CLASS_STEP)
        size = (nbytes + step - 1) & -step
    if align > 64:
        size = -(-size // align) * align
    return size or align


def chunk_size_for(size: int, split_limit: int | None = None) -> int:
    """How much to reserve upstream for a block of `size` that found no free block (a split
    limit under a shared chunk's size would leave its rest unsplittable: no sharing then)."""
    if size <= SMALL_LIMIT:
        return CHUNK
    if size < MEDIUM_LIMIT and (split_limit is None or split_limit >= MEDIUM_CHUNK):
        return MEDIUM_CHUNK
    return -(-size // CHUNK) * CHUNK


class Block:
    """A range of a chunk: allocated, free (ready for anyone) or pending (free, streams still busy)."""

    __slots__ = ("addr", "size", "chunk", "prev", "next", "state", "stream", "waits", "uses",
                 "requested", "view", "view_n", "buf")

    # Typed precisely: a compiled build (accel.py) keeps these as native fields.
    def __init__(self, addr: int, size: int, chunk: Any, prev: Block | None = None,
                 next: Block | None = None):
        self.addr: int = addr
        self.size: int = size
        self.chunk: Any = chunk
        self.prev: Block | None = prev
        self.next: Block | None = next
        self.state: str = READY
        self.stream: Any = None  # allocating stream, then the stream that may reuse it at once
        self.waits: tuple = ()   # ((stream, position), ...) work that must finish before others reuse
        self.uses: list | None = None  # extra streams marked with record_stream
        self.requested: int = 0
        self.view: Any = None    # cached uint8 view of the first view_n bytes
        self.view_n: int = 0
        self.buf: Any = None     # the live buffer the block backs (set and cleared by its allocator)

    def bytes(self, nbytes: int):
        """A uint8 view of the block's first `nbytes` bytes (cached for exact-size reuse)."""
        if self.view_n != nbytes:
            chunk = self.chunk
            off = self.addr - chunk.addr
            self.view = None if chunk.view is None else chunk.view[off:off + nbytes]
            self.view_n = nbytes
        return self.view

    def __repr__(self) -> str:
        return f"Block({self.addr:#x}, {self.size}, {self.state})"


def find_buffer(chunk: Chunk, addr: int, wait: bool) -> Any:
    """The live buffer of a pool's chunk that contains `addr`, or None (wait=False: without
    asking again under the pool's lock after a miss). Each chunk a pool holds finds through
    it (Chunk.finder): typed here, a compiled build reads the blocks' fields natively."""
    buf = _buffer_at(chunk.starts, chunk.blocks, addr)  # first without the lock: a hit is
    if buf is not None:                                 # checked against the buffer itself
        return buf
    lock = chunk.lock
    if lock is None or not wait:
        return None
    # A miss may have raced a split or merge of this chunk: look again under the lock
    # (`with`: the pool's lock may be a plain one, whose owner an interrupt handler
    # could not tell; `with` leaves no gap between the acquire and the block).
    with lock:
        return _buffer_at(chunk.starts, chunk.blocks, addr)


def _buffer_at(starts: list[int], blocks: list[Block], addr: int) -> Any:
    """The live buffer of the block that contains `addr`, or None (also when the lists are
    changing meanwhile: the caller then asks again under the pool's lock)."""
    i = _bisect_right(starts, addr) - 1
    if i < 0:
        return None
    try:
        held = blocks[i].buf
    except IndexError:  # the lists changed meanwhile
        return None
    if held is None:
        return None
    buf: _ByteRange = held  # (typed: compiled, its fields are read natively, ~3x faster)
    if buf.addr <= addr < buf.addr + buf.nbytes:
        return buf
    return None


def absorb(left: Block, right: Block) -> None:
    """Merge `right` (the next block in the chunk) into `left`."""
    chunk: Chunk = left.chunk  # (typed: compiled, its lists are read natively)
    starts = chunk.starts
    i = _bisect_left(starts, right.addr)
    del starts[i]
    del chunk.blocks[i]
    left.size += right.size
    left.next = right.next
    if right.next is not None:
        right.next.prev = left
    left.view_n = -1


def give_back(pool: Any, block: Block) -> None:
    """Return a block its taker could not hand out (an interrupt came between the two) to the
    pool; one that already backs a buffer stays: that buffer is live and can be freed."""
    if block.buf is None:
        pool.deallocate(block)
