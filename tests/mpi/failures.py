"""Run under mpiexec -n 2 with HCCL_EXEC_TIMEOUT=1: a group refused by one stream is withdrawn
whole (E_RUNTIME, the sequence number as it was), and a collective one rank calls only after
the other gave up fails on both and breaks the communicator (a new one works). Rank 0 prints
one line."""

import logging
import time

import numpy as np
from mpi4py import MPI

import ascentrt as art
from ascentrt import hccl

logging.getLogger("ascentrt.hccl").setLevel(logging.CRITICAL)  # (the failures are expected)
world = MPI.COMM_WORLD
rank = world.Get_rank()
comm = hccl.comm_init_root_info(2, world.bcast(hccl.get_root_info() if rank == 0 else None), rank)
comm.group.tag_span = 2  # tags repeat every 2 sequence numbers: stale messages meet new ones
D, O = hccl.HcclDataType, hccl.HcclReduceOp
good, stopped = art.Device(0).create_stream(), art.Device(0).create_stream(stop_on_failure=True)
a, b = art.malloc(64), art.malloc(64)
checks = []


def value(buf, v):
    art.memcpy(buf, np.full(16, v, np.float32))


def boom():
    raise RuntimeError("stop")


if rank == 0:  # rank 0's group has a part on a stopped stream: nothing of it may run
    art.launch(boom, stream=stopped)
    try:
        stopped.synchronize()
    except art.TaskError:
        pass
    hccl.group_start()
    hccl.all_reduce(a, a, 16, D.FP32, O.SUM, comm, stopped)
    hccl.all_reduce(b, b, 16, D.FP32, O.SUM, comm, good)
    try:
        hccl.group_end()
        checks.append("accepted")
    except hccl.HcclError as exc:
        checks.append(exc.code == hccl.HcclResult.E_RUNTIME and comm.group.seq == 0)
world.Barrier()
value(a, rank + 1)
value(b, 10 * (rank + 1))
hccl.all_reduce(a, a, 16, D.FP32, O.SUM, comm, good)
hccl.all_reduce(b, b, 16, D.FP32, O.SUM, comm, good)
good.synchronize()
checks.append(float(a.numpy(np.float32)[0]) == 3.0 and float(b.numpy(np.float32)[0]) == 30.0)
if rank == 1:
    time.sleep(1.5)  # rank 0 gives up on the next one; rank 1 calls it late and hears so
hccl.all_reduce(a, a, 16, D.FP32, O.SUM, comm, good)
try:
    good.synchronize()
    checks.append("no timeout")
except art.TaskError as exc:
    checks.append(exc.__cause__.code == hccl.HcclResult.E_TIMEOUT)
world.Barrier()
try:  # broken on both ranks (a late call and a missing one look alike over MPI): refused
    hccl.all_reduce(a, a, 16, D.FP32, O.SUM, comm, good)
    checks.append("accepted")
except hccl.HcclError as exc:
    checks.append("is broken" in str(exc))
hccl.comm_destroy(comm)  # a new communicator over the same processes works
comm = hccl.comm_init_root_info(2, world.bcast(hccl.get_root_info() if rank == 0 else None), rank)
for _ in range(2):
    value(a, rank + 1)
    hccl.all_reduce(a, a, 16, D.FP32, O.SUM, comm, good)
    good.synchronize()
    checks.append(float(a.numpy(np.float32)[0]) == 3.0)
results = world.gather(checks, root=0)
if rank == 0:
    print("failures", all(c is True for r in results for c in r), results)
