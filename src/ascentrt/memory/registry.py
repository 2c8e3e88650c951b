"""Every live allocation by address, so that an int pointer is checked before it is ever used."""

from __future__ import annotations

import bisect

from .. import forksafe
from ..errors import InvalidAddressError
from .chunks import Chunk


_SHIFT = 21              # buckets of 2 MiB keep every insert and lookup short at 100k+ live buffers
_BUCKET = 1 << _SHIFT


class AddressRegistry:
    """Live allocations by address; lookups are thread-safe, O(1) for pooled memory.

    A pooled buffer is found through its chunk (which knows its blocks): chunks sit in a
    map from each 2 MiB page they cover to the chunks on it, read without a lock (each
    value is a tuple, replaced whole), so allocating and freeing a pooled buffer never
    touches this index. Other allocations (external memory, unpooled buffers) sit in a
    sorted list per 2 MiB bucket of their start address (one that contains an address
    starts in its bucket or the one before); larger ones in one list.

    `observers` (the profiler and the race sanitizer) see every allocation come and go: objects
    with buffer_allocated(alloc), buffer_freed(alloc, stream) (stream: what the free was ordered
    after, None for all work), buffer_used_on(alloc, stream) (record_stream) and
    buffer_viewed(alloc, lo, hi, what, write[, rows]) (a host thread touches bytes), called by whoever makes,
    marks, views or ends the allocation, and, where they have it, reserved_changed(device) (a
    pool trim gave memory back).
    """

    def __init__(self):
        self._lock = forksafe.rlock()  # reentrant only so an interrupted acquire can be undone
        self._buckets: dict[int, tuple[list[int], list]] = {}
        self._large: tuple[list[int], list] = ([], [])
        self._pages: dict[int, tuple[Chunk, ...]] = {}  # 2 MiB page -> the chunks on it
        self.observers: tuple = ()
        # (start, end) of each device's whole memory range, reserved or not: no host memory
        # lies there (a device's range is its for the process's life)
        self.device_memory: tuple[tuple[int, int], ...] = ()

    def add_device_memory(self, addr: int, nbytes: int) -> None:
        """Note a device's whole memory range [addr, addr + nbytes)."""
        with self._lock:
            if (addr, addr + nbytes) not in self.device_memory:
                self.device_memory = (*self.device_memory, (addr, addr + nbytes))

    def in_device_memory(self, addr: int, end: int) -> bool:
        """Whether [addr, end) overlaps any device's memory range."""
        for lo, hi in self.device_memory:
            if lo < end and addr < hi:
                return True
        return False

    def observe(self, observer) -> None:
        """Start telling `observer` of allocations (buffer_allocated(alloc) / buffer_freed(alloc))."""
        self.observers = (*self.observers, observer)

    def unobserve(self, observer) -> None:
        """Stop telling `observer`."""
        self.observers = tuple(o for o in self.observers if o is not observer)

    def allocated(self, alloc) -> None:
        """Tell the observers that `alloc` was made (callers test `observers` first)."""
        for o in self.observers:
            o.buffer_allocated(alloc)

    def freed(self, alloc, stream=None) -> None:
        """Tell the observers that `alloc` ended (after `stream`'s work; None: after all)."""
        for o in self.observers:
            o.buffer_freed(alloc, stream)

    def reserved_changed(self, device) -> None:
        """Tell the observers that have a reserved_changed(device) that `device`'s reserved
        memory changed with no allocation or free (a pool trim)."""
        for o in self.observers:
            changed = getattr(o, "reserved_changed", None)
            if changed is not None:
                changed(device)

    def host_accessed(self, alloc, lo: int, hi: int, what: str = "a numpy view",
                      write: bool = True, rows: tuple | None = None) -> None:
        """Tell the observers that a host thread touches bytes [lo, hi) of `alloc` (with `rows`
        (pitch, width): only those rows of them, from lo): `what` (a numpy view, which may read
        and write; a synchronous copy's source only reads)."""
        for o in self.observers:
            if rows is None:
                o.buffer_viewed(alloc, lo, hi, what, write)
            else:
                o.buffer_viewed(alloc, lo, hi, what, write, rows)

    def used_on(self, alloc, stream) -> None:
        """Tell the observers that `alloc` is marked as used on `stream` (record_stream)."""
        for o in self.observers:
            o.buffer_used_on(alloc, stream)

    def _chunk_pages(self, chunk: Chunk) -> range:
        return range(chunk.addr >> _SHIFT, ((chunk.addr + chunk.size - 1) >> _SHIFT) + 1)

    def add(self, alloc) -> None:
        """Register a live allocation or a pool chunk (anything with .addr and .nbytes)."""
        if alloc.__class__ is Chunk:
            with self._lock:
                pages = self._pages
                for page in self._chunk_pages(alloc):
                    pages[page] = (*pages.get(page, ()), alloc)
            return
        addr = alloc.addr
        lock = self._lock
        try:  # not `with` (slower); an interrupt right after acquire is caught below
            lock.acquire()
            try:
                if alloc.nbytes <= _BUCKET:
                    lists = self._buckets.get(addr >> _SHIFT)
                    if lists is None:
                        lists = self._buckets[addr >> _SHIFT] = ([], [])
                else:
                    lists = self._large
                starts, allocs = lists
                i = bisect.bisect_left(starts, addr)
                starts.insert(i, addr)
                allocs.insert(i, alloc)
            finally:
                lock.release()
        except BaseException:
            # Interrupted between the acquire and the try.
            if lock._is_owned():  # type: ignore[attr-defined]  # RLock has it; typeshed omits it
                lock.release()
            raise

    def shrink_chunk(self, chunk: Chunk, nbytes: int) -> None:
        """A chunk keeps only its first `nbytes`: forget it on the pages past them (it is
        resized by the caller, after this)."""
        with self._lock:
            pages = self._pages
            keep = range(chunk.addr >> _SHIFT, ((chunk.addr + nbytes - 1) >> _SHIFT) + 1)
            for page in self._chunk_pages(chunk):
                if page in keep:
                    continue
                rest = tuple(c for c in pages.get(page, ()) if c is not chunk)
                if rest:
                    pages[page] = rest
                else:
                    pages.pop(page, None)

    def remove(self, alloc) -> None:
        """Forget an allocation; later lookups of its addresses fail."""
        if alloc.__class__ is Chunk:
            with self._lock:
                pages = self._pages
                for page in self._chunk_pages(alloc):
                    rest = tuple(c for c in pages.get(page, ()) if c is not alloc)
                    if rest:
                        pages[page] = rest
                    else:
                        pages.pop(page, None)
            return
        addr = alloc.addr
        small = alloc.nbytes <= _BUCKET
        with self._lock:
            lists = self._buckets.get(addr >> _SHIFT) if small else self._large
            if lists is None:
                return
            starts, allocs = lists
            i = bisect.bisect_left(starts, addr)
            while i < len(allocs) and starts[i] == addr:
                if allocs[i] is alloc:
                    del starts[i], allocs[i]
                    # (by size, not by `lists is self._large`: a compiled build rebuilds a
                    # tuple attribute at each read, so the identity never holds there)
                    if not starts and small:
                        del self._buckets[addr >> _SHIFT]
                    return
                i += 1

    def find(self, addr: int, wait: bool = True, end: int = 0, write: bool = False):
        """The live allocation containing `addr`, or None (with `end`: one that holds all of
        [addr, end) where overlapping host registrations offer several; with `write`, one
        that may be written, where one does). wait=False never takes a pool's lock (for
        callers that hold the engine's): a lookup racing a split may then miss."""
        if type(addr) is not int:
            return None
        chunk = self._chunk_of(addr)
        if chunk is not None:
            return chunk.find(addr, wait)  # may take its pool's lock
        return self._entry(addr, end, write)

    def _chunk_of(self, addr: int):
        """The reserved chunk that contains `addr`, or None (no lock: a dict read of a whole tuple)."""
        for chunk in self._pages.get(addr >> _SHIFT) or ():
            if chunk.addr <= addr < chunk.addr + chunk.size:
                return chunk
        return None

    def pooled_in(self, addr: int, end: int) -> bool:
        """Whether any reserved pool chunk overlaps [addr, end) (no lock, as _chunk_of)."""
        for page in range(addr >> _SHIFT, ((end - 1) >> _SHIFT) + 1):  # (a chunk is on each page it covers)
            for chunk in self._pages.get(page) or ():
                if chunk.addr < end and addr < chunk.addr + chunk.size:
                    return True
        return False

    def _entry(self, addr: int, end: int = 0, write: bool = False):
        """The entry (allocation or chunk) that contains `addr`, or None; with `end`, one that
        holds all of [addr, end) if any does, and with `write` a writable one of those if any
        is. Host registrations may overlap (a slice of an array, then the array): where the
        nearest start does not hold it, earlier ones are looked at too (a small entry starts
        at most a bucket before what it holds)."""
        end = max(end, addr + 1)
        found = None
        read_only = None  # (holds the range, but may not be written)
        key = addr >> _SHIFT
        with self._lock:
            for lists, lowest in ((self._buckets.get(key), addr - _BUCKET),
                                  (self._buckets.get(key - 1), addr - _BUCKET),
                                  (self._large, -1)):
                if lists is None:
                    continue
                starts, allocs = lists
                i = bisect.bisect_right(starts, addr) - 1
                while i >= 0 and starts[i] >= lowest:
                    alloc = allocs[i]
                    stop = alloc.addr + alloc.nbytes
                    if end <= stop:
                        if not write or getattr(alloc, "writable", True):
                            return alloc
                        if read_only is None:
                            read_only = alloc
                    elif found is None and addr < stop:
                        found = alloc  # (holds the address, not the whole range)
                    i -= 1
        return read_only if read_only is not None else found
    def resolve(self, addr: int, nbytes: int, write: bool = False):
        """(allocation, offset) for a range that lies wholly inside one live allocation (a
        writable one for a write, where overlapping registrations offer one); raises."""
        alloc = self.find(addr, True, addr + nbytes if type(nbytes) is int else 0, write)
        chunk = self._chunk_of(addr) if alloc is None and type(addr) is int else None
        if chunk is not None:
            # (a pool's memory, in no live buffer: freed, most likely; no register_host advice)
            what = "pinned host" if getattr(chunk, "pinned", False) else "device"
            raise InvalidAddressError(f"address {addr:#x} is in {what} memory a pool holds but in "
                                      f"no live allocation: its buffer was freed (or the address "
                                      f"was never handed out)")
        if alloc is None:
            raise InvalidAddressError(f"address {addr:#x} is not inside any live allocation (host "
                                      f"memory of your own, such as a numpy array's .ctypes.data, "
                                      f"is reachable once registered: ascentrt.memory.external."
                                      f"register_host(array), or "
                                      f"acl.util.numpy_to_ptr / bytes_to_ptr)"
                                      if isinstance(addr, int) else f"not an address: {addr!r}")
        offset = addr - alloc.addr
        if nbytes < 0 or offset + nbytes > alloc.nbytes:
            raise InvalidAddressError(
                f"range [{addr:#x}, +{nbytes}) runs past the end of its allocation "
                f"({alloc.nbytes} bytes at {alloc.addr:#x}, offset {offset})")
        return alloc, offset

    def live(self) -> list:
        """Every live allocation (a snapshot)."""
        with self._lock:
            lists = [*self._buckets.values(), self._large]
            out = [a for _, allocs in lists for a in allocs]
            chunks = {id(c): c for on_page in self._pages.values() for c in on_page}
        for chunk in chunks.values():
            out += chunk.buffers()
        return out


REGISTRY = AddressRegistry()
