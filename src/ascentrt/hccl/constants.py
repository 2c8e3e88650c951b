"""HCCL's numbers: result codes (and the error that carries them), data types, reduce ops."""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from ..errors import AscentError, ErrorCode, ExceptionInfo
from ..validate import enum_member


class HcclResult(enum.IntEnum):
    """HCCL's HcclResult codes (hccl_types.h)."""

    SUCCESS = 0
    E_PARA = 1
    E_PTR = 2
    E_MEMORY = 3
    E_INTERNAL = 4
    E_NOT_SUPPORT = 5
    E_NOT_FOUND = 6
    E_UNAVAIL = 7
    E_SYSCALL = 8
    E_TIMEOUT = 9
    E_OPEN_FILE_FAILURE = 10
    E_TCP_CONNECT = 11
    E_ROCE_CONNECT = 12
    E_TCP_TRANSFER = 13
    E_ROCE_TRANSFER = 14
    E_RUNTIME = 15
    E_DRV = 16
    E_PROFILING = 17
    E_CCE = 18
    E_NETWORK = 19
    E_AGAIN = 20
    E_REMOTE = 21
    E_SUSPENDING = 22


class HcclError(AscentError):
    """A collective-communication error; `.code` is an HcclResult (HCCL's numbers, not the
    runtime's), `.info` the ExceptionInfo when a stream task failed with it."""

    code: HcclResult  # type: ignore[assignment]  # HCCL's numbers, not the runtime's ErrorCode
    default_code = HcclResult.E_INTERNAL  # type: ignore[assignment]  # (likewise)

    def __init__(self, message: str, code: int | None = None, info: ExceptionInfo | None = None):
        self.code = HcclResult(code) if code is not None else self.default_code
        self.info = info
        self.text = self.message = message  # (message: the name every AscentError has)
        Exception.__init__(self, f"[HCCL {int(self.code)} {self.code.name}] {message}")

    @property
    def task_code(self) -> ErrorCode:
        """The runtime's code for a stream task that failed with this error (stream
        synchronize raises a TaskError with it; its cause is this error)."""
        return _TASK_CODES.get(self.code, ErrorCode.RT_INTERNAL_ERROR)

    def again(self) -> "HcclError":
        """A fresh error with the same code and message (one per stream that reports it)."""
        return HcclError(self.text, code=self.code)


# The runtime's code for a rank's task that failed with each HCCL result that can fail one
# (what else reaches a task, E_INTERNAL and E_RUNTIME, is the runtime's internal error): a
# peer that failed or left (E_REMOTE) is CANN's ACL_ERROR_RT_SUSPECT_REMOTE_ERROR.
_TASK_CODES = {HcclResult.E_PARA: ErrorCode.RT_PARAM_INVALID, HcclResult.E_PTR: ErrorCode.RT_PARAM_INVALID,
               HcclResult.E_NOT_SUPPORT: ErrorCode.RT_PARAM_INVALID,
               HcclResult.E_TIMEOUT: ErrorCode.RT_WAIT_TIMEOUT,
               HcclResult.E_MEMORY: ErrorCode.RT_MEMORY_ALLOCATION,
               HcclResult.E_REMOTE: ErrorCode.RT_SUSPECT_REMOTE_ERROR}


class HcclDataType(enum.IntEnum):
    """HCCL's HcclDataType numbers."""

    INT8 = 0
    INT16 = 1
    INT32 = 2
    FP16 = 3
    FP32 = 4
    INT64 = 5
    UINT64 = 6
    UINT8 = 7
    UINT16 = 8
    UINT32 = 9
    FP64 = 10
    BFP16 = 11


class HcclReduceOp(enum.IntEnum):
    """HCCL's HcclReduceOp numbers."""

    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3


NUMPY_DTYPES = {
    HcclDataType.INT8: np.int8, HcclDataType.INT16: np.int16, HcclDataType.INT32: np.int32,
    HcclDataType.FP16: np.float16, HcclDataType.FP32: np.float32, HcclDataType.INT64: np.int64,
    HcclDataType.UINT64: np.uint64, HcclDataType.UINT8: np.uint8, HcclDataType.UINT16: np.uint16,
    HcclDataType.UINT32: np.uint32, HcclDataType.FP64: np.float64,
}  # BFP16: numpy has no bfloat16, so it is refused (E_NOT_SUPPORT)

UFUNCS = {HcclReduceOp.SUM: np.add, HcclReduceOp.PROD: np.multiply,
          HcclReduceOp.MAX: np.maximum, HcclReduceOp.MIN: np.minimum}


def data_type(value: Any) -> np.dtype:
    """The numpy dtype of an HcclDataType value; HcclError E_PARA / E_NOT_SUPPORT otherwise."""
    dt = enum_member(HcclDataType, value)  # (1.0 is no data type, though it equals INT16)
    if dt is None:
        raise HcclError(f"data type {value!r} is not an HcclDataType (0..11)", code=HcclResult.E_PARA)
    if dt not in NUMPY_DTYPES:
        raise HcclError(f"data type {dt.name} cannot be held by numpy here",
                        code=HcclResult.E_NOT_SUPPORT)
    return np.dtype(NUMPY_DTYPES[dt])


def reduce_op(value: Any) -> HcclReduceOp:
    """The HcclReduceOp of `value`; HcclError E_PARA otherwise."""
    op = enum_member(HcclReduceOp, value)
    if op is None:
        raise HcclError(f"reduce op {value!r:.40} is not an HcclReduceOp (SUM 0, PROD 1, MAX 2, MIN 3)",
                        code=HcclResult.E_PARA)
    return op
