"""pyACL-compatible facade: `import ascentrt.acl as acl` runs code written for pyACL on ascentrt.

Same names, positional arguments, (values..., ret) returns and error codes as pyACL's `acl`
module; int handles and pointers translate onto the core's objects. Constants, which pyACL
does not export, live in ascentrt.acl.constants.
"""

import json as _json
import threading as _threading

from . import constants, rt, util
from ._api import CONTEXTS as _CONTEXTS, EVENTS as _EVENTS, NOTIFIES as _NOTIFIES
from ._api import STREAMS as _STREAMS, api as _api, fail as _fail
from ._api import recent_error_message as _recent_error_message, sweep as _sweep

_init_lock = _threading.Lock()
_init_count = [0]


@_api("s", module="acl", optional=1)
def init(config_path=""):
    """ret: initialise; config_path is a JSON file or "" (aclInit). A second init returns 100002 (counted)."""
    if config_path:
        try:
            with open(config_path, encoding="utf-8") as fh:
                _json.load(fh)
        except (OSError, ValueError):
            raise _fail(constants.ACL_ERROR_INVALID_FILE, f"cannot read JSON config {config_path!r}") from None
    with _init_lock:
        _init_count[0] += 1
        if _init_count[0] > 1:
            raise _fail(constants.ACL_ERROR_REPEAT_INITIALIZE, "acl.init was already called")


def _teardown() -> None:
    """Release everything the facade made: contexts, devices, streams, events, notifies."""
    from .. import context as _ctx
    from ..device import device_count
    from . import _event, _memory
    for h, ctx in _CONTEXTS.items():
        if not ctx.primary and not ctx.destroyed:
            ctx.destroy()
        _CONTEXTS.remove(h)
    for dev_id in range(device_count()):
        if _ctx.primary_uses(dev_id):
            _ctx.release_primary(dev_id, force=True)
    for table in (_STREAMS, _EVENTS, _NOTIFIES):
        for h, _ in table.items():
            table.remove(h)
    _event.forget_all()
    _memory.free_all_host()
    _sweep()
    rt.set_exception_info_callback(None)
    _ctx.set_current_context(None)


@_api("", module="acl")
def finalize():
    """ret: release every device, context, stream and event the program made (aclFinalize); twice is 100037."""
    with _init_lock:
        if _init_count[0] == 0:
            raise _fail(constants.ACL_ERROR_REPEAT_FINALIZE, "acl.finalize without acl.init")
        _init_count[0] = 0
    _teardown()


@_api("", out=(0,), module="acl")
def finalize_reference():
    """(ref_count, ret): undo one init; the last one finalizes (aclFinalizeReference)."""
    with _init_lock:
        if _init_count[0] == 0:
            raise _fail(constants.ACL_ERROR_REPEAT_FINALIZE, "acl.finalize_reference without acl.init")
        _init_count[0] -= 1
        left = _init_count[0]
    if left == 0:
        _teardown()
    return left


@_api("", out=(0, 0, 0), module="acl")
def get_version():
    """(major, minor, patch, ret): the pyACL interface version followed (aclrtGetVersion)."""
    return constants.ACL_MAJOR_VERSION, constants.ACL_MINOR_VERSION, constants.ACL_PATCH_VERSION


def get_soc_name():
    """str: the device's name, "ascentrt-cpu" (aclrtGetSocName)."""
    return "ascentrt-cpu"


def get_recent_err_msg():
    """str or None: the text of this thread's last failed call, then cleared (aclGetRecentErrMsg)."""
    return _recent_error_message()


@_api("O", out=(None,), module="acl")
def get_cann_version(package):
    """(dict, ret): version fields of the runtime package, as aclsysGetCANNVersion."""
    from .. import __version__
    major, minor, patch = (__version__.split(".") + ["0", "0"])[:3]
    return {"version": __version__, "major_version": int(major), "minor_version": int(minor),
            "release_version": 0, "patch_version": int(patch), "reserved": 0}


__all__ = ["init", "finalize", "finalize_reference", "get_version", "get_soc_name",
           "get_recent_err_msg", "get_cann_version", "rt", "util", "constants"]
