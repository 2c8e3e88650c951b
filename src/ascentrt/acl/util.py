"""acl.util: pyACL's converters between pointers, bytes and numpy arrays, and its native threads."""

import sys as _sys
import threading as _threading
import traceback as _traceback
import warnings as _warnings
from typing import Any as _Any, Callable as _Callable

import numpy as _np

from ..backends.sim import TIMELINE as _TIMELINE
from .. import forksafe as _forksafe
from ..interrupts import raised_by_handler as _raised_by_handler
from ..errors import ErrorCode as _ErrorCode, HostAccessWarning as _HostAccessWarning, \
    set_last_error as _set_last_error, warn_at_caller as _warn_at_caller
from ..memory import REGISTRY as _REGISTRY
from ..memory.external import register_bytes as _register_bytes
from ..memory.external import register_host as _register_host
from ..memory.shared_bytes import watch as _watch_code
from ._api import AclTypeError as _AclTypeError

_DTYPE_OF_NUM: dict[int, _np.dtype[_Any]] = {_np.dtype(c).num: _np.dtype(c) for c in _np.typecodes["All"]
                                             if c not in "OMmVSUa"}
_threads: dict[int, "_NativeThread"] = {}
_threads_lock = _forksafe.lock()
# A program may exec code it compiled and keep only the code (or what it bound): note what runs
# from now on, so that bytes_to_ptr knows the constants of that code for the interpreter's.
_watch_code()


def _parse(name: str, args: tuple[_Any, ...], *checks: _Callable[[_Any], bool]) -> None:
    if len(args) != len(checks) or not all(c(a) for c, a in zip(checks, args)):
        raise _AclTypeError(f"acl.util.{name} args parse failed")


def _int(x: object) -> bool:
    return isinstance(x, (int, _np.integer))


def _pointer(x: object) -> bool:
    """A pointer or thread id as pyACL's k converter takes it: a Python int, no numpy integer."""
    return isinstance(x, int)


def _range(ptr: int, nbytes: int, what: str) -> _np.ndarray | None:
    """The live bytes [ptr, ptr + nbytes) of one allocation, or None (and last error 100000);
    device memory is said (HostAccessWarning), as a program ported to an NPU would fail there."""
    try:
        alloc, off = _REGISTRY.resolve(int(ptr), int(nbytes))
        data = alloc._bytes()[off:off + int(nbytes)]
    except Exception as exc:
        if _raised_by_handler(exc):  # (the program's own, not a bad pointer: see ret_of)
            raise
        _set_last_error(_ErrorCode.INVALID_PARAM)
        return None
    if alloc.kind == "device":
        _warn_at_caller(f"acl.util.{what} reads device memory at {int(ptr):#x} from the host: it "
                        f"works here, but the host cannot reach an NPU's memory in ACL_HOST run "
                        f"mode; copy it to host memory first (acl.rt.memcpy)", _HostAccessWarning)
    return data


def bytes_to_ptr(*args: _Any) -> int:
    """int: the address of a bytes object's buffer, which copies may then read and write (keep it alive).

    As pyACL, copies may write into a bytes object the program made at run time (a
    `bytes(n)`, however many names, lists or calls hold it). One the interpreter shares (a
    0- or 1-byte cached object, a constant or table of the code, a static object) is
    registered read-only: a copy into it is refused (107000) instead of rewriting memory the
    interpreter relies on.
    """
    _parse("bytes_to_ptr", args, lambda x: True)
    obj = args[0]
    if not isinstance(obj, bytes):
        raise ValueError("needs an byte as argument")
    return _register_bytes(obj)


def ptr_to_bytes(*args: _Any) -> bytes | None:
    """bytes: a copy of size bytes at ptr; None when the range is not inside one live allocation."""
    _parse("ptr_to_bytes", args, _pointer, _int)
    ptr, nbytes = args
    data = _range(ptr, nbytes, "ptr_to_bytes")
    return None if data is None else data.tobytes()


def numpy_to_ptr(*args: _Any) -> int:
    """int: the data address of an array, usable by copies; deprecated in pyACL (warns)."""
    _parse("numpy_to_ptr", args, lambda x: True)
    arr = args[0]
    if not isinstance(arr, _np.ndarray):
        raise ValueError("needs a numpy array as argument")
    # (pyACL's category: Warning, shown by default, where DeprecationWarning would be hidden)
    _warnings.warn("acl.util.numpy_to_ptr will be deprecated. Please use acl.util.bytes_to_ptr "
                   "instead.", Warning, stacklevel=2)
    if not arr.flags.c_contiguous:
        _warnings.warn("array is not C-contiguous: its pointer does not address its elements in order",
                      RuntimeWarning, stacklevel=2)
        # As pyACL, the raw data pointer: copies through it move the raw bytes of the memory
        # the array lies in, so that memory (its contiguous base array) is registered.
        root = _contiguous_root(arr)
        if root is not None:
            _register_host(root)
        return arr.ctypes.data
    return _register_host(arr)


