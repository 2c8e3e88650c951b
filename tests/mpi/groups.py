"""Run under mpiexec -n 2 with HCCL_EXEC_TIMEOUT=5: inside one group each rank all-reduces on
two communicators, rank 0 in the order A, B and rank 1 in the order B, A (as NCCL allows, and
as in one process): both complete at once. A float16 sum that overflows gives inf (no warning,
none turned into an error). Rank 0 prints one line."""

import logging
import time
import warnings

import numpy as np
from mpi4py import MPI

import ascentrt as art
from ascentrt import hccl

logging.getLogger("ascentrt.hccl").setLevel(logging.CRITICAL)
warnings.simplefilter("error")  # (as pytest's filterwarnings=error)
world = MPI.COMM_WORLD
rank = world.Get_rank()
D, O = hccl.HcclDataType, hccl.HcclReduceOp
A = hccl.comm_init_root_info(2, world.bcast(hccl.get_root_info() if rank == 0 else None), rank)
B = hccl.comm_init_root_info(2, world.bcast(hccl.get_root_info() if rank == 0 else None), rank)
s = art.Device(0).create_stream()
a, b, h = art.malloc(4096), art.malloc(4096), art.malloc(64)
art.memcpy(a, np.full(1024, rank + 1, np.float32))
art.memcpy(b, np.full(1024, 10 * (rank + 1), np.float32))
art.memcpy(h, np.full(32, 60000, np.float16))
start = time.monotonic()
hccl.group_start()
for buf, comm in ([(a, A), (b, B)] if rank == 0 else [(b, B), (a, A)]):
    hccl.all_reduce(buf, buf, 1024, D.FP32, O.SUM, comm, s)
hccl.all_reduce(h, h, 32, D.FP16, O.SUM, A, s)
hccl.group_end()
try:
    s.synchronize(timeout=10)
    ok = (float(a.numpy(np.float32)[0]), float(b.numpy(np.float32)[0]),
          bool(np.isinf(h.numpy(np.float16)).all()), time.monotonic() - start < 4)
except art.TaskError as exc:
    ok = str(exc.__cause__ or exc)
results = world.gather(ok, root=0)
if rank == 0:
    print("groups", results == [(3.0, 30.0, True, True)] * 2, results)
