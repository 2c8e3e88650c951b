"""Run under mpiexec -n 2 with HCCL_EXEC_TIMEOUT=20: rank 1 exits (sys.exit) without
comm_destroy after one all-reduce; rank 0's next all-reduce fails at once with E_REMOTE naming
rank 1 (not after HCCL_EXEC_TIMEOUT with E_TIMEOUT, as if rank 1 were slow). Rank 0 prints one
line."""

import logging
import sys
import time

from mpi4py import MPI

import ascentrt as art
from ascentrt import hccl

logging.getLogger("ascentrt.hccl").setLevel(logging.CRITICAL)
world = MPI.COMM_WORLD
rank = world.Get_rank()
D, O = hccl.HcclDataType, hccl.HcclReduceOp
comm = hccl.comm_init_root_info(2, world.bcast(hccl.get_root_info() if rank == 0 else None), rank)
s = art.Device(0).create_stream()
x = art.malloc(64)
hccl.all_reduce(x, x, 16, D.FP32, O.SUM, comm, s)
s.synchronize(timeout=20)
if rank == 1:
    sys.exit(0)  # (its exit handlers run: the others are told it left)
start = time.monotonic()
hccl.all_reduce(x, x, 16, D.FP32, O.SUM, comm, s)
try:
    s.synchronize(timeout=30)
    print("exit False no error")
except art.TaskError as exc:
    cause = exc.__cause__
    print("exit", cause.code == hccl.HcclResult.E_REMOTE
          and "rank 1's process exited without destroying its communicator" in str(cause)
          and time.monotonic() - start < 5, cause.code, round(time.monotonic() - start, 2))
