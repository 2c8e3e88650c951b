"""Run under mpiexec -n 2 with HCCL_EXEC_TIMEOUT=10: rank 0 all-reduces on a communicator rank
1 destroys without calling it. As in one process, rank 0's part fails at once with E_REMOTE
naming rank 1 (not after HCCL_EXEC_TIMEOUT with E_TIMEOUT), and a new communicator works on the
same stream. Rank 0 prints one line."""

import logging
import time

import numpy as np
from mpi4py import MPI

import ascentrt as art
from ascentrt import hccl

logging.getLogger("ascentrt.hccl").setLevel(logging.CRITICAL)
world = MPI.COMM_WORLD
rank = world.Get_rank()
D, O = hccl.HcclDataType, hccl.HcclReduceOp
old = hccl.comm_init_root_info(2, world.bcast(hccl.get_root_info() if rank == 0 else None), rank)
s = art.Device(0).create_stream()
x = art.malloc(64)
result = []
if rank == 0:
    hccl.all_reduce(x, x, 16, D.FP32, O.SUM, old, s)
world.Barrier()
start = time.monotonic()
if rank == 1:
    hccl.comm_destroy(old)
try:
    s.synchronize(timeout=20)
    result.append(rank == 1 or "no error")
except art.TaskError as exc:
    cause = exc.__cause__
    result.append(cause.code == hccl.HcclResult.E_REMOTE and "rank 1's communicator was destroyed"
                  in str(cause) and time.monotonic() - start < 5)
if rank == 0:
    hccl.comm_destroy(old)
new = hccl.comm_init_root_info(2, world.bcast(hccl.get_root_info() if rank == 0 else None), rank)
art.memcpy(x, np.full(16, rank + 1, np.float32))
hccl.all_reduce(x, x, 16, D.FP32, O.SUM, new, s)
s.synchronize(timeout=20)
result.append(float(x.numpy(np.float32)[0]) == 3.0)
results = world.gather(result, root=0)
if rank == 0:
    print("destroy", results == [[True, True]] * 2, results)
