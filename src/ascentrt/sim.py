"""What a program can ask about the simulated device it runs on: the variant of a what-if
sweep, the virtual time, and the kernels that declared no cost."""

from __future__ import annotations

import json

from . import config
from .backends.presets import PROGRAM_PREFIX
from .device import Device


def variant() -> dict:
    """The variant this run is under `ascentrt whatif` ({} otherwise): program knobs by name
    (from --vary program.NAME=...) and the preset fields it changes."""
    text = config.get("ASCENTRT_SIM_VARY")
    if not text:
        return {}
    doc = json.loads(text)
    return {k[len(PROGRAM_PREFIX):] if k.startswith(PROGRAM_PREFIX) else k: v for k, v in doc.items()}


def now_s(device: int = 0) -> float:
    """The device clock in seconds (virtual time on sim)."""
    return Device(device).now_ns() / 1e9


def uncosted_kernels(device: int = 0) -> dict:
    """Kernels that ran with the preset's default duration (no cost declared): name -> count."""
    return dict(getattr(Device(device)._backend, "uncosted", {}))
