"""The buffer level behind ascentrt.malloc: aligned, 32-byte-rounded DeviceBuffers from the device's pool."""

from __future__ import annotations

from .. import config
from ..errors import ErrorCode, InvalidArgumentError
from .arena import Arena, round_size
from .buffer import GRANULE, DeviceBuffer, check_size
from . import leaks
from .chunks import ArenaChunks
from .links import Links
from .pool import BlockPool
from .registry import REGISTRY


def check_stream(stream, device) -> None:
    """Raise InvalidArgumentError unless `stream` is None or a live stream of `device`."""
    if stream is None:
        return
    if not Links.is_stream(stream):
        raise InvalidArgumentError(f"stream must be a Stream or None, got {type(stream).__name__}")
    if stream.device is not device:
        raise InvalidArgumentError(f"stream {stream.id} belongs to device {stream.device.id}, "
                                   f"not device {device.id}", code=ErrorCode.RT_STREAM_CONTEXT)


def pool_from_config(upstream, name: str, all_streams, align: int = 64) -> BlockPool:
    """A BlockPool with the ASCENTRT_MEM_POOL_* settings."""
    return BlockPool(upstream, align=align, name=name, all_streams=all_streams,
                     split_limit=config.get("ASCENTRT_MEM_POOL_SPLIT_LIMIT"),
                     release_threshold=config.get("ASCENTRT_MEM_POOL_RELEASE_THRESHOLD"),
                     gc_threshold=config.get("ASCENTRT_MEM_POOL_GC_THRESHOLD"))


class DeviceAllocator:
    """Hands out DeviceBuffers from a device's pool (or, with the pool off, a plain first-fit arena)."""

    def __init__(self, device, mem, base: int, capacity: int, pool: BlockPool | None = None,
                 decommit=None):
        self.device = device
        self.mem = mem
        self.base = base
        self.capacity = capacity
        self.live: dict[int, DeviceBuffer] = {}
        self.pool: BlockPool | None = pool
        self.arena: Arena | None = None
        self.pools: list[BlockPool] = []  # explicit MemPools of this device (for device-wide stats)
        self.record_sites = leaks.recording_sites()
        backend = device._backend
        # A simulated device charges each malloc and free its modelled host cost.
        self.host_call = backend.host_call if backend.properties().virtual else None
        if pool is not None:
            self.chunks = pool.upstream   # an explicit MemPool sharing the device's chunks
        elif config.get("ASCENTRT_MEM_POOL_ENABLE"):
            self.chunks = ArenaChunks(capacity, base, mem, decommit)
            self.pool = pool_from_config(self.chunks, f"device {device.id}", self._streams)
            upfront = config.get("ASCENTRT_MEM_POOL_SIZE")
            if upfront:
                self.pool.prereserve(min(upfront, capacity))
        else:
            self.chunks = ArenaChunks(capacity, base, mem, decommit)
            self.arena = self.chunks.arena  # plain mode: every buffer is carved from the arena

    def _streams(self) -> list:
        """Every stream with work in flight, on any device: a free without a stream waits for
        them all, since another device's peer copy may write into this device's memory."""
        return Links.busy_streams()

    def malloc(self, nbytes, stream=None) -> DeviceBuffer:
        """Allocate `nbytes` (rounded up to 32, start 64-byte aligned); raises on bad size or OOM."""
        if type(nbytes) is not int or not 0 < nbytes <= self.capacity:  # one test on the hot path
            nbytes = check_size(nbytes)
            if nbytes > self.capacity:
                raise InvalidArgumentError(f"nbytes {nbytes} exceeds device {self.device.id}'s "
                                           f"capacity {self.capacity}")
        if stream is not None:
            check_stream(stream, self.device)
        charge = self.host_call  # a simulated device charges modelled host costs
        if charge is not None:
            charge("malloc" if self.pool is not None else "malloc_driver")
            before = self.pool.reserved if self.pool is not None else 0
        size = (nbytes + GRANULE - 1) & -GRANULE
        pool = self.pool
        if pool is not None:
            block = pool.allocate(nbytes, stream)
            addr = block.addr
            buf = DeviceBuffer(self.device, addr, size, nbytes, addr - self.base, block.bytes(size), self)
            buf._block = block
        else:
            off = self.arena.alloc(round_size(size))
            addr = self.base + off
            buf = DeviceBuffer(self.device, addr, size, nbytes, off, self.mem[off:off + size], self)
        if charge is not None and pool is not None and pool.reserved > before:
            charge("malloc_driver")  # the pool had to grow: a driver allocation
        self.live[addr] = buf
        REGISTRY.add(buf)
        if self.record_sites:
            leaks.note_site(buf)
        return buf

    def release(self, buf: DeviceBuffer, stream=None) -> None:
        """Free a buffer after `stream`'s work (None: after all queued work of the device)."""
        if stream is not None:
            check_stream(stream, self.device)
        if self.host_call is not None:
            self.host_call("free")
        if self.live.pop(buf.addr, None) is not buf:
            return
        block = buf._block
        waits = None
        if block is not None:
            waits = self.pool.waits_for(block, stream)
            if waits:
                buf._late = (buf._mem, waits)  # tasks queued before the free still run on it
        REGISTRY.remove(buf)
        buf._mem = None
        if block is not None:
            self.pool.deallocate(block, stream, waits)
        else:
            self.arena.free(buf._offset)

    def record_stream(self, buf: DeviceBuffer, stream) -> None:
        """Mark `buf` as used on `stream`: its free then waits for that stream's work too."""
        check_stream(stream, self.device)
        if stream is None:
            raise InvalidArgumentError("record_stream needs a stream")
        buf._bytes()  # raises if freed
        if buf._block is not None:
            self.pool.record_stream(buf._block, stream)

    def used_bytes(self) -> int:
        """Bytes held by live buffers (block sizes)."""
        return self.pool.allocated if self.pool is not None else self.arena.used_bytes

    def reset(self) -> int:
        """Free every live buffer (device reset) and return cached chunks; returns how many buffers.

        Buffers the program never freed are reported first (a LeakWarning)."""
        bufs = list(self.live.values())
        leaks.report(bufs, f"device {self.device.id} reset")
        for buf in bufs:
            self.release(buf)
        if self.pool is not None:
            self.pool.empty_cache()
        return len(bufs)
