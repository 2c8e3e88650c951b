"""acl.rt last-error and exception-info calls, onto ascentrt.errors and the engine's hooks."""

from __future__ import annotations

import collections
import itertools
from typing import Any, Callable

from .. import forksafe
from .. import errors as _errors
from ..callback import _live_thread
from ..engine.hooks import Hooks
from . import constants as C
from ._api import AclTypeError

_INVALID = 0xFFFFFFFF  # what the C API returns for fields of an invalid exception info
_KEEP = 4096           # exception infos kept addressable (oldest forgotten first)
_lock = forksafe.lock()
# handle -> (the info, the failing task's thread as an OS id, found when it was reported)
_infos: collections.OrderedDict[int, tuple[_errors.ExceptionInfo, int]] = collections.OrderedDict()
_handles = itertools.count(0x5E0000001000, 0x40)
_user_callback: list[Callable[[int], object] | None] = [None]


def _level(name: str, args: tuple[Any, ...]) -> int | None:
    if len(args) != 1 or not isinstance(args[0], int) or isinstance(args[0], bool):
        raise AclTypeError(f"acl.rt.{name} args parse failed")
    return args[0]


def get_last_error(*args: Any) -> int:
    """ret: this thread's last error code, then cleared; level must be ACL_RT_THREAD_LEVEL (aclrtGetLastError)."""
    if _level("get_last_error", args) != C.ACL_RT_THREAD_LEVEL:
        return C.ACL_ERROR_INVALID_PARAM
    return _errors.get_last_error()


def peek_at_last_error(*args: Any) -> int:
    """ret: this thread's last error code, not cleared (aclrtPeekAtLastError)."""
    if _level("peek_at_last_error", args) != C.ACL_RT_THREAD_LEVEL:
        return C.ACL_ERROR_INVALID_PARAM
    return _errors.peek_at_last_error()


def _os_thread_id(ident: int) -> int:
    """The OS thread id (32 bits, as CANN reports it) of the live thread `ident` (Python's
    threading.get_ident), found when the failure is reported; 0xFFFFFFFF once it has ended."""
    thread = _live_thread(ident)
    native = None if thread is None else thread.native_id
    return native if native is not None and 0 <= native < _INVALID else _INVALID


def _dispatch(info: _errors.ExceptionInfo) -> None:
    """Engine hook: give the user's callback an int handle for the failed task's info."""
    fn = _user_callback[0]
    if fn is None:
        return
    with _lock:
        handle = next(_handles)
        _infos[handle] = (info, _os_thread_id(info.thread_id))
        while len(_infos) > _KEEP:
            _infos.popitem(last=False)
    fn(handle)


def set_exception_info_callback(*args: Any) -> int:
    """ret: call fn(info) when a device task fails; no argument or None clears it (aclrtSetExceptionInfoCallback)."""
    if len(args) > 1:
        raise AclTypeError("acl.rt.set_exception_info_callback args parse failed")
    fn = args[0] if args else None
    if fn is not None and not callable(fn):
        raise AclTypeError("parameter must be callable")
    _user_callback[0] = fn
    _dispatch.__wrapped__ = fn  # type: ignore[attr-defined]  # (what the engine names when fn raises)
    hooks = Hooks.exception_callbacks
    if fn is not None and _dispatch not in hooks:
        hooks.append(_dispatch)
    elif fn is None and _dispatch in hooks:
        hooks.remove(_dispatch)
    return C.ACL_SUCCESS


def _field(name: str, attr: str, what: str = "") -> Callable[..., int]:
    def read(*args: Any) -> int:
        if len(args) != 1 or not isinstance(args[0], int):
            raise AclTypeError(f"acl.rt.{name} args parse failed")
        with _lock:
            entry = _infos.get(args[0])
        if entry is None:
            return _INVALID
        info, os_thread = entry
        return os_thread if attr == "os_thread" else int(getattr(info, attr))
    read.__name__ = read.__qualname__ = name
    read.__doc__ = (f"int: the {what or attr.replace('_', ' ')} of an exception info, 0xFFFFFFFF "
                    f"for an unknown one (aclrt{''.join(w.title() for w in name.split('_'))}).")
    return read


get_task_id_from_exception_info = _field("get_task_id_from_exception_info", "task_id")
get_stream_id_from_exception_info = _field("get_stream_id_from_exception_info", "stream_id")
get_thread_id_from_exception_info = _field(
    "get_thread_id_from_exception_info", "os_thread",
    "OS id (32 bits; 0xFFFFFFFF once it had ended) of the thread that submitted the failed task")
get_device_id_from_exception_info = _field("get_device_id_from_exception_info", "device_id")
get_error_code_from_exception_info = _field("get_error_code_from_exception_info", "error_code")


def exception_info(handle: int) -> _errors.ExceptionInfo | None:
    """The core ExceptionInfo behind an info handle (for programs that want the whole story)."""
    with _lock:
        entry = _infos.get(handle)
    return None if entry is None else entry[0]


__all__ = ["get_last_error", "peek_at_last_error", "set_exception_info_callback",
           "get_task_id_from_exception_info", "get_stream_id_from_exception_info",
           "get_thread_id_from_exception_info", "get_device_id_from_exception_info",
           "get_error_code_from_exception_info"]
