"""Copies and fills between device buffers, pinned host buffers and numpy arrays.

Every operand is checked against the live allocations first; the work itself is an
operation for the device's backend (addresses and sizes), run on a copy engine for the
asynchronous calls and on the calling thread for the synchronous ones.
"""

from __future__ import annotations

import contextlib
import enum
from typing import Any

import numpy as np

from .backends.base import PlainOp
from .engine import Hooks, Task, check_sync_allowed
from .engine.task import COPY, MEMSET
from . import config, interrupts
from .errors import ErrorCode, InvalidArgumentError, MemcpyKindWarning, NotSupportedError, warn_at_caller
from .validate import check_size, enum_member
from .memory.buffer import UNVIEWED, BufferSlice, DeviceBuffer, HostBuffer, TypedView, task_view
from .memory.external import from_dlpack
from .memory.inflight import ACTIVE as _HOST_USES, DEFERRED as _DEFERRED
from .memory.inflight import number as _use_number, run_deferred_releases
from .memory.host import malloc_host
from .memory.links import Links, register as register_links
from .memory.registry import REGISTRY
from .stream import Stream, resolve_stream

# A synchronous operation registers what it uses (see memory/inflight.py) with _register(use)
# inside the try whose finally calls _end_use(use). (Bound once: ~30 ns a call.)
_register, _unregister = _HOST_USES.append, _HOST_USES.remove

# A copy operand: a device or host buffer, a slice, a typed view, a numpy array, bytes-like
# memory, a DLPack exporter or an int pointer (told apart and checked at run time: _operand).
_Memory = Any


class MemcpyKind(enum.IntEnum):
    """Copy directions, numbered as CANN's aclrtMemcpyKind."""

    HOST_TO_HOST = 0
    HOST_TO_DEVICE = 1
    DEVICE_TO_HOST = 2
    DEVICE_TO_DEVICE = 3
    DEFAULT = 4  # inferred from the operands


class _Operand:
    """A resolved copy operand: its bytes and address, where they live, whether host memory is pinned."""

    __slots__ = ("data", "addr", "where", "pinned", "device", "owner")

    def __init__(self, data: np.ndarray, addr: int, where: str, pinned: bool, device, owner=None):
        self.data, self.addr, self.where, self.pinned, self.device = data, addr, where, pinned, device
        # The allocation the bytes belong to (device or pinned host memory, or a registration):
        # checked again when queued work runs, and what a captured graph checks at each replay.
        self.owner = owner


def _operand(x, nbytes: int | None, writable: bool, role: str) -> _Operand:
    """Resolve a buffer, slice, numpy array or int pointer, checking it is live and big enough."""
    if isinstance(x, (DeviceBuffer, HostBuffer, BufferSlice)):
        data = x._bytes()
        base: Any = x.base  # a DeviceBuffer, or a HostBuffer (which has .pinned) when kind is "host"
        return _Operand(data, x.addr, base.kind, base.kind == "host" and base.pinned, base.device,
                        base)
    if isinstance(x, np.ndarray):
        if not x.flags.c_contiguous:
            raise InvalidArgumentError(f"{role} array must be C-contiguous")
        if x.dtype.hasobject:  # (its bytes are object pointers: nothing to copy, nor to overwrite)
            raise InvalidArgumentError(f"{role} array holds Python objects ({x.dtype}): copies "
                                       f"move plain data")
        if writable and not x.flags.writeable:
            raise InvalidArgumentError(f"{role} array is read-only")
        data = x.reshape(-1).view(np.uint8)
        addr = x.ctypes.data
        alloc = REGISTRY.find(addr) if x.nbytes else None
        if alloc is not None and addr + x.nbytes <= alloc.addr + alloc.nbytes:
            return _Operand(data, addr, alloc.kind, alloc.kind == "host" and alloc.pinned, alloc.device,
                            alloc)
        return _Operand(data, addr, "pageable", False, None)
    if isinstance(x, (bytes, bytearray, memoryview)):
        view = memoryview(x)
        if writable and view.readonly:
            raise InvalidArgumentError(f"{role} is read-only memory")
        if not view.c_contiguous:
            raise InvalidArgumentError(f"{role} memory must be C-contiguous")
        data = np.frombuffer(view.cast("B") if view.ndim != 1 or view.format != "B" else view,
                             dtype=np.uint8)
        return _Operand(data, data.ctypes.data, "pageable", False, None)
    if type(x) is int:
        if nbytes is None:
            raise InvalidArgumentError(f"{role} is a raw pointer: give nbytes")
        alloc, off = REGISTRY.resolve(x, nbytes, writable)
        if writable and not getattr(alloc, "writable", True):
            raise InvalidArgumentError(f"{role} {x:#x} is read-only host memory (a bytes object "
                                       f"registered read-only, or one the interpreter shares: a "
                                       f"constant of the code, a cached 0/1-byte object): copy "
                                       f"into a bytes(n) made at run time, or a bytearray",
                                       code=ErrorCode.RT_PARAM_INVALID)
        return _Operand(alloc._bytes()[off:off + nbytes], x, alloc.kind,
                        alloc.kind == "host" and alloc.pinned, alloc.device, alloc)
    if isinstance(x, TypedView):  # the bytes the view covers (not a DLPack export: ours)
        buf = x.buffer
        base = buf.base
        data = task_view(x).reshape(-1).view(np.uint8)
        return _Operand(data, buf.addr, base.kind, base.kind == "host" and base.pinned,
                        base.device, base)
    if hasattr(x, "__dlpack__"):  # a torch CPU tensor and the like: its memory, zero-copy
        return _operand(from_dlpack(x), nbytes, writable, role)
    raise InvalidArgumentError(f"{role} must be a buffer, slice, numpy array, DLPack exporter "
                               f"or pointer, got {type(x).__name__}")


