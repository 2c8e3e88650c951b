"""Error codes (CANN's numbers), the exception hierarchy, ExceptionInfo and per-thread last error."""

from __future__ import annotations

import contextlib
import enum
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .callsite import user_frame


class ErrorCode(enum.IntEnum):
    """Runtime error codes; numbers follow CANN's acl_base_rt.h / rt_error_codes.h where CANN has one."""

    SUCCESS = 0
    # 1000xx: caller / environment errors (ACL layer)
    INVALID_PARAM = 100000
    UNINITIALIZE = 100001
    REPEAT_INITIALIZE = 100002
    INVALID_FILE = 100003
    REPEAT_SUBSCRIBE = 100033
    REPEAT_FINALIZE = 100037
    # 2000xx: resources (ACL layer)
    BAD_ALLOC = 200000
    API_NOT_SUPPORT = 200001
    INVALID_DEVICE = 200002
    MEMORY_ADDRESS_UNALIGNED = 200003
    RESOURCE_NOT_MATCH = 200004
    INVALID_RESOURCE_HANDLE = 200005
    FEATURE_UNSUPPORTED = 200006
    # 1070xx: runtime parameter / state errors
    RT_PARAM_INVALID = 107000
    RT_INVALID_DEVICEID = 107001
    RT_CONTEXT_NULL = 107002
    RT_STREAM_CONTEXT = 107003
    RT_EVENT_TIMESTAMP_INVALID = 107006
    RT_EVENT_TIMESTAMP_REVERSAL = 107007
    RT_ADDR_UNALIGNED = 107008
    RT_STREAM_SUBSCRIBE = 107011
    RT_THREAD_SUBSCRIBE = 107012
    RT_STREAM_NO_CB_REG = 107015
    RT_INVALID_MEMORY_TYPE = 107016
    RT_INVALID_HANDLE = 107017
    RT_WAIT_TIMEOUT = 107019
    RT_TASK_TIMEOUT = 107020
    RT_SYSPARAMOPT_NOT_SET = 107021
    RT_DEVICE_TASK_ABORT = 107022
    RT_STREAM_ABORT = 107023
    RT_CAPTURE_DEPENDENCY = 107024
    RT_STREAM_UNJOINED = 107025
    RT_STREAM_CAPTURED = 107027
    RT_EVENT_CAPTURED = 107028
    RT_STREAM_NOT_CAPTURED = 107029
    RT_CAPTURE_MODE_NOT_SUPPORT = 107030
    RT_STREAM_CAPTURE_IMPLICIT = 107031
    RT_STREAM_CAPTURE_UNMATCHED = 107036
    RT_MODEL_RUNNING = 107037
    RT_STREAM_CAPTURE_WRONG_THREAD = 107038
    RT_MODEL_UPDATE_FAILED = 107040
    # 2070xx: runtime resource errors
    RT_FEATURE_NOT_SUPPORT = 207000
    RT_MEMORY_ALLOCATION = 207001
    RT_MEMORY_FREE = 207002
    RT_NO_DEVICE = 207004
    RT_RESOURCE_ALLOC_FAIL = 207005
    RT_NO_EVENT_RESOURCE = 207007
    RT_NO_STREAM_RESOURCE = 207008
    RT_NO_NOTIFY_RESOURCE = 207009
    RT_OVER_LIMIT = 207012
    RT_DEVICE_OOM = 207018
    # 5070xx: execution / internal errors
    RT_INTERNAL_ERROR = 507000
    RT_STREAM_NOT_COMPLETE = 507004
    RT_EVENT_NOT_COMPLETE = 507006
    RT_CONTEXT_RELEASE_ERROR = 507007
    RT_MODEL_EXECUTE = 507011
    RT_REPORT_TIMEOUT = 507012
    RT_AICORE_EXCEPTION = 507015
    RT_AICPU_EXCEPTION = 507018
    RT_STREAM_SYNC_TIMEOUT = 507046
    RT_EVENT_SYNC_TIMEOUT = 507047
    RT_COPY_DATA = 507052
    RT_SUSPECT_REMOTE_ERROR = 507057  # a peer's failure (HCCL's E_REMOTE on a rank's task)
    RT_STREAM_CAPTURE_INVALIDATED = 507903
    # No CANN number: a device that cannot make progress (reported instead of hanging).
    RT_DEADLOCK = 507950


