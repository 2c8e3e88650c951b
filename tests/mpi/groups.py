"""Run under mpiexec -n 2 with HCCL_EXEC_TIMEOUT=5: inside one group each rank all-reduces on
two communicators, rank 0 in the order A, B and rank 1 in the order B, A (as NCCL allows, and
as in one process): both complete at once. A float16 sum that overflows gives inf (no warning,
none turned into an error). Then each process forms a communicator of its own over its two
devices, one thread per rank, from a root info it made itself: under mpiexec too, those ranks
meet in-process. Rank 0 prints one line."""

import logging
import threading
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
local = hccl.get_root_info()  # (this process's own: its ranks are two threads of it)
got = {}


def thread_rank(r):
    art.set_device(r)
    c = hccl.comm_init_root_info(2, local, r)
    x, st = art.malloc(64, device=r), art.Device(r).create_stream()
    art.memcpy(x, np.full(16, r + 1, np.float32))
    hccl.all_reduce(x, x, 16, D.FP32, O.SUM, c, st)
    st.synchronize(timeout=10)
    got[r] = (c.group.transport, float(x.numpy(np.float32)[0]))


threads = [threading.Thread(target=thread_rank, args=(r,)) for r in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join(20)
ok = (ok, got == {0: ("process", 3.0), 1: ("process", 3.0)} or got)
results = world.gather(ok, root=0)
if rank == 0:
    print("groups", results == [((3.0, 30.0, True, True), True)] * 2, results)
