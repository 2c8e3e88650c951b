"""acl.rt memory calls: int pointers checked against the core's registry of live allocations."""

from __future__ import annotations

import mmap
import os
from typing import Any, Callable

from .. import interrupts
from ..profiler import hostapi
from ..device import Device
from ..errors import ErrorCode, InvalidAddressError, InvalidArgumentError, InvalidHandleError
from ..memory import REGISTRY, DeviceBuffer, HostBuffer, leaks, malloc_host as _malloc_host
from ..memory.external import register_mapped, unregister_mapped
from ..copies import memcpy as _memcpy, memcpy2d as _memcpy2d
from ..copies import memcpy2d_async as _memcpy2d_async, memcpy_async as _memcpy_async
from ..copies import memset as _memset, memset_async as _memset_async
from . import constants as C
from ._hot import HotFree, HotMalloc
from ..context import _current, current_context
from ._api import _INT32, _MISSING, AclTypeError, AclValueError, api, fail, need_context, note_task, ret_of, stream_of

_MAX_2D_WIDTH, _MAX_2D_HEIGHT = 5_000_000, 5_242_880


# Pointer -> the buffer acl.rt.malloc (device) / malloc_host (host) handed out, until freed
# through acl: a free finds its buffer here at once, of the right kind by where it looks (a
# pointer freed through the core meanwhile, or made there, is looked up in the registry).
_handed: dict[str, dict[int, DeviceBuffer | HostBuffer]] = {"device": {}, "host": {}}
_handed_device = _handed["device"]


# aclrtMalloc rounds a size up to 32 bytes and adds 32 more (reference §11): a copy of up to
# that many bytes into the allocation is in bounds there, so it is here.
PADDING = 32


def _refusal(memory, size: int, exc: Exception) -> Exception:
    """What a refused device allocation reports: pyACL's allocation code for more than the
    device's memory (the core calls that size bad input), else the core's own error."""
    if isinstance(exc, InvalidArgumentError) and size + PADDING > memory.capacity:
        return fail(ErrorCode.RT_MEMORY_ALLOCATION,
                    f"{size} bytes exceed device {memory.device.id}'s {memory.capacity}")
    return exc


interrupts.protect(HotMalloc.__call__, HotFree.__call__)  # (where they run as Python: a Ctrl-C
# between the allocation and its hand-out would lose the buffer; compiled, no signal lands there)


def _refused_malloc(memory: Any, size: int, exc: Exception) -> Any:
    """(0, ret) for a refused device allocation (pyACL's codes)."""
    return ret_of(_refusal(memory, size, exc), (0,))


def _malloc_hot(checked: Callable[..., Any]) -> Callable[..., Any]:
    """acl.rt.malloc's common case (int arguments, a live current context) without a Python
    frame; anything else takes the checked call."""
    return HotMalloc(checked, _handed_device, _current, PADDING, _INT32, _refused_malloc)


@api("ki", out=(0,), hot=_malloc_hot)
def malloc(size: int, policy: int) -> int:
    """(dev_ptr, ret): device memory, 64-byte aligned, size rounded up to 32; any policy (aclrtMalloc)."""
    if size <= 0:  # (before the context: pyACL's code for size 0 even without one)
        raise fail(ErrorCode.INVALID_PARAM, f"size must be > 0, got {size}")
    return _malloc_on((current_context() or need_context()).device._memory, size)


def _malloc_on(memory: Any, size: int, padding: int = PADDING) -> int:
    """Allocate on one device's memory (size and `padding`), handed out for free; pyACL's codes
    for refusals."""
    try:  # (through the device: the call a profile records)
        buf = memory.device.malloc(size + padding)
    except Exception as exc:
        err = _refusal(memory, size, exc)
        if err is exc:
            raise
        raise err from None
    ptr = buf.addr  # (a compiled buffer boxes its address anew at each read)
    _handed_device[ptr] = buf
    return ptr


@api("ki", out=(0,))
def malloc_cached(size: int, policy: int) -> int:
    """(dev_ptr, ret): as malloc, the CPU device is cache-coherent (aclrtMallocCached)."""
    return malloc.__wrapped__(size, policy)


