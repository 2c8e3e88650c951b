"""Allocation traces: record alloc/free events of any resource, save them, replay them against a pool."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import InvalidArgumentError, OutOfMemoryError
from .chunks import ArenaChunks
from .links import Links
from .pool import BlockPool


class TraceRecorder:
    """An adaptor: forwards allocate/deallocate to `upstream` and records each as an event.

    Events are ("alloc", id, nbytes, stream id) and ("free", id, stream id); any other
    attribute is the upstream's, so a recorder can stand in for the pool it wraps.
    """

    def __init__(self, upstream: Any):
        self.upstream = upstream
        self.events: list[tuple] = []
        self._ids: dict = {}
        self._next = 0
        self._lock = threading.Lock()

    def allocate(self, nbytes: int, stream: Any = None) -> Any:
        """Allocate upstream and record it."""
        block = self.upstream.allocate(nbytes, stream)
        with self._lock:
            self._next += 1
            self._ids[block] = self._next
            self.events.append(("alloc", self._next, nbytes, getattr(stream, "id", None)))
        return block

    def deallocate(self, block: Any, stream: Any = None, *rest: Any) -> bool:
        """Free upstream and record it; returns upstream's answer (False: not freed, not
        recorded). Under the recorder's lock, so that a reuse of the block records after it."""
        with self._lock:
            freed = self.upstream.deallocate(block, stream, *rest)
            if freed:
                ident = self._ids.pop(block, None)
                if ident is not None:
                    self.events.append(("free", ident, getattr(stream, "id", None)))
        return freed

    def __getattr__(self, name: str) -> Any:
        return getattr(self.upstream, name)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the events as JSON lines."""
        with open(path, "w") as f:
            for e in list(self.events):
                f.write(json.dumps(e) + "\n")


def load_trace(path: str | os.PathLike[str]) -> list[tuple]:
    """Read a trace written by TraceRecorder.save; raises InvalidArgumentError on a bad line."""
    events = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                e = tuple(json.loads(line))
                ok = (e[0] == "alloc" and len(e) == 4 and isinstance(e[2], int) and e[2] > 0) or \
                     (e[0] == "free" and len(e) == 3)
            except (ValueError, IndexError, TypeError):
                ok = False
            if not ok:
                raise InvalidArgumentError(f"{path}:{n}: not a trace event: {line.strip()[:80]!r}")
            events.append(e)
    return events


def replay(events: Iterable[tuple], pool: BlockPool | None = None, capacity: int = 1 << 40) -> dict:
    """Replay a trace against `pool` (default: a fresh pool over fake address space of `capacity`).

    Returns the peaks (reserved, allocated, requested), their ratio, OOM count and the final
    fragmentation figures. Blocks still live at the end are freed.
    """
    if pool is None:
        pool = BlockPool(ArenaChunks(capacity), name="replay")
    live = {}
    ooms = 0
    for e in events:
        if e[0] == "alloc":
            try:
                live[e[1]] = pool.allocate(e[2])
            except OutOfMemoryError:
                ooms += 1
        else:
            block = live.pop(e[1], None)
            if block is not None:
                pool.deallocate(block)
    result = {"peak_reserved": pool.peak_reserved, "peak_allocated": pool.peak_allocated,
              "peak_requested": pool.peak_requested,
              "reserved_over_requested": pool.peak_reserved / pool.peak_requested
              if pool.peak_requested else 0.0,
              "ooms": ooms, "fragmentation": pool.fragmentation()}
    for block in live.values():
        pool.deallocate(block)
    return result


@contextlib.contextmanager
def record_trace(device: Any = None) -> Iterator[TraceRecorder]:
    """Record the device pool's allocations while the block runs; yields the TraceRecorder."""
    alloc = Links.resolve_device(device)._memory
    if alloc.pool is None:
        raise InvalidArgumentError("the memory pool is off (ASCENTRT_MEM_POOL_ENABLE=0)")
    recorder = TraceRecorder(alloc.pool)
    alloc.pool = recorder
    try:
        yield recorder
    finally:
        alloc.pool = recorder.upstream
