"""Allocation traces: record alloc/free events of any resource, save them, replay them against a pool."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator
from typing import Any

from .. import forksafe
from ..errors import ErrorCode, InvalidArgumentError, OutOfMemoryError, os_cause
from ..handles import Handle
from ..validate import check_path, read_small_file, write_text_file
from ..validate import check_size
from .chunks import ArenaChunks
from .links import Links
from .pool import BlockPool

TRACE_MOST_BYTES = 1 << 31  # a trace file larger is none TraceRecorder.save wrote


class TraceRecorder(Handle):
    """An adaptor: forwards allocate/deallocate to `upstream` and records each as an event.

    Events are ("alloc", id, nbytes, stream id) and ("free", id, stream id); any other
    attribute is the upstream's, so a recorder can stand in for the pool it wraps.
    """

    def __init__(self, upstream: Any):
        self.upstream = upstream
        self.events: list[tuple] = []
        self._ids: dict = {}
        self._next = 0
        self._lock = forksafe.lock()

    def allocate(self, nbytes: int, stream: Any = None) -> Any:
        """Allocate upstream and record it."""
        return self._recorded(self.upstream.allocate(nbytes, stream), nbytes, stream)

    def allocate_again(self, nbytes: int, stream: Any = None) -> Any:
        """Allocate upstream once more after a refusal (see BlockPool.allocate_again) and record it."""
        return self._recorded(self.upstream.allocate_again(nbytes, stream), nbytes, stream)

    def _recorded(self, block: Any, nbytes: int, stream: Any) -> Any:
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
        """Write the events as JSON lines; raises InvalidArgumentError (100003) naming `path`
        when it is not a path or cannot be written."""
        # (an int would be written into as a descriptor, and closed)
        write_text_file(path, "".join(json.dumps(e) + "\n" for e in list(self.events)), "the trace")


def _is_event(e: Any) -> bool:
    """Whether `e` is a trace event as TraceRecorder records them: ("alloc", id, nbytes,
    stream id) with an int id and a positive int size, or ("free", id, stream id)."""
    if type(e) not in (tuple, list) or not e or type(e[0]) is not str:
        return False
    if e[0] == "alloc":
        return len(e) == 4 and type(e[1]) is int and type(e[2]) is int and 0 < e[2] < 1 << 62
    return e[0] == "free" and len(e) == 3 and type(e[1]) is int


def load_trace(path: str | os.PathLike[str]) -> list[tuple]:
    """Read a trace written by TraceRecorder.save; raises InvalidArgumentError (100003) on a
    bad line, or naming `path` and the cause when it is not a path or cannot be read."""
    path = check_path(path, "trace path")  # (an int would be read as a descriptor, and closed)
    try:  # (a regular file of a bounded size: a FIFO would hang, /dev/zero fill memory)
        lines = read_small_file(path, "the trace", TRACE_MOST_BYTES).splitlines()
    except FileNotFoundError as exc:
        raise InvalidArgumentError(f"cannot read the trace {path!r}: {os_cause(exc)}",
                                   code=ErrorCode.INVALID_FILE) from None
    events = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            e = json.loads(line)
        except ValueError:
            e = None
        if not _is_event(e):
            raise InvalidArgumentError(f"{path}:{n}: not a trace event: {line.strip()[:80]!r}",
                                       code=ErrorCode.INVALID_FILE)
        events.append(tuple(e))
    return events


def replay(events: Iterable[tuple], pool: BlockPool | None = None, capacity: int = 1 << 40) -> dict:
    """Replay a trace against `pool` (default: a fresh pool over fake address space of `capacity`).

    Returns the peaks (reserved, allocated, requested), their ratio, OOM count and the final
    fragmentation figures. Blocks still live at the end are freed. Every event is checked
    before the first one runs: a bad one (or a bad pool or capacity) raises
    InvalidArgumentError and replays nothing.
    """
    try:
        events = list(events)
    except TypeError:
        raise InvalidArgumentError(f"events must be an iterable of trace events, got "
                                   f"{type(events).__name__}") from None
    live_ids: set = set()
    for i, e in enumerate(events):
        if not _is_event(e):
            raise InvalidArgumentError(f"event {i} is not a trace event (('alloc', id, nbytes, "
                                       f"stream id) or ('free', id, stream id)): {e!r:.80}")
        if e[0] == "alloc":
            if e[1] in live_ids:  # (its first block would never be freed)
                raise InvalidArgumentError(f"event {i} allocates id {e[1]} again while it is live")
            live_ids.add(e[1])
        else:
            live_ids.discard(e[1])
    capacity = check_size(capacity, "capacity")
    if pool is None:
        pool = BlockPool(ArenaChunks(capacity), name="replay")
    elif not isinstance(pool, (BlockPool, TraceRecorder)):  # (a recorder stands in for its pool)
        raise InvalidArgumentError(f"pool must be a BlockPool (or a TraceRecorder of one) or "
                                   f"None, got {type(pool).__name__}")
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
    finally:  # out of the chain wherever it is now (traces may end in any order, on any thread)
        if alloc.pool is recorder:
            alloc.pool = recorder.upstream
        else:
            outer = alloc.pool
            while isinstance(outer, TraceRecorder) and outer.upstream is not recorder:
                outer = outer.upstream
            if isinstance(outer, TraceRecorder):
                outer.upstream = recorder.upstream


def base_pool(pool: Any) -> Any:
    """The BlockPool under any trace recorders that stand in for it (settings, locks and
    statistics are its own: a recorder only forwards reads)."""
    while isinstance(pool, TraceRecorder):
        pool = pool.upstream
    return pool
