"""Host-side synchronization on streams: wait for their submitted work, then raise their errors."""

from __future__ import annotations

from ..errors import ErrorCode, ExceptionInfo, StreamStateError, TaskError, warn_at_caller
from .hooks import Hooks
from .scheduler import ENGINE


def synchronize_streams(streams: list, timeout: float | None, what: str) -> None:
    """Wait for the work submitted so far on `streams`, then raise their first task error."""
    sanitizer = Hooks.sanitizer
    seen = sanitizer.stream_clocks(streams) if sanitizer is not None else None
    clock = ENGINE.devices[0].backend.now_ns
    aborts = [(s._aborts, s._submitted) for s in streams]
    deadline = None if timeout is None else clock() + timeout * 1e9
    # One wait for them all (the host wakes once, after the last), then the detached stream of
    # non-blocking host functions, which the others feed as they get to them.
    fed = [s for s in streams if s is s._dq.detached]
    for group in ([s for s in streams if s is not s._dq.detached], fed):
        if group:
            remaining = None if deadline is None else max((deadline - clock()) / 1e9, 1e-6)
            ENGINE.wait_all_completed(group, remaining, what)
    # A simulated device charges the call's return path once, from when the host had the work
    # done: from the call (it was done already) or from its completion (the host waited).
    streams[0]._dq.backend.host_call("synchronize")
    if seen is not None:
        sanitizer.host_waited(seen)  # the host now comes after all that work
    raise_stream_errors(streams)
    raise_if_aborted(streams, aborts)


def raise_if_aborted(streams: list, aborts: list[tuple[int, int]]) -> None:
    """Raise StreamStateError (107023) when a discard since `aborts` ((discard count, last task
    waited for) per stream) dropped work the synchronization waited for: it did not get it
    done (as aclrtSynchronizeStream returns ACL_ERROR_RT_STREAM_ABORT after aclrtStreamAbort).
    Work queued after the synchronization began is not its business."""
    for s, (seen, upto) in zip(streams, aborts):
        if s._aborts == seen:
            continue
        for count, first, what in s._abort_log:
            if count > seen and first <= upto:
                raise StreamStateError(f"{what} while the synchronization waited: that work "
                                       f"never ran", code=ErrorCode.RT_STREAM_ABORT)


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


def warn_discarded(what: str, dropped: dict[int, int]) -> None:
    """Say (RuntimeWarning) how many pending tasks a teardown discarded, per stream id: work
    that could not finish in time never ran, and its results are not there."""
    lost = {sid: n for sid, n in dropped.items() if n}
    if lost:
        where = ", ".join(f"{n} on stream {sid}" for sid, n in sorted(lost.items()))
        warn_at_caller(f"ascentrt: {what} discarded {sum(lost.values())} pending task(s) that "
                     f"could not finish ({where}): that work never ran", RuntimeWarning)
