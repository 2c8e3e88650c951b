"""Ctrl-C held back while the runtime changes state that must not be left half changed.

Python raises KeyboardInterrupt between any two bytecodes of the main thread. Raised in the
middle of a pool's bookkeeping (a chunk taken out of the pool but not yet back in the device's
range), it would lose that memory for good. Such sections are entered with hold() and left
with release(): a Ctrl-C meanwhile is delivered again as the outermost one ends. Other parts of the
runtime that hold a Ctrl-C back themselves (the simulator, while a step runs) register a
deferrer, asked first.

Sections of the runtime's Python code (a submission: a stream marked active must reach a
ready queue) are registered with protect() instead, at no cost per call: a Ctrl-C that finds
the main thread inside one is sent again a moment later, until it lands outside. Waits inside
them (a full submission queue) are registered with interruptible(): a Ctrl-C ends those.

The handler is installed only where Python's own one is in place: a program's own SIGINT
handler is left alone.
"""

from __future__ import annotations

import _weakrefset
import os
import signal
import threading
import weakref
from typing import Any, Callable, Final

# The C function under signal.getsignal, which converts to an enum: 1.8 µs of the 2.2 µs a
# hold took.
# (Final, these and _held: a compiled build reads them from C statics, not the module's dict)
_getsignal: Final[Callable[[int], Any]] = getattr(signal, "_signal", signal).getsignal
_get_ident: Final = threading.get_ident
_SIGINT: Final = int(signal.SIGINT)


class _Held:
    """The main thread's held sections: how deep, and whether a Ctrl-C came meanwhile."""

    def __init__(self) -> None:
        self.depth = 0
        self.pending = False
        self.main: int | None = threading.main_thread().ident  # (a fork from another thread makes that one main)


_held: Final = _Held()  # (an instance: a compiled build reads its fields natively)


_deferrers: list[Callable[[], bool]] = []  # fn() -> True when it took the Ctrl-C itself
_protected: set = set()  # code objects of sections a Ctrl-C must not cut
_waits: set = set()      # code objects of waits inside them, which a Ctrl-C may end
_OURS = os.path.dirname(os.path.abspath(__file__))
_WEAKREF_FILES = {weakref.__file__, _weakrefset.__file__}
_WEAKREF_CALLBACKS = {"_remove", "remove", "__call__", "_exitfunc"}  # (their callbacks there)
_LIBRARY = os.path.dirname(os.path.abspath(os.__file__))  # the standard library, site-packages
_REDELIVER_S = 0.002     # how soon a Ctrl-C that landed in a protected section comes again
_resend_due = [False]


def protect(*functions: Any) -> None:
    """Register sections of Python code a Ctrl-C must not cut (compiled ones use hold())."""
    _protected.update(f.__code__ for f in functions if hasattr(f, "__code__"))


def interruptible(*functions: Any) -> None:
    """Register waits inside protected sections that a Ctrl-C may end (nothing is half done)."""
    _waits.update(f.__code__ for f in functions if hasattr(f, "__code__"))


def _in_protected(frame: Any) -> bool:
    """Whether the main thread, stopped at `frame`, is in a protected section: a protected
    frame comes before any wait of _waits and any code of the program's own (a kernel or
    callback the runtime called runs the program's code: a Ctrl-C may stop it)."""
    depth = 0
    while frame is not None and depth < 200:
        code = frame.f_code
        if code in _waits:
            return False
        if code in _protected:
            return True
        if not code.co_filename.startswith((_OURS, _LIBRARY)):
            return False
        frame = frame.f_back
        depth += 1
    return False


def _swallowed_in(frame: Any) -> bool:
    """Whether a KeyboardInterrupt raised at `frame` would be lost: Python prints and ignores
    what a weakref callback or a __del__ raises (a Ctrl-C sent again lands wherever the main
    thread is, and one landed in WeakSet's callback as an Event was collected)."""
    depth = 0
    while frame is not None and depth < 200:  # (what such a callback calls is inside it too)
        code = frame.f_code
        if code.co_name == "__del__" or code.co_filename in _WEAKREF_FILES \
                and code.co_name in _WEAKREF_CALLBACKS:
            return True
        frame = frame.f_back
        depth += 1
    return False


