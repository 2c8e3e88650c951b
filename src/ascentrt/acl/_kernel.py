"""acl.rt.launch_kernel: run a Python callable or built-in kernel with device pointers as numpy views."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from .. import forksafe
from ..errors import ErrorCode
from ..launch import launch
from ..memory import REGISTRY
from ..memory.external import mapped_entry
from ._api import EVENTS, AclTypeError, api, fail, last_task_id, note_task, stream_of
from ._device import core_limit


def _pointer_arg(ptr: int, dtype: np.dtype[Any] | None = None, shape: Any = None) -> Any:
    """The device allocation range starting at ptr, as a BufferSlice or a TypedView of dtype/shape;
    in host memory registered with host_register (the device reaches it), a numpy view."""
    alloc = REGISTRY.find(ptr)
    if alloc is None:
        raise fail(ErrorCode.INVALID_PARAM, f"kernel argument {ptr:#x} is not inside a live allocation")
    if alloc.kind != "device":
        mapped = mapped_entry(ptr)
        if mapped is None:
            raise fail(ErrorCode.RT_INVALID_MEMORY_TYPE, f"kernel argument {ptr:#x} is host memory "
                                                         f"not registered with host_register; kernels "
                                                         f"take device pointers")
        return _mapped_view(mapped, ptr, dtype, shape)
    offset = ptr - alloc.addr
    piece = alloc[offset:alloc.nbytes]
    return piece if dtype is None else piece.view(dtype, shape)


def _mapped_view(entry: Any, ptr: int, dtype: np.dtype[Any] | None, shape: Any) -> np.ndarray:
    """A numpy view of registered host memory from ptr to the registration's end, or of
    dtype/shape there (INVALID_PARAM if it does not fit or is no shape)."""
    raw = entry._bytes()[ptr - entry.addr:]
    if dtype is None:
        return raw
    dims = [raw.nbytes // dtype.itemsize] if shape is None else \
        [shape] if isinstance(shape, (int, np.integer)) else shape
    if not isinstance(dims, (tuple, list)) or any(
            type(d) is bool or not isinstance(d, (int, np.integer)) or d < 0 for d in dims):
        raise fail(ErrorCode.INVALID_PARAM, f"shape must be non-negative ints, got {shape!r:.60}")
    need = math.prod(int(d) for d in dims) * dtype.itemsize
    if need > raw.nbytes:
        raise fail(ErrorCode.INVALID_PARAM, f"a {dtype} array of shape {tuple(dims)} needs {need} "
                                            f"bytes; {raw.nbytes} are registered from {ptr:#x}")
    return raw[:need].view(dtype).reshape(tuple(int(d) for d in dims))


def _translate(arg: Any) -> Any:
    if type(arg) is int:
        # (ints in a device's memory, or in host memory registered for the device, are
        # pointers; any other int is a scalar)
        if REGISTRY.in_device_memory(arg, arg + 1) or mapped_entry(arg) is not None:
            return _pointer_arg(arg)
        return arg
    if isinstance(arg, tuple) and len(arg) == 3 and type(arg[0]) is int:
        ptr, dtype, shape = arg
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            raise fail(ErrorCode.INVALID_PARAM, f"not a dtype: {dtype!r}") from None
        return _pointer_arg(ptr, dtype, shape)
    return arg


@api("OOkk", optional=1)
def launch_kernel(kernel: Callable[..., Any] | str, args: tuple[Any, ...] | list[Any], stream: int,
                  event: int = 0) -> None:
    """Run kernel(*args) after the stream's earlier work (stand-in for aclrtLaunchKernel / pyACL operator launches).

    kernel: a callable or an ascentrt.kernels name. args: a tuple or list; a device pointer
    reaches the kernel as a uint8 numpy view up to its allocation's end, (ptr, dtype, shape) as
    a typed view; other values as they are. An event, when given, is recorded after the kernel.
    """
    if not isinstance(args, (tuple, list)):
        raise AclTypeError("acl.rt.launch_kernel args parse failed")
    s = stream_of(stream)
    ev = EVENTS.get(event) if event else None
    # (a core limit set with set_device_res_limit: the kernel occupies that many units)
    task_id = launch(kernel, *[_translate(a) for a in args] if args else (), stream=s,
                     block_dim=core_limit(s.device.id))
    note_task(stream, s, task_id)
    if ev is not None:
        ev.record(s)


@api("", out=(0,))
def get_thread_last_task_id() -> int:
    """(task_id, ret): this thread's last task on a stream it created, 0 before any (aclrtGetThreadLastTaskId)."""
    return last_task_id()


# Operator execution timeout, in CANN's hardware units: a timeout is a whole number 1..254 of
# the hardware's interval (a request rounds up to one, beyond 254 it clamps; 0 asks for the
# most). ascentrt follows Atlas A2, whose default and maximum AI Core timeout is 1091 s =
# 254 intervals: an interval of 2**32 ns, 4294967 us. The value is recorded for the getters
# only: a kernel is a host-thread call that cannot be pre-empted, so none is cut off.
_INTERVAL_US = (1 << 32) // 1000
_MAX_INTERVALS = 254
_timeout_lock = forksafe.lock()
_op_timeout_us = [_INTERVAL_US * _MAX_INTERVALS]  # the default: the most


def _set_op_timeout_us(timeout_us: int) -> int:
    """Round a timeout in us as the hardware does, keep it; returns what took effect."""
    intervals = _MAX_INTERVALS if timeout_us == 0 else min(-(-timeout_us // _INTERVAL_US), _MAX_INTERVALS)
    actual = intervals * _INTERVAL_US
    with _timeout_lock:
        _op_timeout_us[0] = actual
    return actual


def op_timeout_s() -> float:
    """The operator execution timeout in effect, in seconds."""
    with _timeout_lock:
        return _op_timeout_us[0] / 1e6


@api("I")
def set_op_execute_time_out(timeout: int) -> None:
    """Set the operator execution timeout in seconds, 0 = the most; last call wins (aclrtSetOpExecuteTimeOut)."""
    _set_op_timeout_us(timeout * 1_000_000)  # (a uint32: the wrapper parsed it so)


@api("K", out=(0,))
def set_op_execute_timeout_v2(timeout: int) -> int:
    """(actual_us, ret): set the operator timeout in us, 0 = the most; rounded (aclrtSetOpExecuteTimeOutV2)."""
    return _set_op_timeout_us(timeout & 0xFFFFFFFFFFFFFFFF)


@api("", out=(0,))
def get_op_execute_timeout() -> int:
    """(timeout_ms, ret): the operator execution timeout in effect, in ms (aclrtGetOpExecuteTimeout)."""
    with _timeout_lock:
        return _op_timeout_us[0] // 1000


@api("", out=(0,))
def get_op_timeout_interval() -> int:
    """(interval_us, ret): the timeout granularity: timeouts are 1..254 of it (aclrtGetOpTimeOutInterval)."""
    return _INTERVAL_US


__all__ = ["launch_kernel", "get_thread_last_task_id", "set_op_execute_time_out",
           "set_op_execute_timeout_v2", "get_op_execute_timeout", "get_op_timeout_interval"]
