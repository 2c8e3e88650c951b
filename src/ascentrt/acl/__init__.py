"""pyACL-compatible facade: `import ascentrt.acl as acl` runs code written for pyACL on ascentrt.

Same names, positional arguments, (values..., ret) returns and error codes as pyACL's `acl`
module; int handles and pointers translate onto the core's objects. Constants, which pyACL
does not export, live in ascentrt.acl.constants.
"""

import json as _json
import os as _os
import sys as _sys
import time as _time
import types as _types
from typing import Any as _Any

from .. import forksafe as _forksafe
from .. import interrupts as _interrupts
from .. import config as _config
from .. import context as _ctx
from ..device import Device as _Device, device_count as _device_count
from ..memory import leaks as _leaks
from ..errors import AscentError as _AscentError, ErrorCode as _ErrorCode
from . import _event, _memory, constants, rt, util
from ._api import CONTEXTS as _CONTEXTS, EVENTS as _EVENTS, NOTIFIES as _NOTIFIES
from ._api import STREAMS as _STREAMS, AclTypeError as _AclTypeError, api as _api, fail as _fail
from ._api import MESSAGES as _MESSAGES, recent_error_message as _recent_error_message, sweep as _sweep

_init_lock = _forksafe.lock()
_init_count = [0]


@_api("s", module="acl", optional=1)
def init(config_path: str = "") -> None:
    """ret: initialise; config_path is a JSON file or "" (aclInit). A second init returns 100002 (counted)."""
    config: object = {}
    if config_path:
        try:
            with open(config_path, encoding="utf-8") as fh:
                config = _json.load(fh)
        except (OSError, ValueError):
            raise _fail(constants.ACL_ERROR_INVALID_FILE, f"cannot read JSON config {config_path!r}") from None
    # (the one key read here: the others configure dumps, profiling and devices ascentrt
    # sets elsewhere, or has no use for)
    mode = config.get("err_msg_mode", "0") if isinstance(config, dict) else "0"
    if str(mode) not in ("0", "1"):
        raise _fail(constants.ACL_ERROR_INVALID_PARAM, f'err_msg_mode must be "0" (error '
                                                       f'messages per thread) or "1" (per '
                                                       f'process), got {mode!r}')
    with _init_lock:
        _init_count[0] += 1
        if _init_count[0] > 1:
            raise _fail(constants.ACL_ERROR_REPEAT_INITIALIZE, "acl.init was already called")
        _MESSAGES.per_process, _MESSAGES.message = str(mode) == "1", None


def _teardown() -> None:
    """Release everything the facade made: contexts, devices, streams, events, notifies; the
    memory never freed among it is reported once (a LeakWarning), as reclaimed at acl.finalize."""
    try:
        with _leaks.reclaiming("acl.finalize"):
            explicit = [ctx for _, ctx in _CONTEXTS.items() if not ctx.primary and not ctx.destroyed]
            try:
                _ctx.drain(explicit)  # one drain budget for all of them, then destroy without waiting
            finally:  # (a Ctrl-C or the program's handler only cut the drain short)
                _release(explicit)
    finally:
        _sweep()
        rt.set_exception_info_callback(None)
        _ctx.set_current_context(None)
        _MESSAGES.per_process, _MESSAGES.message = False, None  # (the config's mode ends with it)


def _release(explicit: list) -> None:
    """_teardown's part that does not wait for work: contexts, devices (their last release
    waits in turn), the handle tables, the host memory."""
    try:
        for ctx in explicit:
            ctx._teardown(wait=False, what="acl.finalize")
        for h, _ in _CONTEXTS.items():
            _CONTEXTS.remove(h)
        for dev_id in range(_device_count()):
            if _ctx.primary_uses(dev_id):
                _ctx.release_primary(dev_id, force=True)
    finally:  # (a release cut short is whole itself: the handles go in any case)
        for table in (_STREAMS, _EVENTS, _NOTIFIES):
            for h, _ in table.items():
                table.remove(h)
        _event.forget_all()
        _memory.free_all_host()


@_api("", module="acl")
def finalize() -> None:
    """ret: release every device, context, stream and event the program made (aclFinalize); twice is 100037."""
    with _init_lock:
        if _init_count[0] == 0:
            raise _fail(constants.ACL_ERROR_REPEAT_FINALIZE, "acl.finalize without acl.init")
        _init_count[0] = 0
    _teardown()


@_api("", out=(0,), module="acl")
def finalize_reference() -> int:
    """(ref_count, ret): undo one init; the last one finalizes (aclFinalizeReference)."""
    with _init_lock:
        if _init_count[0] == 0:
            raise _fail(constants.ACL_ERROR_REPEAT_FINALIZE, "acl.finalize_reference without acl.init")
        _init_count[0] -= 1
        left = _init_count[0]
    if left == 0:
        _teardown()
    return left


# A signal must not cut a finalize between its count and its teardown, nor the teardown's
# releases (what it leaves would be counted gone and never released again): it comes once they
# are whole. The drain's waits inside stay ones a signal may end.
_interrupts.protect(_teardown, _release, finalize.__wrapped__, finalize_reference.__wrapped__)


@_api("", out=(0, 0, 0), module="acl")
def get_version() -> tuple[int, int, int]:
    """(major, minor, patch, ret): the pyACL interface version followed (aclrtGetVersion)."""
    return constants.ACL_MAJOR_VERSION, constants.ACL_MINOR_VERSION, constants.ACL_PATCH_VERSION


