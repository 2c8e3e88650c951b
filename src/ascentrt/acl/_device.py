"""acl.rt device and context calls, onto ascentrt.Device and ascentrt.context."""

from __future__ import annotations

from .. import context as _ctx
from ..device import Device, device_count
from ..engine.task import COMPUTE
from ..errors import ErrorCode
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


__all__ = ["set_device", "reset_device", "reset_device_force", "get_device", "get_device_count",
           "get_run_mode", "synchronize_device", "synchronize_device_with_timeout",
           "device_can_access_peer", "device_enable_peer_access", "device_disable_peer_access",
           "device_peer_access_status", "get_device_utilization_rate", "query_device_status",
           "device_get_stream_priority_range", "create_context", "destroy_context", "set_context",
           "get_context", "ctx_get_current_default_stream"]
