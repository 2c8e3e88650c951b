"""Memory: device buffers, pinned host buffers, copies and fills, all checked against live allocations."""

from .buffer import BufferSlice, DeviceBuffer, HostBuffer, TypedView
from .copy import MemcpyKind, memcpy, memcpy2d, memcpy2d_async, memcpy_async, memset, memset_async
from .host import malloc_host
from .registry import REGISTRY


def malloc(nbytes: int, device=None, stream=None) -> DeviceBuffer:
    """Allocate `nbytes` of device memory (64-byte aligned start, size rounded up to 32 bytes).

    `device` defaults to the current device. Raises InvalidArgumentError for a bad size and
    OutOfMemoryError when the device cannot hold it.
    """
    from ..device import Device, current_device
    dev = current_device() if device is None else device if isinstance(device, Device) else Device(device)
    return dev.malloc(nbytes, stream)


def free(buffer) -> None:
    """Free a device or host buffer, or the live allocation at an int address."""
    from ..errors import ErrorCode, InvalidAddressError, InvalidArgumentError
    if isinstance(buffer, (DeviceBuffer, HostBuffer)):
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


__all__ = ["BufferSlice", "DeviceBuffer", "HostBuffer", "MemcpyKind", "REGISTRY", "TypedView",
           "free", "malloc", "malloc_host", "memcpy", "memcpy2d", "memcpy2d_async", "memcpy_async",
           "memset", "memset_async"]
