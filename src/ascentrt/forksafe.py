"""The runtime's locks, made here so that a forked child finds each free and what it guards whole.

A fork copies the locks other threads held at that instant, held, into a child where those
threads do not exist: the child's first call that takes one waits for ever (a malloc while
another thread of the parent freed, say), and what the lock guarded may be half-updated. Every
lock, condition and event the runtime's modules and objects keep is made through this module,
and one `os.register_at_fork` hook takes care of them all, as a C library's pthread_atfork
handlers do for its own: before the fork the forking thread takes each lock (so no other
thread is inside what one guards), and releases them after it, in the parent and the child.
A lock it cannot get within FORK_WAIT_S (another thread holds it for long) is renewed
in the child instead (the interpreter's `_at_fork_reinit`, as `threading` and `logging` do):
never a hang. tests/test_layers.py fails on a lock made any other way.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

FORK_WAIT_S = 1.0  # the longest a fork waits for other threads to leave the runtime's locks
STEP_S = 0.02      # how long it waits for one lock before it takes that one first

# Every lock, condition and event made here that may still be in use, in the order made. A
# per-object one lives as long as its object: entries no one else holds any more are pruned as
# the list doubles.
_made: list[Any] = []
_made_lock = threading.Lock()
_prune_at = 64
_taken: list[Any] = []  # the locks the forking thread took before the fork, to release after it


def _keep(obj: Any) -> Any:
    """Note `obj` for the fork hooks; returns it."""
    global _prune_at
    with _made_lock:
        _made.append(obj)
        if len(_made) >= _prune_at:
            # (held only by the list, the loop's name and getrefcount's argument: unused)
            _made[:] = [o for o in _made if sys.getrefcount(o) > 3]
            _prune_at = max(64, 2 * len(_made))
    return obj


def lock() -> threading.Lock:
    """A threading.Lock that a fork leaves free in the child."""
    return _keep(threading.Lock())


def rlock() -> threading._RLock:
    """A threading.RLock that a fork leaves free in the child (held still by the forking
    thread where it held it)."""
    return _keep(threading.RLock())


def condition(of: Any = None) -> threading.Condition:
    """A threading.Condition over lock `of` (one made here; None: a new rlock()) that a fork
    leaves free in the child, with no waiters (their threads are not in the child)."""
    return _keep(threading.Condition(rlock() if of is None else of))


def event() -> threading.Event:
    """A threading.Event whose inner lock a fork leaves free in the child (its flag kept)."""
    return _keep(threading.Event())


# How long a start cut by an exception waits for its thread to begin before it starts another
# (a started thread begins within milliseconds; one that never began was never started)
BEGIN_WAIT_S = 0.5


class _Start:
    """One start_thread(): the target runs on the first of its threads to begin, once."""

    def __init__(self, target: Any, args: tuple) -> None:
        self.target, self.args = target, args
        self.claim = lock()
        self.claimed = False
        self.began = event()

    def run(self) -> None:
        with self.claim:
            if self.claimed:
                return  # (a thread started again after a cut start whose thread began late)
            self.claimed = True
        self.began.set()
        self.target(*self.args)


def start_thread(target: Any, name: str, args: tuple = ()) -> None:
    """Run target(*args) on a new daemon thread, exactly once, even where a signal handler of
    the program raises meanwhile (inside Thread.start, say): its exception is raised once the
    thread has begun, never leaving a thread that runs unknown to the caller's next try or none
    at all; what creating a thread raises (RuntimeError: can't start new thread) is raised with
    no thread begun. A caller that records the thread after this returns finds, where an
    exception came between, a thread begun that it did not record: what it starts again must
    see the first one (the runtime's singletons claim their role as they begin)."""
    if sys.is_finalizing():  # (Thread.start would wait for ever for a thread that cannot begin)
        raise RuntimeError("can't create new thread at interpreter shutdown")
    start = _Start(target, args)
    pending: BaseException | None = None
    while not start.began.is_set():
        try:
            threading.Thread(target=start.run, daemon=True, name=name).start()
        except BaseException as exc:
            if type(exc) in (RuntimeError, MemoryError) and not start.began.is_set():
                raise  # (no thread could be made)
            if pending is None:
                pending = exc  # (the program's, from a signal handler: raised once it began)
        try:
            start.began.wait(BEGIN_WAIT_S)
        except BaseException as exc:
            if pending is None:
                pending = exc
    if pending is not None:
        raise pending


def _is_lock(obj: Any) -> bool:
    """Whether `obj` is one of the plain locks made here (conditions and events are over locks)."""
    return not isinstance(obj, (threading.Condition, threading.Event))


def _before_fork() -> None:
    """Take every lock made here, one after the other, each as soon as its holder lets it go.
    One still held after STEP_S may be held by a thread that waits for one taken already
    (locks nest in the order the code takes them, which the order made need not be): give
    back all, move that one first (the order learns how they nest) and begin again, for
    FORK_WAIT_S at most in all; then take what is free and go on."""
    _made_lock.acquire()
    deadline = time.monotonic() + FORK_WAIT_S
    while time.monotonic() < deadline:
        for obj in _made:
            if not _is_lock(obj):
                continue
            if obj.acquire(timeout=STEP_S):
                _taken.append(obj)
                continue
            for held in reversed(_taken):
                held.release()
            _taken.clear()
            _made.remove(obj)
            _made.insert(0, obj)
            break
        else:
            return
    _taken.extend(obj for obj in _made if _is_lock(obj) and obj.acquire(False))


def _after_fork_in_parent() -> None:
    """Release what _before_fork took."""
    for obj in reversed(_taken):
        obj.release()
    _taken.clear()
    _made_lock.release()


def _after_fork_in_child() -> None:
    """Release what _before_fork took; renew the locks it could not take (another thread,
    which is not in the child, held them), the conditions' waiters and the events' locks."""
    global _made_lock
    taken = {id(obj) for obj in _taken}
    for obj in reversed(_taken):
        obj.release()
    _taken.clear()
    for obj in _made:
        if isinstance(obj, threading.Condition):
            obj._waiters.clear()  # type: ignore[attr-defined]  # (what its _at_fork_reinit clears)
        elif id(obj) not in taken:
            obj._at_fork_reinit()
    _made_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)