# (numpy 2 moved it; numpy 1.24, the oldest supported, has it at the top)
_byte_bounds: _Any = getattr(getattr(_np.lib, "array_utils", None), "byte_bounds", None) \
    or getattr(_np, "byte_bounds", None)


def _contiguous_root(arr: _np.ndarray) -> _np.ndarray | None:
    """The C-contiguous array whose memory holds every byte `arr` spans, None if none does."""
    low, high = _byte_bounds(arr)
    base = arr.base
    while isinstance(base, _np.ndarray):
        if base.flags.c_contiguous and not base.dtype.hasobject:
            b_low, b_high = _byte_bounds(base)
            if b_low <= low and high <= b_high:
                return base
        base = base.base
    return None


def numpy_contiguous_to_ptr(*args: _Any) -> tuple[int, _np.ndarray]:
    """(int, ndarray): the address of a C-contiguous version of the array, and that array (keep it)."""
    _parse("numpy_contiguous_to_ptr", args, lambda x: True)
    if not isinstance(args[0], _np.ndarray):
        raise ValueError("needs a numpy array as argument")
    _warnings.warn("acl.util.numpy_contiguous_to_ptr will be deprecated. Please use "
                   "acl.util.bytes_to_ptr instead.", Warning, stacklevel=2)
    arr = _np.ascontiguousarray(args[0])
    return _register_host(arr), arr


def ptr_to_numpy(*args: _Any) -> _np.ndarray | None:
    """ndarray: a zero-copy view of shape/npy_type at ptr; None when it is not inside one live allocation."""
    if len(args) == 3 and not isinstance(args[1], tuple) and _pointer(args[0]) and _int(args[2]):
        raise ValueError("shape is empty")  # (pyACL's answer to a shape that is no tuple: a list)
    _parse("ptr_to_numpy", args, _pointer, lambda s: isinstance(s, tuple) and all(_int(d) for d in s), _int)
    _warnings.warn("acl.util.ptr_to_numpy will be deprecated. Please use acl.util.ptr_to_bytes "
                   "instead.", Warning, stacklevel=2)
    ptr, shape, npy_type = args
    dtype = _DTYPE_OF_NUM.get(int(npy_type))
    # numpy's limits too: at most 64 dimensions, each (even beside a zero) below 2**63.
    if dtype is None or len(shape) > 64 or any(not 0 <= d < 1 << 62 for d in shape):
        _set_last_error(_ErrorCode.INVALID_PARAM)
        return None
    count = 1
    for d in shape:
        count *= int(d)
    data = _range(ptr, count * dtype.itemsize, "ptr_to_numpy")
    if data is None:
        return None
    try:
        return data.view(dtype).reshape(tuple(int(d) for d in shape))
    except ValueError:  # a shape numpy cannot hold: bad input, not a crash
        _set_last_error(_ErrorCode.INVALID_PARAM)
        return None


class _NativeThread(_threading.Thread):
    """A thread that runs fn(args) (fn() when args is None) and keeps its exception for the join."""

    def __init__(self, fn: _Callable[..., object], args: object) -> None:
        super().__init__(daemon=True, name="acl-util-thread")
        self.fn, self.fn_args = fn, args
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.fn() if self.fn_args is None else self.fn(self.fn_args)
        except BaseException as exc:
            # As pyACL: printed at once (PyErr_Print), and raised again by stop_thread.
            self.error = exc
            _traceback.print_exception(exc, file=_sys.stderr)


def start_thread(*args: _Any) -> tuple[int, int]:
    """(thread_id, ret): start a thread running fn(args) (start_thread(fn, args), positional
    only); its id works with subscribe_report."""
    if len(args) != 2:  # (pyACL keeps CPython's own parse message here, not "args parse failed")
        raise TypeError(f"function takes exactly 2 arguments ({len(args)} given)")
    fn, fn_args = args
    if not callable(fn):
        raise TypeError("parameter must be callable")
    t = _NativeThread(fn, fn_args)
    t.start()
    ident = t.ident
    assert ident is not None  # set by start()
    _TIMELINE.note_thread(t)  # (a pyACL worker: on sim, one that may act before its first call)
    with _threads_lock:
        _threads[ident] = t
    return ident, 0


def stop_thread(*args: _Any) -> int:
    """ret: join a start_thread thread (it is not interrupted); RuntimeError when fn raised; 3 (ESRCH) when unknown."""
    _parse("stop_thread", args, _pointer)
    ident = int(args[0])
    with _threads_lock:
        t = _threads.pop(ident, None)
    if t is None:
        return 3  # ESRCH, as pthread_join reports an unknown thread
    if t is _threading.current_thread():
        with _threads_lock:
            _threads[ident] = t
        return 35  # EDEADLK: a thread cannot join itself
    t.join()
    if t.error is not None:
        raise RuntimeError(f"exception={type(t.error).__name__},msg=thread call failed;") from t.error
    return 0


__all__ = ["bytes_to_ptr", "ptr_to_bytes", "numpy_to_ptr", "numpy_contiguous_to_ptr",
           "ptr_to_numpy", "start_thread", "stop_thread"]
