"""acl.rt device and context calls, onto ascentrt.Device and ascentrt.context."""

from __future__ import annotations

import uuid
import weakref

from .. import forksafe
from ..interrupts import raised_by_handler
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
    except TaskError as exc:
        if raised_by_handler(exc):  # (the program's own handler raised one: it comes out)
            raise
        # (the tasks that failed before the abort: reported at their streams' next sync)


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
_opts_lock = forksafe.lock()
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


# ---- overflow mode, task scheduler, capabilities, resource limits, topology, id mapping -------
# Process-wide settings per device id, as CANN keeps them per process: read back by the getters
# (and the resource limit by launch_kernel).
_settings_lock = forksafe.lock()
_sat_mode: dict[int, int] = {}                 # device id -> aclrtFloatOverflowMode set
_res_limits: dict[tuple[int, int], int] = {}   # (device id, aclrtDevResLimitType) -> cores


@api("i")
def set_device_sat_mode(mode: int) -> None:
    """Set the current device's float overflow mode (aclrtSetDeviceSatMode): INFNAN, what numpy
    kernels compute; SATURATION is refused (207000): no kernel here clamps its results."""
    dev = need_context().device
    if mode not in (C.ACL_RT_OVERFLOW_MODE_SATURATION, C.ACL_RT_OVERFLOW_MODE_INFNAN):
        raise fail(ErrorCode.RT_PARAM_INVALID, f"overflow mode must be 0 (saturation) or 1 "
                                               f"(inf/nan), got {mode}")
    if mode == C.ACL_RT_OVERFLOW_MODE_SATURATION:
        raise fail(ErrorCode.RT_FEATURE_NOT_SUPPORT, "saturation mode: kernels here compute IEEE "
                                                     "infinities and NaNs (ACL_RT_OVERFLOW_MODE_INFNAN)")
    with _settings_lock:
        _sat_mode[dev.id] = mode


@api("", out=(0,))
def get_device_sat_mode() -> int:
    """(mode, ret): the current device's float overflow mode, INFNAN (aclrtGetDeviceSatMode)."""
    dev = need_context().device
    with _settings_lock:
        return _sat_mode.get(dev.id, C.ACL_RT_OVERFLOW_MODE_INFNAN)


@api("i")
def set_ts_device(ts_id: int) -> None:
    """Choose the task scheduler later work goes to (aclrtSetTsDevice): one scheduler runs every
    task here, so AICORE and AIVECTOR both mean it; any other id is refused (100000)."""
    if ts_id not in (C.ACL_TS_ID_AICORE, C.ACL_TS_ID_AIVECTOR):
        raise fail(ErrorCode.INVALID_PARAM, f"ts_id must be 0 (AICORE) or 1 (AIVECTOR), got {ts_id}")


_FEATURES = {  # aclrtDevFeatureType -> whether ascentrt's devices have it
    C.ACL_FEATURE_TSCPU_TASK_UPDATE_SUPPORT_AIC_AIV: C.ACL_DEV_FEATURE_SUPPORT,  # Graph.update
    C.ACL_FEATURE_SYSTEM_MEMQ_EVENT_CROSS_DEV: C.ACL_DEV_FEATURE_NOT_SUPPORT,    # no memory queues
}
_FEATURE_MAX = 22  # (the enum's values stop at 21)


@api("iI", out=(0,))
def get_device_capability(device_id: int, feature: int) -> int:
    """(value, ret): 1 when the device supports the aclrtDevFeatureType, else 0 (aclrtGetDeviceCapability)."""
    if not 0 <= feature < _FEATURE_MAX:
        raise fail(ErrorCode.RT_PARAM_INVALID, f"unknown device feature {feature}")
    _device_in_range(device_id, ErrorCode.RT_INVALID_DEVICEID)
    return _FEATURES.get(feature, C.ACL_DEV_FEATURE_NOT_SUPPORT)


def _res_type(kind: int) -> int:
    if kind not in (C.ACL_RT_DEV_RES_CUBE_CORE, C.ACL_RT_DEV_RES_VECTOR_CORE):
        raise fail(ErrorCode.RT_PARAM_INVALID, f"resource type must be 0 (cube) or 1 (vector), got {kind}")
    return kind


@api("iI", out=(0,))
def get_device_res_limit(device_id: int, kind: int) -> int:
    """(cores, ret): the cores this process's kernels may use on the device, by default all of
    its compute units (one kind runs cube and vector work alike) (aclrtGetDeviceResLimit)."""
    _res_type(kind)
    dev = _device_in_range(device_id, ErrorCode.RT_INVALID_DEVICEID)
    with _settings_lock:
        return _res_limits.get((device_id, kind), dev.properties.compute_units)


