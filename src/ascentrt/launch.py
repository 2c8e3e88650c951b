"""Kernel launches and host functions: the work a stream runs on its device's executors."""

from __future__ import annotations

from threading import get_ident
from typing import Any, Callable, Sequence

from .backends.base import Cost
from .engine import ENGINE, Task
from .engine.hooks import Hooks
from .engine.task import DETACH, HOST_FUNC, KERNEL
from .errors import ErrorCode, InvalidArgumentError, InvalidHandleError
from .kernels import REGISTRY
from .memory.buffer import BufferSlice, DeviceBuffer, HostBuffer, TypedView, task_view
from .stream import Stream, resolve_stream
from .validate import as_group, as_int, check_finite, check_flag, check_name

_BUFFER_TYPES = (DeviceBuffer, BufferSlice, TypedView, HostBuffer)
_VIEWED = (DeviceBuffer, BufferSlice, TypedView)  # what a kernel receives as a numpy view
_Buffers = Sequence[DeviceBuffer | BufferSlice | TypedView | HostBuffer]  # a launch's reads / writes


def kernel_views(args: tuple) -> list:
    """The arguments a kernel is called with: buffers become numpy views (checked live then)."""
    return [task_view(a) if isinstance(a, _VIEWED) else a for a in args]


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


# The most a declared cost may say: a duration in the virtual clock's range (ns in an int64)
# with room to add, and work that no device takes longer than that over.
MAX_COST_SECONDS = 1e9     # ~32 years
MAX_COST_WORK = 1e24       # flops or bytes


def _bounded(value: float, most: float, what: str) -> float:
    if value > most:
        raise InvalidArgumentError(f"{what} must be at most {most:g}, got {value!r:.40}")
    return value


MAX_BLOCK_DIM = 65535  # CANN's blockDim range: [1, 65535]


def _field(value, what: str, most: float) -> float:
    return _bounded(check_finite(value, what), most, what)


def make_cost(cost, block_dim, device) -> Cost | None:
    """The checked Cost of a launch: `cost` is seconds, a Cost, or a dict of seconds / flops /
    bytes; `block_dim` (or a Cost's own) the logical blocks it runs, 1 .. MAX_BLOCK_DIM (CANN's
    blockDim: as many run at once as there are compute units, the rest in later waves).
    Numbers are ints or floats (numpy's too, not bools); every value a dict gives, and every
    field of a Cost but a None seconds or block_dim (not given), must be one. Seconds above
    MAX_COST_SECONDS, or flops and bytes above MAX_COST_WORK, are refused: the virtual clock
    could not hold their end."""
    if isinstance(cost, Cost):  # (every field checked as the keyword and dict forms are)
        fields = {"flops": cost.flops, "bytes": cost.bytes, "link_bytes": cost.link_bytes}
        if cost.seconds is not None:  # (None: not given, a Cost's default)
            fields["seconds"] = cost.seconds
        block_dim = cost.block_dim if block_dim is None else block_dim
    if block_dim is not None:
        number = as_int(block_dim)  # (numpy's ints too, as byte counts take them)
        if number is None or not 1 <= number <= MAX_BLOCK_DIM:
            raise InvalidArgumentError(f"block_dim must be an int in [1, {MAX_BLOCK_DIM}] (blocks: "
                                       f"device {device.id} runs {device.properties.compute_units} "
                                       f"at once; numpy's ints too, not a bool), got {block_dim!r:.40}")
        block_dim = number
    if cost is None:
        return None if block_dim is None else Cost(block_dim=block_dim)
    if isinstance(cost, dict):
        unknown = set(cost) - {"seconds", "flops", "bytes"}
        if unknown:
            raise InvalidArgumentError(f"cost takes seconds, flops and bytes, not {sorted(unknown)[0]!r}")
        fields = cost  # (every value it gives is checked: None, "" or [] is no 0)
    elif not isinstance(cost, Cost):
        fields = {"seconds": cost}
    seconds = _field(fields["seconds"], "cost seconds", MAX_COST_SECONDS) if "seconds" in fields else None
    return Cost(seconds=seconds, flops=_field(fields.get("flops", 0.0), "cost flops", MAX_COST_WORK),
                bytes=_field(fields.get("bytes", 0.0), "cost bytes", MAX_COST_WORK), block_dim=block_dim,
                link_bytes=_field(fields.get("link_bytes", 0.0), "cost link_bytes", MAX_COST_WORK),
                link_src=cost.link_src if isinstance(cost, Cost) else 0)


