"""The CPU backend: memory is private anonymous mappings, executors are threads, kernels are
Python callables, copies and fills are libc calls (they release the GIL, so executors overlap;
a small copy is a memmove the interpreter makes, cheaper to call)."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import sys
import threading
import time
from typing import Any, cast

import numpy as np

from .base import COPY, Backend, BackendProperties, MemHandle, Op

_PAGE = mmap.PAGESIZE
_MADV_DONTNEED = 4
# (this process's own symbols, libc's among them: ctypes.util.find_library("c") ran ldconfig
# in a child process, ~7 ms, and its imports took ~15 ms, in every process that imports ascentrt)
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.munlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
# libc's own, prototyped and returning nothing: ~15% less per call than ctypes.memmove's
# (which builds a pointer object for its result); foreign calls release the GIL.
_memmove = _libc.memmove
_memmove.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
_memmove.restype = None
# Every address of this process as one memoryview: a small copy is a slice assignment (a
# memmove), about 3000 instructions less than a foreign call's argument conversions. It keeps
# the GIL, so copies past _INLINE_COPY_MAX stay foreign calls, which let executors overlap.
_ADDRESS_SPACE = memoryview((ctypes.c_char * sys.maxsize).from_address(0)).cast("B")
_INLINE_COPY_MAX = 64 << 10
_memset = _libc.memset
_memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
_memset.restype = None


# MAP_NORESERVE: Python 3.11 does not export it; 0x4000 is its value on Linux (x86, arm).
_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000 if sys.platform == "linux" else 0)


# Locking a mapping makes the kernel back every page at once: past the RAM the host has free, it
# would not fail, the OOM killer would end this process (or another). cudaHostAlloc refuses
# what it cannot pin; so does this, for sizes where it could matter.
_CHECKED_FROM = 64 << 20


def _lockable_bytes() -> int:
    """The host RAM a pinned allocation may take now: what the kernel says is available, less
    a margin for everything else (a twentieth of the RAM, at least 256 MiB)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")  # (free pages only)
    try:
        with open("/proc/meminfo", "rb") as f:  # (Linux: free plus reclaimable cache)
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    return available - max(total // 20, 256 << 20)


def _anonymous_map(nbytes: int, reserve: bool = False) -> tuple[mmap.mmap, int]:
    """A private anonymous mapping (untouched pages cost nothing) with huge pages advised;
    `reserve`: address space only, no swap reserved (a simulated device's large memory)."""
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | (_MAP_NORESERVE if reserve else 0)
    mm = mmap.mmap(-1, nbytes, flags=flags)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        try:  # before mlock populates it: huge pages make copies ~15% faster
            mm.madvise(mmap.MADV_HUGEPAGE)
        except OSError:
            pass  # transparent huge pages disabled: normal pages still work
    addr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    return mm, addr


class _Mapping:
    """One mapping and whether it is locked in RAM."""

    __slots__ = ("mm", "size", "pinned")

    def __init__(self, mm: mmap.mmap, size: int, pinned: bool):
        self.mm, self.size, self.pinned = mm, size, pinned


def _strided(addr: int, pitch: int, width: int, height: int) -> np.ndarray:
    """A (height, width) uint8 array over rows `pitch` bytes apart starting at `addr`."""
    span = (height - 1) * pitch + width
    flat = np.ctypeslib.as_array((ctypes.c_uint8 * span).from_address(addr))
    return np.lib.stride_tricks.as_strided(flat, shape=(height, width), strides=(pitch, 1))


class CpuBackend(Backend):
    """A device made of this machine's cores and memory."""

    def __init__(self, name: str = "ascentrt-cpu", memory_bytes: int = 0,
                 executors: tuple[int, int, int] = (1, 1, 1)):
        self._properties = BackendProperties("cpu", name, memory_bytes,
                                             cast("tuple[int, int, int]", tuple(executors)))

    def properties(self) -> BackendProperties:
        """Kind 'cpu', with the executor counts and memory the settings gave."""
        return self._properties

    def alloc(self, nbytes: int, host: bool = False, reserve: bool = False) -> MemHandle:
        """A fresh mapping; host memory is page-rounded and mlocked when the process may lock."""
        size = -(-nbytes // _PAGE) * _PAGE
        if host and size >= _CHECKED_FROM:
            lockable = _lockable_bytes()
            if size > lockable:
                raise OSError(errno.ENOMEM, f"the host has {max(lockable, 0)} bytes of RAM it can "
                                            f"lock now (what is available less a margin)")
        mm, addr = _anonymous_map(size, reserve)
        pinned = host and _libc.mlock(ctypes.c_void_p(addr), ctypes.c_size_t(size)) == 0
        return MemHandle(addr, nbytes, host, pinned, _Mapping(mm, size, pinned))

    def free(self, handle: MemHandle, offset: int = 0, nbytes: int | None = None) -> None:
        """Unlock and unmap (a mapping still exported by a user view lives until that view dies);
        a range is madvise(DONTNEED)ed: touched pages of a private mapping go back to the OS.

        Device memory is never unmapped: stale views of it must not fault.
        """
        if nbytes is not None:
            _libc.madvise(ctypes.c_void_p(handle.addr + offset), ctypes.c_size_t(nbytes), _MADV_DONTNEED)
            return
        m = handle.token
        if not handle.host:
            return
        if m.pinned:
            _libc.munlock(ctypes.c_void_p(handle.addr), ctypes.c_size_t(m.size))
            m.pinned = False
        _libc.madvise(ctypes.c_void_p(handle.addr), ctypes.c_size_t(m.size), _MADV_DONTNEED)
        try:
            m.mm.close()
        except BufferError:
            pass  # a user array still views it: unmapped when that array dies

    def host_view(self, handle: MemHandle) -> memoryview:
        """The mapping itself, cut to the size asked for."""
        return memoryview(handle.token.mm)[:handle.nbytes]

    def start_queue(self, name: str, queue: Any) -> None:
        """One daemon thread per executor, running the engine's dispatch loop."""
        threading.Thread(target=queue, daemon=True, name=name).start()

    def execute(self, op: Op) -> None:
        """Kernels and host functions are called; copies and fills are memmove/memset."""
        fn = op.fn
        if fn is not None:  # kernels, host functions, runs of operations (tested first: hot)
            resolve = op.resolve
            if resolve is None:
                fn(*op.args)
            else:
                fn(*resolve(op.args))
        elif op.kind == COPY:
            dst, dpitch, src, spitch, width, height = op.args if op.resolve is None else op.resolve(op.args)
            if height == 1 or (dpitch == spitch == width):
                n = width * height
                if n <= _INLINE_COPY_MAX:
                    _ADDRESS_SPACE[dst:dst + n] = _ADDRESS_SPACE[src:src + n]
                else:
                    _memmove(dst, src, n)
            elif height:
                np.copyto(_strided(dst, dpitch, width, height), _strided(src, spitch, width, height))
        else:
            dst, value, nbytes = op.args if op.resolve is None else op.resolve(op.args)
            _memset(dst, value, nbytes)

    def new_signal(self) -> threading.Event:
        """A threading.Event (it has the Signal methods)."""
        return threading.Event()

    def host_wait(self, signal, timeout_s: float | None) -> bool:
        """Event.wait: the calling thread sleeps until the signal is set or the time passes."""
        return signal.wait(timeout_s)

    def host_call(self, what: str) -> int:
        """Nothing: host calls cost what they really cost (0: no device time to keep to)."""
        return 0

    # perf_counter_ns itself: monotonic, the same clock the host side uses. (A method calling
    # it cost each profiled task ~8% of a launch: the engine stamps every task three times.)
    now_ns = staticmethod(time.perf_counter_ns)