@dataclass(frozen=True)
class ExceptionInfo:
    """What the runtime knows about a failed task: where it ran and why it failed."""

    device_id: int
    stream_id: int
    task_id: int
    error_code: int
    task_name: str = ""
    cause: BaseException | None = None
    thread_id: int = 0

    def __str__(self) -> str:
        cause = f": {type(self.cause).__name__}: {self.cause}" if self.cause is not None else ""
        return (f"task {self.task_id} ({self.task_name or 'unnamed'}) on device {self.device_id} "
                f"stream {self.stream_id} failed with {self.error_code}{cause}")


class AscentError(Exception):
    """Root of every ascentrt error; `.code` is an ErrorCode, `.info` an ExceptionInfo or None."""

    default_code = ErrorCode.RT_INTERNAL_ERROR

    def __init__(self, message: str, code: int | None = None, info: ExceptionInfo | None = None):
        self.code = ErrorCode(code) if code is not None else self.default_code
        self.info = info
        self.message = message  # (the cause in words, without the code)
        super().__init__(f"[{int(self.code)} {self.code.name}] {message}")
        _last.code = int(self.code)  # every error raised in a host thread becomes its last error

    def __reduce__(self) -> tuple:
        # (pickle, as multiprocessing sends a worker's error, and copy.copy: `args` hold the
        # text with its code already in front, and __init__ would put it there again and set
        # the receiving thread's last error; the rebuilt error gets the same args and attributes)
        return _rebuilt, (type(self), self.args), self.__dict__

    def in_words(self) -> str:
        """The error as a command prints it: the cause first, its code after."""
        return f"{self.message} ({int(self.code)} {self.code.name})"


class InvalidArgumentError(AscentError, ValueError):
    """A parameter is out of range, of the wrong kind, or inconsistent with the others."""

    default_code = ErrorCode.INVALID_PARAM


class InvalidDeviceError(AscentError, ValueError):
    """A device id outside [0, device_count())."""

    default_code = ErrorCode.RT_INVALID_DEVICEID


class InvalidHandleError(AscentError, ValueError):
    """A stream, event, notify or buffer that is destroyed, freed or belongs elsewhere."""

    default_code = ErrorCode.RT_INVALID_HANDLE


class InvalidAddressError(AscentError, ValueError):
    """A pointer or byte range that does not lie inside one live allocation of the right kind."""

    default_code = ErrorCode.INVALID_PARAM


class OutOfMemoryError(AscentError, MemoryError):
    """The device (or pinned host memory) cannot satisfy an allocation; `.device` is the
    device id where it was device memory (None: host memory, or not known)."""

    default_code = ErrorCode.RT_MEMORY_ALLOCATION

    def __init__(self, message: str, code: int | None = None, info: ExceptionInfo | None = None,
                 device: int | None = None):
        super().__init__(message, code, info)
        self.device = device


class StreamStateError(AscentError):
    """The stream refuses work: destroyed, or failed in STOP mode."""

    default_code = ErrorCode.RT_STREAM_ABORT


class CaptureError(StreamStateError):
    """A call that is not allowed while (or about) capturing; `.code` says which rule."""

    default_code = ErrorCode.RT_STREAM_CAPTURED


class AscentTimeoutError(AscentError, TimeoutError):
    """A synchronizing call or a device-side wait ran past its timeout."""

    default_code = ErrorCode.RT_STREAM_SYNC_TIMEOUT


# (the name the runtime's own modules use: they import it as TimeoutError_, which shadows no
# builtin; a traceback shows the public name, AscentTimeoutError)
TimeoutError_ = AscentTimeoutError


class TaskError(AscentError):
    """A task failed on the device; `.info` says which task, where, and the original exception."""

    default_code = ErrorCode.RT_AICORE_EXCEPTION


class DeadlockError(AscentError):
    """The device cannot make progress: the streams wait on each other (a cycle) or on nothing."""

    default_code = ErrorCode.RT_DEADLOCK


