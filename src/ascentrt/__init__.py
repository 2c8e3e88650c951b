"""ascentrt: an accelerator runtime in the mould of the Ascend CANN Runtime, running for real on the CPU."""

from typing import NoReturn as _NoReturn

from . import accel

accel.keep_to_source_if_asked()  # before any module that accel may replace is imported

from . import config
from .backends import KINDS as _KINDS
config.BACKEND_KINDS = _KINDS  # (the table itself: a kind added to it later is known too)

from . import kernels
from .device import (Device, DeviceProperties, current_device, default_stream, device_count,
                     set_device, synchronize)
from .errors import (AscentError, AscentTimeoutError, DeadlockError, ErrorCode, ExceptionInfo,
                     InvalidAddressError, InvalidArgumentError, InvalidDeviceError,
                     InvalidHandleError, NotPicklableError, NotSupportedError, OutOfMemoryError, StreamStateError,
                     TaskError, get_last_error, peek_at_last_error)
from .event import Event, elapsed_time, set_wait_timeout
from .launch import launch, launch_host_func
from .copies import (MemcpyKind, memcpy, memcpy2d, memcpy2d_async, memcpy_async, memset,
                     memset_async)
from .memory import BufferSlice, DeviceBuffer, HostBuffer, TypedView, free, malloc, malloc_host
from .memory import (MemPool, ReusePolicy, configure_pool, empty_cache, free_async,
                     malloc_async, memory_snapshot, memory_stats, memory_summary, record_stream,
                     record_trace, replay_trace, reset_peak_memory_stats)
from .memory.external import from_dlpack
from .notify import Notify, record_notify, wait_and_reset_notify
from .stream import FailureMode, Stream
from .graph import CaptureError, CaptureMode, CaptureStatus, Graph, Schedule, TaskGraph, TaskGroup
from . import sanitizer
from .sanitizer import sanitize
from . import callback, context  # report-thread callbacks; contexts (pyACL's model, used by ascentrt.acl)
from . import usage  # this process's device usage, published for `ascentrt info` elsewhere
from . import sim  # what a program asks of the simulated device (ascentrt.sim.variant(), ...)
from .backends import sim as _sim
from . import interrupts as _interrupts
accel.restore_docstrings(vars(_sim))  # (a backend may import nothing above it: done from here)
# From import on (where the main thread imports it and Python's own handler is in place): the
# sections protect() registers are safe only once this handler is, and the first device or
# allocation may come from another thread, where it cannot be installed.
_interrupts.install()

__version__ = "0.1.0"

__all__ = [
    "AscentError", "AscentTimeoutError", "BufferSlice", "DeadlockError", "Device", "DeviceBuffer",
    "DeviceProperties", "ErrorCode", "Event", "ExceptionInfo", "FailureMode", "HostBuffer",
    "InvalidAddressError", "InvalidArgumentError", "InvalidDeviceError", "InvalidHandleError",
    "MemcpyKind", "NotPicklableError", "NotSupportedError", "Notify", "OutOfMemoryError", "Stream", "StreamStateError",
    "TaskError", "TypedView", "current_device", "default_stream", "device_count", "elapsed_time",
    "free", "get_last_error", "kernels", "launch", "launch_host_func", "malloc", "malloc_host",
    "memcpy", "memcpy2d", "memcpy2d_async", "memcpy_async", "memset", "memset_async",
    "peek_at_last_error", "record_notify", "set_device", "set_wait_timeout", "synchronize",
    "wait_and_reset_notify", "__version__",
    # task graphs (issue 6)
    "CaptureError", "CaptureMode", "CaptureStatus", "Graph", "Schedule", "TaskGraph", "TaskGroup",
    # memory pool (issue 4)
    "MemPool", "ReusePolicy", "configure_pool", "empty_cache", "free_async", "malloc_async",
    "memory_snapshot", "memory_stats", "memory_summary", "record_stream", "record_trace",
    "replay_trace", "reset_peak_memory_stats",
    # profiler (issue 5), race sanitizer (issue 12)
    "profile", "profiler", "sanitize", "sanitizer",
    # contexts and report-thread callbacks (issue 3, pyACL's model); published device usage
    "callback", "context", "usage", "sim",
    # interop (issue 14)
    "from_dlpack",
]


def _refuse(text: str) -> "_NoReturn":
    # A wrong setting at import: one line, not a traceback. Under `ascentrt prof` (a process of
    # its run) the run's folder notes why, so that its error says what happened.
    import os
    folder, owner = os.environ.get("ASCENTRT_PROFILE"), os.environ.get("ASCENTRT_PROFILE_PID")
    if folder and owner and owner != str(os.getpid()):
        from .profiler.folders import note_refusal
        note_refusal(folder, os.getpid(), text)
    raise SystemExit(f"ascentrt: {text}")


def _sanitize_from_env() -> None:
    # ASCENTRT_SANITIZE=warn|raise|log checks the whole program for stream races.
    from . import config
    try:
        mode = config.get("ASCENTRT_SANITIZE")
    except InvalidArgumentError as exc:  # a wrong setting: one line, not a traceback
        _refuse(str(exc))
    if mode != "off":
        sanitizer.enable(mode)
        path = config.get("ASCENTRT_SANITIZE_REPORT")
        if path:
            sanitizer.write_reports_at_exit(path)


def _profile_from_env() -> None:
    # ASCENTRT_PROFILE=dir profiles the whole program (written at exit); last, so every
    # public name above exists when the profiler wraps it.
    from . import config
    folder = config.get("ASCENTRT_PROFILE")
    if folder:
        from .profiler.session import start_from_env
        try:
            config.get("ASCENTRT_BACKEND")  # (the profile's clock reads it: its error, not the folder's)
            config.get("ASCENTRT_PROFILE_PID")  # (a made-up owner: its own error, named)
        except InvalidArgumentError as exc:
            _refuse(str(exc))
        try:
            start_from_env(folder)
        except InvalidArgumentError as exc:  # a folder that is taken: one line, not a traceback
            _refuse(f"ASCENTRT_PROFILE={folder}: {exc}")


# Names loaded on first use, most processes using neither (the profiler's import is ~15 ms of
# each process's ~140 ms): name -> (its submodule, the name in it, or None for the module)
_LAZY = {"hccl": ("hccl", None), "profiler": ("profiler", None), "profile": ("profiler", "profile")}


def __getattr__(name: str):
    """The names of _LAZY, imported on first use (and kept: later reads find them here)."""
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'ascentrt' has no attribute {name!r}")
    import importlib  # (import_module, not `from . import`: that asks this function again)
    module = importlib.import_module(f"{__name__}.{where[0]}")
    value = module if where[1] is None else getattr(module, where[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names, those loaded on first use included (tab completion, help())."""
    return sorted(set(globals()) | set(_LAZY))


def _warn_unknown_settings() -> None:
    # An ASCENTRT_* variable no setting reads is most likely a typo, silently ignored otherwise.
    import warnings
    from . import config
    for name, near in config.unknown_settings():
        hint = f" (did you mean {near}?)" if near else " (`ascentrt info` lists the settings)"
        warnings.warn_explicit(f"ascentrt: {name} is not a setting of ascentrt; it is ignored{hint}",
                               UserWarning, "ascentrt", 0)


_warn_unknown_settings()
_sanitize_from_env()
_profile_from_env()
