"""The buffer level behind ascentrt.malloc: aligned, 32-byte-rounded DeviceBuffers from the device's pool."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np

from .. import config
from ..errors import ErrorCode, InvalidArgumentError, InvalidHandleError, OutOfMemoryError
from ..handles import make_handles
from ..interrupts import hold, release, release_or_undo
from ..units import format_bytes
from .arena import Arena, round_size
from ..validate import check_size
from .buffer import GRANULE, UNVIEWED, DeviceBuffer
from . import leaks
from .chunks import ArenaChunks
from .inflight import DEFERRED as _DEFERRED, give_back_when_unused, run_deferred_releases
from .links import Links
from .block import Block, give_back
from .pool import BlockPool
from .stream_order import DeferredFrees, busy_positions
from .registry import REGISTRY

# Final: a compiled build keeps these in C statics (no module-dict lookup per malloc) and
# does GRANULE's arithmetic on native ints. The module uses these names throughout.
_GRANULE: Final[int] = GRANULE
_REGISTRY: Final = REGISTRY
_FROM_SOURCE: Final[bool] = __file__.endswith(".py")  # (not compiled: see malloc)


def check_stream(stream: Any, device: Any) -> None:
    """Raise InvalidArgumentError unless `stream` is None or a stream of `device`;
    InvalidHandleError when it was destroyed (work ordered on it would never run)."""
    if stream is None:
        return
    if not isinstance(stream, Links.stream_type):
        raise InvalidArgumentError(f"stream must be a Stream or None, got {type(stream).__name__}")
    if stream._refuse == "destroyed":
        raise InvalidHandleError(f"stream {stream.id} was destroyed")
    if stream.device is not device:
        raise InvalidArgumentError(f"stream {stream.id} belongs to device {stream.device.id}, "
                                   f"not device {device.id}", code=ErrorCode.RT_STREAM_CONTEXT)


def pool_from_config(upstream: Any, name: str, all_streams: Callable[[], list],
                     align: int = 64) -> BlockPool:
    """A BlockPool with the ASCENTRT_MEM_POOL_* settings.

    `all_streams()` lists every stream with work in flight, on any device: a free without a
    stream waits for them all, since another device's peer copy may write into the memory.
    They are the engine's streams: kept in `Links.active_sets` while they have work."""
    return BlockPool(upstream, align=align, name=name, all_streams=all_streams,
                     busy_sets=Links.active_sets,
                     split_limit=config.get("ASCENTRT_MEM_POOL_SPLIT_LIMIT"),
                     release_threshold=config.get("ASCENTRT_MEM_POOL_RELEASE_THRESHOLD"),
                     gc_threshold=config.get("ASCENTRT_MEM_POOL_GC_THRESHOLD"))