def launch(kernel: Callable[..., Any] | str, *args: Any, stream: Stream | None = None,
           reads: _Buffers | None = None, writes: _Buffers | None = None, name: str | None = None,
           cost: float | Cost | dict[str, float] | None = None, block_dim: int | None = None) -> int:
    """Run `kernel(*args)` on a compute executor after the stream's earlier work; returns the task id.

    Buffer arguments (device buffers, slices, typed views from `buf.view(dtype, shape)`) reach
    the kernel as numpy views; `reads` / `writes` name the buffers it reads and writes (default:
    all buffer arguments, both). On a simulated device `cost` gives its duration (seconds, or
    a dict / Cost of flops and bytes for a roofline) and `block_dim` the compute units it
    occupies (default: all); elsewhere they are checked and kept for graphs. Raises
    InvalidArgumentError / InvalidHandleError on bad input.
    """
    if type(stream) is not Stream or stream._refuse is not None:
        stream = resolve_stream(stream)
    if not callable(kernel):
        kernel = _resolve_kernel(kernel)
    if name is not None:
        check_name(name)
    task = Task(KERNEL, kernel, args, name)
    if cost is not None or block_dim is not None:
        task.cost = make_cost(cost, block_dim, stream.device)
    if args:
        device = stream.device
        for a in args:
            if isinstance(a, _BUFFER_TYPES):
                _check_buffer_arg(a, device)
                task.resolve = kernel_views
    if reads is not None or writes is not None:  # checked even for a kernel without arguments
        if type(reads) is not list:  # (lists, or None beside a list: the hot path's forms)
            reads = () if reads is None else as_group(reads, _BUFFER_TYPES, "reads/writes")
        if type(writes) is not list:
            writes = () if writes is None else as_group(writes, _BUFFER_TYPES, "reads/writes")
        for group in (reads, writes):
            for b in group:
                if not isinstance(b, _BUFFER_TYPES):
                    raise InvalidArgumentError(f"reads/writes take buffers, got {type(b).__name__}")
        task.reads = tuple(reads)
        task.writes = tuple(writes)
    if stream._capture is not None:
        return stream._capture.add(stream, task)
    task.thread = get_ident()
    return ENGINE.submit(stream, task)  # inlined Stream._submit: this is the hottest path


def _told_to_sanitizer(fn: Callable[..., Any], task: Task, sanitizer: Any) -> Callable[..., Any]:
    """`fn`, telling the sanitizer as it starts (see Sanitizer.host_function_began)."""
    def host_function(*args: Any) -> Any:
        sanitizer.host_function_began(task)
        return fn(*args)
    return host_function


def launch_host_func(fn: Callable[..., Any], *args: Any, stream: Stream | None = None,
                     blocking: bool = True) -> int:
    """Run `fn(*args)` on a host thread once the stream's earlier work is done.

    blocking=True holds back the stream's later tasks until fn returns; blocking=False lets
    them go on while fn runs. Returns the task id.
    """
    stream = resolve_stream(stream)
    if not callable(fn):
        raise InvalidArgumentError(f"host function must be callable, got {type(fn).__name__}")
    blocking = check_flag(blocking, "blocking")  # ("no" would be a blocking one)
    name = getattr(fn, "__name__", "host_func")
    task = Task(HOST_FUNC, fn, args, name)
    if Hooks.sanitizer is not None:
        task.fn = _told_to_sanitizer(fn, task, Hooks.sanitizer)
    if not blocking:
        task = Task(DETACH, task, (), name)
    return stream._submit(task)