@api("ki", out=(0,))
def malloc_align32(size: int, policy: int) -> int:
    """(dev_ptr, ret): as malloc, but the size only rounded up to 32 bytes, with no 32 more
    (aclrtMallocAlign32)."""
    if size <= 0:
        raise fail(ErrorCode.INVALID_PARAM, f"size must be > 0, got {size}")
    return _malloc_on((current_context() or need_context()).device._memory, size, padding=0)


def _free(ptr: int, kind: str) -> None:
    """Free the live `kind` allocation starting at ptr: what malloc handed out is claimed from
    _handed (a racing free of the same pointer finds it in the registry, and the core refuses
    one of the two); anything else, or a handed-out buffer freed through the core meanwhile,
    is found in the registry. A refused free leaves a live allocation handed out."""
    alloc = _handed[kind].pop(ptr, None)  # (its key is its start: no address test)
    if alloc is not None:
        if _free_claimed(ptr, alloc, kind):
            return
    if ptr == 0:
        raise fail(ErrorCode.INVALID_PARAM, "pointer is null")
    alloc = REGISTRY.find(ptr)
    if alloc is None or alloc.addr != ptr or alloc.kind != kind:
        raise fail(ErrorCode.RT_MEMORY_FREE, f"{ptr:#x} is not the start of a live {kind} allocation")
    alloc.free()


def _free_claimed(ptr: int, alloc: DeviceBuffer | HostBuffer, kind: str) -> bool:
    """Free a buffer popped from _handed; False when it was freed already (through the core)."""
    try:
        alloc.free()
    except InvalidHandleError:
        if alloc._mem is None:
            return False  # freed before: another allocation may start at ptr now
        raise
    except BaseException:
        if alloc._mem is not None:
            _handed[kind][ptr] = alloc  # refused (live DLPack exports): still handed out
        raise
    return True


def _free_hot(checked: Callable[..., Any]) -> Callable[..., Any]:
    """acl.rt.free's common case (a pointer acl.rt.malloc handed out, still live) without a
    Python frame; anything else, or a refused free, takes the checked call (which claims it
    again and says why: a refusal frees nothing, so trying again is safe)."""
    return HotFree(checked, _handed_device)


@api("k", hot=_free_hot)
def free(dev_ptr: int) -> None:
    """Free memory from malloc, at once (aclrtFree)."""
    _free(dev_ptr, "device")


hostapi.watch(malloc.record)  # type: ignore[attr-defined]  # (a HotMalloc: see _malloc_hot)
hostapi.watch(free.record)  # type: ignore[attr-defined]  # (a HotFree: see _free_hot)


_PHYSICAL = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@api("k", out=(0,))
def malloc_host(size: int) -> int:
    """(host_ptr, ret): page-locked host memory, page aligned (aclrtMallocHost)."""
    if size <= 0:
        raise fail(ErrorCode.INVALID_PARAM, f"size must be > 0, got {size}")
    if size > _PHYSICAL:
        raise fail(ErrorCode.RT_MEMORY_ALLOCATION, f"{size} bytes exceed the host's memory")
    buf = _malloc_host(size)
    _handed["host"][buf.addr] = buf
    return buf.addr


@api("k")
def free_host(host_ptr: int) -> None:
    """Free memory from malloc_host (aclrtFreeHost)."""
    _free(host_ptr, "host")


def free_all_host() -> None:
    """Free what malloc_host handed out and nobody freed (acl.finalize), reported as leaks."""
    freed = []
    host = _handed["host"]
    for ptr, buf in list(host.items()):
        if host.pop(ptr, None) is buf and buf.alive:
            try:
                buf.free()
                freed.append(buf)
            except InvalidArgumentError:
                pass  # live DLPack exports hold it: it stays (reported as a leak at exit)
            except InvalidHandleError:
                pass  # another thread's free got there first
    leaks.report(freed, "acl.finalize")


