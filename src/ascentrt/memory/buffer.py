"""Buffers the user holds: device and pinned host allocations, offset slices, typed views."""

from __future__ import annotations

import copy
import math
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from .. import forksafe
from ..accel import restore_docstrings
from ..callsite import site_text, user_code_site
from ..errors import ErrorCode, InvalidArgumentError, InvalidHandleError
from ..handles import not_picklable
from .links import Links
from .registry import REGISTRY

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

GRANULE = 32  # CANN rounds every device allocation up to 32 bytes
KDL_CPU = 1   # DLPack's device type of memory the host reaches (cpu and sim backends)
# What a pooled buffer's `_mem` holds while it is live: its numpy view is made when its bytes
# are first asked for (DeviceBuffer._view). Slicing costs ~0.25 us, a third of a malloc + free
# whose size its block did not serve last, and a buffer used only through its pointer never
# needs it. It has no bytes and is never handed out.
UNVIEWED: Final = np.empty(0, np.uint8)

# DLPack exports alive: id(allocation) -> how many. A buffer with live exports refuses to be
# freed: the arrays other libraries hold would point into a block the pool hands out again.
_exports: Final[dict[int, int]] = {}  # (Final: a compiled free reads it from a C static)
_exports_lock = forksafe.lock()
# A view's shape: an int, ints (numpy's too), or None (1-D over all the bytes). Any to a
# compiled build, which would otherwise refuse numpy ints with a bare TypeError at the call.
_Shape = Any


def _export_done(key: int, base: object) -> None:
    """An export died (`base` was held until now: the allocation lives as long as its exports)."""
    with _exports_lock:
        left = _exports.get(key, 0) - 1
        if left > 0:
            _exports[key] = left
        else:
            _exports.pop(key, None)


def _dlpack(base: object, array: np.ndarray, stream: Any, kwargs: dict) -> Any:
    """A DLPack capsule of `array` (memory of allocation `base`), counted until its consumer
    lets it go (numpy's capsule holds the array: its end is the export's)."""
    if stream is not None and stream != -1:
        raise InvalidArgumentError(f"DLPack export: host memory takes stream None (or -1), got "
                                   f"{stream!r}")
    try:
        capsule = array.__dlpack__(**kwargs)
    except Exception as exc:  # (numpy's refusals: BufferError, TypeError, ValueError, ...)
        raise InvalidArgumentError(f"DLPack export refused: {exc}") from None
    key = id(base)
    with _exports_lock:
        _exports[key] = _exports.get(key, 0) + 1
    weakref.finalize(array, _export_done, key, base)  # holds base: its id stays its own
    return capsule


def exported_buffers(buffers: Iterable[object]) -> list:
    """Those of `buffers` with live DLPack exports."""
    return [b for b in buffers if _exports.get(id(b))] if _exports else []


def check_no_exports(buf: object) -> None:
    """Raise when `buf` has live DLPack exports (InvalidArgumentError, 207002)."""
    n = _exports.get(id(buf), 0)
    if n:
        raise InvalidArgumentError(
            f"{buf!r} has {n} live DLPack export(s) (arrays of its memory another library "
            f"holds): free it once they are gone", code=ErrorCode.RT_MEMORY_FREE)


def _plain_dtype(dtype: DTypeLike) -> np.dtype:
    """A numpy dtype of plain bytes (no Python objects inside); raises InvalidArgumentError."""
    try:
        dtype = np.dtype(dtype)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"not a numpy dtype: {dtype!r}") from None
    if dtype.hasobject or dtype.itemsize == 0:
        raise InvalidArgumentError(f"device memory holds plain bytes; {dtype} cannot view it")
    if dtype.subdtype is not None:  # (it would add dimensions of its own to the view)
        raise InvalidArgumentError(f"{dtype} is a subarray dtype: view as {dtype.subdtype[0]} "
                                   f"with the shape instead")
    return dtype


