"""acl.rt device and context calls, onto ascentrt.Device and ascentrt.context."""

from __future__ import annotations

import threading
import uuid
import weakref

from .. import context as _ctx
from ..device import Device, device_count
from ..engine.task import COMPUTE
from ..errors import ErrorCode, TaskError
from . import constants as C
from ._api import CONTEXTS, api, fail, need_context, sweep, timeout_ms, STREAMS



def _device(device_id: int) -> Device:
    return Device(device_id)  # raises InvalidDeviceError (107001) for ids out of range


@api("i")
def set_device(device_id: int) -> None:
    """Bind this thread to a device, creating its default context and stream (aclrtSetDevice)."""
    _ctx.retain_primary(_device(device_id))


@api("i")
def reset_device(device_id: int) -> None:
    """Undo one set_device; the last one releases the device's contexts, streams and memory (aclrtResetDevice)."""
    _ctx.release_primary(_device(device_id))
    sweep()


@api("i")
def reset_device_force(device_id: int) -> None:
    """Release the device at once, whatever its set count (aclrtResetDeviceForce)."""
    _ctx.release_primary(_device(device_id), force=True)
    sweep()


@api("", out=(0,))
def get_device() -> int:
    """(device_id, ret): the device of this thread's current context (aclrtGetDevice)."""
    return need_context().device.id


@api("", out=(0,))
def get_device_count() -> int:
    """(count, ret): how many devices there are (aclrtGetDeviceCount)."""
    return device_count()


@api("", out=(0,))
def get_run_mode() -> int:
    """(run_mode, ret): always ACL_HOST, the program runs on the host (aclrtGetRunMode)."""
    return C.ACL_HOST


@api("")
def synchronize_device() -> None:
    """Wait for all work of the current device (aclrtSynchronizeDevice)."""
    need_context().device.synchronize()


@api("i")
def synchronize_device_with_timeout(timeout: int) -> None:
    """Wait for the current device up to timeout ms, -1 forever (aclrtSynchronizeDeviceWithTimeout)."""
    if timeout < -1:
        raise fail(ErrorCode.RT_PARAM_INVALID, f"timeout must be -1 or > 0 ms, got {timeout}")
    need_context().device.synchronize(timeout_ms(timeout))


@api("ii")
def device_task_abort(device_id: int, timeout: int) -> None:
    """Discard the tasks not started yet on every stream of the device, then wait up to
    timeout ms (-1 or 0: for ever) for the running ones (aclrtDeviceTaskAbort)."""
    seconds = timeout_ms(timeout, zero_means_forever=True)
    dev = _device(device_id)
    for stream in list(dev._dq.streams.values()):
        if stream._refuse != "destroyed":
            stream.abort()
    try:
        dev.synchronize(seconds)
    except TaskError:
        pass  # (the tasks that failed before the abort: reported at their streams' next sync)


def _peer_pair(device_id: int, peer_id: int) -> None:
    _device(device_id), _device(peer_id)
    if device_id == peer_id:
        raise fail(ErrorCode.INVALID_PARAM, "a device is not its own peer")


@api("ii", out=(0,))
def device_can_access_peer(device_id: int, peer_device_id: int) -> int:
    """(can_access, ret): 1 when the devices can reach each other (aclrtDeviceCanAccessPeer)."""
    _peer_pair(device_id, peer_device_id)
    return int(Device(device_id).can_access_peer(peer_device_id))


@api("iI")
def device_enable_peer_access(peer_device_id: int, flag: int) -> None:
    """Let the current device access peer memory; flag must be 0 (aclrtDeviceEnablePeerAccess)."""
    me = need_context().device.id
    if flag != 0:
        raise fail(ErrorCode.FEATURE_UNSUPPORTED, f"flag must be 0, got {flag}")
    _peer_pair(me, peer_device_id)
    Device(me).enable_peer_access(peer_device_id)


@api("i")
def device_disable_peer_access(peer_device_id: int) -> None:
    """Turn off what device_enable_peer_access turned on (aclrtDeviceDisablePeerAccess)."""
    me = need_context().device.id
    _peer_pair(me, peer_device_id)
    Device(me).disable_peer_access(peer_device_id)


@api("ii", out=(0,))
def device_peer_access_status(device_id: int, peer_device_id: int) -> int:
    """(status, ret): 1 when device_enable_peer_access was called for the pair (aclrtDevicePeerAccessStatus)."""
    _peer_pair(device_id, peer_device_id)
    return int(Device(device_id).peer_access_enabled(peer_device_id))


