"""Memory: chunks, the caching pool, device and pinned host buffers, all checked against live allocations."""

from __future__ import annotations

from typing import Any

from .. import interrupts
from ..errors import ErrorCode, InvalidAddressError, InvalidArgumentError
from .buffer import BufferSlice, DeviceBuffer, HostBuffer, TypedView
from .chunks import ArenaChunks, HostChunks
from .host import malloc_host
from .mempool import (MemPool, configure_pool, empty_cache, free_async, malloc_async,
                      record_stream)
from .pool import BlockPool
from .policy import ReusePolicy
from .stats import memory_snapshot, memory_stats, memory_summary, reset_peak_memory_stats
from .trace import TraceRecorder, load_trace, record_trace, replay as replay_trace
from .links import Links
from .registry import REGISTRY


def malloc(nbytes: int, device: Any = None, stream: Any = None) -> DeviceBuffer:
    """Allocate `nbytes` of device memory (64-byte aligned start, size rounded up to 32 bytes).

    `device` defaults to the current device. Raises InvalidArgumentError for a bad size and
    OutOfMemoryError when the device cannot hold it.
    """
    if device is None:
        if stream is None:
            dev = Links.thread.device  # (inline: a call to current_device() costs more)
            if dev is None:
                dev = Links.current_device()
            return dev._memory.malloc(nbytes)
        if type(stream) is Links.stream_type or isinstance(stream, Links.stream_type):
            return stream.device._memory.malloc(nbytes, stream)  # on the stream's device
    return Links.resolve_device(device)._memory.malloc(nbytes, stream)


def free(buffer: DeviceBuffer | HostBuffer | int) -> None:
    """Free a device or host buffer, or the live allocation at an int address."""
    if type(buffer) is DeviceBuffer or isinstance(buffer, (DeviceBuffer, HostBuffer)):  # (the common case first)
        buffer.free()
        return
    if type(buffer) is int:
        alloc = REGISTRY.find(buffer)
        if alloc is None or alloc.addr != buffer:
            raise InvalidAddressError(f"{buffer:#x} is not the start of a live allocation",
                                      code=ErrorCode.RT_MEMORY_FREE)
        alloc.free()
        return
    raise InvalidArgumentError(f"free() takes a buffer or its pointer, got {type(buffer).__name__}")


# (a Ctrl-C as a new buffer is handed on would lose it: sent again once the call returned)
interrupts.protect(malloc)

__all__ = ["ArenaChunks", "BlockPool", "BufferSlice", "DeviceBuffer", "HostBuffer", "HostChunks",
           "MemPool", "REGISTRY", "ReusePolicy", "TraceRecorder", "TypedView",
           "configure_pool", "empty_cache", "free", "free_async", "load_trace", "malloc",
           "malloc_async", "malloc_host", "memory_snapshot", "memory_stats", "memory_summary",
           "record_stream", "record_trace", "replay_trace", "reset_peak_memory_stats"]