def _copy_args(dst: int, dest_max: int, src: int, count: int, kind: int) -> int | None:
    """Check pyACL's copy rules; returns the core kind (None for DEFAULT) or raises."""
    if dst == 0 or src == 0:
        raise fail(ErrorCode.INVALID_PARAM, "null pointer")
    if not C.ACL_MEMCPY_HOST_TO_HOST <= kind <= C.ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE:
        raise fail(ErrorCode.INVALID_PARAM, f"memcpy kind must be 0..5, got {kind}")
    if count > dest_max:
        raise fail(ErrorCode.INVALID_PARAM, f"count {count} exceeds dest_max {dest_max}")
    return _CORE_KIND[kind]


def _memcpy_hot(checked: Callable[..., Any]) -> Callable[..., Any]:
    """acl.rt.memcpy's common case (int arguments in range, a live current context) in one
    frame, straight to the core's copy: the checked call's frames were ~0.8 us of a 3.4 us
    4 KiB copy. Anything else takes the checked call, which says what is wrong."""
    def memcpy(dst=_MISSING, dest_max=_MISSING, src=_MISSING, count=_MISSING, kind=_MISSING, /,
               *rest):
        ctx = _current.context
        if type(dst) is not int or type(dest_max) is not int or type(src) is not int \
                or type(count) is not int or type(kind) is not int or rest \
                or not 0 < count <= dest_max or not dst or not src \
                or not C.ACL_MEMCPY_HOST_TO_HOST <= kind <= C.ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE \
                or ctx is None or ctx.destroyed:
            return checked(dst, dest_max, src, count, kind, *rest)
        try:
            _memcpy(dst, src, count, _CORE_KIND[kind])
        except Exception as exc:
            return ret_of(exc, ())
        return 0
    return memcpy


# pyACL's copy kinds as the core's: DEFAULT is inferred (None), through-a-buffer is H2D.
_CORE_KIND = (C.ACL_MEMCPY_HOST_TO_HOST, C.ACL_MEMCPY_HOST_TO_DEVICE, C.ACL_MEMCPY_DEVICE_TO_HOST,
              C.ACL_MEMCPY_DEVICE_TO_DEVICE, None, C.ACL_MEMCPY_HOST_TO_DEVICE)


@api("kkkki", hot=_memcpy_hot)
def memcpy(dst: int, dest_max: int, src: int, count: int, kind: int) -> None:
    """Copy count bytes now; both pointers must lie in live allocations (aclrtMemcpy)."""
    if count == 0:
        return
    core_kind = _copy_args(dst, dest_max, src, count, kind)
    need_context()  # (as CANN's synchronous copy: a thread without one is refused, 107002)
    _memcpy(dst, src, count, core_kind)


@api("kkkkik")
def memcpy_async(dst: int, dest_max: int, src: int, count: int, kind: int, stream: int) -> None:
    """Copy after the stream's earlier work; pageable host memory makes it synchronous (aclrtMemcpyAsync)."""
    if count == 0:
        return
    core_kind = _copy_args(dst, dest_max, src, count, kind)
    s = stream_of(stream, own=True)
    # (get_run_mode says ACL_HOST: the host is not the device's, as on an EP server; the
    # addresses decide, as for every direction, not the kind)
    _memcpy_async(dst, src, count, stream=s, kind=core_kind, host_to_host=False)
    note_task(stream, s)


@api("kkkkik")
def memcpy_async_with_condition(dst: int, dest_max: int, src: int, count: int, kind: int,
                                stream: int) -> None:
    """memcpy_async, which here already copies pageable (not page-locked) host memory before it
    returns, as this older call documents (aclrtMemcpyAsyncWithCondition, deprecated)."""
    if count == 0:
        return
    if kind > C.ACL_MEMCPY_DEFAULT:  # (its kinds are 0..4)
        raise fail(ErrorCode.INVALID_PARAM, f"memcpy kind must be 0..4, got {kind}")
    memcpy_async.__wrapped__(dst, dest_max, src, count, kind, stream)


def _not_provided(what: str) -> Exception:
    """The refusal (207000) of a memory feature ascentrt's devices do not have."""
    return fail(ErrorCode.RT_FEATURE_NOT_SUPPORT, f"{what} is not provided by ascentrt's devices")


