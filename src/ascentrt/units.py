"""Sizes and times for people: each in the unit that shows it (1 KiB is not '0.0 MiB')."""

from __future__ import annotations


def format_bytes(n: float) -> str:
    """'512 B', '4.0 KiB', '3.5 MiB', '2.0 GiB'."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if abs(n) >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{int(n)} B"


def format_ms(ns: float) -> str:
    """Nanoseconds as '12.34 ms' (the unit of the profiler's findings); under 10 us, where
    that would read 0.00 or 0.01 ms, as '2.00 us'."""
    if 0 < abs(ns) < 10_000:
        return f"{ns / 1e3:.2f} us"
    return f"{ns / 1e6:.2f} ms"
