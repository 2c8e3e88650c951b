"""Run under mpiexec -n 3 with HCCL_CONNECT_TIMEOUT=5: ranks 0 and 1 form a communicator of
their own (rank 0 makes the root info and sends it to rank 1 alone; only they call
comm_init_root_info, as in HCCL) while rank 2 does something else; then all three form one from
a new root info. Both all-reduce correctly. Rank 0 prints one line."""

import logging
import time

import numpy as np
from mpi4py import MPI

import ascentrt as art
from ascentrt import hccl

logging.getLogger("ascentrt.hccl").setLevel(logging.CRITICAL)
world = MPI.COMM_WORLD
rank, n = world.Get_rank(), world.Get_size()
D, O = hccl.HcclDataType, hccl.HcclReduceOp
s = art.Device(0).create_stream()
x = art.malloc(64)
result = []
start = time.monotonic()
if rank in (0, 1):
    if rank == 0:
        info = hccl.get_root_info()
        world.send(info, dest=1, tag=77)
    else:
        info = world.recv(source=0, tag=77)
    try:
        sub = hccl.comm_init_root_info(2, info, rank)
        art.memcpy(x, np.full(16, rank + 1, np.float32))
        hccl.all_reduce(x, x, 16, D.FP32, O.SUM, sub, s)
        s.synchronize(timeout=20)
        result.append((hccl.get_rank_size(sub), float(x.numpy(np.float32)[0]),
                       time.monotonic() - start < 4))
    except hccl.HcclError as exc:
        result.append(str(exc))
else:
    result.append((2, 3.0, True))  # (not a member: it never calls it)
world.Barrier()
info = world.bcast(hccl.get_root_info() if rank == 0 else None, root=0)
try:
    every = hccl.comm_init_root_info(n, info, rank)
    art.memcpy(x, np.full(16, rank + 1, np.float32))
    hccl.all_reduce(x, x, 16, D.FP32, O.SUM, every, s)
    s.synchronize(timeout=20)
    result.append(float(x.numpy(np.float32)[0]))
except hccl.HcclError as exc:
    result.append(str(exc))
results = world.gather(result, root=0)
if rank == 0:
    print("subgroup", results == [[(2, 3.0, True), n * (n + 1) / 2]] * n, results)
