"""The block level: a best-fit caching allocator over chunks, with stream-ordered reuse.

A request is rounded to a size class (16 per power of two, so the common case is an exact
size reuse from a per-size bin). Free blocks whose last users (streams) still have work
queued are *pending*: the freeing stream may reuse them at once (stream order protects it);
another stream only when the work is done (opportunistic), when it already waits on an event
that covers it (follow event dependencies), or by inserting that wait itself. A freed block
first goes to a small per-size cache (not merged, so the next request of that size takes it
back at once); otherwise, and whenever a request misses, free blocks coalesce with free
neighbours. Whole free chunks go back upstream on trim or past the release threshold.
"""

from __future__ import annotations

import bisect
import sys
from typing import TYPE_CHECKING, Any, Final

from .. import forksafe
from ..errors import ErrorCode, InvalidArgumentError, OutOfMemoryError
from ..handles import make_handles
from ..interrupts import hold, release, release_or_undo
from ..units import format_bytes
from ..validate import check_finite, check_size
from .block import ALLOCATED, CACHED, PENDING, READY, Block, absorb, chunk_size_for, find_buffer, size_class
from .chunks import Chunk, round_chunk
from .inflight import ACTIVE, defer_release
from .links import Links
from .oom import fragmentation_hint
from .policy import ReusePolicy
from .stream_order import busy_positions, furthest_positions, positions_reached

if TYPE_CHECKING:
    from .buffer import _Allocation  # (typed: a compiled build reads it natively)

# Final: a compiled build inlines them instead of looking each up in the module per use.
_HOST_USES: Final = ACTIVE  # (memory/inflight.py's, read natively: not from the module's dict)
CACHE_PER_SIZE: Final = 8           # freed blocks kept unmerged per size, for exact-size reuse
CACHE_BYTES: Final = 64 << 20       # at most this many bytes kept unmerged
CACHE_SIZES_KEPT: Final = 512       # emptied per-size caches kept across a flush, at most
MIN_SPLIT: Final = 512              # a remainder smaller than this stays inside the block
OVERSIZE_SLACK: Final = 20 << 20    # an unsplittable block serves a request at most this much smaller

# Compiled (accel.py) under a GIL, code that calls no Python code, allocates no container
# (which could start a garbage collection and its finalizers) and blocks nowhere runs without
# another thread in between: the exact-size cache paths below run so, without the lock, while
# no thread holds it (the lock is then a plain one: its holder can be seen). From source, every
# path takes the lock (an RLock: an interrupt between acquire and try can be undone).
COMPILED: Final[bool] = not __file__.endswith(".py")
ATOMIC: Final[bool] = COMPILED and getattr(sys, "_is_gil_enabled", lambda: True)()
# (Final: a compiled build calls them from C statics, not through the bisect module's attributes)
_bisect_left: Final = bisect.bisect_left
_bisect_right: Final = bisect.bisect_right
_insort: Final = bisect.insort


class _SizeCache:
    """The freed blocks of one size kept unmerged (CACHED) for an exact-size reuse: a stack in a
    list that keeps its length, so that a reuse and a free resize nothing."""

    __slots__ = ("size", "blocks", "n")

    def __init__(self, size: int):
        self.size: int = size
        self.blocks: list[Block | None] = [None] * CACHE_PER_SIZE
        self.n: int = 0  # blocks[:n] are cached

    def push(self, block: Block) -> None:
        """Keep `block` (the caller checked n < CACHE_PER_SIZE)."""
        self.blocks[self.n] = block
        self.n += 1

    def pop(self) -> Block:
        """The block freed last (the caller checked n > 0)."""
        n = self.n - 1
        self.n = n
        block = self.blocks[n]
        self.blocks[n] = None
        return block  # type: ignore[return-value]  # (blocks[:n] are blocks)

    def taken(self) -> list[Block]:
        """Every cached block, removed from the cache (which stays, empty, for its size)."""
        blocks = self.blocks
        out: list[Block] = []
        for i in range(self.n):
            out.append(blocks[i])  # type: ignore[arg-type]  # (blocks[:n] are blocks)
            blocks[i] = None
        self.n = 0
        return out


_NO_SIZE: Final = _SizeCache(-1)  # what the last-used-size memo holds before any cache exists


