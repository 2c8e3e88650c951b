"""Caller-owned host memory (bytes, bytearray, numpy arrays) registered so its address can be used.

register_host(obj) makes the object's buffer a pageable-host allocation in the address
registry: an int pointer into it then passes the registry's range checks, so copies can read
it and write into it (pyACL's acl.util.bytes_to_ptr / numpy_to_ptr). The registration keeps
the object alive; it is dropped once nothing but the registry refers to the object (checked
whenever something new is registered) or on unregister_host().
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

import numpy as np

from ..handles import Handle
from .. import forksafe
from ..interrupts import raised_by_handler
from ..errors import ErrorCode, InvalidAddressError, InvalidArgumentError
from ..validate import check_flag
from .registry import REGISTRY
from .shared_bytes import interpreter_shares

_lock = forksafe.lock()
# start address -> its registrations, oldest first (a view of an array's start, then the
# array: both stay, as queued or captured work may hold either)
_external: dict[int, list["ExternalHostBuffer"]] = {}


class ExternalHostBuffer(Handle):
    """A registered caller-owned host buffer: `.addr`, `.nbytes`, kind 'pageable'."""

    __slots__ = ("obj", "addr", "nbytes", "hold", "writable", "__weakref__")
    kind = "pageable"
    pinned = False
    device = None

    def __init__(self, obj: Any, addr: int, nbytes: int, writable: bool):
        self.obj, self.addr, self.nbytes, self.writable = obj, addr, nbytes, writable
        # An export pins a bytearray's buffer: it cannot be resized (moved) while registered.
        self.hold = memoryview(obj) if isinstance(obj, bytearray) else None

    @property
    def alive(self) -> bool:
        """Whether the registration still stands."""
        return self.obj is not None

    def _bytes(self) -> np.ndarray:
        """A uint8 view of the object's memory (the view keeps the object alive), writable only
        if the registration is: every path to the bytes (copies, kernels given the pointer,
        acl.util.ptr_to_numpy) goes through here, so none writes into read-only memory."""
        obj = self.obj
        if obj is None:
            raise InvalidArgumentError(f"host memory at {self.addr:#x} is no longer registered")
        if isinstance(obj, bytes):
            # bytes export read-only buffers; pyACL's bytes_to_ptr lets copies write into them.
            raw: Any = (ctypes.c_uint8 * self.nbytes).from_address(self.addr)  # (takes attributes)
            raw._keep = obj
            view = np.ctypeslib.as_array(raw)
        elif isinstance(obj, np.ndarray):
            view = obj.reshape(-1).view(np.uint8)
        else:
            view = np.frombuffer(obj, dtype=np.uint8)
        if view.ctypes.data != self.addr or view.nbytes < self.nbytes:
            # The caller moved or shrank the memory (ndarray.resize with refcheck=False): the
            # registered range is gone, and an int pointer into it would reach freed memory.
            raise InvalidAddressError(f"host memory at {self.addr:#x} moved since it was "
                                      f"registered (the {type(obj).__name__} was resized): "
                                      f"register it again")
        if not self.writable and view.flags.writeable:
            view = view.view()
            view.flags.writeable = False
        return view

    def free(self) -> None:
        """Drop the registration (the object itself belongs to the caller)."""
        unregister_host(self.addr)

    def __repr__(self) -> str:
        return f"ExternalHostBuffer(ptr={self.addr:#x}, nbytes={self.nbytes}, {type(self.obj).__name__})"


def _address(obj: object) -> tuple[int, int]:
    if isinstance(obj, bytes):
        return ctypes.cast(ctypes.c_char_p(obj), ctypes.c_void_p).value or 0, len(obj)
    if isinstance(obj, bytearray):
        return np.frombuffer(obj, dtype=np.uint8).ctypes.data if obj else 0, len(obj)
    if isinstance(obj, np.ndarray):
        if not obj.flags.c_contiguous:
            raise InvalidArgumentError("only C-contiguous arrays can be registered")
        if obj.dtype.hasobject:  # (a copy into it would overwrite object pointers)
            raise InvalidArgumentError(f"an array of Python objects ({obj.dtype}) holds no plain "
                                       f"data to register")
        return obj.ctypes.data, obj.nbytes
    raise InvalidArgumentError(f"register_host takes bytes, bytearray or a numpy array, "
                               f"got {type(obj).__name__}")


def register_host(obj: object, writable: bool | None = None) -> int:
    """Register obj's buffer as pageable host memory; returns its address.

    Copies may write into it when `writable` (default: what the object allows; a bytes
    object only when the caller says so, and never one the interpreter shares: see
    shared_bytes). Memory that already lies inside a live allocation (e.g. a view of device
    memory) is not registered again. Raises InvalidArgumentError for other types,
    non-contiguous arrays, or a writable registration of a shared bytes object.
    """
    if writable is not None:
        writable = check_flag(writable, "writable")
    if writable and isinstance(obj, bytes) and interpreter_shares(obj):
        raise InvalidArgumentError(f"a {len(obj)}-byte bytes object the interpreter shares (a "
                                   f"constant of the code, or a cached or static object) cannot "
                                   f"be written into: use bytes(n) made at run time, or a bytearray")
    return _register(obj, writable)


def register_bytes(obj: bytes) -> int:
    """Register a bytes object as pyACL's bytes_to_ptr does: copies may write into it unless
    the interpreter shares it (then it is read-only); returns its address."""
    return _register(obj, not interpreter_shares(obj))


def _register(obj: object, writable: bool | None) -> int:
    """register_host() once the writable check is done."""
    addr, nbytes = _address(obj)
    _prune()
    if nbytes == 0:
        return addr
    if writable is None:
        writable = isinstance(obj, bytearray) or isinstance(obj, np.ndarray) and obj.flags.writeable
    # Already reachable as asked: inside a live allocation or a registration that holds all of
    # it (and may be written, where this one may). A registration that holds only a part (a
    # small view of the array registered first) does not make the rest reachable: the new one
    # is added beside it (lookups take the one that holds a whole range, writable for a write).
    holder = REGISTRY.find(addr, True, addr + nbytes, bool(writable))
    if holder is not None and addr + nbytes <= holder.addr + holder.nbytes \
            and (not writable or getattr(holder, "writable", True)):
        return addr
    entry = ExternalHostBuffer(obj, addr, nbytes, bool(writable))
    with _lock:
        _external.setdefault(addr, []).append(entry)
    REGISTRY.add(entry)
    if REGISTRY.observers:
        REGISTRY.allocated(entry)
    return addr


def unregister_host(addr: int) -> None:
    """Forget the registration starting at `addr` (the latest, where several start there);
    raises InvalidArgumentError when there is none."""
    if isinstance(addr, bool) or not isinstance(addr, (int, np.integer)):
        # (an int address only: a list is unhashable, 1.0 would match 1)
        raise InvalidArgumentError(f"unregister_host takes the int address register_host "
                                   f"returned, got {type(addr).__name__}")
    addr = int(addr)
    entry = _take_entry(addr, lambda e: True)
    if entry is None:
        raise InvalidArgumentError(f"no registered host memory starts at {addr!r}",
                                   code=ErrorCode.RT_MEMORY_FREE)
    _forget(entry)


def _take_entry(addr: int, pick) -> "ExternalHostBuffer | None":
    """Remove and return the latest registration starting at `addr` that `pick` accepts."""
    with _lock:
        entries = _external.get(addr, [])
        entry = next((e for e in reversed(entries) if pick(e)), None)
        if entry is not None:
            entries.remove(entry)
            if not entries:
                del _external[addr]
    return entry


def _forget(entry: ExternalHostBuffer) -> None:
    REGISTRY.remove(entry)
    if REGISTRY.observers:
        REGISTRY.freed(entry)
    _drop(entry)


def _drop(entry: ExternalHostBuffer) -> None:
    if entry.hold is not None:
        entry.hold.release()
    entry.obj = entry.hold = None


def _prune() -> None:
    """Drop registrations of objects nothing else refers to (ours are the only references)."""
    with _lock:
        # getrefcount sees the entry's attribute, its own argument and the entry's export.
        dead = [e for at in _external.values() for e in at
                if sys.getrefcount(e.obj) <= 2 + (e.hold is not None)]
        for entry in dead:
            at = _external[entry.addr]
            at.remove(entry)
            if not at:
                del _external[entry.addr]
    for entry in dead:
        _forget(entry)


def registered_count() -> int:
    """How many caller-owned buffers are registered now."""
    _prune()
    return sum(len(at) for at in _external.values())


def from_dlpack(obj: Any) -> np.ndarray:
    """The memory of a DLPack exporter (a torch CPU tensor, a numpy array, ...) as a
    zero-copy numpy array, registered as pageable host memory: its address then passes every
    range check, as numpy_to_ptr memory does. Raises InvalidArgumentError (100000) for memory
    the host cannot reach, a dtype numpy cannot hold, or non-contiguous strides."""
    try:
        array = np.from_dlpack(obj)
    except Exception as exc:  # (whatever the exporter or numpy raise: BufferError, TypeError, ...)
        if raised_by_handler(exc):  # (the program's own handler raised it: it comes out as it is)
            raise
        raise InvalidArgumentError(f"from_dlpack: {type(obj).__name__} cannot be taken as host "
                                   f"memory ({exc})") from None
    if not array.flags.c_contiguous:
        raise InvalidArgumentError(f"from_dlpack: the {type(obj).__name__}'s memory is not "
                                   f"contiguous (strides {array.strides}); make it contiguous first")
    register_host(array)
    return array


# Host memory registered by address (acl.rt.host_register): start -> the array over it, held
# here so that the registration stands until unregister_mapped, whoever else refers to it.
_mapped: dict[int, np.ndarray] = {}
PAGE = 4096  # aclrtHostRegister takes 4 KiB-aligned memory


def _mapped_writable(addr: int, nbytes: int) -> bool:
    """Whether [addr, addr + nbytes) lies in this process's readable and writable mappings
    (Linux's /proc/self/maps; elsewhere, nothing can be checked: no)."""
    try:
        with open("/proc/self/maps") as maps:
            lines = maps.readlines()
    except OSError:
        return False
    at, end = addr, addr + nbytes
    for line in lines:  # (sorted by address, adjacent mappings may continue the range)
        span, perms = line.split(None, 2)[:2]
        lo, hi = (int(x, 16) for x in span.split("-"))
        if lo <= at < hi and perms.startswith("rw"):
            at = hi
            if at >= end:
                return True
    return False


def register_mapped(addr: int, nbytes: int) -> None:
    """Register `nbytes` of the caller's host memory at `addr` (4 KiB aligned, mapped readable
    and writable in this process) until unregister_mapped(addr): kernels and copies may then
    take pointers into it. Raises InvalidArgumentError for an unaligned, unmapped or
    read-only range, device memory, or a range that overlaps one registered already or the
    runtime's own host memory."""
    if addr <= 0 or addr % PAGE:
        raise InvalidArgumentError(f"host memory to register must start 4 KiB aligned, got {addr:#x}")
    if not 0 < nbytes < 1 << 62:
        raise InvalidArgumentError(f"size must be > 0, got {nbytes}")
    end = addr + nbytes
    if REGISTRY.in_device_memory(addr, end):
        # (mapped readable and writable too: registered as host memory, a host copy into it
        # would write a device buffer's bytes)
        raise InvalidAddressError(f"{nbytes} bytes at {addr:#x} reach device memory: host_register "
                                  f"takes host memory of your own")
    if not _mapped_writable(addr, nbytes):
        raise InvalidAddressError(f"{nbytes} bytes at {addr:#x} are not host memory this process "
                                  f"has mapped readable and writable")
    # The runtime's own host memory (pinned, from malloc_host) is page-locked and reachable
    # already; a pool's free memory goes to its next owner, or back to the OS: registered as
    # the caller's, a copy into it would write another buffer's bytes, or unmapped memory.
    owned = next((a for a in REGISTRY.live() if a.addr < end and addr < a.addr + max(a.nbytes, 1)
                  and not isinstance(a, ExternalHostBuffer)), None)
    if owned is not None or REGISTRY.pooled_in(addr, end):
        held = f"a live {owned.kind} allocation" if owned is not None else "a pool of its own"
        raise InvalidAddressError(f"{nbytes} bytes at {addr:#x} reach memory the runtime holds "
                                  f"({held}): host_register takes host memory of your own")
    array = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(addr))
    entry = ExternalHostBuffer(array, addr, nbytes, True)
    with _lock:
        # (as CUDA's cudaErrorHostMemoryAlreadyRegistered: each page is registered once, so
        # that one unregister cannot take away what another registration still covers)
        for at, registered in _mapped.items():
            if at < end and addr < at + registered.nbytes:
                raise InvalidArgumentError(f"host memory at {addr:#x} overlaps the "
                                           f"{registered.nbytes} bytes registered at {at:#x} already")
        _mapped[addr] = array
        _external.setdefault(addr, []).append(entry)
    # (its own entry, even where a pageable registration reaches the range: unregistering
    # that one leaves this one standing)
    REGISTRY.add(entry)
    if REGISTRY.observers:
        REGISTRY.allocated(entry)


def unregister_mapped(addr: int) -> None:
    """Undo register_mapped(addr); InvalidArgumentError when nothing was registered there."""
    with _lock:
        array = _mapped.pop(addr, None)
    entry = _take_entry(addr, lambda e: e.obj is array) if array is not None else None
    if array is None:
        raise InvalidArgumentError(f"no host memory registered at {addr:#x}")
    if entry is not None:
        _forget(entry)


def mapped_entry(addr: int) -> "ExternalHostBuffer | None":
    """The host_register registration that contains `addr`, or None."""
    if not _mapped:  # (the common case: nothing registered, no lookup)
        return None
    with _lock:  # (registrations never overlap: the one whose range holds addr, if any)
        for at, array in _mapped.items():
            if at <= addr < at + array.nbytes:
                return next((e for e in _external.get(at, ()) if e.obj is array), None)
    return None
