"""ascentrt: an accelerator runtime in the mould of the Ascend CANN Runtime, running for real on the CPU."""

from . import kernels
from .device import Device, DeviceProperties, current_device, device_count, set_device
from .errors import (AscentError, AscentTimeoutError, DeadlockError, ErrorCode, ExceptionInfo,
                     InvalidAddressError, InvalidArgumentError, InvalidDeviceError,
                     InvalidHandleError, NotSupportedError, OutOfMemoryError, StreamStateError,
                     TaskError, get_last_error, peek_at_last_error)
from .event import Event, elapsed_time, set_wait_timeout
from .launch import launch, launch_host_func
from .memory import (BufferSlice, DeviceBuffer, HostBuffer, MemcpyKind, TypedView, free, malloc,
                     malloc_host, memcpy, memcpy2d, memcpy2d_async, memcpy_async, memset,
                     memset_async)
from .notify import Notify, record_notify, wait_and_reset_notify
from .stream import FailureMode, Stream

__version__ = "0.1.0"


def synchronize(timeout: float | None = None) -> None:
    """Wait for all work on the current device (see Device.synchronize)."""
    current_device().synchronize(timeout)


def default_stream() -> Stream:
    """The current device's default stream."""
    return current_device().default_stream


__all__ = [
    "AscentError", "AscentTimeoutError", "BufferSlice", "DeadlockError", "Device", "DeviceBuffer",
    "DeviceProperties", "ErrorCode", "Event", "ExceptionInfo", "FailureMode", "HostBuffer",
    "InvalidAddressError", "InvalidArgumentError", "InvalidDeviceError", "InvalidHandleError",
    "MemcpyKind", "NotSupportedError", "Notify", "OutOfMemoryError", "Stream", "StreamStateError",
    "TaskError", "TypedView", "current_device", "default_stream", "device_count", "elapsed_time",
    "free", "get_last_error", "kernels", "launch", "launch_host_func", "malloc", "malloc_host",
    "memcpy", "memcpy2d", "memcpy2d_async", "memcpy_async", "memset", "memset_async",
    "peek_at_last_error", "record_notify", "set_device", "set_wait_timeout", "synchronize",
    "wait_and_reset_notify", "__version__",
]
