"""Pinned host memory: page-aligned buffers from a pool of mlocked chunks (mlock paid once per chunk)."""

from __future__ import annotations

import mmap
from typing import Any, Callable

import numpy as np

from .. import forksafe
from .. import config
from ..errors import OutOfMemoryError
from .. import interrupts
from ..interrupts import hold, release
from . import leaks
from ..validate import check_size
from .buffer import HostBuffer
from .chunks import HostChunks
from .inflight import give_back_when_unused
from .block import give_back
from .pool import BlockPool
from .stream_order import DeferredFrees, busy_positions
from .links import Links
from .registry import REGISTRY

HOST_RELEASE_THRESHOLD = 256 << 20  # pinned bytes the pool keeps cached at most
HOST_SPLIT_LIMIT = 32 << 20         # larger pinned blocks serve only requests of about their size
_state: dict = {}
_state_lock = forksafe.lock()


def host_pool():
    """The process-wide pinned host BlockPool (None when ASCENTRT_MEM_POOL_ENABLE is off)."""
    if "pool" not in _state:
        with _state_lock:
            if "pool" not in _state:
                pool = None
                if config.get("ASCENTRT_MEM_POOL_ENABLE"):
                    from .allocator import pool_from_config
                    pool = pool_from_config(HostChunks(Links.host_backend(), registry=REGISTRY),
                                            "pinned host", Links.busy_streams, align=mmap.PAGESIZE)
                    # Locked pages are scarce host RAM: cache a bounded amount, and never let a
                    # small buffer pin a large chunk (it would keep all of it locked).
                    if pool.release_threshold is None:
                        pool.release_threshold = HOST_RELEASE_THRESHOLD
                    if pool.split_limit is None:
                        pool.split_limit = HOST_SPLIT_LIMIT
                backend = Links.host_backend()  # (a simulated one charges malloc_host's time)
                _state["charge"] = backend.host_call if backend.properties().virtual else None
                _state["pool"] = pool
                _state["sites"] = leaks.recording_sites()
    return _state["pool"]


def _pooled(pool: BlockPool, nbytes: int, again: bool = False) -> HostBuffer:
    """A pinned buffer from the pool, whole or not made (given back if making it failed);
    `again`: after a refusal the caller waited on (a second one is counted once)."""
    block = pool.allocate_again(nbytes) if again else pool.allocate(nbytes)
    try:
        buf = HostBuffer(block.addr, nbytes, block.chunk.pinned, block.bytes(nbytes), block,
                         _release)
    except BaseException:
        give_back(pool, block)
        raise
    block.buf = buf  # from here on its pointers resolve (through the chunk)
    return buf


def _release(buf: HostBuffer) -> bool:
    """Free a pooled pinned buffer (after all queued work); False if already freed."""
    _charge_free()
    return _state["pool"].deallocate(buf._handle, None, None, buf)


def _charge_free() -> None:
    """A simulated host pays for a free of pinned memory, as for a device buffer's."""
    charge = _state.get("charge")
    if charge is not None:
        charge("free")


def _release_unpooled(buf: HostBuffer) -> bool:
    """Free a pinned buffer that has its own mapping (pool off): its mapping goes once the
    work queued before the free (which may still copy it, and still sees the bytes) is done;
    False if already freed."""
    _charge_free()
    held = hold()  # (a buffer marked freed must reach the late frees or the backend)
    try:
        with _state_lock:  # one of two racing frees claims it: its mapping is freed once
            if buf._mem is None:
                return False
            waits = busy_positions(Links.busy_streams())
            if waits:
                buf._late = (buf._mem, waits)
            buf._mem = None
        REGISTRY.remove(buf)
        handle = buf._handle
        return_mapping: Callable[[], Any] = (lambda: _late_frees.add(handle, waits)) if waits \
            else (lambda: Links.host_backend().free(handle))
        give_back_when_unused(buf, return_mapping)
    finally:
        release(held)
    if _late_frees.entries:
        _late_frees.reap(Links.host_backend().free)
    return True


_late_frees = DeferredFrees()  # the mappings of frees waiting for queued work (pool off)


def _map_host(backend, nbytes: int):
    """backend.alloc(nbytes, host=True), its refusal an OutOfMemoryError."""
    try:
        return backend.alloc(nbytes, host=True)
    except OSError as exc:
        raise OutOfMemoryError(f"pinned host: cannot allocate {nbytes} bytes: the host could "
                               f"not map them ({exc})") from None


def malloc_host(nbytes: int) -> HostBuffer:
    """Allocate page-locked host memory; `.pinned` is False where mlock is not permitted."""
    if type(nbytes) is not int or not 0 < nbytes < 1 << 62:  # one test on the hot path
        nbytes = check_size(nbytes)
    pool = _state["pool"] if "pool" in _state else host_pool()
    if pool is None:
        if _late_frees.entries:
            _late_frees.reap(Links.host_backend().free)
        backend = Links.host_backend()
        try:
            handle = _map_host(backend, nbytes)
        except OutOfMemoryError:  # (memory freed after queued work is the program's once it ends)
            if not _late_frees.wait_for(backend.free):
                raise
            handle = _map_host(backend, nbytes)
        mem = np.frombuffer(backend.host_view(handle), dtype=np.uint8)
        buf = HostBuffer(handle.addr, nbytes, handle.pinned, mem, handle, _release_unpooled)
        REGISTRY.add(buf)
    else:
        try:
            buf = _pooled(pool, nbytes)
        except OutOfMemoryError:  # (as a device allocation: see DeviceAllocator._waited_for_frees)
            if not pool.wait_for_pending():  # (not held: a Ctrl-C may end a long wait)
                raise
            buf = _pooled(pool, nbytes, again=True)
    try:
        # (a simulated host pays for the call here, with the pinned mapping it may have made,
        # not the host call after it; without the pool every call is a driver allocation alone)
        charge = _state["charge"]
        if charge is not None:
            charge("malloc" if pool is not None else "settle")
        if REGISTRY.observers:
            REGISTRY.allocated(buf)
        if _state["sites"]:
            leaks.note_site(buf)
    except BaseException:
        # (a Ctrl-C a simulated host held back while it stepped is raised by the charge, where
        # protect() cannot send it again: the caller never gets the buffer, so it goes back)
        buf.free()
        raise
    return buf


# A Ctrl-C between the pool's block and the caller's buffer would lose it: sent again once the
# call returned (Python code: registered at no cost per call, where hold() costs ~0.2 us).
interrupts.protect(malloc_host, _pooled)
