"""Backends: what differs between device kinds, behind the contract in base.py."""

from __future__ import annotations

from .base import Backend, BackendProperties, Cost, MemHandle, Op, PlainOp, Signal
from .cpu import CpuBackend
from .presets import Preset, PresetError, load as load_preset
from .sim import SimBackend

KINDS = {"cpu": CpuBackend, "sim": SimBackend}  # ASCENTRT_BACKEND names a key of this table


def make_backend(kind: str, name: str, memory_bytes: int, executors: tuple[int, int, int],
                 preset: Preset | None = None) -> Backend:
    """A new backend of `kind` for one device (a sim one follows `preset`; memory_bytes 0:
    the preset's); raises KeyError for a kind not in KINDS, ValueError for sim without a preset."""
    if kind == "sim":
        if preset is None:
            raise ValueError("a sim backend follows a preset: pass one (see ascentrt.backends.presets)")
        return SimBackend(name, memory_bytes, executors, preset)
    return KINDS[kind](name, memory_bytes, executors)


__all__ = ["Backend", "BackendProperties", "Cost", "CpuBackend", "KINDS", "MemHandle", "Op", "PlainOp",
           "Preset", "PresetError", "Signal", "SimBackend", "load_preset", "make_backend"]