@api("kKi", out=(0,))
def host_register(ptr: int, size: int, reg_type: int) -> int:
    """(dev_ptr, ret): let the device reach `size` bytes of the caller's host memory at `ptr`
    (4 KiB aligned), until host_unregister; the device address is `ptr` itself, as the host's
    memory is what these devices reach (aclrtHostRegister)."""
    if reg_type != C.ACL_HOST_REGISTER_MAPPED:
        raise fail(ErrorCode.INVALID_PARAM, f"register type must be ACL_HOST_REGISTER_MAPPED (0), "
                                            f"got {reg_type}")
    need_context()
    try:
        register_mapped(ptr, size)
    except (InvalidArgumentError, InvalidAddressError) as exc:
        raise fail(ErrorCode.INVALID_PARAM, str(exc)) from None
    return ptr


@api("k")
def host_unregister(ptr: int) -> None:
    """Undo host_register(ptr); the memory stays the caller's (aclrtHostUnregister)."""
    try:
        unregister_mapped(ptr)
    except InvalidArgumentError as exc:
        raise fail(ErrorCode.INVALID_PARAM, str(exc)) from None


_VMM = ("virtual memory management (reserve_mem_address, malloc_physical, map_mem): device "
        "memory comes from malloc and the stream-ordered pool")
_IPC = ("IPC memory sharing (ipc_mem_*): each process has its own devices; share data across "
        "processes with hccl over MPI")


@api("kkkK", out=(0,))
def reserve_mem_address(size: int, alignment: int, expect_ptr: int, flags: int) -> int:
    """(vir_ptr, ret): refused, 207000 after CANN's argument checks (aclrtReserveMemAddress)."""
    if size == 0 or flags not in (0, 1):
        raise fail(ErrorCode.INVALID_PARAM, "size must be > 0 and flags 0 or 1")
    raise _not_provided(_VMM)


@api("k")
def release_mem_address(vir_ptr: int) -> None:
    """Refused, 207000 (aclrtReleaseMemAddress): nothing was ever reserved."""
    if vir_ptr == 0:
        raise fail(ErrorCode.INVALID_PARAM, "null address")
    raise _not_provided(_VMM)


@api("kOK", out=(0,))
def malloc_physical(size: int, prop: object, flags: int) -> int:
    """(handle, ret): refused, 207000 after CANN's argument checks (aclrtMallocPhysical)."""
    if not isinstance(prop, dict):
        raise AclTypeError("the aclrtPhysicalMemProp argument is not dict")
    if size == 0 or flags != 0:
        raise fail(ErrorCode.INVALID_PARAM, "size must be > 0 and flags 0")
    raise _not_provided(_VMM)


@api("k")
def free_physical(handle: int) -> None:
    """Refused, 207000 (aclrtFreePhysical): no physical handle is ever made."""
    if handle == 0:
        raise fail(ErrorCode.INVALID_PARAM, "null handle")
    raise _not_provided(_VMM)


@api("kkkkK")
def map_mem(vir_ptr: int, size: int, offset: int, handle: int, flags: int) -> None:
    """Refused, 207000 after CANN's argument checks (aclrtMapMem)."""
    if vir_ptr == 0 or handle == 0 or size == 0 or flags != 0:
        raise fail(ErrorCode.INVALID_PARAM, "address, handle and size must be non-zero, flags 0")
    raise _not_provided(_VMM)


@api("k")
def unmap_mem(vir_ptr: int) -> None:
    """Refused, 207000 (aclrtUnmapMem)."""
    if vir_ptr == 0:
        raise fail(ErrorCode.INVALID_PARAM, "null address")
    raise _not_provided(_VMM)


@api("kkkK", out=("",))
def ipc_mem_get_export_key(dev_ptr: int, size: int, length: int, flags: int) -> str:
    """(key, ret): refused, ("", 207000) after CANN's checks (aclrtIpcMemGetExportKey)."""
    if length >= 1024:
        raise AclValueError("key len should be less than 1024")
    if dev_ptr == 0:
        raise fail(ErrorCode.INVALID_PARAM, "null device pointer")
    if size == 0 or length == 0 or flags > 1:
        raise fail(ErrorCode.RT_PARAM_INVALID, "size and len must be > 0, flags 0 or 1")
    raise _not_provided(_IPC)