# The directions by their number, (dst on a device) + 2 * (src on a device): a tuple read,
# where building the member by value (MemcpyKind(n)) costs ~0.4 us, a tenth of a small copy.
_DIRECTIONS = (MemcpyKind.HOST_TO_HOST, MemcpyKind.HOST_TO_DEVICE, MemcpyKind.DEVICE_TO_HOST,
               MemcpyKind.DEVICE_TO_DEVICE)


_DIRECTION_NAMES = tuple(d.name.lower() for d in _DIRECTIONS)  # (a member's .name costs ~0.3 us)
_KIND_TYPES = (int, MemcpyKind)
_DEFAULT_KIND = int(MemcpyKind.DEFAULT)


def _direction(dst: _Operand, src: _Operand) -> MemcpyKind:
    return _DIRECTIONS[(dst.where == "device") + 2 * (src.where == "device")]


def _prepare(dst, src, nbytes, kind) -> tuple[int, _Operand, _Operand, MemcpyKind]:
    if nbytes is not None:
        nbytes = check_size(nbytes, allow_zero=True)
    d = _operand(dst, nbytes, True, "dst")
    s = _operand(src, nbytes, False, "src")
    n = s.data.nbytes if nbytes is None else nbytes
    if n > s.data.nbytes:
        raise InvalidArgumentError(f"copy of {n} bytes reads past the end of src ({s.data.nbytes} bytes)")
    if n > d.data.nbytes:
        hint = f" (src is {s.owner.requested} bytes as asked for, rounded to {n}: pass nbytes)" \
            if nbytes is None and getattr(s.owner, "requested", n) < n else ""
        raise InvalidArgumentError(f"copy of {n} bytes does not fit dst ({d.data.nbytes} bytes){hint}")
    direction = _direction(d, s)
    _check_kind(kind, direction)
    return n, d, s, direction


def copy_direction(dst: _Memory, src: _Memory, nbytes: int | None = None) -> tuple[str, int]:
    """The direction ("host_to_device", ...) and bytes of a copy src -> dst of `nbytes` (None:
    all of src), found as memcpy finds them (what a profile counts of a synchronous copy);
    raises as memcpy does for operands it refuses."""
    dc, sc = dst.__class__, src.__class__
    if dc in _WHOLE and sc in _WHOLE:  # (the common calls, without building operands)
        return _DIRECTION_NAMES[(dc is DeviceBuffer) + 2 * (sc is DeviceBuffer)], \
            nbytes if type(nbytes) is int else src.nbytes
    if dc is int and sc is int and type(nbytes) is int:
        d, s = REGISTRY.find(dst, wait=False), REGISTRY.find(src, wait=False)
        if d is not None and s is not None:
            return _DIRECTION_NAMES[(d.kind == "device") + 2 * (s.kind == "device")], nbytes
    n, _, _, direction = _prepare(dst, src, nbytes, None)
    return _DIRECTION_NAMES[_DIRECTIONS.index(direction)], n