class DeviceAllocator:
    """Hands out DeviceBuffers from a device's pool (or, with the pool off, a plain first-fit arena).

    A pooled buffer is known through its block (`Block.buf`) and its chunk's place in the
    address registry: malloc and free of a cached size touch no global index, and take one
    lock (the pool's) each.
    """

    def __init__(self, device: Any, mem: np.ndarray, base: int, capacity: int,
                 pool: BlockPool | None = None, decommit: Callable[[int, int], None] | None = None):
        self.device = device
        # (The runtime registered its Stream class on import, before any device: read once
        # here, a compiled malloc compares types natively instead of looking up Links per call.)
        self._stream_type: type[Any] = Links.stream_type
        # The last stream found to be one of this device's (a stream's device never changes):
        # a program that allocates and frees on one stream checks it once, not per call.
        self._checked_stream: Any = None
        self.mem = mem
        self.base = base
        self.capacity = capacity
        self.live: dict[int, DeviceBuffer] = {}  # buffers of the plain arena (pool off) only
        # A BlockPool, or what stands in for one (record_trace's TraceRecorder): typed loosely.
        self.pool: Any = pool
        self.arena: Arena | None = None
        self.explicit: list[DeviceAllocator] = []  # the allocators of this device's MemPools
        # The plain arena's (pool off): frees waiting for queued work, (offset, waits), and the
        # streams record_stream named per buffer address.
        self.late_frees = DeferredFrees()
        self.used_on: dict[int, list] = {}
        # The plain arena's figures for memory_stats (the pool keeps its own): counts, and the
        # peaks of the bytes live buffers hold and of the bytes they asked for.
        self.plain = {"allocs": 0, "frees": 0, "ooms": 0, "allocated": 0, "peak_allocated": 0,
                      "requested": 0, "peak_requested": 0, "peak_reserved": 0}
        self.record_sites = leaks.recording_sites()
        # a stream-ordered free notes its line too, for a task it left behind to name
        self.free_sites = self.record_sites or bool(config.get("ASCENTRT_CALL_SITES"))
        backend = device._backend
        # A simulated device charges each malloc and free its modelled host cost.
        self.host_call: Callable[[str], None] | None = \
            backend.host_call if backend.properties().virtual else None
        if pool is None:  # (the device's own allocator: its range is device memory, no host's)
            _REGISTRY.add_device_memory(base, capacity)
        if pool is not None:
            self.chunks = pool.upstream   # an explicit MemPool sharing the device's chunks
        elif config.get("ASCENTRT_MEM_POOL_ENABLE"):
            self.chunks = ArenaChunks(capacity, base, mem, decommit, registry=_REGISTRY)
            self.pool = pool_from_config(self.chunks, f"device {device.id}", Links.busy_streams)
            upfront = config.get("ASCENTRT_MEM_POOL_SIZE")
            if upfront > capacity:
                # Refused, not cut to the capacity: a size that cannot be reserved is a mistake
                # (64G for 64M), as a CANN malloc of more than the device has fails (207001).
                raise InvalidArgumentError(
                    f"ASCENTRT_MEM_POOL_SIZE={upfront} bytes ({format_bytes(upfront)}) is more than "
                    f"device {device.id} has: {capacity} bytes ({format_bytes(capacity)}); reserve at "
                    f"most that, or raise ASCENTRT_DEVICE_MEMORY")
            if upfront:
                self.pool.prereserve(upfront)
        else:
            self.chunks = ArenaChunks(capacity, base, mem, decommit)
            self.arena = self.chunks.arena  # plain mode: every buffer is carved from the arena
        if self.pool is not None:
            self.pool.device_id = device.id  # (its OOMs name the device: a profile blames that one)

    def malloc(self, nbytes: Any, stream: Any = None) -> DeviceBuffer:
        """Allocate `nbytes` (rounded up to 32, start 64-byte aligned); raises on bad size or OOM."""
        if type(nbytes) is not int or not 0 < nbytes <= self.capacity:  # one test on the hot path
            nbytes = check_size(nbytes)
            if nbytes > self.capacity:
                # (an allocation no device state could serve: out of memory, as cudaMalloc and
                # aclrtMalloc say, not bad input)
                raise OutOfMemoryError(f"cannot allocate {nbytes} bytes ({format_bytes(nbytes)}): more "
                                       f"than device {self.device.id}'s whole memory "
                                       f"({format_bytes(self.capacity)})", device=self.device.id)
        if stream is not None and stream is not self._checked_stream:
            self._check_stream(stream)
        if _FROM_SOURCE:
            # The pool holds a Ctrl-C through its work and raises it as it returns: here, before
            # the block backs a buffer, it would be lost. Held until the buffer is whole.
            held = hold()
            try:
                buf = self._malloc(nbytes, stream)
            except BaseException:
                release(held)
                raise
            release_or_undo(held, buf.free)  # (a Ctrl-C meanwhile: the caller never gets it)
            return buf
        return self._malloc(nbytes, stream)

    def _malloc(self, nbytes: int, stream: Any) -> DeviceBuffer:
        """malloc() of a checked size and stream."""
        pool = self.pool
        if self.host_call is not None or pool is None:
            return self._malloc_slow(nbytes, stream)
        # Typed: a compiled build reads the block's fields natively (a stand-in for the pool,
        # such as record_trace's recorder, hands out the pool's own blocks).
        n: int = nbytes  # (checked: a compiled build does the size arithmetic on native ints)
        block: Block = self._block(pool, n, stream)
        size = (n + _GRANULE - 1) & -_GRANULE
        try:
            # (requested: the caller's own int object; a compiled build would box n again.
            # Its view is made when its bytes are first asked for: see UNVIEWED.)
            buf = DeviceBuffer(self.device, block.addr, size, nbytes, UNVIEWED, self, block)
            block.buf = buf  # from here on its pointers resolve (through the chunk)
        except BaseException:
            give_back(pool, block)
            raise
        if _REGISTRY.observers:
            _REGISTRY.allocated(buf)
        if self.record_sites:
            leaks.note_site(buf)
        return buf

    def _block(self, pool: Any, n: int, stream: Any) -> Block:
        """pool.allocate(n, stream), once more after waiting for the pending frees when the pool
        refuses it (see _waited_for_frees)."""
        try:
            if type(pool) is BlockPool:  # (compiled: a direct call, not one through the method's name)
                return pool.allocate(n, stream)
            return pool.allocate(n, stream)
        except OutOfMemoryError:
            if _DEFERRED:
                run_deferred_releases()  # (what a Ctrl-C left deferred after its copy ended)
            if self._waited_for_frees():
                try:
                    return pool.allocate_again(n, stream)
                except OutOfMemoryError:
                    pass
            if self._settled_other_pools(pool):
                try:
                    return pool.allocate_again(n, stream)
                except OutOfMemoryError:
                    pass
            if not self._emptied_default_cache(pool):
                raise
            return pool.allocate_again(n, stream)  # (one refusal: counted once)

    def settle(self) -> None:
        """After a host synchronize: every pool of the device takes in its frees whose queued
        work is done, and past its release threshold gives their chunks back, as CUDA's pools
        do at a synchronize (not when their state is read: reading must not move the pool)."""
        for p in (self.pool, *self.pools()):
            if p is not None:
                p.synchronize_pending()

    def _settled_other_pools(self, pool: Any) -> bool:
        """After a refused allocation: the device's other pools take in their frees whose
        queued work is done, giving back what their release thresholds say (a CUDA pool does
        at the next synchronize); True if that gave any memory back to the device."""
        memory = self.device._memory
        others = [p for p in (memory.pool, *memory.pools()) if p is not None and p is not pool]
        before = sum(p.reserved for p in others)
        for p in others:
            p.synchronize_pending()
        return sum(p.reserved for p in others) < before

    def _emptied_default_cache(self, pool: Any) -> bool:
        """After a MemPool's refused allocation: the device's default pool gives back its wholly
        free chunks, the runtime's own cache of memory no buffer uses; True if it held any.
        (A MemPool's reserved memory stays its own, as a CUDA memory pool keeps it until
        trimmed: the default pool's cache must not make another allocation fail.)"""
        default = self.device._memory.pool
        return default is not None and default is not pool and default.empty_cache() > 0

    def pools(self) -> list[BlockPool]:
        """The pools of this device's MemPools (device-wide stats count them)."""
        return [alloc.pool for alloc in self.explicit]

    def forget_stream(self, stream: Any) -> None:
        """`stream` is being destroyed: no allocator of the device may pass it unchecked."""
        for alloc in [self, *self.explicit]:
            if alloc._checked_stream is stream:
                alloc._checked_stream = None

    def _check_stream(self, stream: Any) -> None:
        """Raise unless `stream` is a stream of this device; remember it when it is."""
        if type(stream) is not self._stream_type or stream.device is not self.device \
                or stream._refuse == "destroyed":
            check_stream(stream, self.device)  # (raises unless a live subclass of Stream)
        self._checked_stream = stream

    def _malloc_slow(self, nbytes: int, stream: Any) -> DeviceBuffer:
        """malloc() on a simulated device (host costs charged) or from the plain arena."""
        pool = self.pool
        size = (nbytes + _GRANULE - 1) & -_GRANULE
        if pool is not None:  # (with the pool on, only a simulated device's malloc comes here)
            host_call: Callable[[str], None] = self.host_call  # type: ignore[assignment]
            host_call("malloc")
            before = pool.reserved
            block = self._block(pool, nbytes, stream)
            try:
                if pool.reserved > before:
                    host_call("malloc_driver")  # the pool had to grow: a driver allocation
                buf = DeviceBuffer(self.device, block.addr, size, nbytes, UNVIEWED, self, block)
                block.buf = buf
            except BaseException:
                give_back(pool, block)
                raise
        else:
            if self.host_call is not None:
                self.host_call("malloc_driver")
            if self.late_frees.entries:
                self.late_frees.reap(self.arena.free)  # type: ignore[union-attr]  # (plain mode: the arena is set)
            arena: Arena = self.arena  # type: ignore[assignment]  # no pool: the plain arena is set
            try:
                try:
                    off = arena.alloc(round_size(size))
                except OutOfMemoryError as exc:
                    if not self._waited_for_frees():
                        if self.late_frees.entries:  # (the arena counts their ranges in use)
                            raise OutOfMemoryError(
                                f"{exc}; some of the memory in use is freed after queued work "
                                f"not done yet (an allocation waits for that work, except inside "
                                f"a task, during a capture, or when it can never finish)") from None
                        raise
                    off = arena.alloc(round_size(size))
            except OutOfMemoryError as exc:
                exc.device = self.device.id  # (the arena knows no device: a profile blames this one)
                self.plain["ooms"] += 1
                raise
            buf = DeviceBuffer(self.device, self.base + off, size, nbytes,
                               self.mem[off:off + size], self)
            self.live[buf.addr] = buf
            _REGISTRY.add(buf)
            self._count_plain(size, nbytes)
        if _REGISTRY.observers:
            _REGISTRY.allocated(buf)
        if self.record_sites:
            leaks.note_site(buf)
        return buf

    def _count_plain(self, size: int, requested: int) -> None:
        """Count a plain-arena malloc (positive sizes) or free (negative) in self.plain."""
        c = self.plain
        c["allocs" if size > 0 else "frees"] += 1
        c["allocated"] += size
        c["requested"] += requested
        c["peak_allocated"] = max(c["peak_allocated"], c["allocated"])
        c["peak_requested"] = max(c["peak_requested"], c["requested"])
        c["peak_reserved"] = max(c["peak_reserved"], self.arena.used_bytes)  # type: ignore[union-attr]

    def _waited_for_frees(self) -> bool:
        """After a refused allocation: wait for the work that this allocator's pending frees
        wait for, and make their memory free (memory freed after queued work is the program's
        again once it ends, as after a synchronous free: an allocation must not fail for it);
        False when there were none, or this thread may not wait (Links.wait_reached)."""
        if self.pool is not None:
            return self.pool.wait_for_pending()
        return self.late_frees.wait_for(self.arena.free)  # type: ignore[union-attr]  # no pool: the plain arena is set

    def release(self, buf: DeviceBuffer, stream: Any = None) -> bool:
        """Free a buffer after `stream`'s work (None: after all queued work of the device);
        False when another thread freed it first."""
        if stream is not None:
            if stream is not self._checked_stream:
                self._check_stream(stream)
            if stream._capture is not None:  # (a capture records no frees: it refuses them)
                stream._capture.refuse_free(stream, buf)
        if self.host_call is not None:
            self.host_call("free")
        block: Block | None = buf._block
        if block is None:
            held = hold()  # (the arena and the deferral are Python: a Ctrl-C waits till it is whole)
            try:
                if not self._release_unpooled(buf, stream):
                    return False  # freed meanwhile by another thread
            finally:
                release(held)
        else:
            pool = self.pool  # (a block: the pool's; a direct call when it is a BlockPool)
            freed = pool.deallocate(block, stream, None, buf) \
                if type(pool) is BlockPool else pool.deallocate(block, stream, None, buf)
            if not freed:
                return False  # freed meanwhile by another thread
        if _REGISTRY.observers:
            _REGISTRY.freed(buf, stream)
        return True

    def _release_unpooled(self, buf: DeviceBuffer, stream: Any) -> bool:
        """release() of a buffer of the plain arena (no pool); False when another thread freed
        it first."""
        if self.live.pop(buf.addr, None) is not buf:
            return False
        _REGISTRY.remove(buf)
        self._count_plain(-buf.nbytes, -buf.requested)
        # No pool: the range goes back to the arena once the work queued before the free
        # is done (the stream's and those record_stream named, or all work: another
        # device's peer copy may write into it), which until then still sees the bytes.
        named = self.used_on.pop(buf.addr, ())
        streams = [stream, *named] if stream is not None else Links.busy_streams()
        waits = busy_positions(streams)
        mem = buf._mem
        if waits and mem is not None:  # (before the bytes go: a queued task looking at them
            buf._late = (mem, waits)  # meanwhile, a value wait's check, must find them here)
        buf._mem = None  # (first: a synchronous copy that starts now refuses it)
        offset = buf.addr - self.base
        return_range: Callable[[], Any]
        if waits and mem is not None:
            return_range = lambda: self.late_frees.add(offset, waits)  # noqa: E731
        else:
            return_range = lambda: self.arena.free(offset)  # type: ignore[union-attr]  # noqa: E731  # (the plain arena's)
        give_back_when_unused(buf, return_range)
        return True

    def record_stream(self, buf: DeviceBuffer, stream: Any) -> None:
        """Mark `buf` as used on `stream`: its free then waits for that stream's work too."""
        check_stream(stream, self.device)
        if stream is None:
            raise InvalidArgumentError("record_stream needs a stream")
        buf._bytes()  # raises if freed
        if buf._block is not None:
            self.pool.record_stream(buf._block, stream)  # (a block: the pool's)
        else:  # (the plain arena's: its free waits for the stream too)
            self.used_on.setdefault(buf.addr, []).append(stream)
        if _REGISTRY.observers:
            _REGISTRY.used_on(buf, stream)

    def used_bytes(self) -> int:
        """Bytes held by live buffers (block sizes)."""
        if self.pool is not None:
            return self.pool.allocated
        return self.arena.used_bytes  # type: ignore[union-attr]  # no pool: the plain arena is set

    def live_buffers(self) -> list[DeviceBuffer]:
        """Every live buffer of this allocator (a snapshot)."""
        if self.pool is None:
            return list(self.live.values())
        return [buf for chunk in self.pool.chunks() for buf in chunk.buffers()
                if buf._owner is self]

    def reset(self) -> int:
        """Free every live buffer (device reset) and return cached chunks; returns how many buffers.

        Buffers the program never freed are reported first (a LeakWarning)."""
        bufs = self.live_buffers()
        # (and those of the device's MemPools: a reset frees every buffer of the device)
        pooled = [buf for alloc in self.explicit for buf in alloc.live_buffers()]
        leaks.report(bufs + pooled, f"device {self.device.id} reset")
        by = f"the reset of device {self.device.id}"
        for buf in bufs:
            self.release(buf)
            buf._revoke(by)
        for buf in pooled:
            buf._owner.release(buf)
            buf._revoke(by)
        for pool in [self.pool, *self.pools()]:
            if pool is not None:
                pool.empty_cache()
        return len(bufs) + len(pooled)


# (resources of this process: copies are themselves, pickling is refused)
make_handles(DeviceAllocator)