@api("s")
def ipc_mem_close(key: str) -> None:
    """Refused, 207000 (aclrtIpcMemClose)."""
    raise _not_provided(_IPC)


@api("sK", out=(0,))
def ipc_mem_import_by_key(key: str, flags: int) -> int:
    """(dev_ptr, ret): refused, 207000 after CANN's checks (aclrtIpcMemImportByKey)."""
    if flags > 1:
        raise fail(ErrorCode.RT_PARAM_INVALID, f"flags must be 0 or 1, got {flags}")
    raise _not_provided(_IPC)


@api("sO")
def ipc_mem_set_import_pid(key: str, pids: object) -> None:
    """Refused, 207000 after CANN's checks (aclrtIpcMemSetImportPid)."""
    if not isinstance(pids, list):
        raise AclValueError("argument 2 only support the format of list")
    if not all(type(p) is int for p in pids):
        raise AclValueError("get values from PyList failed")
    if not pids:
        raise fail(ErrorCode.RT_PARAM_INVALID, "the pid list is empty")
    raise _not_provided(_IPC)


@api("kik")
def memcpy_async_with_desc(desc: int, kind: int, stream: int) -> None:
    """Refused, 207000 after CANN's checks (aclrtMemcpyAsyncWithDesc): copies described in
    device memory have no model in ascentrt; use memcpy_async."""
    if desc == 0 or stream == 0 or not 0 <= kind <= C.ACL_MEMCPY_INTER_DEVICE_TO_DEVICE:
        raise fail(ErrorCode.INVALID_PARAM, "desc and stream must be non-zero, kind 0..7")
    raise _not_provided("a copy described in device memory (memcpy_async_with_desc)")


def _fill_args(ptr: int, max_count: int, count: int) -> None:
    if ptr == 0:
        raise fail(ErrorCode.INVALID_PARAM, "null pointer")
    if count > max_count:
        raise fail(ErrorCode.INVALID_PARAM, f"count {count} exceeds max_count {max_count}")


@api("kkik")
def memset(dev_ptr: int, max_count: int, value: int, count: int) -> None:
    """Set count bytes to value (as C memset, the low byte) now (aclrtMemset)."""
    if count == 0:
        return
    _fill_args(dev_ptr, max_count, count)
    need_context()
    _memset(dev_ptr, value & 0xFF, count)


@api("kkikk")
def memset_async(dev_ptr: int, max_count: int, value: int, count: int, stream: int) -> None:
    """Set count bytes to value after the stream's earlier work (aclrtMemsetAsync)."""
    if count == 0:
        return
    _fill_args(dev_ptr, max_count, count)
    s = stream_of(stream, own=True)
    _memset_async(dev_ptr, value & 0xFF, count, stream=s)
    note_task(stream, s)


def _copy2d_args(dst: int, dpitch: int, src: int, spitch: int, width: int, height: int, kind: int,
                 kinds: tuple[int, ...]) -> None:
    if dst == 0 or src == 0:
        raise fail(ErrorCode.INVALID_PARAM, "null pointer")
    if kind not in kinds:
        raise fail(ErrorCode.INVALID_PARAM, f"memcpy2d kind must be one of {kinds}, got {kind}")
    if not 0 < width <= min(dpitch, spitch) or width > _MAX_2D_WIDTH or not 0 < height <= _MAX_2D_HEIGHT:
        raise fail(ErrorCode.INVALID_PARAM, f"width {width} / height {height} out of range for "
                                            f"pitches {dpitch}, {spitch}")


_2D_KINDS = (C.ACL_MEMCPY_HOST_TO_DEVICE, C.ACL_MEMCPY_DEVICE_TO_HOST)


