"""Backends: what differs between device kinds, behind the contract in base.py."""

from .base import Backend, BackendProperties, Cost, MemHandle, Op, PlainOp, Signal
from .cpu import CpuBackend

KINDS = {"cpu": CpuBackend}  # ASCENTRT_BACKEND names a key of this table


def make_backend(kind: str, name: str, memory_bytes: int, executors: tuple[int, int, int]) -> Backend:
    """A new backend of `kind` for one device; raises KeyError for a kind not in KINDS."""
    return KINDS[kind](name, memory_bytes, executors)


__all__ = ["Backend", "BackendProperties", "Cost", "CpuBackend", "KINDS", "MemHandle", "Op", "PlainOp",
           "Signal", "make_backend"]
