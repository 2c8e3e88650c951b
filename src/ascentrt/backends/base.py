"""The device contract every backend implements: raw memory, copy, fill, execute, timestamps."""

from __future__ import annotations

import abc

import numpy as np


class Backend(abc.ABC):
    """What a device must provide; everything common (streams, pools, graphs) lives above it."""

    name: str = "abstract"

    @abc.abstractmethod
    def reserve(self, nbytes: int) -> tuple[np.ndarray, int]:
        """Reserve `nbytes` of device memory; return a uint8 view of it and its base address."""

    @abc.abstractmethod
    def host_alloc(self, nbytes: int) -> tuple[np.ndarray, int, bool, object]:
        """Allocate page-aligned host memory; return (uint8 view, address, pinned?, handle)."""

    @abc.abstractmethod
    def host_free(self, handle: object) -> None:
        """Release host memory returned by host_alloc."""

    @abc.abstractmethod
    def copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        """Copy `src` into `dst` (same byte length, any memory this backend can reach)."""

    @abc.abstractmethod
    def fill(self, dst: np.ndarray, value: int) -> None:
        """Set every byte of `dst` to `value`."""

    @abc.abstractmethod
    def execute(self, kernel, args: tuple) -> None:
        """Run a kernel with its (already translated) arguments."""

    @abc.abstractmethod
    def now_ns(self) -> int:
        """The device clock in nanoseconds (monotonic)."""