@api("kkkkkki")
def memcpy2d(dst: int, dpitch: int, src: int, spitch: int, width: int, height: int, kind: int) -> None:
    """Copy height rows of width bytes between pitched layouts now; H2D or D2H (aclrtMemcpy2d)."""
    _copy2d_args(dst, dpitch, src, spitch, width, height, kind, _2D_KINDS)
    need_context()
    _memcpy2d(dst, dpitch, src, spitch, width, height, kind)


@api("kkkkkkik")
def memcpy2d_async(dst: int, dpitch: int, src: int, spitch: int, width: int, height: int, kind: int,
                   stream: int) -> None:
    """Pitched copy after the stream's earlier work; H2D, D2H or D2D (aclrtMemcpy2dAsync)."""
    _copy2d_args(dst, dpitch, src, spitch, width, height, kind,
                 _2D_KINDS + (C.ACL_MEMCPY_DEVICE_TO_DEVICE,))
    s = stream_of(stream, own=True)
    _memcpy2d_async(dst, dpitch, src, spitch, width, height, stream=s, kind=kind, host_to_host=False)
    note_task(stream, s)


@api("i", out=(0, 0))
def get_mem_info(attr: int) -> tuple[int, int]:
    """(free, total, ret): the current device's memory in bytes, whatever the attribute (aclrtGetMemInfo)."""
    if not C.ACL_DDR_MEM <= attr <= C.ACL_MEM_P2P_HUGE1G:
        raise fail(ErrorCode.INVALID_PARAM, f"unknown memory attribute {attr}")
    return need_context().device.mem_info()


def _check_range(ptr: int, size: int) -> None:
    if ptr == 0 or size <= 0:
        raise fail(ErrorCode.INVALID_PARAM, "null pointer or size 0")
    REGISTRY.resolve(ptr, size)


@api("kk")
def mem_flush(ptr: int, size: int) -> None:
    """Checks the range; no-op, the CPU device is cache-coherent (aclrtMemFlush)."""
    _check_range(ptr, size)


@api("kk")
def mem_invalidate(ptr: int, size: int) -> None:
    """Checks the range; no-op, the CPU device is cache-coherent (aclrtMemInvalidate)."""
    _check_range(ptr, size)


def _malloc_config(cfg: object, what: str) -> list[tuple[int, dict[str, Any]]]:
    """(attr, value dict) pairs of a pyACL aclrtMallocConfig dict, shaped as pyACL's wrapper
    reads it ({} = none; else "numAttrs" and a list "attrs" of {"attr": int, "value":
    {"moduleId" | "deviceId" | "rsv": ...}}); a malformed one raises TypeError."""
    if not isinstance(cfg, dict):
        raise AclTypeError("pyCfg is not dict!")
    if not cfg:
        return []
    attrs, count = cfg.get("attrs"), cfg.get("numAttrs", 0)
    if not isinstance(attrs, list):
        raise AclTypeError(f"acl.rt.{what}: cfg[\"attrs\"] must be a list of dicts")
    if type(count) is not int or count != len(attrs):
        raise AclTypeError(f"acl.rt.{what}: cfg[\"numAttrs\"] {count!r} does not match {len(attrs)} attrs")
    out = []
    for item in attrs:
        value = item.get("value") if isinstance(item, dict) else None
        attr = item.get("attr", C.ACL_RT_MEM_ATTR_RSV) if isinstance(item, dict) else None
        if type(attr) is not int or not isinstance(value, dict) \
                or not any(k in value for k in ("moduleId", "deviceId", "rsv")):
            raise AclTypeError(f"acl.rt.{what}: each attr is {{\"attr\": int, \"value\": "
                               f"{{\"moduleId\" | \"deviceId\" | \"rsv\": ...}}}}, got {item!r:.80}")
        out.append((attr, value))
    return out


