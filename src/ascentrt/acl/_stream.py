"""acl.rt stream calls, onto ascentrt.Stream through the current context."""

from __future__ import annotations

from .. import context
from ..callback import forget_destroyed_streams
from ..context import is_default_stream
from ..engine import ENGINE, PRIORITY_LEVELS
from ..errors import ErrorCode
from ..hccl.collectives import accept_stream_handles
from ..stream import FailureMode, Stream, counted_streams
from . import constants as C
from ._api import EVENTS, STREAMS, AclTypeError, api, fail, need_context, note_task, stream_of, timeout_ms
from ._event import NO_LIMIT, check_sync_flag, complete_before_record, note_wait

accept_stream_handles(stream_of)  # (hccl's calls take the aclrtStream handles pyACL code holds)


@api("", out=(0,))
def create_stream() -> int:
    """(stream, ret): a new stream, highest priority, in the current context (aclrtCreateStream)."""
    return STREAMS.add(need_context().create_stream(0))


@api("II", out=(0,))
def create_stream_with_config(priority: int, flag: int) -> int:
    """(stream, ret): a stream of priority 0 (highest)..7, clamped; flags are accepted and
    ignored (aclrtCreateStreamWithConfig)."""
    priority = min(max(priority, 0), PRIORITY_LEVELS - 1)
    return STREAMS.add(need_context().create_stream(priority))


def _destroy(handle: int, force: bool) -> None:
    stream = stream_of(handle, own=True)
    if handle == 0 or is_default_stream(stream):
        raise fail(ErrorCode.INVALID_PARAM, "a default stream cannot be destroyed")
    if force:
        stream.destroy(force=True)
    else:
        _destroy_when_done(stream)
    STREAMS.remove(handle)  # only now: a destroy cut short leaves it for destroy_stream_force
    forget_destroyed_streams()  # its report subscription goes with it


def _destroy_when_done(stream: Stream) -> None:
    """Wait for the stream's work as long as it can finish, then destroy it; once it is stuck,
    fail with the stuck wait's code and leave the stream alive: 507046 (the synchronize
    timeout) for a wait nothing will release, 507950 for a cycle of waits (a deadlock)."""
    stuck = context.wait_while_it_can_finish(stream, lambda t: stream.destroy(timeout=t))
    if stuck is not None:
        raise fail(stuck.code, f"{stuck.message}; the stream is left alive: destroy_stream_force "
                               f"discards its work") from stuck


@api("k")
def destroy_stream(stream: int) -> None:
    """Wait for the stream's tasks, then destroy it; stuck: 507046, or 507950 in a cycle (aclrtDestroyStream)."""
    if stream == 0:
        raise fail(ErrorCode.INVALID_PARAM, "stream handle is null")
    _destroy(stream, force=False)


@api("k")
def destroy_stream_force(stream: int) -> None:
    """Destroy the stream, discarding its pending tasks (aclrtDestroyStreamForce)."""
    if stream == 0:
        raise fail(ErrorCode.INVALID_PARAM, "stream handle is null")
    _destroy(stream, force=True)


@api("k")
def synchronize_stream(stream: int) -> None:
    """Block until the stream's submitted tasks finish; a failed task's code comes back (aclrtSynchronizeStream)."""
    stream_of(stream).synchronize()


@api("ki")
def synchronize_stream_with_timeout(stream: int, timeout: int) -> None:
    """As synchronize_stream, at most timeout ms (-1 forever); expiry is 507046 (aclrtSynchronizeStreamWithTimeout)."""
    s = stream_of(stream)
    s.synchronize(timeout_ms(timeout))


@api("k", out=(C.ACL_STREAM_STATUS_COMPLETE,))
def stream_query(stream: int) -> int:
    """(status, ret): 0 when every submitted task finished, 1 otherwise (aclrtStreamQuery)."""
    done = stream_of(stream).query()
    return C.ACL_STREAM_STATUS_COMPLETE if done else C.ACL_STREAM_STATUS_NOT_READY


@api("kI")
def set_stream_failure_mode(stream: int, mode: int) -> None:
    """0 continue on failure (default), 1 stop the stream at the first failed task (aclrtSetStreamFailureMode)."""
    s = stream_of(stream, own=True)
    if mode not in (C.ACL_CONTINUE_ON_FAILURE, C.ACL_STOP_ON_FAILURE):
        raise fail(ErrorCode.INVALID_PARAM, f"failure mode must be 0 or 1, got {mode}")
    s.set_failure_mode(FailureMode(mode))


@api("kk")
def stream_wait_event(stream: int, event: int) -> None:
    """Later tasks of the stream wait for the work the event's last record captured (aclrtStreamWaitEvent)."""
    s = stream_of(stream, own=True)
    ev = EVENTS.get(event)
    check_sync_flag(event, "stream_wait_event")
    if complete_before_record(event, ev):
        return
    s.wait(ev)
    note_task(stream, s)  # (before note_wait's own marker task)
    note_wait(event, s)


