"""Vector clocks: their join and meet, and whether one covers another."""

from __future__ import annotations


def meet(clocks: list) -> dict:
    """The element-wise minimum of vector clocks: what each of them is ordered after."""
    out = dict(clocks[0])
    for c in clocks[1:]:
        for actor in list(out):
            t = c.get(actor, 0)
            if t < out[actor]:
                out[actor] = t
    return out


def covered(clock: dict, by: dict) -> bool:
    """Whether everything `clock` is ordered after, `by` is ordered after too."""
    return all(by.get(actor, 0) >= t for actor, t in clock.items())


def join(into: dict, other: dict) -> None:
    """Raise `into` to the element-wise maximum of it and `other` (in place)."""
    for actor, t in other.items():
        if into.get(actor, 0) < t:
            into[actor] = t