class _ByteRange:
    """Shared behaviour of anything that names bytes: pointer, length, numpy views, slicing."""

    # What every kind of range stores; what it computes (base, offset, kind, alive) are
    # properties each kind overrides. (A compiled build lays these out as native fields.)
    __slots__ = ("addr", "nbytes", "device")
    addr: int       # the start address
    nbytes: int     # the length in bytes
    device: Any     # the Device the memory is on (None for host memory)

    @property
    def base(self) -> _ByteRange:
        """The allocation the range is part of."""
        raise NotImplementedError

    @property
    def offset(self) -> int:
        """Where the range starts inside its allocation."""
        raise NotImplementedError

    @property
    def kind(self) -> str:
        """'device' or 'host'."""
        raise NotImplementedError

    @property
    def alive(self) -> bool:
        """Whether the memory is still allocated."""
        raise NotImplementedError

    @property
    def ptr(self) -> int:
        """The start address as an int."""
        return self.addr

    def _bytes(self) -> np.ndarray:
        """The bytes as a uint8 numpy array (checks the allocation is still live)."""
        raise NotImplementedError

    def numpy(self, dtype: DTypeLike = np.uint8, shape: _Shape = None) -> np.ndarray:
        """A zero-copy numpy view of the bytes as `dtype`, reshaped to `shape` (default 1-D)."""
        array = self._array(dtype, shape)
        if REGISTRY.observers:  # (a host view; inside a task, the sanitizer sees whose)
            REGISTRY.host_accessed(self.base, self.offset, self.offset + array.nbytes)
        return array

    def _array(self, dtype: DTypeLike, shape: _Shape) -> np.ndarray:
        """numpy() without telling the observers (a check, or a task's own view)."""
        dtype = _plain_dtype(dtype)
        raw = self._bytes()
        dims: list[Any]
        if shape is None:
            dims = [raw.nbytes // dtype.itemsize]
        elif isinstance(shape, (int, np.integer)):
            dims = [shape]
        elif isinstance(shape, (tuple, list)):
            dims = list(shape)
        else:
            raise InvalidArgumentError(f"shape must be an int or a tuple of ints, got {shape!r:.40}")
        for d in dims:  # (bools are no sizes, though True == 1)
            if type(d) is bool or not isinstance(d, (int, np.integer)) or d < 0:
                raise InvalidArgumentError(f"shape must be non-negative ints, got {tuple(dims)!r:.60}")
        shape = tuple(int(d) for d in dims)
        need = math.prod(shape) * dtype.itemsize
        if need > raw.nbytes:
            raise InvalidArgumentError(f"a {dtype} array of shape {shape} needs {need} bytes; "
                                       f"the buffer has {raw.nbytes}")
        try:
            return raw[:need].view(dtype).reshape(shape)
        except (ValueError, OverflowError):  # (dimensions numpy cannot hold, a 0 among them)
            raise InvalidArgumentError(f"numpy cannot make an array of shape {shape!r:.60}") from None

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        """DLPack export of the bytes (uint8, 1-D): zero-copy for np.from_dlpack and
        torch.from_dlpack; the buffer cannot be freed while the array lives."""
        return _dlpack(self.base, self.numpy(), stream, kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        """(kDLCPU, 0): the memory is this machine's on the cpu and sim backends."""
        return KDL_CPU, 0

    def view(self, dtype: DTypeLike = np.uint8, shape: _Shape = None) -> "TypedView":
        """A typed view to pass to kernels: they receive it as a numpy array of dtype/shape."""
        self._array(dtype, shape)  # validate now, not when the kernel runs
        return TypedView(self, _plain_dtype(dtype), shape)

    def __getitem__(self, key: slice) -> "BufferSlice":
        """buf[a:b] is the byte range [a, b) of the buffer, usable wherever a buffer is."""
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise InvalidArgumentError("buffers slice by contiguous byte ranges: buf[start:stop]")
        try:
            start, stop, _ = key.indices(self.nbytes)
        except TypeError:  # (buf[0.5:2]: the bounds are byte offsets, ints)
            raise InvalidArgumentError(f"buffer slice bounds must be ints, got "
                                       f"[{key.start!r}:{key.stop!r}]") from None
        if stop < start:
            stop = start
        return BufferSlice(self, start, stop - start)

    def __len__(self) -> int:
        return self.nbytes

    # Copying (README: Copying and pickling): a buffer names its memory, so copy.copy is the
    # buffer itself (a second owner of the bytes would outlive their free); copy.deepcopy makes
    # new memory with the bytes, as a deep copy of a device array does; pickle is refused.
    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict) -> Any:
        raise NotImplementedError

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise not_picklable(self)


def task_view(x: Any) -> np.ndarray:
    """The numpy array a task receives for a buffer, slice or typed view (not a host access)."""
    if type(x) is TypedView:
        return x.buffer._array(x.dtype, x.shape)
    return x._array(np.uint8, None)


class _Allocation(_ByteRange):
    """What device and host allocations share: their memory, until it is freed."""

    # `_late` is set only by a stream-ordered free that queued work still needs:
    # (bytes, ((stream, last task id), ...)); unset otherwise (one store less per malloc).
    # `_freed_by` is set only when the runtime freed it for the program (a device reset): a
    # later free is no double free of the program's, and says so.
    __slots__ = ("_mem", "_late", "site", "_freed_by")
    _mem: np.ndarray | None
    _late: tuple[np.ndarray, tuple]
    _freed_by: str
    site: Any       # where the program allocated it (noted under ASCENTRT_LEAK_CHECK=sites), or None

    @property
    def alive(self) -> bool:
        """False once freed (or its device was reset)."""
        return self._mem is not None

    @property
    def base(self) -> _ByteRange:
        """The allocation itself (slices return their parent)."""
        return self

    @property
    def offset(self) -> int:
        """Offset inside the allocation (always 0 for the allocation itself)."""
        return 0

    def __deepcopy__(self, memo: dict) -> Any:
        """A new allocation of the same size and kind holding these bytes (a synchronous copy);
        InvalidHandleError (107017) once freed."""
        return Links.copy_allocation(self)

    def _revoke(self, by: str = "a device reset") -> None:
        """After a reset's free: tasks queued before it no longer see the bytes (they fail with
        107017 as they run, another device's queued copy too), as if the memory were gone."""
        self._freed_by = by
        late = getattr(self, "_late", None)
        if late is not None:
            self._late = (late[0], ())

    def _view(self) -> np.ndarray | None:
        """The view of the bytes (`_mem`, made first where it is UNVIEWED); None once freed."""
        return self._mem

    def _bytes(self) -> np.ndarray:
        mem = self._mem
        if mem is UNVIEWED:
            mem = self._view()
        if mem is None:
            late = getattr(self, "_late", None)
            if late is not None and _queued_before_free(late[1]):
                return late[0]  # a task queued before a stream-ordered free still sees the bytes
            by = getattr(self, "_freed_by", None)
            if by:
                how = f" by {by}"
            else:
                on = getattr(self, "_freed_on", None)
                how = "" if on is None else _freed_on(on, getattr(self, "_free_site", None))
            raise InvalidHandleError(f"{self.kind} buffer at {self.addr:#x} was freed{how}")
        return mem

    def _freed_again(self) -> InvalidHandleError:
        """The error of a free of a freed allocation (207002): a double free, or one after the
        runtime freed it for the program."""
        by = getattr(self, "_freed_by", None)
        if by:
            text = (f"free of {self.kind} buffer at {self.addr:#x} after {by} freed it (the program "
                    f"had not; a reset frees every buffer of its device, and a buffer needs no free after it)")
        else:
            text = f"double free of {self.kind} buffer at {self.addr:#x}"
        return InvalidHandleError(text, code=ErrorCode.RT_MEMORY_FREE)


class DeviceBuffer(_Allocation):
    """Device memory: `.ptr` (int address), `.nbytes` (rounded to 32), `.device`, `.free()`."""

    __slots__ = ("requested", "_owner", "_block", "_viewed", "_freed_on", "_free_site")
    requested: int
    _owner: Any          # the DeviceAllocator that made it
    _block: Any         # the pool's Block, or None (untyped: the pool imports this module's types)
    _viewed: np.ndarray | None  # a pooled buffer's view, once made (its _mem stays UNVIEWED)
    # Set only by a free on a stream (for the tasks of other streams it leaves without the
    # bytes to say so): that stream, and where the program freed it (when sites are noted).
    _freed_on: Any
    _free_site: Any

    def __init__(self, device: Any, addr: int, nbytes: int, requested: int, mem: np.ndarray,
                 owner: Any, block: Any = None):
        self.device, self.addr, self.nbytes, self.requested = device, addr, nbytes, requested
        self._mem, self._owner, self._block = mem, owner, block  # block: the pool's, or None
        self.site = None
        self._viewed = None

    @property
    def kind(self) -> str:
        """'device'."""
        return "device"

    def _view(self) -> np.ndarray | None:
        """The view of the bytes; None once freed. A pooled buffer's is made from its chunk on
        first use and kept beside `_mem`, which stays UNVIEWED: `_mem` alone says whether the
        buffer is live, so a view made as it is freed never makes it live again, and no lock
        is taken (a view asked for as the buffer is freed is one read just before the free)."""
        mem = self._mem
        if mem is not UNVIEWED:
            return mem
        view = self._viewed
        if view is None:
            chunk = self._block.chunk  # (a block's address never changes, nor its chunk)
            whole = chunk.view
            if whole is None:  # (fake address space: no bytes)
                return None
            off = self.addr - chunk.addr
            view = self._viewed = whole[off:off + self.nbytes]
        return view

    def free(self, stream: Any = None) -> None:
        """Return the memory to its device after `stream`'s queued work (None: after all of it).

        Tasks queued before the free still see the bytes; the host and later tasks do not.
        Freeing twice raises InvalidHandleError (207002); freeing with live DLPack exports
        raises InvalidArgumentError (207002) and frees nothing.
        """
        if self._mem is None:
            raise self._freed_again()
        if _exports:
            check_no_exports(self)
        if stream is not None:
            self._freed_on = stream
            if self._owner.free_sites:
                self._free_site = user_code_site(2)
        if not self._owner.release(self, stream):  # another thread's free got there first
            raise self._freed_again()

    def __repr__(self) -> str:
        state = "" if self.alive else ", freed"
        return f"DeviceBuffer(ptr={self.addr:#x}, nbytes={self.nbytes}, device={self.device.id}{state})"


def _freed_on(stream: Any, site: Any) -> str:
    """How a free on `stream` (at `site`, or None) left the calling thread's task, of another
    stream, without the bytes, and what orders the two (a task queued after a free is refused
    at its submit, so this one came before it)."""
    at = "" if site is None else f" at {site_text(site)}"
    text = f" with free(stream=stream {stream.id}){at}"
    task = Links.current_task()
    user = getattr(task, "stream", None)
    if user is None or user is stream:
        return text
    u, f = user.id, stream.id
    return (f"{text} while stream {u} still had tasks using it, this one among them (a free on a "
            f"stream waits for that stream's work only): free it on stream {u}, or make stream {f} "
            f"wait for stream {u}'s work first (record_stream(buf, stream {u}) before the free, or "
            f"an event recorded on stream {u} that stream {f} waits on)")


def _queued_before_free(waits: tuple) -> bool:
    """Whether the calling executor thread runs a task that was queued before the buffer's
    free (itself, or a task it runs as part of: a collective's step for each rank's task, a
    non-blocking host function for the task that handed it off)."""
    return _task_before_free(Links.current_task(), waits)


def bytes_seen_by(x: Any, task: Any) -> np.ndarray:
    """The bytes (uint8) of buffer or slice `x` as `task` sees them, whichever thread asks (a
    stream's value wait, looked at by the engine): a task queued before a stream-ordered free
    still sees them. Raises InvalidHandleError (107017) once they are gone for it."""
    try:
        return x._bytes()
    except InvalidHandleError:
        base = x.base
        late = getattr(base, "_late", None)
        if late is None or not _task_before_free(task, late[1]):
            raise
        start = x.offset
        return late[0][start:start + x.nbytes]


def _task_before_free(task: Any, waits: tuple) -> bool:
    """Whether `task` (None: no task) was queued before the free whose waits are `waits`."""
    if task is None:
        return False
    for s, last in waits:
        if task.stream is s and task.id <= last:
            return True
        for other, tid in task.acting_for:
            if other is s and tid <= last:
                return True
    # (or on another stream, which the freeing stream waits for before the free: an event
    # wait queued there, as a stream-ordered free of buffers several streams use asks)
    return Links.ordered_before(task, waits)


class HostBuffer(_Allocation):
    """Page-aligned host memory, pinned (mlocked) when permitted: `.pinned` says which."""

    __slots__ = ("pinned", "_handle", "_release")
    pinned: bool
    _handle: Any        # its own mapping's MemHandle, or its Block of the pinned pool (as `_release` takes it)
    _release: Callable[[HostBuffer], bool]

    def __init__(self, addr: int, nbytes: int, pinned: bool, mem: np.ndarray, handle: Any,
                 release: Callable[[HostBuffer], bool]):
        self.device, self.addr, self.nbytes, self.pinned = None, addr, nbytes, pinned
        self._mem, self._handle, self._release = mem, handle, release  # release(buf) -> bool
        self.site = None

    @property
    def kind(self) -> str:
        """'host'."""
        return "host"

    def free(self) -> None:
        """Release the memory; freeing twice raises InvalidHandleError (207002)."""
        if self._mem is None:
            raise self._freed_again()
        if _exports:
            check_no_exports(self)
        if not self._release(self):  # another thread's free got there first
            raise self._freed_again()
        if REGISTRY.observers:
            REGISTRY.freed(self)

    def __repr__(self) -> str:
        return f"HostBuffer(ptr={self.addr:#x}, nbytes={self.nbytes}, pinned={self.pinned})"


class BufferSlice(_ByteRange):
    """Bytes [offset, offset + nbytes) of a device or host buffer."""

    __slots__ = ("_base", "_offset")
    _base: _ByteRange    # the allocation it slices (a DeviceBuffer or HostBuffer)
    _offset: int

    def __init__(self, base: _ByteRange, offset: int, nbytes: int):
        if isinstance(base, BufferSlice):
            offset += base._offset
            base = base._base
        self._base, self._offset, self.nbytes = base, offset, nbytes
        self.addr, self.device = base.addr + offset, base.device  # (fixed for its life)

    @property
    def base(self) -> _ByteRange:
        """The allocation it slices (a DeviceBuffer or HostBuffer)."""
        return self._base

    @property
    def offset(self) -> int:
        """Where the slice starts inside that allocation."""
        return self._offset

    @property
    def kind(self) -> str:
        """'device' or 'host', as the buffer it slices."""
        return self._base.kind

    @property
    def alive(self) -> bool:
        """Whether the sliced buffer is still allocated."""
        return self._base.alive

    def _bytes(self) -> np.ndarray:
        return self._base._bytes()[self._offset:self._offset + self.nbytes]

    def __deepcopy__(self, memo: dict) -> Any:
        """The same range of a deep copy of its buffer (one copy per buffer in one deepcopy)."""
        return BufferSlice(copy.deepcopy(self._base, memo), self._offset, self.nbytes)

    def __repr__(self) -> str:
        return f"BufferSlice({self._base!r}[{self._offset}:{self._offset + self.nbytes}])"


class TypedView:
    """A buffer seen as a typed array: kernels receive `buffer.numpy(dtype, shape)` at run time."""

    __slots__ = ("buffer", "dtype", "shape")

    def __init__(self, buffer: _ByteRange, dtype: np.dtype, shape: _Shape):
        self.buffer, self.dtype, self.shape = buffer, dtype, shape

    @property
    def device(self) -> Any:
        """The device of the underlying buffer."""
        return self.buffer.device

    def numpy(self) -> np.ndarray:
        """The numpy array this view stands for."""
        return self.buffer.numpy(self.dtype, self.shape)

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        """DLPack export with the view's dtype and shape (see _ByteRange.__dlpack__)."""
        return _dlpack(self.buffer.base, self.numpy(), stream, kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        """(kDLCPU, 0), as the buffer's."""
        return KDL_CPU, 0

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict) -> Any:
        """The same view of a deep copy of its buffer (see _ByteRange.__copy__)."""
        return TypedView(copy.deepcopy(self.buffer, memo), self.dtype, self.shape)

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise not_picklable(self)

    def __repr__(self) -> str:
        return f"TypedView({self.buffer!r}, {self.dtype}, {self.shape})"


restore_docstrings(globals())  # (its classes are public: help() shows them compiled too)
