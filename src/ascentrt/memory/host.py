"""Pinned host memory: page-aligned, mlocked when the process may lock memory."""

from __future__ import annotations

from ..backends import CpuBackend
from .buffer import HostBuffer, check_size
from .registry import REGISTRY

_backend = CpuBackend()


def malloc_host(nbytes: int) -> HostBuffer:
    """Allocate page-locked host memory; `.pinned` is False where mlock is not permitted."""
    nbytes = check_size(nbytes)
    mem, addr, pinned, handle = _backend.host_alloc(nbytes)
    buf = HostBuffer(addr, nbytes, pinned, mem, handle, _backend.host_free)
    REGISTRY.add(buf)
    return buf
