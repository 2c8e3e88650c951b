"""Every live allocation by address, so that an int pointer is checked before it is ever used."""

from __future__ import annotations

import bisect
import threading

from ..errors import InvalidAddressError


class AddressRegistry:
    """Sorted start addresses of live allocations; lookups are O(log n) and thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._starts: list[int] = []
        self._allocs: list = []

    def add(self, alloc) -> None:
        """Register a live allocation (anything with .addr and .nbytes)."""
        with self._lock:
            i = bisect.bisect_left(self._starts, alloc.addr)
            self._starts.insert(i, alloc.addr)
            self._allocs.insert(i, alloc)

    def remove(self, alloc) -> None:
        """Forget an allocation; later lookups of its addresses fail."""
        with self._lock:
            i = bisect.bisect_left(self._starts, alloc.addr)
            while i < len(self._allocs) and self._starts[i] == alloc.addr:
                if self._allocs[i] is alloc:
                    del self._starts[i], self._allocs[i]
                    return
                i += 1

    def find(self, addr: int):
        """The live allocation containing `addr`, or None."""
        if type(addr) is not int:
            return None
        with self._lock:
            i = bisect.bisect_right(self._starts, addr) - 1
            if i < 0:
                return None
            alloc = self._allocs[i]
        return alloc if addr < alloc.addr + alloc.nbytes else None

    def resolve(self, addr: int, nbytes: int):
        """(allocation, offset) for a range that lies wholly inside one live allocation; raises."""
        alloc = self.find(addr)
        if alloc is None:
            raise InvalidAddressError(f"address {addr:#x} is not inside any live allocation"
                                      if isinstance(addr, int) else f"not an address: {addr!r}")
        offset = addr - alloc.addr
        if nbytes < 0 or offset + nbytes > alloc.nbytes:
            raise InvalidAddressError(
                f"range [{addr:#x}, +{nbytes}) runs past the end of its allocation "
                f"({alloc.nbytes} bytes at {alloc.addr:#x}, offset {offset})")
        return alloc, offset

    def __len__(self) -> int:
        return len(self._allocs)


REGISTRY = AddressRegistry()
