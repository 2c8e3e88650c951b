"""Backends: what differs between devices (raw memory, copies, kernel execution, clocks)."""

from .base import Backend
from .cpu import CpuBackend

__all__ = ["Backend", "CpuBackend"]
