"""Collective communication between devices, with HCCL's names and numbers (snake_case).

    comms = hccl.comm_init_all([0, 1, 2, 3])          # one communicator per device
    hccl.all_reduce(send, recv, count, hccl.HcclDataType.FP32, hccl.HcclReduceOp.SUM,
                    comms[r], stream)                 # a task on the caller's stream

Each call checks its arguments (HcclError with an HcclResult code; nothing is queued) and
queues the rank's part on its stream; the part completes once every rank's matching call has
arrived and the data moved (peer copies and reduce kernels on the ranks' lanes). Calls that
disagree fail every rank's part with E_PARA naming each rank's call; a rank that never comes
fails the others with E_TIMEOUT after HCCL_EXEC_TIMEOUT seconds.
"""

from __future__ import annotations

from .collectives import (all_gather, all_reduce, all_to_all, barrier, broadcast, group_end,
                          group_start, recv, reduce_scatter, send)
from .comm import (ROOT_INFO_BYTES, Communicator, RootInfo, comm_destroy, comm_init_all,
                   comm_init_root_info, get_rank_id, get_rank_size, get_root_info)
from .comm import check_comm as _check_comm
from .constants import HcclDataType, HcclError, HcclReduceOp, HcclResult
from .flight import FlightRecord


def flight_record(comm) -> list[FlightRecord]:
    """The last collectives of `comm`'s communicator, oldest first (the flight recorder)."""
    return _check_comm(comm).group.flight.records()


__all__ = ["ROOT_INFO_BYTES", "Communicator", "FlightRecord", "HcclDataType", "HcclError",
           "HcclReduceOp", "HcclResult", "RootInfo", "all_gather", "all_reduce", "all_to_all",
           "barrier", "broadcast", "comm_destroy", "comm_init_all", "comm_init_root_info",
           "flight_record", "get_rank_id", "get_rank_size", "get_root_info", "group_end",
           "group_start", "recv", "reduce_scatter", "send"]
