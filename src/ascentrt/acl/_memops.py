"""acl.rt stream-ordered memory operations beyond copies and fills: cache maintenance, an
in-place reduce, and 64-bit value writes and waits (aclrtCmoAsync, aclrtReduceAsync,
aclrtValueWrite, aclrtValueWait), each a task of the stream, on device memory."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ErrorCode, TimeoutError_
from ..event import wait_timeout
from ..launch import launch
from ..memory import REGISTRY
from . import constants as C
from ._api import api, fail, note_task, stream_of
from ._kernel import op_timeout_s


def _device_range(ptr: int, nbytes: int, what: str, stream) -> Any:
    """The device bytes [ptr, ptr + nbytes) as a buffer slice, on the stream's device (107000
    for host memory or a range no live allocation holds, as CANN's pointer checks answer)."""
    alloc = REGISTRY.find(ptr)
    if alloc is None or alloc.kind != "device":
        raise fail(ErrorCode.RT_PARAM_INVALID, f"{what} {ptr:#x} is not device memory")
    offset = ptr - alloc.addr
    if offset + nbytes > alloc.nbytes:
        raise fail(ErrorCode.INVALID_PARAM, f"{what}: {nbytes} bytes from {ptr:#x} run past its "
                                            f"allocation ({alloc.nbytes} bytes at {alloc.addr:#x})")
    if alloc.device is not stream.device:
        raise fail(ErrorCode.RT_PARAM_INVALID, f"{what} {ptr:#x} is memory of device "
                                               f"{alloc.device.id}, the stream's is {stream.device.id}")
    return alloc[offset:offset + nbytes]


def _nothing(piece) -> None:
    """A cache maintenance task: the cpu backend's memory is coherent, so it has nothing to do
    but take its place in the stream (on sim, the time its bytes take)."""


@api("kkik")
def cmo_async(src: int, size: int, cmo_type: int, stream: int) -> None:
    """Prefetch, write back, invalidate or flush the cache lines of device memory after the
    stream's earlier work (aclrtCmoAsync): ordered, with nothing to do on coherent memory."""
    if src == 0 or size == 0:
        raise fail(ErrorCode.INVALID_PARAM, "cmo_async needs a pointer and a size > 0")
    if not C.ACL_RT_CMO_TYPE_PREFETCH <= cmo_type <= C.ACL_RT_CMO_TYPE_FLUSH:
        raise fail(ErrorCode.RT_FEATURE_NOT_SUPPORT, f"cache operation type must be 0..3, got {cmo_type}")
    s = stream_of(stream, own=True)
    piece = _device_range(src, size, "cmo_async source", s)
    launch(_nothing, piece, stream=s, reads=[piece], name="cmo_async", cost={"bytes": size})
    note_task(stream, s)


_REDUCE_TYPES = {C.ACL_FLOAT: np.float32, C.ACL_FLOAT16: np.float16, C.ACL_INT8: np.int8,
                 C.ACL_INT16: np.int16, C.ACL_INT32: np.int32, C.ACL_UINT8: np.uint8,
                 C.ACL_UINT16: np.uint16, C.ACL_UINT32: np.uint32}
_REDUCE_OPS = {C.ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM: np.add,
               C.ACL_RT_MEMCPY_SDMA_AUTOMATIC_MAX: np.maximum,
               C.ACL_RT_MEMCPY_SDMA_AUTOMATIC_MIN: np.minimum}


@api("kkkiikk")
def reduce_async(dst: int, src: int, count: int, kind: int, dtype: int, stream: int,
                 reserve: int) -> None:
    """dst = dst op src over `count` bytes of `dtype` elements, after the stream's earlier work
    (aclrtReduceAsync; op SUM, MAX or MIN; integers wrap as the hardware's do)."""
    if dst == 0 or src == 0:
        raise fail(ErrorCode.INVALID_PARAM, "reduce_async needs a destination and a source")
    if reserve != 0:
        raise fail(ErrorCode.INVALID_PARAM, f"reserve must be 0, got {reserve}")
    if dtype in (C.ACL_BF16, C.ACL_INT4):
        raise fail(ErrorCode.RT_FEATURE_NOT_SUPPORT, f"data type {dtype} has no numpy type here")
    if dtype not in _REDUCE_TYPES:
        raise fail(ErrorCode.INVALID_PARAM, f"reduce_async does not take data type {dtype}")
    if count == 0:
        raise fail(ErrorCode.RT_PARAM_INVALID, "count must be > 0 bytes")
    if kind == C.ACL_RT_MEMCPY_SDMA_AUTOMATIC_EQUAL:
        raise fail(ErrorCode.RT_FEATURE_NOT_SUPPORT, "the EQUAL reduce has no model in ascentrt")
    if kind not in _REDUCE_OPS:
        raise fail(ErrorCode.RT_PARAM_INVALID, f"reduce kind must be 10 (sum), 11 (max) or 12 "
                                               f"(min), got {kind}")
    item = np.dtype(_REDUCE_TYPES[dtype]).itemsize
    if count % item:
        raise fail(ErrorCode.RT_PARAM_INVALID, f"count {count} is not a whole number of "
                                               f"{item}-byte elements")
    s = stream_of(stream, own=True)
    out = _device_range(dst, count, "reduce_async destination", s)
    into = _device_range(src, count, "reduce_async source", s)
    op, np_type = _REDUCE_OPS[kind], _REDUCE_TYPES[dtype]
    launch(_reduce, out.view(np_type), into.view(np_type), op, stream=s, reads=[out, into],
           writes=[out], name="reduce_async", cost={"bytes": 3 * count})
    note_task(stream, s)