def check_copy(dst: _Memory, src: _Memory, nbytes: int | None = None) -> int:
    """The bytes a copy src -> dst of `nbytes` (None: all of src) moves, checked as
    memcpy_async checks it (a graph node is checked when it is added, not when it runs)."""
    return _prepare(dst, src, nbytes, None)[0]


def _check_kind(kind, direction: MemcpyKind) -> None:
    """An explicit kind is DEFAULT or the direction the operands make.

    As on CANN, the addresses decide: a kind that disagrees is a MemcpyKindWarning (once per
    call site) and the copy goes on, or an error (107016) with ASCENTRT_STRICT_MEMCPY_KIND=1.
    """
    if kind is None or kind.__class__ in _KIND_TYPES and (kind == direction or kind == _DEFAULT_KIND):
        return  # (the common calls, without building a member: ~0.4 us)
    member = enum_member(MemcpyKind, kind)
    if member is None:  # (a list raised a bare TypeError; 1.0 passed as 1)
        raise InvalidArgumentError(f"unknown memcpy kind {kind!r:.40}")
    kind = member
    if kind != MemcpyKind.DEFAULT and kind != direction:
        message = (f"memcpy kind {kind.name} does not match the operands, which make it "
                   f"{direction.name}")
        if config.get("ASCENTRT_STRICT_MEMCPY_KIND"):
            raise InvalidArgumentError(message, code=ErrorCode.RT_INVALID_MEMORY_TYPE)
        warn_at_caller(f"{message}: copying {direction.name} (set ASCENTRT_STRICT_MEMCPY_KIND=1 "
                       f"to refuse)", MemcpyKindWarning)


def _check_peer(d: _Operand, s: _Operand, runner) -> None:
    """A copy between two devices' memory runs on one of them (`runner`: the stream's device,
    or None for a synchronous copy: the current device when it is one of the two), which needs
    peer access to the other (RT_FEATURE_NOT_SUPPORT otherwise, nothing copied)."""
    a, b = d.device, s.device
    if a is None or b is None or a is b:
        return
    if runner is None:
        runner = Links.current_device()
        if runner is not a and runner is not b:
            runner = a
    elif runner is not a and runner is not b:
        raise InvalidArgumentError(f"a copy between device {a.id} and device {b.id} memory on a "
                                   f"stream of device {runner.id}", code=ErrorCode.RT_STREAM_CONTEXT)
    other = b if runner is a else a
    if other.id not in runner._peers:
        raise InvalidArgumentError(f"a copy between device {a.id} and device {b.id} memory needs "
                                   f"peer access: call Device({runner.id}).enable_peer_access("
                                   f"{other.id}) first", code=ErrorCode.RT_FEATURE_NOT_SUPPORT)


def _backend_of(*ops: _Operand):
    """The backend that runs a copy between these operands: a device's, else the host's."""
    for op in ops:
        if op.device is not None:
            return op.device._backend
    return Links.host_backend()


def _still_live(*ops: _Operand):
    """The run-time check of a queued copy or fill: its allocations are still its own.

    The same rule as a kernel's buffer arguments: a buffer freed after the task was queued
    raises InvalidHandleError when the task runs (unless the free was stream-ordered behind
    it), instead of writing into memory that may have a new owner.
    """
    owners = tuple(op.owner for op in ops if op.owner is not None)
    if not owners:
        return None

    def resolve(args):
        for buf in owners:
            buf._bytes()
        return args
    return resolve


def _copy_op(n: int, d: _Operand, s: _Operand):
    """The backend operation copying n bytes from s to d (both kept alive until it ran, with
    the allocations they are in: a graph that captures it checks those)."""
    return (d.addr, n, s.addr, n, n, 1), (d.data, s.data, d.owner, s.owner)


_WHOLE = (DeviceBuffer, HostBuffer)
_SYNC_COPY = "a synchronous copy"  # (what the sanitizer says touched the bytes)


