"""Signals held back while the runtime changes state that must not be left half changed.

Python runs a signal's handler between any two bytecodes of the main thread, and raises what
it raises there: Ctrl-C's KeyboardInterrupt, a timeout's TimeoutError (SIGALRM), the program's
own. Raised in the middle of a pool's bookkeeping (a chunk taken out of the pool but not yet
back in the device's range), it would lose that memory for good. Such sections are entered
with hold() and left with release(): a signal meanwhile is delivered again as the outermost
one ends. Other parts of the runtime that hold a signal back themselves (the simulator, while
a step runs) register a deferrer, asked first.

Sections of the runtime's Python code (a submission: a stream marked active must reach a
ready queue) are registered with protect() instead, at no cost per call: a signal that finds
the main thread inside one is sent again a moment later, until it lands outside. Waits inside
them (a full submission queue) are registered with interruptible(): a signal ends those.

A profile written at exit is held further (hold_ending()): SIGINT, SIGTERM and SIGHUP are
held even where their action is the default one, the process's end (a handler of ours stands
in for it meanwhile; SIGKILL cannot be held), and a second signal of a kind held already is
delivered at once, standing for both: it may end a write that is stuck.

For this every Python-level handler runs behind a shim of ours: install() puts one around
each handler in place (Python's own SIGINT one included) and replaces signal.signal and
signal.getsignal by wrappers that do the same for every handler installed later, while
getsignal (and what signal.signal returns) gives back the program's own handler objects. A
handler installed through a reference to signal.signal taken before `import ascentrt` (or
through _signal) has no shim: it runs wherever its signal lands, as Python runs it.
"""

from __future__ import annotations

import _weakrefset
import dis
import os
import signal
import sys
import threading
import weakref
from typing import Any, Callable, Final

from .callsite import is_ours

_get_ident: Final = threading.get_ident
_SIGINT: Final = int(signal.SIGINT)
# Python's own signal.signal and getsignal (enum conversions and all), before ours replace them
_real_signal: Final[Callable[[Any, Any], Any]] = signal.signal
_real_getsignal: Final[Callable[[Any], Any]] = signal.getsignal
_default_int_handler: Final = signal.default_int_handler
_SIG_DFL: Final = signal.SIG_DFL
# The signals that end a process by default and that hold_ending() holds even then
_ENDING: Final = tuple(int(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP))
# The signal numbers, as plain ints (valid_signals() makes an enum member of each)
_SIGNALS: Final = tuple(int(s) for s in signal.valid_signals()
                        if s not in (signal.SIGKILL, signal.SIGSTOP))


class _Held:
    """The main thread's held sections: how deep, and whether a signal came meanwhile."""

    def __init__(self) -> None:
        self.depth = 0
        self.pending = False  # (whether `signals` has any: one native read in release())
        self.signals: list[int] = []  # the signals held, in the order they came
        self.installed = False  # whether install() ran on the main thread
        self.deciding = False   # whether a shim is deciding whether to hold a signal back
        self.ending = 0  # how deep in hold_ending() sections (a second signal of a kind held: at once)
        self.defaults: list[int] = []  # the signals whose default action hold_ending() holds
        self.main: int | None = threading.main_thread().ident  # (a fork from another thread makes that one main)


# (Final, these and _held: a compiled build reads them from C statics, not the module's dict)
_held: Final = _Held()  # (an instance: a compiled build reads its fields natively)


_deferrers: list[Callable[[int], bool]] = []  # fn(signum) -> True when it took the signal itself
_protected: set = set()  # code objects of sections a signal must not cut
_waits: set = set()      # code objects of waits inside them, which a signal may end
_WEAKREF_FILES = {weakref.__file__, _weakrefset.__file__}
_WEAKREF_CALLBACKS = {"_remove", "remove", "__call__", "_exitfunc"}  # (their callbacks there)
_LIBRARY = os.path.join(os.path.dirname(os.path.abspath(os.__file__)), "")  # the standard library
_THREADING = threading.__file__
_CONDITION_WAIT = threading.Condition.wait.__code__
_BLOCKING_LINES = frozenset(  # (Condition.wait's lines that acquire its waiter)
    i.positions.lineno for i in dis.get_instructions(_CONDITION_WAIT)
    if i.argval == "acquire" and i.positions is not None)
_REDELIVER_S = 0.002     # how soon a signal that landed in a protected section comes again
_resend_due = [False]    # whether a timer is on its way to send `_resend_signals` again
_resend_signals: list[int] = []


def protect(*functions: Any) -> None:
    """Register sections of Python code a signal must not cut (compiled ones use hold())."""
    _protected.update(f.__code__ for f in functions if hasattr(f, "__code__"))


