"""User annotations: named ranges and instant marks that appear on the host timeline."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar
from . import clock

from . import session

_P = ParamSpec("_P")
_R = TypeVar("_R")


class range:  # noqa: N801 - named like the function users call: ascentrt.profiler.range("x")
    """`with ascentrt.profiler.range("name"):` marks a span of host time (cheap when not profiling).

    Also usable as a decorator: `@ascentrt.profiler.range("step")`.
    """

    __slots__ = ("name", "_t0", "_recorder")

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            from ..errors import InvalidArgumentError
            raise InvalidArgumentError(f"a range needs a non-empty str name, got {name!r}")
        self.name = name
        self._recorder: Any = None  # (the recorder of the profile it is entered under)

    def __enter__(self) -> "range":
        rec = session.active_recorder()
        self._recorder = rec
        if rec is not None:
            self._t0 = clock.now_ns()
        return self

    def __exit__(self, *exc) -> None:
        rec = self._recorder
        if rec is not None:
            rec.add_range(self.name, self._t0, clock.now_ns(), threading.get_ident())
            self._recorder = None

    def __call__(self, fn: Callable[_P, _R]) -> Callable[_P, _R]:
        import functools

        @functools.wraps(fn)
        def ranged(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            with range(self.name):
                return fn(*args, **kwargs)
        return ranged


def mark(name: str) -> None:
    """Record an instant `name` on this host thread's timeline (nothing when not profiling)."""
    if not isinstance(name, str) or not name:
        from ..errors import InvalidArgumentError
        raise InvalidArgumentError(f"a mark needs a non-empty str name, got {name!r}")
    rec = session.active_recorder()
    if rec is not None:
        rec.add_mark(name, clock.now_ns(), threading.get_ident())