def _host_touches(what: str, written: tuple, read: tuple = (0, 0), rows: tuple = (None, None)) -> None:
    """Tell the registry's observers (the race sanitizer) that the calling host thread writes
    the (address, nbytes) span `written` and reads `read` now: a synchronous copy or fill
    (`what`) runs on it, not on a stream. `rows`: (pitch, width) of each span's rows when
    only those are touched (a pitched copy), else None."""
    for (addr, n), write, pitched in ((written, True, rows[0]), (read, False, rows[1])):
        alloc = REGISTRY.find(addr) if n else None
        if alloc is not None:
            off = addr - alloc.addr
            REGISTRY.host_accessed(alloc, off, min(off + n, alloc.nbytes), what, write, pitched)


def memcpy(dst: _Memory, src: _Memory, nbytes: int | None = None, kind: MemcpyKind | int | None = None) -> None:
    """Copy now, on the calling thread; nbytes defaults to all of src. Raises before touching memory."""
    if Hooks.sync_guards:
        check_sync_allowed("a synchronous memcpy")
    dc, sc = dst.__class__, src.__class__
    if dc in _WHOLE and sc in _WHOLE:
        # A free while it runs leaves the memory to it until it ends (see memory/inflight.py):
        # the buffers are registered before they are checked live.
        use = (dst, src, _use_number())
        try:
            _register(use)
            dm, sm = dst._mem, src._mem
            if dm is UNVIEWED:  # (a pooled buffer's first use: its view is made now)
                dm = dst._view()
            if sm is UNVIEWED:
                sm = src._view()
            if kind is None and type(nbytes) is int \
                    and 0 < nbytes <= dst.nbytes and nbytes <= src.nbytes \
                    and dm is not None and sm is not None \
                    and (dst.device is src.device or dc is not sc):
                # Two live buffers and a byte count that fits both (the common call): the
                # checks _prepare makes, without building operands.
                if REGISTRY.observers:  # (whole buffers: they are the allocations)
                    REGISTRY.host_accessed(dst, 0, nbytes, _SYNC_COPY, True)
                    REGISTRY.host_accessed(src, 0, nbytes, _SYNC_COPY, False)
                device = dst.device if dc is DeviceBuffer else src.device
                backend = device._backend if device is not None else Links.host_backend()
                # (positional: keywords cost a call ~200 ns more, half of a 4 KiB memmove)
                backend.execute(PlainOp(COPY, None, (dst.addr, nbytes, src.addr, nbytes, nbytes, 1),
                                        None, (dm, sm), nbytes))
                return
        finally:
            _end_use(use)
    _copy_checked(dst, src, nbytes, kind)


def _copy_allocation(buf: DeviceBuffer | HostBuffer) -> DeviceBuffer | HostBuffer:
    """copy.deepcopy of a buffer: a new allocation of its size and kind (device memory from
    the same device and pool; host memory pinned as malloc_host makes it) that a synchronous
    memcpy fills with its bytes. Raises InvalidHandleError (107017) for a freed buffer."""
    buf._bytes()  # (a freed one is refused with its code, before anything is allocated)
    new = buf._owner.malloc(buf.requested) if type(buf) is DeviceBuffer else malloc_host(buf.nbytes)
    try:
        memcpy(new, buf, buf.nbytes)
    except BaseException:
        new.free()
        raise
    return new


def _copy_checked(dst: _Memory, src: _Memory, nbytes: Any, kind: Any) -> None:
    """memcpy() of anything but two whole buffers (the allocations it finds are registered
    as used until it ends: see memory/inflight.py)."""
    if type(dst) is int and type(src) is int:
        d, s = REGISTRY.find(dst), REGISTRY.find(src)
        use = (d, s, _use_number())
        try:
            _register(use)  # (before they are checked live)
            if _copy_pointers(dst, src, nbytes, kind, d, s):
                return
        finally:
            _end_use(use)
    n, d, s, _ = _prepare(dst, src, nbytes, kind)
    _check_peer(d, s, None)
    with _using(d, s):
        if n:
            if REGISTRY.observers:
                _host_touches(_SYNC_COPY, (d.addr, n), (s.addr, n))
            args, keep = _copy_op(n, d, s)
            _backend_of(d, s).execute(PlainOp(COPY, None, args, None, keep, n))