def interruptible(*functions: Any) -> None:
    """Register waits inside protected sections that a signal may end (nothing is half done)."""
    _waits.update(f.__code__ for f in functions if hasattr(f, "__code__"))


def _in_protected(frame: Any) -> bool:
    """Whether the main thread, stopped at `frame`, is in a protected section: a protected
    frame comes before any wait of _waits and any code of the program's own (a kernel or
    callback the runtime called runs the program's code: a signal may stop it). Where the
    runtime runs threading's code (a wait's condition, say), anywhere but a blocked acquire
    counts as protected too: an exception there would leave a condition's lock held, or
    release it twice."""
    cut = frame is not None and frame.f_code.co_filename == _THREADING \
        and not (frame.f_code is _CONDITION_WAIT and frame.f_lineno in _BLOCKING_LINES)
    depth = 0
    while frame is not None and depth < 200:
        code = frame.f_code
        if code in _protected:
            return True
        ours = is_ours(code.co_filename)
        if cut and ours:
            return True
        if code in _waits:
            return False
        if not ours and not code.co_filename.startswith(_LIBRARY):
            return False
        frame = frame.f_back
        depth += 1
    return False


def _swallowed_in(frame: Any) -> bool:
    """Whether an exception a handler raises at `frame` would be lost: Python prints and
    ignores what a weakref callback or a __del__ raises (a signal sent again lands wherever
    the main thread is, and one landed in WeakSet's callback as an Event was collected)."""
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
    _resend_due[0] = False  # (first: one added from now on is sent below or by a new timer)
    while _resend_signals:
        os.kill(os.getpid(), _resend_signals.pop(0))


def _send_again(signum: int) -> None:
    """Send `signum` to this process again in a moment (one timer on its way stands for any
    signal that came meanwhile)."""
    if signum not in _resend_signals:
        _resend_signals.append(signum)
    if _resend_due[0]:
        return
    _resend_due[0] = True
    timer = threading.Timer(_REDELIVER_S, _resend)
    timer.daemon = True
    deciding = _held.deciding
    _held.deciding = True  # (a signal while it waits for its thread to begin joins the list)
    try:
        timer.start()
    finally:
        _held.deciding = deciding
    if not deciding and _resend_signals and not _resend_due[0]:
        # The timer fired before its start returned (a loaded machine: 2 ms pass quickly) and
        # the signal it sent landed here, joining the list after the timer had emptied it:
        # nothing would send it again, and the program would never see it.
        _send_again(_resend_signals[0])


def _deferred(signum: int, frame: Any) -> bool:
    """Whether the signal that landed at `frame` is held back (to a deferrer that takes it,
    until the outermost held section ends, or sent again a moment later), not handled now.
    One that lands while the shim itself decides (starting a timer waits) is sent again."""
    if _held.deciding:
        if signum not in _resend_signals:
            _resend_signals.append(signum)
        return True
    _held.deciding = True
    try:
        held = _held_back(signum, frame)
        while _resend_signals and not _resend_due[0]:  # (one that came while it decided)
            _send_again(_resend_signals[0])
        return held
    finally:
        _held.deciding = False


def _held_back(signum: int, frame: Any) -> bool:
    for defer in _deferrers:
        if defer(signum):
            return True
    if _held.depth:
        if signum not in _held.signals:  # (signals coalesce: one stands for all that came)
            _held.signals.append(signum)
        elif _held.ending:  # (a second one while a write at exit holds it: at once, for both)
            if _swallowed_in(frame):  # (raised there, both would be lost: a moment later)
                _send_again(signum)
                return True
            _held.signals.remove(signum)
            _held.pending = bool(_held.signals)
            return False
        _held.pending = True
        return True
    if _in_protected(frame) or _swallowed_in(frame):
        _send_again(signum)
        return True
    return False


class _Shim:
    """What the runtime installs in place of the program's Python handler of a signal: the
    handler, called unless the signal landed where it must be held back."""

    def __init__(self, handler: Any) -> None:
        self.handler = handler

    def __call__(self, signum: int, frame: Any) -> Any:
        if not _deferred(signum, frame):
            _call_handler(self.handler, signum, frame)


# An exception the program's handler raised carries this attribute (its signal): where the
# runtime turns errors into codes (the pyACL facade), it must come out as the program's own.
_RAISED_BY_HANDLER: Final = "_ascentrt_signal_handler_raised"


def _call_handler(handler: Any, signum: int, frame: Any) -> None:
    """handler(signum, frame), marking what it raises as the program's (raised_by_handler)."""
    try:
        handler(signum, frame)
    except BaseException as exc:
        try:
            setattr(exc, _RAISED_BY_HANDLER, signum)
        except (AttributeError, TypeError):  # (an object that takes no attribute: left unmarked)
            pass
        raise


