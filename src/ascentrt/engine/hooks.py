"""What the engine shares with its observers and executors: the observer slots (Hooks) and
the task each executor thread runs (current_task), kept apart from the scheduler so that the
compiled stepping interface (engine.stepping) reads them without importing it."""

from __future__ import annotations

import threading
from typing import Any

from .task import Task


class _ThreadStream(threading.local):
    """The stream whose batch this executor thread is running (None on host threads), and
    whether this thread's waits have a budget of the runtime's own (see
    scheduler.teardown_budget)."""

    stream: Any = None
    budget: bool = False


_local = _ThreadStream()


class Hooks:
    """Observers registered with the core (it never imports them); each slot is empty when unused.

    profiler: task_done(task[, error text]) and tasks_done(stream, tasks) (a batch), while
        profiling; tasks_dropped(stream, tasks, now) for work dropped unrun (under the lock).
    exception_callbacks: fn(ExceptionInfo), called outside the lock; a facade's hook that
        calls the program's function names it as `fn.__wrapped__` (what a failure is logged as).
    capture: the stream-capture implementation (begin, end, status, task groups), set by
        ascentrt.graph when it is imported.
    sync_guards: fn(what) called before a synchronous host call; a capture in progress
        registers one that refuses calls it forbids (empty, and free, otherwise).
    thread_holds: fn(thread id) -> streams that wait for that host thread to act (a report
        thread's queued blocking callbacks), for the deadlock diagnosis of its host waits.
    sanitizer: the race sanitizer while it is on: submitted(stream, task) (before the engine
        lock) and submitted_all(work) (under it) see tasks before they are queued (it may raise
        to refuse them), the host synchronizations tell it what the host waited for, and
        markers_released(markers) the records that will never come.
    """

    profiler: Any = None
    exception_callbacks: list = []
    capture: Any = None
    sync_guards: list = []
    thread_holds: list = []
    sanitizer: Any = None


def check_sync_allowed(what: str) -> None:
    """Ask the registered guards whether the synchronous host call `what` may run (they raise)."""
    for guard in list(Hooks.sync_guards):
        guard(what)


def current_task() -> Task | None:
    """The task the calling executor thread is running (None on user threads)."""
    s = _local.stream
    return None if s is None else s._running


def act_for_stream(stream) -> object:
    """Mark the calling thread as running `stream`'s current task (a report thread running a
    blocking callback on its behalf); returns the previous mark for restore_stream_mark()."""
    prev = _local.stream
    _local.stream = stream
    return prev


def restore_stream_mark(prev) -> None:
    """Undo act_for_stream()."""
    _local.stream = prev