class BlockPool:
    """Best-fit caching allocator over an upstream chunk resource (allocate/deallocate on a stream)."""

    # (Arguments typed Any: they are checked here, with InvalidArgumentError, where a compiled
    # build would raise a bare TypeError at the call.)
    def __init__(self, upstream: Any, *, align: Any = 64, split_limit: Any = None,
                 release_threshold: Any = None, gc_threshold: Any = 0.0, policy: Any = None,
                 all_streams: Any = None, busy_sets: list[set] | None = None, name: Any = "pool"):
        if not all(callable(getattr(upstream, m, None)) for m in ("allocate", "deallocate")):
            raise InvalidArgumentError(f"a pool's upstream allocates and deallocates chunks "
                                       f"(ArenaChunks, HostChunks), got {type(upstream).__name__}")
        self.upstream = upstream
        self.align: int = check_size(align, "align")
        if self.align & (self.align - 1):
            raise InvalidArgumentError(f"align must be a power of two, got {align}")
        self.split_limit: int | None = None if split_limit is None else \
            check_size(split_limit, "split_limit")
        self.release_threshold: int | None = None if release_threshold is None else \
            check_size(release_threshold, "release_threshold", allow_zero=True)
        self.gc_threshold: float = check_finite(gc_threshold, "gc_threshold")
        if self.gc_threshold > 1:
            raise InvalidArgumentError(f"gc_threshold is a fraction of the capacity (0 to 1), "
                                       f"got {gc_threshold}")
        if policy is not None and not isinstance(policy, ReusePolicy):
            raise InvalidArgumentError(f"policy must be a ReusePolicy, got {type(policy).__name__}")
        if all_streams is not None and not callable(all_streams):
            raise InvalidArgumentError("all_streams must be a function returning streams")
        if not isinstance(name, str):
            raise InvalidArgumentError(f"name must be a str, got {type(name).__name__}")
        self.policy: ReusePolicy = policy or ReusePolicy()
        self.all_streams = all_streams or (lambda: ())  # streams a stream-less free waits for
        # Sets that hold every stream all_streams() may return while it has work in flight: when
        # all are empty, a stream-less free waits for nothing without calling all_streams().
        self.busy_sets: list[set] | None = busy_sets
        self.name: str = name
        self.device_id: int = -1  # the device whose memory it holds (its allocator sets it); -1: host
        lock: Any = forksafe.lock() if ATOMIC else forksafe.rlock()  # (see ATOMIC)
        self._lock: Any = lock
        self._acquire: Any = lock.acquire  # bound once: the hot paths skip a method lookup
        self._release: Any = lock.release
        self._locked: Any = lock.locked if ATOMIC else None  # (an RLock has no locked())
        self._chunks: dict[int, Any] = {}
        self._bins: dict[int, dict[Block, None]] = {}  # ready free blocks by size
        self._sizes: list[int] = []          # sorted sizes with a non-empty bin
        # The chunks whose one block is ready (whole and idle), and their bytes: kept as blocks
        # enter and leave the bins (a block's wholeness cannot change while it is binned),
        # so that a reserve need not scan every chunk to learn whether idle ones could serve.
        self._idle: dict[Any, None] = {}
        self._idle_bytes: int = 0
        # stream -> size -> pending blocks only it may take at once
        self._stream_bins: dict[Any, dict[int, dict[Block, None]]] = {}
        # (Read once: the runtime registers its Stream class on import; a pool made before
        # that only misses the lock-free path for streams.)
        self._stream_type: type[Any] = Links.stream_type
        self._pending: dict[Block, None] = {}  # every pending block, in free order
        self._pending_streams: dict[Any, int] = {}  # stream -> pending blocks waiting for it
        self._collect_key: Any = None        # those streams' progress at the last collect
        self._cache: dict[int, _SizeCache] = {}  # size -> freed blocks kept unmerged (CACHED)
        # The cache of the size used last: a request or free of that size skips the dict (in a
        # compiled build, the boxing of the size and the key comparison it costs).
        self._last_cache: _SizeCache = _NO_SIZE
        self._cached_bytes: int = 0
        self.allocated: int = 0
        self.requested: int = 0
        self.reserved: int = 0
        self.pending_bytes: int = 0
        self.peak_allocated: int = 0
        self.peak_requested: int = 0
        self.peak_reserved: int = 0
        self.peak_active: int = 0
        self.n_allocs: int = 0
        self.n_frees: int = 0
        self._counts = dict.fromkeys(("reserves", "releases", "retries", "ooms", "reused_pending",
                                      "inserted_waits"), 0)
        self._classes: dict[int, int] = {}   # request -> size class, memoised (from source)
        # (request, size class) of the request seen last: one field, so that a thread never
        # reads one request's class with another's size. It starts as a real request's: an
        # unset pair such as (-1, 0) once handed a request of -1 a block of 0 bytes.
        self._last_class: tuple[int, int] = (1, size_class(1, self.align))

    @property
    def counts(self) -> dict:
        """Event counts: allocs, frees, reserves, releases, retries, ooms, reused_pending, inserted_waits."""
        return {"allocs": self.n_allocs, "frees": self.n_frees, **self._counts}

    # ---- allocate (hot path first) ---------------------------------------------------------

    def allocate(self, nbytes: Any, stream=None) -> Block:
        """A block of at least `nbytes` usable on `stream`; raises OutOfMemoryError (and
        InvalidArgumentError for a size that is no int > 0)."""
        # (an int first: 1024.0 == 1024 would otherwise hit the memo of the last request)
        n: int = nbytes if type(nbytes) is int else check_size(nbytes)
        last = self._last_class
        size = last[1] if last[0] == n else self._size_class(n)
        # (Compiled, no lock held: see ATOMIC. A stream of the runtime's own class hashes in C.)
        if ATOMIC and not self._locked() and (stream is None or (
                type(stream) is self._stream_type
                and (not self._stream_bins or not self._stream_bins.get(stream)))):
            cached = self._size_cache(size)
            if cached is not None and cached.n:
                self._cached_bytes -= size
                return self._hand_out(cached.pop(), stream, n)
        return self._allocate_locked(size, stream, n)

    def _allocate_locked(self, size: int, stream, n: int) -> Block:
        """allocate() of a size class under the pool's lock. (Apart from allocate: a function
        that makes a closure, as the undo below, pays for it on every call, compiled.)"""
        lock = self._lock
        # Held compiled too: the slow path calls Python code (the upstream's, hold()'s own),
        # where a Ctrl-C lands; held, it is raised only once the pool is whole (below).
        held = hold()
        try:  # not `with` (slower); an interrupt right after acquire is caught below
            self._acquire()
            try:
                block = None
                # (A stream being captured may not take its own pending blocks: the graph may
                # replay on another stream, not ordered after the work they wait for.)
                if stream is not None and stream._capture is None:
                    bins = self._stream_bins.get(stream)
                    if bins:
                        same = bins.get(size)
                        if same:
                            block = self._take_pending(same.popitem()[0])
                            if not same:
                                del bins[size]
                if block is None:
                    cached = self._size_cache(size)
                    if cached is not None and cached.n:
                        block = cached.pop()  # an exact-size block freed with no work pending
                        self._cached_bytes -= size
                    else:
                        block = self._allocate_slow(size, stream, n)
                block = self._hand_out(block, stream, n)
            finally:
                self._release()
        except BaseException:
            if not ATOMIC and lock._is_owned():  # interrupted between acquire and try
                lock.release()
            release(held)
            raise
        # A Ctrl-C held meanwhile is raised now, the pool whole, and undoes this allocation:
        # its block would be lost.
        release_or_undo(held, lambda: self._undo_allocate(block, stream))
        return block

    def _undo_allocate(self, block: Block, stream) -> None:
        """Put back a block allocate() handed out that its caller never got, after the work
        it may still wait for (a pending block's, the stream's)."""
        with self._lock:
            self._put_back(block, stream, tuple(block.waits) + self.waits_for(block, stream), None)

    def _size_class(self, nbytes: int) -> int:
        """size_class(nbytes), memoised (and remembered as the last request); a request of
        no bytes or fewer is refused (InvalidArgumentError), so only real ones are remembered."""
        if nbytes <= 0:  # (a memo miss only: a size allocated just before never comes here)
            raise InvalidArgumentError(f"{self.name}: a block of {nbytes} bytes was asked for "
                                       f"(a request must be > 0 bytes)")
        # (Compiled, size_class is a few native steps (~20 ns): the memo's lookup costs more,
        # and misses anyway on varied sizes. From source it is ~10x dearer than a lookup.)
        size = size_class(nbytes, self.align) if COMPILED else self._classes.get(nbytes)
        if size is None:
            size = size_class(nbytes, self.align)
            if len(self._classes) < 4096:
                self._classes[nbytes] = size
        self._last_class = (nbytes, size)
        return size

    def _size_cache(self, size: int) -> _SizeCache | None:
        """The cache of `size`, if it has one (remembered as the last used)."""
        last = self._last_cache
        if last.size == size:
            return last
        cached = self._cache.get(size)
        if cached is not None:
            self._last_cache = cached
        return cached

    def _hand_out(self, block: Block, stream, nbytes: int) -> Block:
        """Mark a block taken from the free lists allocated on `stream`, and count it."""
        block.state = ALLOCATED
        block.stream = stream
        block.requested = nbytes
        allocated = self.allocated + block.size  # (locals: fewer attribute reads)
        self.allocated = allocated
        requested = self.requested + nbytes
        self.requested = requested
        self.n_allocs += 1
        if allocated > self.peak_allocated:
            self.peak_allocated = allocated
        if requested > self.peak_requested:
            self.peak_requested = requested
        active = allocated + self.pending_bytes
        if active > self.peak_active:
            self.peak_active = active
        return block

    def allocate_again(self, nbytes: Any, stream=None) -> Block:
        """allocate() once more after a refusal the caller acted on (it waited for pending
        frees, or emptied another pool's cache): the refusal before it reached no caller, so
        it is not counted (as PyTorch counts only the OOMs its callers see); a second one is
        counted once."""
        try:
            return self.allocate(nbytes, stream)
        finally:
            with self._lock:
                self._counts["ooms"] -= 1

    def _allocate_slow(self, size: int, stream, nbytes: int) -> Block:
        self._collect()
        block = self._take_ready(size)
        if block is None and self._cached_bytes:
            self._flush_cache()
            block = self._take_ready(size)
        if block is None and stream is not None and self._pending:
            block = self._take_pending_for(size, stream)
        if block is None:
            block = self._reserve(size, nbytes)
        return block

    def _take_ready(self, size: int) -> Block | None:
        """Best fit among ready blocks, honouring the split limit; splits off the remainder."""
        sizes = self._sizes
        i = _bisect_left(sizes, size)
        if i == len(sizes):
            return None
        have = sizes[i]
        limit = self.split_limit
        if limit is not None and have > limit:
            # Blocks over the split limit stay whole: only large requests close to their size get them.
            if size <= limit or have - size > OVERSIZE_SLACK:
                return None
        key: Any = have  # (one int object for the lookups below: compiled, each would box it)
        bin_ = self._bins.get(key)
        if not bin_:  # (a size listed with no block: a failure between two steps left it)
            self._drop_size(have)
            return self._take_ready(size)
        block = bin_.popitem()[0]
        if not bin_:  # (_drop_size, at the index found above)
            del self._bins[key]
            del sizes[i]
        if block.prev is None and block.next is None:
            self._unidle(block)
        if limit is None or have <= limit:
            self._split(block, size)
        return block

    def _split(self, block: Block, size: int) -> None:
        rest = block.size - size
        if rest < MIN_SPLIT:
            return
        chunk: Chunk = block.chunk  # (typed: compiled, its lists are read natively)
        addr: Any = block.addr + size  # (one int object for the tail and the list)
        tail = Block(addr, rest, chunk, block, block.next)
        starts = chunk.starts
        i = _bisect_right(starts, block.addr)
        starts.insert(i, addr)
        chunk.blocks.insert(i, tail)
        if block.next is not None:
            block.next.prev = tail
        block.next = tail
        block.size = size
        block.view_n = -1
        self._add_ready(tail)

    def _take_pending(self, block: Block) -> Block:
        """Remove a pending block (already out of its stream bin) from the pending set."""
        del self._pending[block]
        self._track(block, -1)
        self.pending_bytes -= block.size
        self._counts["reused_pending"] += 1
        return block

    def _track(self, block: Block, delta: int) -> None:
        """Count the pending blocks that wait on each stream."""
        counts = self._pending_streams
        for s, _ in block.waits:
            n = counts.get(s, 0) + delta
            if n:
                counts[s] = n
            else:
                del counts[s]

    def _take_pending_for(self, size: int, stream) -> Block | None:
        """A pending block of another stream that `stream` may use now (maybe after inserting a wait)."""
        awaited = stream._awaited_positions() if self.policy.follow_event_dependencies else {}
        covered = uncovered = None
        for block in self._pending:
            if not size <= block.size <= size + max(size, MIN_SPLIT):
                continue  # taken whole: at most twice the size asked for
            if self._covered(block, stream, awaited):
                if covered is None or block.size < covered.size:
                    covered = block
                    if block.size == size:
                        break
            elif uncovered is None or block.size < uncovered.size:
                uncovered = block
        best = covered
        if best is None:
            if uncovered is None or not self.policy.allow_internal_dependencies \
                    or stream._capture is not None or not self._insert_waits(uncovered, stream):
                return None
            best = uncovered
            self._counts["inserted_waits"] += 1
        self._unlist_pending(best)
        return self._take_pending(best)

    def _covered(self, block: Block, stream, awaited: dict) -> bool:
        """True when every stream in the block's waits is `stream`, done, or awaited by `stream`."""
        opportunistic = self.policy.opportunistic
        own = stream._capture is None  # (captured: its own order is not the replay's, see allocate)
        for s, pos in block.waits:
            if s is stream and own:
                continue
            if opportunistic and s._completed >= pos:
                continue
            if awaited.get(s, 0) > pos:
                continue  # `stream` already waits on an event recorded after the free
            return False
        return True

    def _insert_waits(self, block: Block, stream) -> bool:
        """Make `stream` wait for the block's pending work (an event recorded on each busy stream)."""
        for s, pos in block.waits:
            if s is stream or s._completed >= pos:
                continue
            try:
                # Recorded now it captures at least the work queued at the free: conservative, exact enough.
                event: Any = s.device.internal_event()
                event.record(s)
                stream._order_after(event)  # never times out: reuse must not outrun the old owner
            except Exception:  # the freeing stream was destroyed or refuses work: skip this block
                return False
        return True

    def _reserve(self, size: int, nbytes: int, want: int = 0) -> Block:
        """Reserve a new chunk of `want` bytes (0: chunk_size_for(size)) for a block of `size`
        (after GC and, on failure, after releasing cached chunks). The caller holds a Ctrl-C
        (hold()) until the block is in use or in the bins: a chunk taken upstream must reach
        the pool, and the block its caller."""
        want = want or chunk_size_for(size, self.split_limit)
        cap = getattr(self.upstream, "capacity", None)
        if self.gc_threshold and cap and self.reserved + want > self.gc_threshold * cap:
            self._release_free_chunks(max(0, int(self.gc_threshold * cap) - want))
        elif self._idle_bytes >= want:
            # Idle whole chunks could hold it: give them back first, so the range they leave
            # is reused instead of the pool growing (halves the reserved/live overhead).
            self._release_free_chunks(0)
        chunk = self.upstream.allocate(want)
        if chunk is None and want > size:
            chunk = self.upstream.allocate(size)  # no room for a shared chunk: just the block
        if chunk is None:
            self._counts["retries"] += 1
            self._release_free_chunks(0)
            chunk = self.upstream.allocate(size)
        if chunk is None and self._trim_free_tails():
            chunk = self.upstream.allocate(size)  # (a chunk's free end may border the room)
        if chunk is None:
            self._counts["ooms"] += 1
            raise self._oom_error(size, nbytes)
        self._chunks[chunk.addr] = chunk
        self.reserved += chunk.size
        self._counts["reserves"] += 1
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved
        block = Block(chunk.addr, chunk.size, chunk)
        chunk.first = block
        chunk.starts, chunk.blocks = [chunk.addr], [block]
        chunk.lock = self._lock  # lookups of interior pointers read the blocks under it
        chunk.finder = find_buffer
        limit = self.split_limit
        if limit is None or chunk.size <= limit or size <= limit:
            self._split(block, size)
        return block

    def prereserve(self, nbytes: Any) -> None:
        """Reserve a chunk of `nbytes` up front and keep it as a free block; raises OutOfMemoryError."""
        nbytes = check_size(nbytes)
        held = hold()  # (see _reserve)
        try:
            with self._lock:
                size = round_chunk(nbytes)
                self._add_ready(self._reserve(size, nbytes, size))
        finally:
            release(held)

    # ---- deallocate ------------------------------------------------------------------------

    def waits_for(self, block: Block, stream=None) -> tuple:
        """(stream, last queued task id) of each busy stream a free of `block` on `stream` waits for."""
        sets = self.busy_sets
        if sets is not None:
            for active in sets:  # (a loop, not any(): the common answer, all idle, is cheapest)
                if active:
                    break
            else:
                return ()  # no stream of any device has work in flight: nothing to wait for
        if stream is None:
            return busy_positions(self.all_streams())
        if block.stream is stream and not block.uses:  # the common case: freed where it was used
            return ((stream, stream._submitted),) if stream._completed < stream._submitted else ()
        streams = [stream]
        if block.stream is not None and block.stream is not stream:
            streams.append(block.stream)
        if block.uses:
            streams.extend(s for s in block.uses if s is not stream)
        return busy_positions(streams)

    def deallocate(self, block: Any, stream=None, waits: tuple | None = None,
                   buf: _Allocation | None = None) -> bool:
        """Free a block after `stream`'s work so far (None: after all work queued on the device).

        With `buf`, the buffer the block backs: it is marked freed under the same lock (tasks
        queued before the free still see its bytes), unless another free got there first;
        returns False then, and when the block was not allocated.
        """
        blk = self._own(block)  # (typed: a compiled build reads its fields natively)
        if waits is None:
            waits = self.waits_for(blk, stream)
        # (Compiled, no lock held: see ATOMIC. A free that goes to an existing cache list
        # with room does only what that path of _put_back does. Its block may hold no other
        # stream than the caller's: dropping the last reference to one could run Python code,
        # a weak reference's callback, in the middle.)
        if ATOMIC and not waits and blk.stream is stream and blk.uses is None \
                and not _HOST_USES and not self._locked():
            cached = self._size_cache(blk.size)
            if cached is not None and cached.n < CACHE_PER_SIZE and self._may_cache(blk.size):
                return self._put_back(blk, stream, waits, buf)
        lock = self._lock
        # (a compiled build holds no Ctrl-C here, being uninterruptible, unless a synchronous
        # copy is registered: deferring the release runs Python code, memory/inflight.py)
        held = hold() if not ATOMIC or _HOST_USES else False
        try:  # not `with` (slower); an interrupt right after acquire is caught below
            self._acquire()
            try:
                return self._put_back(blk, stream, waits, buf)
            finally:
                self._release()
        except BaseException:
            if not ATOMIC and lock._is_owned():  # interrupted between acquire and try
                lock.release()
            raise
        finally:
            release(held)

    def _own(self, block: Any) -> Block:
        """`block`, if it is one of this pool's (a chunk it holds shares its lock: a block of
        another pool would corrupt both pools' accounting); else InvalidArgumentError."""
        if type(block) is not Block or block.chunk.lock is not self._lock:
            raise InvalidArgumentError(f"{self.name}: {type(block).__name__} {block!r:.60} is not "
                                       f"a block this pool allocated")
        return block

    def _may_cache(self, size: int) -> bool:
        """Whether a freed block of `size` with no work pending may stay unmerged in the cache."""
        threshold = self.release_threshold
        return self._cached_bytes + size <= CACHE_BYTES and (threshold is None
                                                            or self.reserved <= threshold)

    def _put_back(self, block: Block, stream, waits: tuple, buf: _Allocation | None) -> bool:
        """deallocate()'s work, the pool held (or, compiled, atomic; see there)."""
        if buf is not None:
            if block.buf is not buf:
                return False
            block.buf = None
            if waits:  # (its view, made here if nothing viewed it yet)
                buf._late = (buf._view(), waits)  # tasks queued before the free still run on it
            buf._mem = None
            if _HOST_USES and self._deferred(buf, block, stream, waits):
                return True  # a synchronous copy or fill still uses it: freed when that ends
        if block.state is not ALLOCATED:
            return False
        size = block.size
        self.allocated -= size
        self.requested -= block.requested
        self.n_frees += 1
        block.uses = None
        if not waits:
            if self._may_cache(size):
                cached = self._size_cache(size)
                if cached is None:
                    cached = self._cache[size] = self._last_cache = _SizeCache(size)
                if cached.n < CACHE_PER_SIZE:  # kept unmerged for an exact-size reuse
                    block.state = CACHED
                    block.stream = None
                    cached.push(block)
                    self._cached_bytes += size
                    return True
            self._free_ready(block)
        else:
            self._park(block, stream if stream is not None else block.stream, waits)
        return True

    def _deferred(self, buf: Any, block: Block, stream: Any, waits: tuple) -> bool:
        """Leave the rest of a free to the end of the synchronous operations that use `buf`
        (see memory/inflight.py); False when none does. (Apart from _put_back: a function
        that makes a closure pays for it on every call, compiled.)"""
        return defer_release(buf, lambda: self.deallocate(block, stream, waits))

    def _park(self, block: Block, owner, waits: tuple) -> None:
        """Make a freed block pending until `waits` are done (`owner` may reuse it at once)."""
        block.state = PENDING
        block.stream = owner
        block.waits = waits
        self._pending[block] = None
        self._track(block, 1)
        self.pending_bytes += block.size
        if owner is not None and all(s is owner for s, _ in waits):
            bins: dict | None = self._stream_bins.get(owner)
            if bins is None:
                bins = self._stream_bins[owner] = {}
            same: dict | None = bins.get(block.size)
            if same is None:
                same = bins[block.size] = {}
            same[block] = None

    def record_stream(self, block: Any, stream) -> None:
        """Mark that `stream` uses the block: a free waits for that stream's work too."""
        block = self._own(block)
        with self._lock:
            if block.uses is None:
                block.uses = []
            if stream is not block.stream and stream not in block.uses:
                block.uses.append(stream)

    def _collect(self) -> int:
        """Turn pending blocks whose streams finished their work into ready blocks; returns how many."""
        if not self._pending:
            return 0
        # (what the pending blocks wait for: their streams' progress, and that of the work
        # those streams queued elsewhere)
        key = [(s, s._completed, [o._completed for o, _ in s._spawned]) for s in self._pending_streams]
        if key == self._collect_key:
            return 0  # no stream moved since the last look: nothing new can be done
        done = [b for b in self._pending if positions_reached(b.waits)]
        for block in done:
            self._unlist_pending(block)
            del self._pending[block]
            self._track(block, -1)
            self.pending_bytes -= block.size
            self._free_ready(block)  # (may release a chunk: a Ctrl-C there leaves the rest pending)
        self._collect_key = key  # (only now: after a Ctrl-C above, the next look tries again)
        return len(done)

    def _unlist_pending(self, block: Block) -> None:
        bins = self._stream_bins.get(block.stream)
        if bins:
            same = bins.get(block.size)
            if same and block in same:
                del same[block]
                if not same:
                    del bins[block.size]
                    if not bins:
                        del self._stream_bins[block.stream]

    def _free_ready(self, block: Block) -> None:
        """Make a block ready: merge it with ready neighbours, then bin it or release its chunk."""
        block.state = READY
        block.stream = None
        block.waits = ()
        prev, nxt = block.prev, block.next
        if nxt is not None and nxt.state is READY:
            self._remove_ready(nxt)
            absorb(block, nxt)
        if prev is not None and prev.state is READY:
            self._remove_ready(prev)
            absorb(prev, block)
            block = prev
        self._add_ready(block)  # (first: a Ctrl-C at the release below leaves it in the bins)
        threshold = self.release_threshold
        if block.prev is None and block.next is None and threshold is not None \
                and self.reserved > threshold:
            self._release_chunk(block.chunk)

    # ---- bins ------------------------------------------------------------------------------

    def _add_ready(self, block: Block) -> None:
        block.state = READY
        size: Any = block.size  # (one int object for the lookups below: compiled, each would box it)
        same = self._bins.get(size)
        if same is None:
            _insort(self._sizes, size)  # (first: a size listed with no bin is mended, not lost)
            same = self._bins[size] = {}
        same[block] = None
        if block.prev is None and block.next is None:
            self._idle[block.chunk] = None
            self._idle_bytes += block.size

    def _remove_ready(self, block: Block) -> None:
        size: Any = block.size  # (one int object for the lookups below)
        same = self._bins.get(size)
        if same is not None:  # (None: a failure between two steps of a change dropped it)
            del same[block]
            if not same:
                self._drop_size(size)
        if block.prev is None and block.next is None:
            self._unidle(block)

    def _unidle(self, block: Block) -> None:
        """A whole chunk's block left the bins: its chunk is no longer idle."""
        del self._idle[block.chunk]
        self._idle_bytes -= block.size

    def _drop_size(self, size: int) -> None:
        """No more blocks of `size` in the bins (a failure between the steps leaves a state
        _take_ready mends: a size listed with no block)."""
        self._bins.pop(size, None)
        sizes = self._sizes
        i = _bisect_left(sizes, size)
        if i < len(sizes) and sizes[i] == size:
            del sizes[i]

    # ---- chunks ----------------------------------------------------------------------------

    def _release_chunk(self, chunk) -> None:
        """Give a wholly free chunk (its one block in the bins) back upstream."""
        # (held whole, compiled too: the upstream is Python, where a Ctrl-C can land, and a
        # chunk out of the pool but not back upstream would be lost for good; hold() is
        # Python too, so nothing changes before it)
        held = hold()
        try:
            self._remove_ready(chunk.first)
            del self._chunks[chunk.addr]
            self.reserved -= chunk.size
            self._counts["releases"] += 1
            chunk.first = None
            chunk.starts, chunk.blocks, chunk.lock, chunk.finder = [], [], None, None
            self.upstream.deallocate(chunk)
        finally:
            release(held)

    def _flush_cache(self) -> None:
        """Merge every cached block into the free lists.

        The emptied per-size caches stay (a workload of many sizes flushes often, and would
        otherwise make each size's cache again), unless there are more than CACHE_SIZES_KEPT.
        """
        blocks: list[Block] = []
        for same in self._cache.values():
            if same.n:
                blocks.extend(same.taken())
        if len(self._cache) > CACHE_SIZES_KEPT:
            self._cache.clear()
            self._last_cache = _NO_SIZE
        self._cached_bytes = 0
        for b in blocks:
            self._free_ready(b)

    def _largest_free(self) -> int:
        largest = self._sizes[-1] if self._sizes else 0
        for size, same in self._cache.items():
            if same.n and size > largest:
                largest = size
        return largest

    def _whole_free_chunks(self) -> list:
        return list(self._idle)

    def _release_free_chunks(self, target: int) -> int:
        """Release wholly free chunks (largest first) until reserved <= target; returns bytes
        freed (with those the release threshold gave back as finished frees came in). The
        caller holds a Ctrl-C (hold()): the cache's blocks, taken out to merge, must all reach
        the bins."""
        before = self.reserved
        self._collect()
        self._flush_cache()
        whole = self._whole_free_chunks()
        whole.sort(key=lambda c: -c.size)
        for chunk in whole:
            if self.reserved <= target:
                break
            self._release_chunk(chunk)
        return before - self.reserved

    def _trim_free_tails(self) -> int:
        """Give back the free end of every chunk that a live block keeps (from its first 2 MiB
        boundary past the last block in use); returns bytes given back. The caller holds a
        Ctrl-C (hold()), as for _release_free_chunks."""
        shrink = getattr(self.upstream, "shrink", None)
        if shrink is None:
            return 0  # (pinned host chunks are mappings of their own: all or nothing)
        freed = 0
        for chunk in list(self._chunks.values()):
            tail: Block = chunk.blocks[-1]
            if tail.state is not READY or tail.prev is None:
                continue  # (a wholly free chunk goes back whole: _release_free_chunks)
            keep = round_chunk(tail.addr - chunk.addr)
            if keep >= chunk.size:
                continue
            self._remove_ready(tail)
            if chunk.addr + keep == tail.addr:  # the whole block goes
                tail.prev.next = None
                chunk.starts.pop()
                chunk.blocks.pop()
            else:
                tail.size = chunk.addr + keep - tail.addr
                tail.view_n = -1
                self._add_ready(tail)
            given = chunk.size - keep
            self.reserved -= given
            freed += given
            shrink(chunk, keep)
        return freed

    def trim_to(self, nbytes: Any) -> int:
        """Return cached whole chunks upstream until at most `nbytes` stay reserved; returns bytes freed."""
        nbytes = check_size(nbytes, allow_zero=True)
        held = hold()  # (compiled too: see _release_free_chunks)
        try:
            with self._lock:
                return self._release_free_chunks(nbytes)
        finally:
            release(held)

    def empty_cache(self) -> int:
        """Release every wholly free chunk; returns bytes freed."""
        return self.trim_to(0)

    def synchronize_pending(self) -> int:
        """Move pending blocks whose work is done to the free lists (past the release
        threshold, wholly free chunks go back); returns how many."""
        if not self._pending:  # (read without the lock: a free queued meanwhile waits for the next)
            return 0
        with self._lock:
            return self._collect()

    def wait_for_pending(self) -> bool:
        """Wait until the work the pending blocks wait for is done and make them free (the
        pool's lock not held: called after a refused allocation, which then tries again);
        False when none were pending, or the calling thread may not wait (Links.wait_reached)."""
        with self._lock:
            waits = furthest_positions([block.waits for block in self._pending])
        if not waits or not Links.wait_reached(waits):
            return False
        self.synchronize_pending()
        return True

    # ---- introspection ---------------------------------------------------------------------

    def free_chunk_ranges(self) -> list[tuple[int, int]]:
        """(address, size) of each chunk no block of which is in use or waits for work not done
        yet: memory the pool gives back upstream when an allocation needs the room."""
        with self._lock:
            out = []
            for chunk in self._chunks.values():
                b = chunk.first
                while b is not None and (b.state is READY or b.state is CACHED
                                         or b.state is PENDING and positions_reached(b.waits)):
                    b = b.next
                if b is None:
                    out.append((chunk.addr, chunk.size))
            return out

    def chunks(self) -> list:
        """The reserved chunks, by address (a copy; hold the pool's lock to walk their blocks)."""
        return [self._chunks[a] for a in sorted(self._chunks)]

    def blocks(self, chunk):
        """The blocks of one chunk, by address."""
        b = chunk.first
        while b is not None:
            yield b
            b = b.next

    def free_now(self) -> tuple[int, int]:
        """(bytes it could hand out now, the largest pending block among them): its ready
        blocks and the pending ones whose work is done, though it has not looked yet (it does
        at its next allocation). A look that changes nothing: a stats reader or a profiler must
        not move the pool (collecting may give chunks back, and the next allocation would pay
        for a new one)."""
        with self._lock:
            ready, _, largest = self._free_now()
            return ready, largest

    def _free_now(self) -> tuple[int, int, int]:
        """free_now()'s bytes, then the bytes and the largest of the pending blocks whose work
        is done (the caller holds the lock)."""
        done = [b.size for b in self._pending if positions_reached(b.waits)]
        total = sum(done)
        return self.reserved - self.allocated - self.pending_bytes + total, total, max(done, default=0)

    def largest_free_block(self) -> int:
        """The largest ready free block in the pool."""
        with self._lock:
            return self._largest_free()

    def free_bytes(self) -> int:
        """Reserved bytes not allocated (ready and pending free blocks)."""
        return self.reserved - self.allocated

    def fragmentation(self) -> dict:
        """Internal (rounding), external (free space between blocks) and 1 - largest/total free."""
        with self._lock:
            return self._fragmentation()

    def _fragmentation(self) -> dict:
        free = self.reserved - self.allocated  # the caller holds the lock
        ready = free - self.pending_bytes
        largest = self._largest_free()
        return {
            "internal": 1 - self.requested / self.allocated if self.allocated else 0.0,
            "external": free / self.reserved if self.reserved else 0.0,
            "largest_free_ratio": 1 - largest / ready if ready else 0.0,
            "free_bytes": free, "largest_free_block": largest,
        }

    def _oom_error(self, size: int, nbytes: int) -> OutOfMemoryError:
        refusal = getattr(self.upstream, "refusal", "")  # (host chunks: the OS said no)
        if refusal:
            pending = f", {format_bytes(self.pending_bytes)} freed after queued work" \
                if self.pending_bytes else ""
            return OutOfMemoryError(
                f"{self.name}: cannot allocate {nbytes} bytes ({format_bytes(nbytes)}): "
                f"{refusal}; this pool holds {format_bytes(self.reserved)} "
                f"({format_bytes(self.allocated)} allocated{pending}); free buffers you no "
                f"longer need", code=ErrorCode.RT_MEMORY_ALLOCATION, device=self._device_or_none())
        frag = self._fragmentation()
        cap = getattr(self.upstream, "capacity", 0)
        unreserved = self.upstream.unreserved_bytes()
        largest = max(frag["largest_free_block"], self.upstream.largest_unreserved())
        free_total = frag["free_bytes"] + unreserved
        # (pending blocks are free but not yet reusable: fragmentation only where the ready
        # ones and the unreserved range could hold it)
        fragmented = free_total - self.pending_bytes >= size
        # What the device's other pools (MemPools, or the default pool for a MemPool) reserve:
        # the same chunks' capacity, which this pool cannot use until they give it back.
        elsewhere = max(0, cap - unreserved - self.reserved) if cap else 0
        hint = fragmentation_hint(self, size, elsewhere) if fragmented else \
            "free buffers you no longer need, or raise ASCENTRT_DEVICE_MEMORY"
        if elsewhere >= size - largest > 0:
            hint = (f"the device's other pools reserve {format_bytes(elsewhere)}: what they cache "
                    f"comes back with MemPool.trim_to(0) or ascentrt.empty_cache(), what they "
                    f"hold for frees still waiting on queued work once that work is done; " + hint)
        if self.pending_bytes:
            hint += (f"; {format_bytes(self.pending_bytes)} are freed after queued work not done "
                     "yet (a device allocation waits for that work, except inside a task, during "
                     "a capture, or when it can never finish)")
        # (sizes in the unit that shows them, as the leak report gives them; the request's and
        # the capacity's exact bytes too)
        return OutOfMemoryError(
            f"{self.name}: cannot allocate {nbytes} bytes ({format_bytes(nbytes)}; a block of "
            f"{format_bytes(size)}): capacity {cap} ({format_bytes(cap)}), allocated "
            f"{format_bytes(self.allocated)}, reserved {format_bytes(self.reserved)} of which "
            f"reserved-but-free {format_bytes(frag['free_bytes'])}, unreserved "
            f"{format_bytes(unreserved)}"
            + (f", reserved by other pools {format_bytes(elsewhere)}" if elsewhere else "")
            + f", largest free piece {format_bytes(largest)} (reserved or not); "
            f"fragmentation: external {frag['external']:.1%}, the largest free piece is "
            f"{largest / free_total if free_total else 0:.1%} of all free memory, internal "
            f"{frag['internal']:.1%}; {hint}", code=ErrorCode.RT_MEMORY_ALLOCATION,
            device=self._device_or_none())

    def _device_or_none(self) -> int | None:
        """The device id an OOM of this pool names (None: host memory)."""
        return None if self.device_id < 0 else self.device_id


# (resources of this process: copies are themselves, pickling is refused)
make_handles(BlockPool)
