"""Device memory behind ascentrt.malloc: one backing mapping per device, carved by an Arena."""

from __future__ import annotations

import threading

from ..errors import InvalidArgumentError
from .arena import Arena, round_size
from .buffer import GRANULE, DeviceBuffer, check_size
from .registry import REGISTRY


class DeviceAllocator:
    """Hands out DeviceBuffers from a device's mapping and keeps every live one until freed."""

    def __init__(self, device, mem, base: int, capacity: int):
        self.device = device
        self.mem = mem
        self.base = base
        self.capacity = capacity
        self.arena = Arena(capacity)
        self.live: dict[int, DeviceBuffer] = {}
        self._lock = threading.Lock()
        self.peak_bytes = 0

    def malloc(self, nbytes, stream=None) -> DeviceBuffer:
        """Allocate `nbytes` (rounded up to 32, start 64-byte aligned); raises on bad size or OOM."""
        nbytes = check_size(nbytes)
        if nbytes > self.capacity:
            raise InvalidArgumentError(f"nbytes {nbytes} exceeds device {self.device.id}'s capacity "
                                       f"{self.capacity}")
        size = -(-nbytes // GRANULE) * GRANULE
        off = self.arena.alloc(round_size(size))
        buf = DeviceBuffer(self.device, self.base + off, size, nbytes, off,
                           self.mem[off:off + size], self)
        with self._lock:
            self.live[off] = buf
            self.peak_bytes = max(self.peak_bytes, self.arena.used_bytes)
        REGISTRY.add(buf)
        return buf

    def release(self, buf: DeviceBuffer, stream=None) -> None:
        """Free a buffer: later use of it or its pointer is an error, its bytes go back to the arena."""
        with self._lock:
            if self.live.pop(buf._offset, None) is not buf:
                return
        REGISTRY.remove(buf)
        buf._mem = None
        self.arena.free(buf._offset)

    def used_bytes(self) -> int:
        """Bytes currently reserved by live buffers."""
        return self.arena.used_bytes

    def reset(self) -> int:
        """Free every live buffer (device reset); returns how many there were."""
        with self._lock:
            bufs = list(self.live.values())
        for buf in bufs:
            self.release(buf)
        return len(bufs)
