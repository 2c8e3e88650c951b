"""Host-side synchronization on streams: wait for their submitted work, then raise their errors."""

from __future__ import annotations

from ..errors import ExceptionInfo, TaskError
from .scheduler import ENGINE, Hooks


def synchronize_streams(streams: list, timeout: float | None, what: str) -> None:
    """Wait for the work submitted so far on `streams`, then raise their first task error."""
    streams[0]._dq.backend.host_call("synchronize")  # a simulated device charges the call
    sanitizer = Hooks.sanitizer
    seen = sanitizer.stream_clocks(streams) if sanitizer is not None else None
    clock = ENGINE.devices[0].backend.now_ns
    deadline = None if timeout is None else clock() + timeout * 1e9
    for s in streams:
        remaining = None if deadline is None else max((deadline - clock()) / 1e9, 1e-6)
        ENGINE.wait_completed(s, remaining, what)
    if seen is not None:
        sanitizer.host_waited(seen)  # the host now comes after all that work
    raise_stream_errors(streams)


def raise_stream_errors(streams: list, before: int | None = None) -> None:
    """Raise (and clear) the first recorded task error of `streams` (tasks before `before` only)."""
    with ENGINE.lock:
        errors: list[ExceptionInfo] = []
        for s in streams:
            keep: list[ExceptionInfo] = []
            for info in s._errors:
                (errors if before is None or info.task_id < before else keep).append(info)
            s._errors = keep
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more failed tasks)" if len(errors) > 1 else ""
        raise TaskError(f"{first}{more}", code=first.error_code, info=first) from first.cause
