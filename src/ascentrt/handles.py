"""What copy.copy, copy.deepcopy and pickle do to runtime objects (README: Copying and pickling).

A handle (a stream, event, notify, graph, pool, context, communicator) names one runtime
object of this process, as a C handle does: a copy of it, shallow or deep, is the object
itself, and pickling it is refused with NotPicklableError. Buffers and views follow the same
rule, except that a deep copy makes a new allocation with their bytes (memory/buffer.py).
"""

from __future__ import annotations

from typing import Any

from .errors import NotPicklableError


def not_picklable(obj: Any) -> NotPicklableError:
    """The error pickling `obj`, a runtime object of this process, raises."""
    name = type(obj).__name__
    return NotPicklableError(
        f"{name} cannot be pickled: it names a runtime object of this process ({obj!r:.80}), "
        f"which another process cannot use; pass data as numpy arrays or bytes (buf.numpy().copy()) "
        f"and make streams, events, notifies and memory in the process that uses them")


class Handle:
    """Mixin of a runtime object that names one thing of this process: copy.copy and
    copy.deepcopy return it, pickle refuses it (NotPicklableError)."""

    __slots__ = ()

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict) -> Any:
        return self

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise not_picklable(self)


def make_handles(*classes: type) -> None:
    """Give `classes` Handle's copy and pickle methods: for compiled classes, which cannot
    inherit a Python mixin (the methods are looked up on the class, as for any other)."""
    for cls in classes:
        for name in ("__copy__", "__deepcopy__", "__reduce_ex__"):
            setattr(cls, name, Handle.__dict__[name])