@api("iII")
def set_device_res_limit(device_id: int, kind: int, value: int) -> None:
    """Cap the cores this process's later kernels use on the device (aclrtSetDeviceResLimit):
    launch_kernel gives them that block_dim (on sim, the compute units they occupy)."""
    _res_type(kind)
    dev = _device_in_range(device_id, ErrorCode.RT_INVALID_DEVICEID)
    units = dev.properties.compute_units
    if not 1 <= value <= units:
        raise fail(ErrorCode.RT_PARAM_INVALID, f"core limit must be in [1, {units}] (the device's "
                                               f"compute units), got {value}")
    with _settings_lock:
        _res_limits[(device_id, kind)] = value


@api("i")
def reset_device_res_limit(device_id: int) -> None:
    """Drop this process's core limits on the device (aclrtResetDeviceResLimit)."""
    _device_in_range(device_id, ErrorCode.RT_INVALID_DEVICEID)
    with _settings_lock:
        for kind in (C.ACL_RT_DEV_RES_CUBE_CORE, C.ACL_RT_DEV_RES_VECTOR_CORE):
            _res_limits.pop((device_id, kind), None)


def core_limit(device_id: int) -> int | None:
    """The smallest core limit set for the device (None: none set), for launch_kernel."""
    with _settings_lock:
        limits = [v for (d, _), v in _res_limits.items() if d == device_id]
    return min(limits) if limits else None


@api("II", out=(0,))
def get_devices_topo(device_id: int, other_device_id: int) -> int:
    """(link bits, ret): how two devices are connected (aclrtGetDevicesTopo): HCCS on a sim
    preset with a peer link, else PHB (cpu devices share this host's memory bus)."""
    dev = _device_in_range(device_id, ErrorCode.RT_INVALID_DEVICEID)
    _device_in_range(other_device_id, ErrorCode.RT_INVALID_DEVICEID)
    if device_id == other_device_id:
        raise fail(ErrorCode.RT_PARAM_INVALID, "a device has no link to itself")
    preset = getattr(dev._backend, "preset", None)
    return C.ACL_RT_DEVS_TOPOLOGY_HCCS if preset is not None and preset.peer_link_bandwidth \
        else C.ACL_RT_DEVS_TOPOLOGY_PHB


def _same_id(device_id: int, code: int) -> int:
    """Ids map to themselves here (no ASCEND_RT_VISIBLE_DEVICES renumbering, no containers)."""
    if device_id < 0:
        raise fail(code, f"device id must be >= 0, got {device_id}")
    return _device_in_range(device_id, ErrorCode.RT_INVALID_DEVICEID).id


@api("i", out=(0,))
def get_logic_dev_id_by_user_dev_id(user_dev_id: int) -> int:
    """(logic id, ret): the same id (aclrtGetLogicDevIdByUserDevId)."""
    return _same_id(user_dev_id, ErrorCode.RT_INVALID_DEVICEID)


@api("i", out=(0,))
def get_user_dev_id_by_logic_dev_id(logic_dev_id: int) -> int:
    """(user id, ret): the same id (aclrtGetUserDevIdByLogicDevId)."""
    return _same_id(logic_dev_id, ErrorCode.RT_INVALID_DEVICEID)


@api("i", out=(0,))
def get_logic_dev_id_by_phy_dev_id(phy_dev_id: int) -> int:
    """(logic id, ret): the same id (aclrtGetLogicDevIdByPhyDevId)."""
    return _same_id(phy_dev_id, ErrorCode.RT_PARAM_INVALID)


@api("i", out=(0,))
def get_phy_dev_id_by_logic_dev_id(logic_dev_id: int) -> int:
    """(physical id, ret): the same id (aclrtGetPhyDevIdByLogicDevId)."""
    return _same_id(logic_dev_id, ErrorCode.RT_PARAM_INVALID)


__all__ = ["set_device", "reset_device", "reset_device_force", "get_device", "get_device_count",
           "get_run_mode", "synchronize_device", "synchronize_device_with_timeout",
           "device_can_access_peer", "device_enable_peer_access", "device_disable_peer_access",
           "device_peer_access_status", "get_device_utilization_rate", "query_device_status",
           "device_get_stream_priority_range", "create_context", "destroy_context", "set_context",
           "get_context", "ctx_get_current_default_stream", "get_device_info", "device_get_uuid",
           "get_primary_ctx_state", "ctx_set_sys_param_opt", "ctx_get_sys_param_opt",
           "set_sys_param_opt", "get_sys_param_opt", "device_task_abort", "set_device_sat_mode",
           "get_device_sat_mode", "set_ts_device", "get_device_capability", "get_device_res_limit",
           "set_device_res_limit", "reset_device_res_limit", "get_devices_topo",
           "get_logic_dev_id_by_user_dev_id", "get_user_dev_id_by_logic_dev_id",
           "get_logic_dev_id_by_phy_dev_id", "get_phy_dev_id_by_logic_dev_id"]