@api("kiO", out=(0,))
def malloc_with_cfg(size: int, policy: int, cfg: object) -> int:
    """(dev_ptr, ret): as malloc; cfg {} or a config dict, deviceId picks the device (aclrtMallocWithCfg)."""
    attrs = _malloc_config(cfg, "malloc_with_cfg")
    if size <= 0:
        raise fail(ErrorCode.INVALID_PARAM, f"size must be > 0, got {size}")
    device = need_context().device
    for attr, value in attrs:  # (the last of repeated attributes wins, as in CANN)
        if attr == C.ACL_RT_MEM_ATTR_DEVICE_ID:
            dev_id = value.get("deviceId")
            if type(dev_id) is not int:
                raise AclTypeError("acl.rt.malloc_with_cfg: deviceId must be an int")
            device = Device(dev_id)  # (107001 for an id out of range)
        elif attr not in (C.ACL_RT_MEM_ATTR_RSV, C.ACL_RT_MEM_ATTR_MODULE_ID):
            # (a module id only labels CANN's memory statistics: accepted, nothing to label)
            raise fail(ErrorCode.RT_PARAM_INVALID, f"malloc config attribute {attr} is not 0, 1 or 2")
    return _malloc_on(device._memory, size)


@api("kO", out=(0,))
def malloc_host_with_cfg(size: int, cfg: object) -> int:
    """(host_ptr, ret): as malloc_host; cfg {} or a config dict (module id, VA flag) (aclrtMallocHostWithCfg)."""
    attrs = _malloc_config(cfg, "malloc_host_with_cfg")
    if size <= 0:
        raise fail(ErrorCode.INVALID_PARAM, f"size must be > 0, got {size}")
    for attr, _ in attrs:
        # A module id labels statistics; the VA flag asks for an address every device can use,
        # which pinned host memory here always is.
        if attr not in (C.ACL_RT_MEM_ATTR_MODULE_ID, C.ACL_RT_MEM_ATTR_VA_FLAG):
            raise fail(ErrorCode.RT_PARAM_INVALID, f"host malloc config attribute {attr} is not 1 or 3")
    return malloc_host.__wrapped__(size)


_PAGE_SIZE = mmap.PAGESIZE  # what backs every allocation here: the host's pages


@api("k", out=(None,))
def pointer_get_attributes(ptr: int) -> dict[str, Any]:
    """(dict, ret): location {"id", "type"}, page_size of the memory at ptr (aclrtPointerGetAttributes)."""
    if ptr == 0:
        raise fail(ErrorCode.INVALID_PARAM, "pointer is null")
    alloc = REGISTRY.find(ptr)
    if alloc is None:
        # CANN reports memory it did not allocate as unregistered (success, no page size).
        where, dev_id, page = C.ACL_MEM_LOCATION_TYPE_UNREGISTERED, 0, 0
    elif alloc.kind == "device":
        where, dev_id, page = C.ACL_MEM_LOCATION_TYPE_DEVICE, alloc.device.id, _PAGE_SIZE
    elif alloc.kind == "host":
        where, dev_id, page = C.ACL_MEM_LOCATION_TYPE_HOST, 0, _PAGE_SIZE
    else:  # registered pageable memory: not page-locked, as CANN's unregistered host memory
        where, dev_id, page = C.ACL_MEM_LOCATION_TYPE_UNREGISTERED, 0, _PAGE_SIZE
    return {"location": {"id": dev_id, "type": where}, "page_size": page, "rsv": [0, 0, 0, 0]}


# (a Ctrl-C as a new buffer is handed out would lose it: sent again once the call returned)
interrupts.protect(_malloc_on, malloc_host.__wrapped__)

__all__ = ["malloc", "malloc_cached", "malloc_align32", "free", "malloc_host", "free_host",
           "memcpy", "memcpy_async", "memset", "memset_async", "memcpy2d", "memcpy2d_async",
           "get_mem_info", "mem_flush", "mem_invalidate", "malloc_with_cfg", "malloc_host_with_cfg",
           "pointer_get_attributes", "memcpy_async_with_condition", "reserve_mem_address",
           "release_mem_address", "malloc_physical", "free_physical", "map_mem", "unmap_mem",
           "ipc_mem_get_export_key", "ipc_mem_close", "ipc_mem_import_by_key",
           "ipc_mem_set_import_pid", "memcpy_async_with_desc", "host_register", "host_unregister"]