def raised_by_handler(exc: BaseException) -> bool:
    """Whether `exc` came out of the program's own handler of a signal (one installed through
    signal.signal, which the runtime runs behind its shim), not out of the runtime."""
    return getattr(exc, _RAISED_BY_HANDLER, None) is not None


def _on_sigint(signum: int, frame: Any) -> None:
    """Ctrl-C, with Python's own SIGINT handler: held back as any signal, else raised."""
    if not _deferred(signum, frame):
        _default_int_handler(signum, frame)


def _on_default(signum: int, frame: Any) -> None:
    """A signal whose action is the default one (the process's end) while hold_ending() holds
    it: held back as any signal, else what it does by default."""
    if not _deferred(signum, frame):
        _end_by(signum)


def _end_by(signum: int) -> None:
    """Do what `signum` does by default (end the process, for those of _ENDING)."""
    _real_signal(signum, _SIG_DFL)
    signal.raise_signal(signum)


def _shim(signum: Any, handler: Any) -> Any:
    """The handler to install for the program's `handler` of `signum`."""
    if not callable(handler) or type(handler) is _Shim or handler is _on_sigint \
            or handler is _on_default:
        return handler  # (SIG_DFL, SIG_IGN, or one of ours already)
    if handler is _default_int_handler and signum == _SIGINT:
        return _on_sigint
    return _Shim(handler)


def _unshim(handler: Any) -> Any:
    """The program's own handler behind what is installed."""
    if type(handler) is _Shim:
        return handler.handler
    if handler is _on_sigint:
        return _default_int_handler
    if handler is _on_default:
        return _SIG_DFL
    return handler


def _signal_of_program(signalnum: Any, handler: Any) -> Any:
    """signal.signal: set the handler of a signal (the runtime's shim around a Python one) and
    return the previous one, as the program set it. Raises as signal.signal."""
    return _unshim(_real_signal(signalnum, _shim(signalnum, handler)))


def handler_of(signalnum: Any) -> Any:
    """The program's own handler of a signal: signal.getsignal, as the program set it."""
    return _unshim(_real_getsignal(signalnum))


def install() -> None:
    """Put the runtime's shim around every Python handler of a signal (from the main thread:
    those in place; from any thread: those installed later through signal.signal)."""
    signal.signal = _signal_of_program  # (the attribute callers read)
    signal.getsignal = handler_of
    if _held.installed or threading.current_thread() is not threading.main_thread():
        return
    _held.installed = True
    for signum in _SIGNALS:
        handler = _real_getsignal(signum)
        if callable(handler) and _shim(signum, handler) is not handler:
            _real_signal(signum, _shim(signum, handler))


def deliver(signums: list[int]) -> None:
    """Run now, in turn, the program's handlers of signals the runtime held back (where what
    they raise may come out); one a handler's exception cuts off is sent again a moment later."""
    _each_or_send_again(signums, _run_handler)


def _run_handler(signum: int) -> None:
    """Run the program's handler of `signum` here (or what the signal does without one)."""
    handler = handler_of(signum)
    if callable(handler):
        _call_handler(handler, signum, _caller_frame())
    elif handler == signal.SIG_DFL:
        signal.raise_signal(signum)  # (what it does without a handler)


def _each_or_send_again(signums: list[int], run: Callable[[int], Any]) -> None:
    """run(signum) for each in turn; where one raises, the rest are sent again a moment later
    and its exception comes out."""
    for i, signum in enumerate(signums):
        try:
            run(signum)
        except BaseException:
            for rest in signums[i + 1:]:
                _send_again(rest)
            raise


def _caller_frame() -> Any:
    """The innermost Python frame outside this module, for a handler run here."""
    frame: Any = sys._getframe(0)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    return frame


def add_deferrer(defer: Callable[[int], bool]) -> None:
    """Ask defer(signum) first at each signal: True when it took it (to deliver it later)."""
    if defer not in _deferrers:
        _deferrers.append(defer)
    install()


def hold() -> bool:
    """Enter a section no signal's handler may cut; returns whether it counts (the main
    thread's, where handlers run). Pass the result to release()."""
    if _get_ident() != _held.main:
        return False  # (Python runs handlers in the main thread only)
    if not _held.installed:
        install()
    _held.depth += 1
    return True