def _resend() -> None:
    _resend_due[0] = False
    os.kill(os.getpid(), signal.SIGINT)


def _on_sigint(signum: int, frame: Any) -> None:
    """Ctrl-C: to a deferrer that takes it, else held until the outermost section ends, else
    Python's own handler."""
    for defer in _deferrers:
        if defer():
            return
    if _held.depth:
        _held.pending = True
        return
    if _protected and _in_protected(frame) or _swallowed_in(frame):
        if not _resend_due[0]:  # (one on its way stands for any that came meanwhile)
            _resend_due[0] = True
            timer = threading.Timer(_REDELIVER_S, _resend)
            timer.daemon = True
            timer.start()
        return
    signal.default_int_handler(signum, frame)


_HANDLER: Final = _on_sigint  # (what hold() compares the installed handler with, read natively)


def install() -> None:
    """Take over SIGINT (from the main thread, only while Python's own handler has it)."""
    if threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


def add_deferrer(defer: Callable[[], bool]) -> None:
    """Ask defer() first at each Ctrl-C: True when it took the interrupt (to raise it later)."""
    if defer not in _deferrers:
        _deferrers.append(defer)
    install()


def hold() -> bool:
    """Enter a section a Ctrl-C must not cut; returns whether it counts (the main thread's,
    where a handler of ours is in place). Pass the result to release()."""
    if _get_ident() != _held.main:
        return False  # (Python raises KeyboardInterrupt in the main thread only)
    if _getsignal(_SIGINT) is not _HANDLER:
        install()
        if _getsignal(_SIGINT) is not _HANDLER:
            return False  # the program's own handler decides
    _held.depth += 1
    return True


def redeliver() -> None:
    """Give the program back a Ctrl-C its own code took on the main thread inside a runtime step.

    The runtime made that KeyboardInterrupt the code's failure (a condition's, a callback's)
    to stay whole; the Ctrl-C is raised again as the outermost held section ends, else sent
    again a moment later (where no protected section is cut). Nothing on other threads, where
    no Ctrl-C lands, nor where the program's own SIGINT handler is in place."""
    if _get_ident() != _held.main:
        return
    if _held.depth:
        _held.pending = True
        return
    if _getsignal(_SIGINT) not in (_HANDLER, signal.default_int_handler):
        return
    if not _resend_due[0]:
        _resend_due[0] = True
        timer = threading.Timer(_REDELIVER_S, _resend)
        timer.daemon = True
        timer.start()


def _after_fork_in_child() -> None:
    """A child forked while the main thread held a section starts with none held (its main
    thread is the forking one, which held nothing)."""
    _held.depth = 0
    _held.pending = False
    _held.main = threading.main_thread().ident  # (threading's own fork hook ran first)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def release(held: bool) -> None:
    """Leave a section entered with hold(); the outermost raises a Ctrl-C held meanwhile
    (KeyboardInterrupt out of this call: the section's state must be whole before it)."""
    if held:
        _held.depth -= 1
        if not _held.depth and _held.pending:
            _held.pending = False
            signal.raise_signal(signal.SIGINT)


def release_or_undo(held: bool, undo: Callable[[], Any]) -> None:
    """release(held), for a section that made something for its caller: when a Ctrl-C held
    meanwhile is to be raised, undo() first (the caller will never get what was made), then
    raise it. A Ctrl-C during undo() joins the one raised."""
    if not held:
        return
    _held.depth -= 1
    if _held.depth or not _held.pending:
        return
    _held.depth += 1
    try:
        undo()
    finally:
        _held.depth -= 1
        _held.pending = False
    raise KeyboardInterrupt  # (here, whatever frame: what was made is undone already)
