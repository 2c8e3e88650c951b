"""The CPU backend: device memory is a private anonymous mapping, kernels are Python callables."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import time

import numpy as np

from .base import Backend

_PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.munlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def _anonymous_map(nbytes: int) -> tuple[mmap.mmap, np.ndarray, int]:
    """A private anonymous mapping (untouched pages cost nothing) with huge pages advised."""
    mm = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            mm.madvise(mmap.MADV_HUGEPAGE)
        except OSError:
            pass  # transparent huge pages disabled: normal pages still work
    view = np.frombuffer(mm, dtype=np.uint8)
    return mm, view, view.ctypes.data


class _HostBlock:
    """One host mapping and whether it is locked in RAM."""

    __slots__ = ("mm", "addr", "nbytes", "pinned")

    def __init__(self, mm, addr, nbytes, pinned):
        self.mm, self.addr, self.nbytes, self.pinned = mm, addr, nbytes, pinned


class CpuBackend(Backend):
    """Threads + numpy: memory copies and arithmetic release the GIL, so executors overlap."""

    name = "cpu"

    def reserve(self, nbytes: int) -> tuple[np.ndarray, int]:
        """Reserve device memory as one mapping, touched lazily as it is used."""
        self._keep = getattr(self, "_keep", [])
        mm, view, addr = _anonymous_map(nbytes)
        self._keep.append(mm)  # device memory stays mapped for the process: stale views never fault
        return view, addr

    def host_alloc(self, nbytes: int) -> tuple[np.ndarray, int, bool, object]:
        """Page-aligned host memory, mlocked when the process may lock memory."""
        size = -(-nbytes // _PAGE) * _PAGE
        mm, view, addr = _anonymous_map(size)
        pinned = _libc.mlock(ctypes.c_void_p(addr), ctypes.c_size_t(size)) == 0
        return view[:nbytes], addr, pinned, _HostBlock(mm, addr, size, pinned)

    def host_free(self, handle: _HostBlock) -> None:
        """Unlock the mapping; it is unmapped when the last numpy view of it is gone."""
        if handle.pinned:
            _libc.munlock(ctypes.c_void_p(handle.addr), ctypes.c_size_t(handle.nbytes))
            handle.pinned = False
        try:
            handle.mm.close()
        except BufferError:
            pass  # a user view still exports it: the mapping lives until that view dies

    def copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        """np.copyto releases the GIL for large copies."""
        np.copyto(dst, src, casting="no")

    def fill(self, dst: np.ndarray, value: int) -> None:
        """Byte fill, as C memset."""
        dst.fill(value)

    def execute(self, kernel, args: tuple) -> None:
        """A kernel is a Python callable; numpy work inside it releases the GIL."""
        kernel(*args)

    def now_ns(self) -> int:
        """perf_counter_ns: monotonic, the same clock the host side uses."""
        return time.perf_counter_ns()
