"""What a program can ask about the simulated device it runs on: the variant of a what-if
sweep, the virtual time, and the kernels that declared no cost."""

from __future__ import annotations

import atexit
import json

from . import config
from .backends.presets import PROGRAM_PREFIX, PresetError, variant_doc
from .errors import InvalidArgumentError
from .device import Device


_read: set[str] = set()  # the knobs this run looked up (see _Variant)
_telling: set[str] = set()  # the files _write_reads fills at exit


class _Variant(dict):
    """The variant's knobs, noting which ones the program looks up: `ascentrt whatif` reports
    a varied knob that no run read (a misspelt name gives the same row for every value)."""

    def __getitem__(self, name):
        _read.add(name)
        return super().__getitem__(name)

    def get(self, name, default=None):
        """The knob's value (default when the variant has none), noted as read."""
        _read.add(name)
        return super().get(name, default)

    def __contains__(self, name) -> bool:
        _read.add(name)
        return super().__contains__(name)

    # Taken whole ({**defaults, **variant()}, dict(), update(), a loop): every knob is read.
    def _all_read(self) -> None:
        _read.update(dict.keys(self))

    def __iter__(self):
        self._all_read()
        return super().__iter__()

    def keys(self):
        """The knobs' names (all noted as read)."""
        self._all_read()
        return super().keys()

    def items(self):
        """(name, value) of every knob (all noted as read)."""
        self._all_read()
        return super().items()

    def values(self):
        """Every knob's value (all noted as read)."""
        self._all_read()
        return super().values()


def _write_reads(path: str) -> None:
    """Tell `ascentrt whatif` which knobs this run read (at exit)."""
    try:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(sorted(_read), f)
    except OSError:
        pass  # (whatif then says nothing about unread knobs)


def variant() -> dict:
    """The variant this run is under `ascentrt whatif` ({} otherwise): program knobs by name
    (from --vary program.NAME=...) and the preset fields it changes."""
    try:  # (checked as device creation checks it: one line with its code, not a traceback)
        doc = variant_doc(config.get("ASCENTRT_SIM_VARY"))
    except PresetError as exc:
        raise InvalidArgumentError(f"ASCENTRT_SIM_VARY: {exc}") from None
    reads = config.get("ASCENTRT_SIM_VARY_READS")
    if reads and reads not in _telling:
        _telling.add(reads)
        atexit.register(_write_reads, reads)
    return _Variant({k[len(PROGRAM_PREFIX):] if k.startswith(PROGRAM_PREFIX) else k: v
                     for k, v in doc.items()})


def now_s(device: int = 0) -> float:
    """The device clock in seconds: virtual time since the process began on sim, this
    machine's monotonic clock (an arbitrary origin) on cpu; take differences."""
    return Device(device).now_ns() / 1e9


def uncosted_kernels(device: int = 0) -> dict:
    """Kernels that ran with the preset's default duration (no cost declared): name -> count."""
    return dict(getattr(Device(device)._backend, "uncosted", {}))