@api("k", out=(0,))
def stream_get_id(stream: int) -> int:
    """(id, ret): the stream's id, as exception infos report it (aclrtStreamGetId)."""
    return stream_of(stream).id


@api("", out=(0,))
def get_stream_available_num() -> int:
    """(n, ret): streams the current device can still create (aclrtGetStreamAvailableNum)."""
    dev = need_context().device
    limit = dev._backend.properties().max_streams or NO_LIMIT
    with ENGINE.lock:  # (streams come and go under it)
        alive = counted_streams(dev)
    return max(limit - alive, 0)


_MODELLED_STREAM_ATTRS = (C.ACL_STREAM_ATTR_FAILURE_MODE, C.ACL_STREAM_ATTR_PRIORITY)
_KNOWN_STREAM_ATTRS = range(C.ACL_STREAM_ATTR_FAILURE_MODE, C.ACL_STREAM_ATTR_PRIORITY + 1)


def _check_stream_attr(attr: int) -> None:
    if attr not in _KNOWN_STREAM_ATTRS:
        raise fail(ErrorCode.RT_PARAM_INVALID, f"unknown stream attribute {attr}")
    if attr not in _MODELLED_STREAM_ATTRS:  # overflow check, custom tag, op-info cache
        raise fail(ErrorCode.RT_FEATURE_NOT_SUPPORT, f"stream attribute {attr} has no model in ascentrt")


@api("ki", out=(None,))
def get_stream_attribute(stream: int, attr: int) -> dict[str, int | list[int]]:
    """(dict, ret): {"failureMode": m} (attr 1), {"reserved": [priority, 0, 0, 0]} (5) (aclrtGetStreamAttribute)."""
    s = stream_of(stream)
    _check_stream_attr(attr)
    if attr == C.ACL_STREAM_ATTR_FAILURE_MODE:
        return {"failureMode": int(s.failure_mode)}
    # pyACL returns the value union's reserve words for attributes it has no key for.
    return {"reserved": [s.priority, 0, 0, 0]}


@api("kiO")
def set_stream_attribute(stream: int, attr: int, value: object) -> None:
    """Set attribute 1, the failure mode ({"failureMode": 0 or 1}) (aclrtSetStreamAttribute)."""
    if not isinstance(value, dict):
        raise AclTypeError("the aclrtStreamAttrValue argument is not dict")
    s = stream_of(stream)
    _check_stream_attr(attr)
    if attr == C.ACL_STREAM_ATTR_PRIORITY:
        raise fail(ErrorCode.RT_FEATURE_NOT_SUPPORT, "a stream's priority is fixed when it is created")
    mode = value.get("failureMode", 0)  # (pyACL leaves a missing member 0)
    if isinstance(mode, bool) or not isinstance(mode, int):
        raise AclTypeError("acl.rt.set_stream_attribute args parse failed!")
    if mode not in (C.ACL_CONTINUE_ON_FAILURE, C.ACL_STOP_ON_FAILURE):
        raise fail(ErrorCode.RT_PARAM_INVALID, f"failure mode must be 0 or 1, got {mode}")
    s.set_failure_mode(FailureMode(mode))


@api("k")
def stream_abort(stream: int) -> None:
    """Discard the stream's tasks not started yet; the stream stays usable (aclrtStreamAbort)."""
    stream_of(stream, own=True).abort()


def _overflow_stream(stream: int) -> Stream:
    s = stream_of(stream)
    if s._capture is not None:
        raise fail(ErrorCode.RT_STREAM_CAPTURED, f"stream {s.id} is being captured")
    return s


@api("kI")
def set_stream_overflow_switch(stream: int, flag: int) -> None:
    """Turn float overflow detection of the stream's later tasks off (0) (aclrtSetStreamOverflowSwitch);
    on (1) is refused (207000): kernels here compute IEEE infinities and NaNs, nothing detects."""
    if flag not in (0, 1):
        raise fail(ErrorCode.INVALID_PARAM, f"overflow switch must be 0 or 1, got {flag}")
    _overflow_stream(stream)
    if flag:
        raise fail(ErrorCode.RT_FEATURE_NOT_SUPPORT, "float overflow detection has no model in "
                                                     "ascentrt (ACL_STREAM_ATTR_FLOAT_OVERFLOW_CHECK)")


@api("k", out=(0,))
def get_stream_overflow_switch(stream: int) -> int:
    """(flag, ret): 0, overflow detection off (aclrtGetStreamOverflowSwitch)."""
    stream_of(stream)
    return 0


__all__ = ["create_stream", "create_stream_with_config", "destroy_stream", "destroy_stream_force",
           "synchronize_stream", "synchronize_stream_with_timeout", "stream_query",
           "set_stream_failure_mode", "stream_wait_event", "stream_get_id", "get_stream_available_num",
           "get_stream_attribute", "set_stream_attribute", "stream_abort",
           "set_stream_overflow_switch", "get_stream_overflow_switch"]