@contextlib.contextmanager
def _using(*ops: _Operand):
    """Register the allocations of checked operands as used by a synchronous operation until
    the block ends, and check them again: one freed between the two checks is refused here,
    one freed after is kept until the block ends (see memory/inflight.py)."""
    owners = tuple(op.owner for op in ops if op.owner is not None)
    use = (*owners, _use_number())
    try:
        _register(use)
        for owner in owners:
            owner._bytes()  # (raises if freed)
        yield
    finally:
        _end_use(use)


def _end_use(use: tuple) -> None:
    """The synchronous operation registered as `use` ended: forget it, and give back what was
    freed meanwhile."""
    try:
        _unregister(use)
    except ValueError:
        pass  # (a Ctrl-C came before it was registered)
    if _DEFERRED:
        run_deferred_releases()


def _copy_pointers(dst: int, src: int, nbytes: Any, kind: Any, d: Any, s: Any) -> bool:
    """memcpy() between two int pointers inside live device or pinned host buffers (pyACL's
    common call; d and s: the allocations found for them, registered as used), checked as
    _prepare checks them without building operands; False where
    anything else holds (a registration, another device, a kind that needs a word): the
    general path then checks and says why."""
    if type(nbytes) is not int or nbytes <= 0:
        return False
    dc, sc = d.__class__, s.__class__
    if dc not in _WHOLE or sc not in _WHOLE:
        return False
    dm, sm = d._mem, s._mem
    if dm is UNVIEWED:  # (a pooled buffer's first use: its view is made now)
        dm = d._view()
    if sm is UNVIEWED:
        sm = s._view()
    if dm is None or sm is None \
            or dst + nbytes > d.addr + d.nbytes or src + nbytes > s.addr + s.nbytes \
            or not (d.device is s.device or dc is not sc):
        return False
    # (ints, not members: reading MemcpyKind.DEFAULT costs ~0.1 us; a mismatch warns or fails
    # on the general path, which also checks a float or a numpy int)
    if kind is not None and (kind.__class__ not in _KIND_TYPES or kind != _DEFAULT_KIND
                             and kind != (dc is DeviceBuffer) + 2 * (sc is DeviceBuffer)):
        return False
    if REGISTRY.observers:
        _host_touches(_SYNC_COPY, (dst, nbytes), (src, nbytes))
    device = d.device if dc is DeviceBuffer else s.device
    backend = device._backend if device is not None else Links.host_backend()
    backend.execute(PlainOp(COPY, None, (dst, nbytes, src, nbytes, nbytes, 1), None,
                            (dm, sm, d, s), nbytes))
    return True


def memcpy_async(dst: _Memory, src: _Memory, nbytes: int | None = None, *, stream: Stream | None = None,
                 kind: MemcpyKind | int | None = None, host_to_host: bool = True) -> None:
    """Copy after the stream's earlier work, on a copy engine.

    With pinned or device memory on both sides the call returns at once; with pageable host
    memory (a plain numpy array) it returns only once the copy is done. host_to_host=False
    refuses (207000) a copy whose addresses are both host memory, whatever `kind` says (as
    pyACL does with the host apart from the device).
    """
    stream = resolve_stream(stream)
    n, do, so, direction = _prepare(dst, src, nbytes, kind)
    if not host_to_host and direction == MemcpyKind.HOST_TO_HOST:
        _refuse_host_to_host()
    _check_peer(do, so, stream.device)
    _check_stream_device(stream, do, so)
    args, keep = _copy_op(n, do, so)
    task = Task(COPY, None, args, _DIRECTION_NAMES[direction])
    task.keep = keep
    task.resolve = _still_live(do, so)
    task.nbytes = n
    _submit_maybe_sync(stream, task, do.where == "pageable" or so.where == "pageable",
                       "memcpy_async", _no_copy(args))


def _no_copy(args: tuple) -> tuple:
    """A copy's arguments (dst, dpitch, src, spitch, width, height) with nothing to move."""
    return (args[0], 0, args[2], 0, 0, 0)


def _refuse_host_to_host() -> None:
    raise NotSupportedError("an asynchronous host-to-host copy is not supported with the host apart "
                            "from the device (ACL_HOST run mode): use memcpy")


