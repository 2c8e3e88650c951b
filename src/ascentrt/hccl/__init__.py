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
from ..device import current_device as _current_device
from . import comm as _comm
from . import mpi as _mpi
from .comm import (ROOT_INFO_BYTES, Communicator, RootInfo, comm_destroy, comm_init_all,
                   get_rank_id, get_rank_size)
from .comm import check_comm as _check_comm
from .constants import HcclDataType, HcclError, HcclReduceOp, HcclResult
from .flight import FlightRecord


def get_root_info() -> RootInfo:
    """A new root info for one group (HcclGetRootInfo), to hand to every rank; under mpiexec it
    names this process (the other ranks' processes join through it)."""
    return _comm.get_root_info(_mpi.maker_tag() if _mpi.launched_under_mpi() else "")


def comm_init_root_info(nranks: int, root_info: RootInfo, rank: int) -> Communicator:
    """Join, as `rank` of `nranks`, the communicator `root_info` names, on this thread's
    current device (HcclCommInitRootInfo). The ranks are threads of this process, or, under
    mpiexec (ASCENTRT_HCCL_TRANSPORT), processes meeting over MPI; returns once all joined."""
    nranks, rank = _comm.check_init_args(nranks, root_info, rank)
    transport = _comm.read_setting("ASCENTRT_HCCL_TRANSPORT")
    if transport == "mpi" or transport == "auto" and (
            _mpi.launched_under_mpi() or not _comm.is_local(root_info)):
        comm = _mpi.comm_init(nranks, root_info, rank, _current_device())
        if comm is not None or transport == "mpi":
            if comm is None:
                raise HcclError("comm_init_root_info: no other process of the MPI job holds this "
                                "root info (ASCENTRT_HCCL_TRANSPORT=mpi): make it on one process and "
                                "broadcast it, or set ASCENTRT_HCCL_TRANSPORT=process for ranks that "
                                "are threads of this one", code=HcclResult.E_PARA)
            return comm
    return _comm.comm_init_root_info(nranks, root_info, rank)


def flight_record(comm: Communicator) -> list[FlightRecord]:
    """The last collectives of `comm`'s communicator, oldest first (the flight recorder)."""
    return _check_comm(comm).group.flight.records()


__all__ = ["ROOT_INFO_BYTES", "Communicator", "FlightRecord", "HcclDataType", "HcclError",
           "HcclReduceOp", "HcclResult", "RootInfo", "all_gather", "all_reduce", "all_to_all",
           "barrier", "broadcast", "comm_destroy", "comm_init_all", "comm_init_root_info",
           "flight_record", "get_rank_id", "get_rank_size", "get_root_info", "group_end",
           "group_start", "recv", "reduce_scatter", "send"]