def _reduce(out: np.ndarray, src: np.ndarray, op) -> None:
    """The reduce task: out = out op src, in place."""
    op(out, src, out=out)


def _value_args(dev_addr: int, flag: int, flags: int, stream: int):
    """(stream, the 8 bytes at dev_addr as a buffer slice) after CANN's checks."""
    if dev_addr == 0:
        raise fail(ErrorCode.INVALID_PARAM, "null device address")
    if not 0 <= flag < flags:
        raise fail(ErrorCode.RT_PARAM_INVALID, f"flag must be in [0, {flags}), got {flag}")
    if dev_addr % 8:
        raise fail(ErrorCode.RT_PARAM_INVALID, f"device address {dev_addr:#x} is not 8-byte aligned")
    s = stream_of(stream, own=True)
    return s, _device_range(dev_addr, 8, "device address", s)


@api("kkIk")
def value_write(dev_addr: int, value: int, flag: int, stream: int) -> None:
    """Write the 64-bit `value` at dev_addr after the stream's earlier work (aclrtValueWrite)."""
    s, word = _value_args(dev_addr, flag, 1, stream)
    s.write_value(word, value & 0xFFFFFFFFFFFFFFFF)
    note_task(stream, s)


def _reached(w: int, v: int) -> bool:
    """GEQ as CANN defines it, (int64_t)(*devAddr - value) >= 0 (CUDA's CU_STREAM_WAIT_VALUE_GEQ
    too): a cyclic compare of 64-bit counters, which holds across their wrap-around (a word
    just past 2**63 has reached a value just below it; one 2**63 or more behind has not)."""
    return (w - v) & 0xFFFFFFFFFFFFFFFF < 1 << 63


_CONDITIONS = {  # ACL_STREAM_WAIT_VALUE_*: whether the word at the address lets the stream go
    C.ACL_STREAM_WAIT_VALUE_GEQ: _reached,
    C.ACL_STREAM_WAIT_VALUE_EQ: lambda w, v: w == v,
    C.ACL_STREAM_WAIT_VALUE_AND: lambda w, v: (w & v) != 0,
    C.ACL_STREAM_WAIT_VALUE_NOR: lambda w, v: (~(w | v)) & 0xFFFFFFFFFFFFFFFF != 0,
}


@api("kkIk")
def value_wait(dev_addr: int, value: int, flag: int, stream: int) -> None:
    """Hold the stream's later work until the 64-bit word at dev_addr meets the condition
    (flag: GEQ, a cyclic compare (int64)(word - value) >= 0, EQ, AND or NOR against `value`)
    (aclrtValueWait): a device-side wait, which
    holds no host-function thread, bounded by the device wait timeout (set_op_wait_timeout),
    else the operator timeout: past it the stream fails with 107019."""
    s, word = _value_args(dev_addr, flag, len(_CONDITIONS), stream)
    met, value = _CONDITIONS[flag], value & 0xFFFFFFFFFFFFFFFF
    bound = wait_timeout() or op_timeout_s()
    what = f"the word at {dev_addr:#x} to meet {_NAMES[flag]} {value:#x} (value_wait)"

    def timed_out(_stream: Any, _task: Any) -> TimeoutError_:
        return TimeoutError_(f"value_wait: the word at {dev_addr:#x} did not meet its condition "
                             f"within {bound:g} s", code=ErrorCode.RT_WAIT_TIMEOUT)

    # (the operator timeout is failure detection, not the program's logic: a deadlock through
    # the wait is said at once, not after it, up to 18 minutes later; one set_op_wait_timeout
    # set is the program's: the stream goes on after it fails the wait)
    s.wait_value(word, lambda w: met(w, value), what, bound, timed_out, last_resort=not wait_timeout())
    note_task(stream, s)


_NAMES = {C.ACL_STREAM_WAIT_VALUE_GEQ: ">=", C.ACL_STREAM_WAIT_VALUE_EQ: "==",
          C.ACL_STREAM_WAIT_VALUE_AND: "AND", C.ACL_STREAM_WAIT_VALUE_NOR: "NOR"}


__all__ = ["cmo_async", "reduce_async", "value_write", "value_wait"]
