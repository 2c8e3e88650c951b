"""acl.rt.launch_kernel: run a Python callable or built-in kernel with device pointers as numpy views."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import ErrorCode
from ..launch import launch
from ..memory import REGISTRY, BufferSlice, TypedView
from ._api import EVENTS, AclTypeError, api, fail, stream_of


_ranges: list[tuple[int, int]] = []  # (start, end) of each device's memory mapping, made once


def _device_ranges() -> list[tuple[int, int]]:
    """Where device memory lives: ints in these ranges are pointers, not scalars."""
    if not _ranges:
        from ..device import Device, device_count
        for i in range(device_count()):
            mem = Device(i)._memory
            base, size = getattr(mem, "base", None), getattr(mem, "capacity", None)
            if base is not None and size is not None:
                _ranges.append((base, base + size))
    return _ranges


def _pointer_arg(ptr: int, dtype: np.dtype[Any] | None = None, shape: Any = None) -> BufferSlice | TypedView:
    """The device allocation range starting at ptr, as a BufferSlice or a TypedView of dtype/shape."""
    alloc = REGISTRY.find(ptr)
    if alloc is None:
        raise fail(ErrorCode.INVALID_PARAM, f"kernel argument {ptr:#x} is not inside a live allocation")
    if alloc.kind != "device":
        raise fail(ErrorCode.RT_INVALID_MEMORY_TYPE, f"kernel argument {ptr:#x} is host memory; "
                                                     f"kernels take device pointers")
    offset = ptr - alloc.addr
    piece = alloc[offset:alloc.nbytes]
    return piece if dtype is None else piece.view(dtype, shape)


def _translate(arg: Any) -> Any:
    if type(arg) is int:
        if any(lo <= arg < hi for lo, hi in _device_ranges()):
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
    launch(kernel, *[_translate(a) for a in args] if args else (), stream=s)
    if ev is not None:
        ev.record(s)


__all__ = ["launch_kernel"]