class NotSupportedError(AscentError):
    """A feature this backend does not provide."""

    default_code = ErrorCode.RT_FEATURE_NOT_SUPPORT


class NotPicklableError(NotSupportedError, TypeError):
    """A runtime object (a buffer, stream, event, ...) was pickled: it names memory or a handle
    of this process, which no other process can use (a TypeError too, as for any object
    pickle cannot take)."""


def _rebuilt(cls: type, args: tuple) -> AscentError:
    """An error of class `cls` with `args`, made without running its __init__ (see
    AscentError.__reduce__); pickle then restores its attributes."""
    # (the __new__ of the builtin exception whose layout the class has, found through
    # __base__, the base that gave it its layout: MemoryError's, first in the MRO of an
    # OutOfMemoryError, is refused for it)
    base: Any = cls
    while base.__module__ != "builtins":
        base = base.__base__
    err = base.__new__(cls, *args)
    err.args = args  # (an OSError's __new__ leaves them to __init__)
    return err




class _ThreadError(threading.local):
    """This host thread's last error code (0: none)."""

    code = 0


_last = _ThreadError()
# host thread id -> (code of a task it submitted that failed, that thread): the thread is
# kept because Python hands an ended thread's id to the next thread it starts, which must not
# inherit its errors
_async_errors: dict[int, tuple[int, threading.Thread]] = {}


def note_async_error(thread_id: int, code: int) -> None:
    """Record that a task submitted by `thread_id` failed, for that thread's get_last_error
    (nothing when it has ended: nobody is left to ask)."""
    for thread in threading.enumerate():
        if thread.ident == thread_id:
            _async_errors[thread_id] = (int(code), thread)
            return


def _async_error(clear: bool) -> int:
    """The calling thread's recorded task failure (0: none), cleared with `clear`."""
    me = threading.get_ident()
    entry = _async_errors.pop(me, None) if clear else _async_errors.get(me)
    if entry is None:
        return 0
    if entry[1] is not threading.current_thread():  # an ended thread's, whose id this one got
        _async_errors.pop(me, None)
        return 0
    return entry[0]


@contextlib.contextmanager
def keeping_last_error() -> Iterator[None]:
    """Errors made inside are tasks' failures, made on whichever thread the engine notices them
    (a host thread stepping a simulated device, one calling destroy): not that thread's last
    error, which is its own calls' (a failure reaches get_last_error by note_async_error)."""
    prev = _last.code
    try:
        yield
    finally:
        _last.code = prev


def failure_of_a_task(cls: type, message: str, code: int) -> "AscentError":
    """An error a task fails with (see keeping_last_error)."""
    with keeping_last_error():
        return cls(message, code=code)


def set_last_error(code: int) -> None:
    """Record `code` as this host thread's last error (what get_last_error returns)."""
    _last.code = int(code)


def get_last_error() -> int:
    """Return this thread's last error code and clear it (0 when none)."""
    code = _async_error(clear=True)
    code = _last.code or code
    _last.code = 0
    return code


def peek_at_last_error() -> int:
    """Return this thread's last error code without clearing it (0 when none)."""
    return _last.code or _async_error(clear=False)


class HostAccessWarning(UserWarning):
    """The host read or wrote device memory directly (acl.util on a device pointer): it works
    here, where device memory is this machine's, not on an NPU in ACL_HOST run mode."""


class MemcpyKindWarning(UserWarning):
    """A copy's explicit kind disagrees with the direction its addresses make (the addresses win)."""


def warn_at_caller(message: str, category: type[Warning]) -> None:
    """Warn as if from the first frame outside ascentrt: the default filter then shows each
    warning once per call site of the user's program, whichever facade layer it came through."""
    frame = user_frame(2)
    if frame is None:
        warnings.warn(message, category, stacklevel=2)
        return
    registry = frame.f_globals.setdefault("__warningregistry__", {})
    warnings.warn_explicit(message, category, frame.f_code.co_filename, frame.f_lineno,
                           frame.f_globals.get("__name__"), registry)


def os_cause(exc: OSError) -> str:
    """An OSError's cause in words ("no such file or directory"), without its errno."""
    return (exc.strerror or str(exc)).lower()
