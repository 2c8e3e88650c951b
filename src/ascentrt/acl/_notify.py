"""acl.rt notify calls, onto ascentrt.Notify."""

from __future__ import annotations

from typing import Any

from ..errors import ErrorCode
from ..notify import Notify
from . import constants as C
from ._api import NOTIFIES, AclTypeError, api, fail, need_context, note_task, stream_of


@api("I", out=(0,))
def create_notify(flag: int) -> int:
    """(notify, ret): a wait-until-recorded signal; flag 0 or ACL_NOTIFY_DEVICE_USE_ONLY (aclrtCreateNotify)."""
    if flag not in (C.ACL_NOTIFY_DEFAULT, C.ACL_NOTIFY_DEVICE_USE_ONLY):
        raise fail(ErrorCode.INVALID_PARAM, f"notify flag must be 0 or 1, got {flag}")
    return NOTIFIES.add(Notify(need_context().device))


@api("k")
def destroy_notify(notify: int) -> None:
    """Release the notify (aclrtDestroyNotify)."""
    NOTIFIES.get(notify).destroy()
    NOTIFIES.remove(notify)


@api("kk")
def record_notify(notify: int, stream: int) -> None:
    """Set the notify once the stream reaches this point (aclrtRecordNotify)."""
    s = stream_of(stream)
    s.record_notify(NOTIFIES.get(notify))
    note_task(stream, s)


@api("kkO")
def wait_and_reset_notify(notify: int, stream: int, timeout: int) -> None:
    """The stream waits until the notify is set, then resets it; timeout ms, 0 = forever (aclrtWaitAndResetNotify)."""
    if isinstance(timeout, bool) or not isinstance(timeout, int):
        raise AclTypeError("acl.rt.wait_and_reset_notify args parse failed")
    if timeout < 0:
        raise AclTypeError("timeout can't be a negative number!")
    if timeout >= 1 << 32:
        raise AclTypeError("timeout should be less than 2**32!")
    s = stream_of(stream)
    s.wait_notify(NOTIFIES.get(notify), None if timeout == 0 else timeout / 1000.0)
    note_task(stream, s)


@api("k", out=(0,))
def get_notify_id(notify: int) -> int:
    """(id, ret): the notify's id (aclrtGetNotifyId)."""
    return NOTIFIES.get(notify).id


def notify_batch_reset(*args: Any) -> int:
    """ret: clear every listed notify's pending record (aclrtNotifyBatchReset).

    As pyACL: a non-list raises ValueError, a non-int element TypeError.
    """
    if len(args) != 1:
        raise AclTypeError("acl.rt.notify_batch_reset args parse failed")
    notifies = args[0]
    if not isinstance(notifies, list):
        raise ValueError("notify_batch_reset needs a list of notifies")
    if not all(isinstance(n, int) for n in notifies):
        raise TypeError("notify_batch_reset takes int notify handles")
    return _batch_reset(notifies)


@api("O")
def _batch_reset(handles: list[int]) -> None:
    targets = [NOTIFIES.get(h) for h in handles]  # all valid before any is touched
    for n in targets:
        n.reset()


__all__ = ["create_notify", "destroy_notify", "record_notify", "wait_and_reset_notify",
           "get_notify_id", "notify_batch_reset"]
