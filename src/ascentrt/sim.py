"""What a program can ask about the simulated device it runs on: the variant of a what-if
sweep, the virtual time, and the kernels that declared no cost."""

from __future__ import annotations

from . import config
from .backends.presets import PROGRAM_PREFIX, PresetError, variant_doc
from .errors import InvalidArgumentError
from .device import Device


def variant() -> dict:
    """The variant this run is under `ascentrt whatif` ({} otherwise): program knobs by name
    (from --vary program.NAME=...) and the preset fields it changes."""
    try:  # (checked as device creation checks it: one line with its code, not a traceback)
        doc = variant_doc(config.get("ASCENTRT_SIM_VARY"))
    except PresetError as exc:
        raise InvalidArgumentError(f"ASCENTRT_SIM_VARY: {exc}") from None
    return {k[len(PROGRAM_PREFIX):] if k.startswith(PROGRAM_PREFIX) else k: v for k, v in doc.items()}


def now_s(device: int = 0) -> float:
    """The device clock in seconds (virtual time on sim)."""
    return Device(device).now_ns() / 1e9


def uncosted_kernels(device: int = 0) -> dict:
    """Kernels that ran with the preset's default duration (no cost declared): name -> count."""
    return dict(getattr(Device(device)._backend, "uncosted", {}))