def get_soc_name(*_ignored: _Any) -> str:
    """str: the device's name, "ascentrt-cpu", or "ascentrt-sim-<preset>" on the simulated NPU
    (aclrtGetSocName; arguments are ignored, as pyACL's wrapper never parses them)."""
    props = _Device(0).properties
    return f"ascentrt-{props.backend}" + (f"-{props.preset}" if props.preset else "")


def get_recent_err_msg(*_ignored: _Any) -> str | None:
    """str or None: the text of this thread's last failed call (the process's with acl.init's
    "err_msg_mode": "1"), then cleared (aclGetRecentErrMsg; arguments are ignored, as pyACL's
    wrapper never parses them)."""
    return _recent_error_message()


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_log_lock = _forksafe.lock()


def app_log(*args: _Any) -> None:
    """None: log `message` at `log_level` (0 DEBUG .. 3 ERROR), as ACL_APP_LOG.

    Written when log_level >= ASCEND_GLOBAL_LOG_LEVEL (default 3, ERROR; 4 turns logging
    off): to stdout with ASCEND_SLOG_PRINT_TO_STDOUT=1, to plog-<pid>.log in
    ASCEND_PROCESS_LOG_PATH when set, else to stderr. Bad arguments raise TypeError.
    """
    if len(args) != 2 or type(args[0]) is not int or not isinstance(args[1], str):
        raise _AclTypeError("acl.app_log args parse failed")
    level, message = args
    if not 0 <= level < len(_LOG_LEVELS) or level < _config.get("ASCEND_GLOBAL_LOG_LEVEL"):
        return None
    # (time's functions, not datetime.now(), which imports `time` afresh: a __del__ that logs
    # at interpreter shutdown, as acllite's do, must still write its line, as aclAppLog does)
    now = _time.time()
    us = int(now * 1_000_000) % 1_000_000
    stamp = _time.strftime("%Y-%m-%d-%H:%M:%S.", _time.localtime(now)) + f"{us // 1000:03d}.{us % 1000:03d}"
    program = _os.path.basename(_sys.argv[0]) if _sys.argv and _sys.argv[0] else "python"
    line = f"[{_LOG_LEVELS[level]}] APP({_os.getpid()},{program}):{stamp} {message}\n"
    folder = _config.get("ASCEND_PROCESS_LOG_PATH")
    with _log_lock:
        if _config.get("ASCEND_SLOG_PRINT_TO_STDOUT"):
            _sys.stdout.write(line)
            _sys.stdout.flush()
        elif folder:
            try:
                _os.makedirs(folder, exist_ok=True)
                # (os calls, not open(): builtins may be gone when a __del__ logs at shutdown)
                fd = _os.open(_os.path.join(folder, f"plog-{_os.getpid()}.log"),
                              _os.O_WRONLY | _os.O_APPEND | _os.O_CREAT, 0o644)
                try:
                    _os.write(fd, line.encode("utf-8"))
                finally:
                    _os.close(fd)
            except OSError:
                _sys.stderr.write(line)  # an unwritable log folder must not lose the message
        else:
            _sys.stderr.write(line)
    return None


@_api("O", out=(None,), module="acl")
def get_cann_version(package: object) -> dict[str, str | int]:
    """(dict, ret): version fields of the runtime package, as aclsysGetCANNVersion."""
    from .. import __version__
    major, minor, patch = (__version__.split(".") + ["0", "0"])[:3]
    return {"version": __version__, "major_version": int(major), "minor_version": int(minor),
            "release_version": 0, "patch_version": int(patch), "reserved": 0}


class UnsupportedModuleError(_AscentError, AttributeError):
    """A name of a pyACL module this runtime does not provide (an AttributeError too: code
    that probes with hasattr sees the name missing)."""

    default_code = _ErrorCode.API_NOT_SUPPORT


class _Unsupported(_types.ModuleType):
    """A pyACL module outside this runtime (models, operators, media): each name of it raises
    UnsupportedModuleError (200001) that says so, where a bare AttributeError would not."""

    def __init__(self, name: str, what: str):
        super().__init__(f"acl.{name}", f"pyACL's acl.{name} ({what}): not provided by ascentrt")
        self._what = what

    def __getattr__(self, attr: str) -> _Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        name = self.__name__.split('.')[-1]
        raise UnsupportedModuleError(
            f"acl.{name}.{attr}: pyACL's acl.{name} ({self._what}) is not part of ascentrt, "
            f"which runs streams, events, memory and kernels (acl.rt, acl.util); run models "
            f"and operators with a framework on top of it")


# (every pyACL submodule besides rt and util: reference §1)
mdl = _Unsupported("mdl", "offline models (.om) and their datasets")
op = _Unsupported("op", "single operators")
media = _Unsupported("media", "DVPP media processing")
blas = _Unsupported("blas", "BLAS operators")
himpi = _Unsupported("himpi", "the media processing interface of Ascend 310P SoCs")
fv = _Unsupported("fv", "feature vector search")
prof = _Unsupported("prof", "msprof profiling calls: use ascentrt prof")
_UNSUPPORTED_MODULES = ("mdl", "op", "media", "blas", "himpi", "fv", "prof")

__all__ = ["init", "finalize", "finalize_reference", "get_version", "get_soc_name",
           "get_recent_err_msg", "get_cann_version", "app_log", "rt", "util", "constants",
           "mdl", "op", "media", "blas", "himpi", "fv", "prof"]