def _check_stream_device(stream, *ops: _Operand) -> None:
    """Device memory is copied or set on a stream of its own device (a copy between two
    devices' memory: on either, which _check_peer checks); RT_STREAM_CONTEXT otherwise."""
    if len(ops) == 2 and ops[0].where == ops[1].where == "device":
        return
    for op in ops:
        if op.device is not None and op.device is not stream.device:
            raise InvalidArgumentError(f"device {op.device.id} memory on a stream of device "
                                       f"{stream.device.id}", code=ErrorCode.RT_STREAM_CONTEXT)


def _submit_maybe_sync(stream, task: Task, pageable: bool, call: str, nothing: tuple) -> None:
    """Submit `task` (of the program's `call`); with pageable host memory, return only once it
    ran. A wait that fails or is interrupted before the task started withdraws it (it runs on
    `nothing`, its arguments with no byte to move): a call that raised moved no byte, and none
    moves later into memory the program took back."""
    if not pageable:
        stream._submit(task)
        return
    check_sync_allowed(f"{task.name} with pageable host memory (synchronous)")
    # Pageable host memory may change or vanish once we return: finish the copy first.
    ev = stream.device.internal_event()
    stream._submit(task)
    if stream._capture is not None:
        return
    what = f"{call} ({task.name}, {task.nbytes} bytes, pageable host memory) on stream {stream.id}"
    try:
        ev.record(stream)
        ev._synchronize(None, what)
    except BaseException:
        if not stream._withdraw(task, nothing):
            # It started (or ran, or its stream dropped it): one that runs must end before the
            # call returns, the memory the program holds being the copy's until then.
            _wait_out(ev, what)
        raise


def _wait_out(ev, what: str) -> None:
    """Wait until the work before `ev`'s record has ended, whatever cuts the wait: a cut (a
    second Ctrl-C, a handler's repeating timer) waits on, and the last one comes out once the
    work is over (the first, the call's, as its context); the work's own failure, or its
    stream dropping it, ends the wait (the first error is the call's)."""
    cut: BaseException | None = None
    while True:
        try:
            ev._synchronize(None, what)
            break
        except BaseException as exc:
            if not (isinstance(exc, KeyboardInterrupt) or interrupts.raised_by_handler(exc)):
                break
            cut = exc
    if cut is not None:
        raise cut


def _check_fill(value) -> int:
    if type(value) is not int and not isinstance(value, np.integer) or not 0 <= int(value) <= 255:
        raise InvalidArgumentError(f"memset value must be a byte (0..255), got {value!r}")
    return int(value)


def _fill_target(dst, value, nbytes) -> tuple[_Operand, int, int]:
    """The checked destination, byte value and byte count of a memset."""
    value = _check_fill(value)
    if nbytes is not None:
        nbytes = check_size(nbytes, allow_zero=True)
    op = _operand(dst, nbytes, True, "dst")
    n = op.data.nbytes if nbytes is None else nbytes
    if n > op.data.nbytes:
        raise InvalidArgumentError(f"memset of {n} bytes runs past the end of dst ({op.data.nbytes} bytes)")
    return op, value, n


def check_fill(dst: _Memory, value: int, nbytes: int | None = None) -> int:
    """The bytes a memset of dst to `value` sets, checked as memset_async checks it."""
    return _fill_target(dst, value, nbytes)[2]


def memset(dst: _Memory, value: int, nbytes: int | None = None) -> None:
    """Set `nbytes` bytes (default: all) of dst to `value`, now."""
    check_sync_allowed("a synchronous memset")
    op, value, n = _fill_target(dst, value, nbytes)
    with _using(op):
        if n:
            if REGISTRY.observers:
                _host_touches("a synchronous memset", (op.addr, n))
            _backend_of(op).execute(PlainOp(MEMSET, None, (op.addr, value, n), None, op.data, n))


def memset_async(dst: _Memory, value: int, nbytes: int | None = None, *, stream: Stream | None = None) -> None:
    """Set bytes of dst to `value` after the stream's earlier work."""
    stream = resolve_stream(stream)
    op, value, n = _fill_target(dst, value, nbytes)
    _check_stream_device(stream, op)
    task = Task(MEMSET, None, (op.addr, value, n), "memset")
    task.keep = (op.data, op.owner)  # (bytes kept alive, and the allocation they are in)
    task.resolve = _still_live(op)
    task.nbytes = n
    _submit_maybe_sync(stream, task, op.where == "pageable", "memset_async", (op.addr, value, 0))