def give_back(exc: BaseException) -> None:
    """Give the program back a signal its own code took on the main thread inside a runtime
    step, when `exc` is what it raised there: a Ctrl-C's KeyboardInterrupt, or what the
    program's handler of a signal raised (see raised_by_handler).

    The runtime made that exception the code's failure (a condition's, a callback's) to stay
    whole; the signal is handled again as the outermost held section ends, else sent again a
    moment later (where no protected section is cut): for a handler of the program's, that is
    a second run of it, outside the step. Nothing for other exceptions, on other threads
    (where no signal's handler runs), nor for a KeyboardInterrupt while the program's own
    SIGINT handler is in place (the program raised it, not a Ctrl-C's default handler)."""
    signum = getattr(exc, _RAISED_BY_HANDLER, None)
    if signum is None:
        if not isinstance(exc, KeyboardInterrupt) or handler_of(_SIGINT) is not _default_int_handler:
            return
        signum = _SIGINT
    if _get_ident() != _held.main:
        return
    if _held.depth:
        if signum not in _held.signals:
            _held.signals.append(signum)
        _held.pending = True
        return
    _send_again(signum)


def _after_fork_in_child() -> None:
    """A child forked while the main thread held a section starts with none held (its main
    thread is the forking one, which held nothing)."""
    _held.depth = 0
    _held.pending = False
    _held.signals = []
    _held.deciding = False
    _held.main = threading.main_thread().ident  # (threading's own fork hook ran first)
    _held.ending = 0
    _restore_defaults()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _take_held() -> list[int]:
    signums = _held.signals
    _held.signals = []
    _held.pending = False
    return signums


def release(held: bool) -> None:
    """Leave a section entered with hold(); the outermost sends again the signals held
    meanwhile (what their handlers raise comes out of this call: the section's state must be
    whole before it)."""
    if held:
        _held.depth -= 1
        if not _held.depth and _held.pending:
            # (each handler runs here, unless held again)
            _each_or_send_again(_take_held(), signal.raise_signal)


def release_or_undo(held: bool, undo: Callable[[], Any]) -> None:
    """release(held), for a section that made something for its caller: the handlers of the
    signals held meanwhile run now (still held: others wait), and where one raises, undo()
    runs first (the caller will never get what was made), then its exception comes out."""
    if not held:
        return
    if _held.depth > 1 or not _held.pending:
        _held.depth -= 1
        return
    try:
        signums = _take_held()
        while signums:  # (here, whatever frame: what was made is undone where one raises)
            deliver(signums)
            signums = _take_held()  # (those that came while it ran)
    except BaseException:
        try:
            undo()
        finally:
            _held.depth -= 1
            for signum in _take_held():  # (came during the handler or the undo: a Ctrl-C joins
                if signum != _SIGINT:   # the one raised; another comes again in a moment)
                    _send_again(signum)
        raise
    _held.depth -= 1


def hold_ending() -> bool:
    """Enter a section (a profile written at exit) that SIGINT, SIGTERM and SIGHUP may not cut,
    even where their action is the default one, the process's end: it is held as a handler's
    (one ignored stays ignored); a second of a kind held already comes at once, standing for
    both. Returns whether it counts (on the main thread only); pass it to release_ending()."""
    if not hold():
        return False
    _held.ending += 1
    if _held.ending == 1:
        for signum in _ENDING:
            if _real_getsignal(signum) == _SIG_DFL:
                _real_signal(signum, _on_default)
                _held.defaults.append(signum)
    return True


def held_signals() -> list[int]:
    """The signals held back now, in the order they came."""
    return list(_held.signals)


def _restore_defaults() -> None:
    """Give back their default action to the signals hold_ending() held with a handler of ours."""
    defaults, _held.defaults = _held.defaults, []
    for signum in defaults:
        if _real_getsignal(signum) is _on_default:  # (not one the program installed since)
            _real_signal(signum, _SIG_DFL)


def release_ending(held: bool, tell: Callable[[int], Any] | None = None) -> None:
    """Leave a section entered with hold_ending(): as release(), the signals held meanwhile
    handled in the order they came; one whose action is the default one ends the process, as
    it would have (after a handler's exception too). `tell(signum)` is called first for each
    signal held (to say it came): one that fails, say on a closed stderr, changes nothing."""
    if not held:
        return
    if tell is not None:
        for signum in list(_held.signals):
            try:
                tell(signum)
            except Exception:  # (a broken pipe must not leave the signal held for good)
                pass
    _held.ending -= 1
    ends = [] if _held.ending else _held.defaults  # (the default actions it stood in for)
    if not _held.ending:
        _restore_defaults()
    # (release() handles the signals where the outermost hold ends: this one, or one around it)
    due = list(_held.signals) if _held.depth == 1 else []
    try:
        release(True)
    finally:  # (reached where a handler raised: one that ends the process still does)
        for signum in due:
            if signum in ends and _real_getsignal(signum) == _SIG_DFL:
                signal.raise_signal(signum)
