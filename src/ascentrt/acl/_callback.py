"""acl.rt host callbacks with report threads, onto ascentrt.callback."""

from __future__ import annotations

from typing import Any, Callable

from .. import callback as _cb
from ..errors import ErrorCode
from . import constants as C
from ._api import AclTypeError, api, fail, note_task, stream_of


@api("kk")
def subscribe_report(thread_id: int, stream: int) -> None:
    """Let a thread (its id, as threading.get_ident) run the stream's callbacks (aclrtSubscribeReport)."""
    _cb.subscribe(thread_id, stream_of(stream))


@api("kk")
def unsubscribe_report(thread_id: int, stream: int) -> None:
    """Undo subscribe_report; callbacks not yet run are cancelled (aclrtUnSubscribeReport)."""
    _cb.unsubscribe(thread_id, stream_of(stream))


@api("OOik")
def launch_callback(fn: Callable[..., Any], user_data: object, block_type: int, stream: int) -> None:
    """Queue fn(user_data) for the stream's report thread; block_type 1 holds the stream until
    it ran (aclrtLaunchCallback)."""
    if not callable(fn):
        raise AclTypeError("parameter must be callable")
    if block_type not in (C.ACL_CALLBACK_NO_BLOCK, C.ACL_CALLBACK_BLOCK):
        raise fail(ErrorCode.INVALID_PARAM, f"block type must be 0 or 1, got {block_type}")
    s = stream_of(stream)
    note_task(stream, s, _cb.launch_callback(fn, user_data, s, blocking=block_type == C.ACL_CALLBACK_BLOCK))


@api("i")
def process_report(timeout: int) -> None:
    """Run this thread's queued callbacks, waiting up to timeout ms (-1 forever); 507012 when
    none came (aclrtProcessReport)."""
    if timeout == 0 or timeout < -1:
        raise fail(ErrorCode.INVALID_PARAM, f"timeout must be -1 or > 0 ms, got {timeout}")
    _cb.process_reports(None if timeout == -1 else timeout / 1000.0)


__all__ = ["subscribe_report", "unsubscribe_report", "launch_callback", "process_report"]