def _check_pitched(data: np.ndarray, pitch: int, width: int, height: int, role: str) -> None:
    need = (height - 1) * pitch + width if height else 0
    if need > data.nbytes:
        raise InvalidArgumentError(f"{role}: {height} rows of pitch {pitch} and width {width} need "
                                   f"{need} bytes; it has {data.nbytes}")


def _prepare_2d(dst, dpitch, src, spitch, width, height, kind):
    dpitch, spitch, width, height = (  # (as plain ints: numpy integers are accepted too)
        check_size(v, name, allow_zero=True)
        for name, v in (("dpitch", dpitch), ("spitch", spitch), ("width", width), ("height", height)))
    if width > dpitch or width > spitch:
        raise InvalidArgumentError(f"width {width} exceeds a pitch (dpitch {dpitch}, spitch {spitch})")
    d = _operand(dst, None if type(dst) is not int else (height - 1) * dpitch + width if height else 0,
                 True, "dst")
    s = _operand(src, None if type(src) is not int else (height - 1) * spitch + width if height else 0,
                 False, "src")
    _check_kind(kind, _direction(d, s))
    _check_pitched(d.data, dpitch, width, height, "dst")
    _check_pitched(s.data, spitch, width, height, "src")
    return (d.addr, dpitch, s.addr, spitch, width, height), d, s


def memcpy2d(dst: _Memory, dpitch: int, src: _Memory, spitch: int, width: int, height: int,
             kind: MemcpyKind | int | None = None) -> None:
    """Copy `height` rows of `width` bytes between pitched layouts, now."""
    check_sync_allowed("a synchronous memcpy2d")
    args, d, s = _prepare_2d(dst, dpitch, src, spitch, width, height, kind)
    _check_peer(d, s, None)
    with _using(d, s):
        if width and height:
            if REGISTRY.observers:  # (the rows only: not the gaps between them)
                _host_touches(_SYNC_COPY, (d.addr, (height - 1) * dpitch + width),
                              (s.addr, (height - 1) * spitch + width),
                              ((dpitch, width) if dpitch != width else None,
                               (spitch, width) if spitch != width else None))
            _backend_of(d, s).execute(PlainOp(COPY, None, args, keep=(d.data, s.data),
                                              nbytes=width * height))


def memcpy2d_async(dst: _Memory, dpitch: int, src: _Memory, spitch: int, width: int, height: int, *,
                   stream: Stream | None = None, kind: MemcpyKind | int | None = None,
                   host_to_host: bool = True) -> None:
    """Pitched copy after the stream's earlier work (returns at once unless memory is pageable);
    host_to_host as memcpy_async's."""
    stream = resolve_stream(stream)
    args, do, so = _prepare_2d(dst, dpitch, src, spitch, width, height, kind)
    if not host_to_host and do.where != "device" and so.where != "device":
        _refuse_host_to_host()
    _check_peer(do, so, stream.device)
    _check_stream_device(stream, do, so)
    # (named by its direction too: a replayed graph's lane is cut where the direction changes,
    # as for plain copies, whose names are their directions)
    task = Task(COPY, None, args, "memcpy2d " + _DIRECTION_NAMES[(do.where == "device") + 2 * (so.where == "device")])
    task.keep = (do.data, so.data, do.owner, so.owner)
    task.resolve = _still_live(do, so)
    task.nbytes = width * height
    _submit_maybe_sync(stream, task, do.where == "pageable" or so.where == "pageable",
                       "memcpy2d_async", _no_copy(args))


interrupts.protect(_end_use)  # (a Ctrl-C there would leave the operation registered for good)
# (a signal between the submit and the wait's try would let the call raise with its copy
# queued, which then writes into memory the program took back: it comes in the wait instead,
# which stays one a signal may end, the copy then withdrawn or waited out)
interrupts.protect(_submit_maybe_sync, _wait_out)
register_links(copy_allocation=_copy_allocation)
