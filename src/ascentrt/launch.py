"""Kernel launches and host functions: the work a stream runs on its device's executors."""

from __future__ import annotations

from threading import get_ident

from .engine import ENGINE, Task
from .engine.task import DETACH, HOST_FUNC, KERNEL
from .errors import ErrorCode, InvalidArgumentError, InvalidHandleError
from .kernels import REGISTRY
from .memory.buffer import BufferSlice, DeviceBuffer, HostBuffer, TypedView
from .stream import Stream, resolve_stream

_BUFFER_TYPES = (DeviceBuffer, BufferSlice, TypedView, HostBuffer)
_VIEWED = (DeviceBuffer, BufferSlice, TypedView)  # what a kernel receives as a numpy view


def kernel_views(args: tuple) -> list:
    """The arguments a kernel is called with: buffers become numpy views (checked live then)."""
    return [a.numpy() if isinstance(a, _VIEWED) else a for a in args]


def _check_buffer_arg(arg, device) -> None:
    buf = arg.buffer if type(arg) is TypedView else arg
    if not buf.alive:
        raise InvalidHandleError(f"kernel argument {buf!r} was freed")
    if buf.kind != "device":
        raise InvalidArgumentError(f"kernel argument {buf!r} is host memory; kernels take device "
                                   f"buffers (copy it to the device first)",
                                   code=ErrorCode.RT_INVALID_MEMORY_TYPE)
    if buf.device is not device:
        raise InvalidArgumentError(f"kernel argument {buf!r} lives on device {buf.device.id}, the "
                                   f"stream on device {device.id}", code=ErrorCode.RT_STREAM_CONTEXT)


def _resolve_kernel(kernel):
    if callable(kernel):
        return kernel
    if isinstance(kernel, str):
        try:
            return REGISTRY[kernel]
        except KeyError:
            raise InvalidArgumentError(f"no built-in kernel named {kernel!r}; known: "
                                       f"{', '.join(sorted(REGISTRY))}") from None
    raise InvalidArgumentError(f"kernel must be callable or a built-in kernel name, got "
                               f"{type(kernel).__name__}")


def launch(kernel, *args, stream: Stream | None = None, reads=None, writes=None,
           name: str | None = None) -> int:
    """Run `kernel(*args)` on a compute executor after the stream's earlier work; returns the task id.

    Buffer arguments (device buffers, slices, typed views from `buf.view(dtype, shape)`) reach
    the kernel as numpy views; `reads` / `writes` name the buffers it reads and writes (default:
    all buffer arguments, both). Raises InvalidArgumentError / InvalidHandleError on bad input.
    """
    if type(stream) is not Stream or stream._refuse is not None:
        stream = resolve_stream(stream)
    if not callable(kernel):
        kernel = _resolve_kernel(kernel)
    task = Task(KERNEL, kernel, args, name)
    if args:
        device = stream.device
        for a in args:
            if isinstance(a, _BUFFER_TYPES):
                _check_buffer_arg(a, device)
                task.resolve = kernel_views
    if reads is not None or writes is not None:  # checked even for a kernel without arguments
        for group in (reads or (), writes or ()):
            for b in group:
                if not isinstance(b, _BUFFER_TYPES):
                    raise InvalidArgumentError(f"reads/writes take buffers, got {type(b).__name__}")
        task.reads = tuple(reads or ())
        task.writes = tuple(writes or ())
    if stream._capture is not None:
        return stream._capture.add(stream, task)
    task.thread = get_ident()
    return ENGINE.submit(stream, task)  # inlined Stream._submit: this is the hottest path


def launch_host_func(fn, *args, stream: Stream | None = None, blocking: bool = True) -> int:
    """Run `fn(*args)` on a host thread once the stream's earlier work is done.

    blocking=True holds back the stream's later tasks until fn returns; blocking=False lets
    them go on while fn runs. Returns the task id.
    """
    stream = resolve_stream(stream)
    if not callable(fn):
        raise InvalidArgumentError(f"host function must be callable, got {type(fn).__name__}")
    name = getattr(fn, "__name__", "host_func")
    task = Task(HOST_FUNC, fn, args, name)
    if not blocking:
        task = Task(DETACH, task, (), name)
    return stream._submit(task)