@api("i", out=(None,))
def get_device_utilization_rate(device_id: int) -> dict[str, int]:
    """(dict, ret): compute-executor and memory use in percent (aclrtGetDeviceUtilizationRate)."""
    dev = _device(device_id)
    dq = dev._dq
    free, total = dev.mem_info()
    compute = 100 * dq.busy[COMPUTE] // max(dq.sizes[COMPUTE], 1)
    return {"cube_utilization": compute, "vector_utilization": compute, "aicpu_utilization": 0,
            "memory_utilization": 100 * (total - free) // total, "utilization_extend": 0}


@api("i", out=(0,))
def query_device_status(device_id: int) -> int:
    """(status, ret): ACL_RT_DEVICE_STATUS_NORMAL for every existing device (aclrtQueryDeviceStatus)."""
    _device(device_id)
    return C.ACL_RT_DEVICE_STATUS_NORMAL


@api("", out=(0, 0))
def device_get_stream_priority_range() -> tuple[int, int]:
    """(least, greatest, ret): stream priorities run 7 (lowest) .. 0 (highest) (aclrtDeviceGetStreamPriorityRange)."""
    least, greatest = need_context().device.properties.stream_priority_range
    return least, greatest


def _device_in_range(device_id: int, code: int) -> Device:
    if not 0 <= device_id < device_count():
        raise fail(code, f"device id must be in [0, {device_count()}), got {device_id}")
    return Device(device_id)


# The aclrtDevAttr values CANN defines for hardware ascentrt does not model (SIMT limits, L2
# cache, SMP / super pod / mainboard ids, connection, form factor, NPU arch): refused as
# unsupported, not answered with made-up numbers.
_UNMODELLED_ATTRS = frozenset(range(C.ACL_DEV_ATTR_WARP_SIZE, C.ACL_DEV_ATTR_MAX_BLOCK_DIM_Z + 1)) | {
    C.ACL_DEV_ATTR_L2_CACHE_SIZE, C.ACL_DEV_ATTR_SMP_ID, C.ACL_DEV_ATTR_SUPER_POD_DEVICE_ID,
    C.ACL_DEV_ATTR_SUPER_POD_SERVER_ID, C.ACL_DEV_ATTR_SUPER_POD_ID, C.ACL_DEV_ATTR_CUST_OP_PRIVILEGE,
    C.ACL_DEV_ATTR_MAINBOARD_ID, C.ACL_DEV_ATTR_HD_CONNECT_TYPE, C.ACL_DEV_ATTR_DEVICE_FORM_FACTOR,
    C.ACL_DEV_ATTR_NPU_ARCH}


@api("II", out=(0,))
def get_device_info(device_id: int, attr: int) -> int:
    """(value, ret): a device attribute (aclrtDevAttr), from the device's properties (aclrtGetDeviceInfo)."""
    dev = _device_in_range(device_id, ErrorCode.RT_PARAM_INVALID)  # (CANN: 107000, not 107001)
    props = dev.properties
    if attr == C.ACL_DEV_ATTR_AICPU_CORE_NUM:
        preset = getattr(dev._backend, "preset", None)  # a sim device's hardware model
        return int(preset.ai_cpus) if preset is not None else 0  # the cpu backend has none
    if attr in (C.ACL_DEV_ATTR_AICORE_CORE_NUM, C.ACL_DEV_ATTR_CUBE_CORE_NUM,
                C.ACL_DEV_ATTR_VECTOR_CORE_NUM):
        # One kind of compute unit runs every kernel here, cube or vector work alike.
        return props.compute_units
    if attr == C.ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE:
        return dev.mem_info()[1]
    if attr == C.ACL_DEV_ATTR_PHY_CHIP_ID:
        return device_id  # no logical-to-physical renumbering here
    if attr == C.ACL_DEV_ATTR_IS_VIRTUAL:
        return 0  # no compute-power splitting
    if attr in _UNMODELLED_ATTRS:
        raise fail(ErrorCode.RT_FEATURE_NOT_SUPPORT, f"device attribute {attr} has no model in ascentrt")
    raise fail(ErrorCode.RT_PARAM_INVALID, f"unknown device attribute {attr}")


@api("i", out=(None,))
def device_get_uuid(device_id: int) -> dict[str, list[int]]:
    """(dict, ret): {"bytes": 16 ints}, a name-based UUID of backend, preset and id (aclrtDeviceGetUuid)."""
    dev = _device_in_range(device_id, ErrorCode.RT_INVALID_DEVICEID)
    props = dev.properties
    # RFC 4122 version 5: the same device of the same backend (and sim preset) gets the same
    # UUID in every run, and devices that differ in any of these get different ones.
    name = f"ascentrt:{props.backend}:{props.preset}:{device_id}"
    return {"bytes": list(uuid.uuid5(uuid.NAMESPACE_URL, name).bytes)}


# ---- contexts -------------------------------------------------------------------------------

@api("i", out=(0,))
def create_context(device_id: int) -> int:
    """(context, ret): a new context on the device, made current (aclrtCreateContext)."""
    return CONTEXTS.add(_ctx.create_context(_device(device_id)))


@api("k")
def destroy_context(context: int) -> None:
    """Destroy an explicit context and its streams (aclrtDestroyContext)."""
    ctx = CONTEXTS.get(context)
    if ctx.primary:
        raise fail(ErrorCode.INVALID_PARAM, "the default context cannot be destroyed; reset the device")
    ctx.destroy()
    CONTEXTS.remove(context)
    sweep()


@api("k")
def set_context(context: int) -> None:
    """Make a context this thread's current one (aclrtSetCurrentContext)."""
    ctx = CONTEXTS.get(context)
    if ctx.destroyed:
        CONTEXTS.remove(context)
        raise fail(ErrorCode.RT_INVALID_HANDLE, f"context {context:#x} was destroyed")
    _ctx.set_current_context(ctx)


@api("", out=(0,))
def get_context() -> int:
    """(context, ret): this thread's current context (aclrtGetCurrentContext)."""
    return CONTEXTS.add(need_context())


@api("", out=(0,))
def ctx_get_current_default_stream() -> int:
    """(stream, ret): the current context's default stream (aclrtCtxGetCurrentDefaultStream)."""
    return STREAMS.add(need_context().default_stream)


@api("i", out=(0, 0))
def get_primary_ctx_state(device_id: int) -> tuple[int, int]:
    """(active, flags, ret): 1 while set_device holds the default context; flags 0 (aclrtGetPrimaryCtxState)."""
    _device(device_id)
    return int(_ctx.primary_uses(device_id) > 0), 0


# ---- system parameters (aclSysParamOpt) ------------------------------------------------------
# Recorded as CANN records them: per context (set -> get, no default) and per process (default
# 0). They select kernel variants in CANN (deterministic reductions, debug kernels); ascentrt's
# kernels compute the same way whatever the value, and reading it back is what programs do.
_CTX_OPTS = (C.ACL_OPT_DETERMINISTIC, C.ACL_OPT_ENABLE_DEBUG_KERNEL, C.ACL_OPT_STRONG_CONSISTENCY)
_PROCESS_OPTS = _CTX_OPTS + (C.ACL_OPT_ENABLE_KERNEL_EARLY_START,)
_opts_lock = threading.Lock()
_ctx_opts: weakref.WeakKeyDictionary[_ctx.Context, dict[int, int]] = weakref.WeakKeyDictionary()
_process_opts: dict[int, int] = dict.fromkeys(_PROCESS_OPTS, 0)


def _check_opt(opt: int, allowed: tuple[int, ...]) -> None:
    if opt not in allowed:
        raise fail(ErrorCode.INVALID_PARAM, f"system parameter must be one of {allowed}, got {opt}")


def _check_opt_value(opt: int, value: int) -> None:
    # DETERMINISTIC takes a level 0..3 (3: batch-invariant); the others are off/on switches.
    top = 4 if opt == C.ACL_OPT_DETERMINISTIC else 2
    if not 0 <= value < top:
        raise fail(ErrorCode.RT_PARAM_INVALID, f"system parameter {opt} takes 0..{top - 1}, got {value}")


@api("il")
def ctx_set_sys_param_opt(opt: int, value: int) -> None:
    """Set a system parameter of the current context (and the process's), last call wins (aclrtCtxSetSysParamOpt)."""
    _check_opt(opt, _CTX_OPTS)
    _check_opt_value(opt, value)
    ctx = need_context()
    with _opts_lock:
        _ctx_opts.setdefault(ctx, {})[opt] = value
        _process_opts[opt] = value  # (CANN's runtime stores a context's setting process-wide too)


@api("i", out=(0,))
def ctx_get_sys_param_opt(opt: int) -> int:
    """(value, ret): the current context's system parameter; 107021 until set (aclrtCtxGetSysParamOpt)."""
    _check_opt(opt, _CTX_OPTS)
    ctx = need_context()
    with _opts_lock:
        value = _ctx_opts.get(ctx, {}).get(opt)
    if value is None:
        raise fail(ErrorCode.RT_SYSPARAMOPT_NOT_SET, f"system parameter {opt} was not set in this context")
    return value


@api("il")
def set_sys_param_opt(opt: int, value: int) -> None:
    """Set a process-wide system parameter, last call wins (aclrtSetSysParamOpt)."""
    _check_opt(opt, _PROCESS_OPTS)
    _check_opt_value(opt, value)
    with _opts_lock:
        _process_opts[opt] = value


@api("i", out=(0,))
def get_sys_param_opt(opt: int) -> int:
    """(value, ret): the process-wide system parameter, 0 until set (aclrtGetSysParamOpt)."""
    _check_opt(opt, _PROCESS_OPTS)
    with _opts_lock:
        return _process_opts[opt]


__all__ = ["set_device", "reset_device", "reset_device_force", "get_device", "get_device_count",
           "get_run_mode", "synchronize_device", "synchronize_device_with_timeout",
           "device_can_access_peer", "device_enable_peer_access", "device_disable_peer_access",
           "device_peer_access_status", "get_device_utilization_rate", "query_device_status",
           "device_get_stream_priority_range", "create_context", "destroy_context", "set_context",
           "get_context", "ctx_get_current_default_stream", "get_device_info", "device_get_uuid",
           "get_primary_ctx_state", "ctx_set_sys_param_opt", "ctx_get_sys_param_opt",
           "set_sys_param_opt", "get_sys_param_opt", "device_task_abort"]
