"""Run under mpiexec -n 2 with HCCL_CONNECT_TIMEOUT=2: rank 1 reaches comm_init_root_info 3 s
late. Rank 0's first call times out (E_TIMEOUT naming rank 1) and leaves nothing behind: its
retry with the same root info meets rank 1's late call, and the communicator works (rank 1's
call never waits for good on what rank 0's first call left). Rank 0 prints one line."""

import logging
import time

import numpy as np
from mpi4py import MPI

import ascentrt as art
from ascentrt import hccl

logging.getLogger("ascentrt.hccl").setLevel(logging.CRITICAL)
world = MPI.COMM_WORLD
rank = world.Get_rank()
info = world.bcast(hccl.get_root_info() if rank == 0 else None, root=0)
result = []
if rank == 1:
    time.sleep(3)
else:
    try:
        hccl.comm_init_root_info(2, info, rank)
        result.append("formed without rank 1")
    except hccl.HcclError as exc:
        result.append(exc.code == hccl.HcclResult.E_TIMEOUT and "ranks [1] did not join" in str(exc))
comm = hccl.comm_init_root_info(2, info, rank)
s = art.Device(0).create_stream()
x = art.malloc(64)
art.memcpy(x, np.full(16, rank + 1, np.float32))
hccl.all_reduce(x, x, 16, hccl.HcclDataType.FP32, hccl.HcclReduceOp.SUM, comm, s)
s.synchronize(timeout=20)
result.append(float(x.numpy(np.float32)[0]) == 3.0)
results = world.gather(result, root=0)
if rank == 0:
    print("late join", results == [[True, True], [True]], results)
