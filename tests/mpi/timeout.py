"""Run under mpiexec -n N with HCCL_EXEC_TIMEOUT=1: the last rank calls the second AllReduce
only after the others gave up; they fail with E_TIMEOUT naming it, and it fails with E_TIMEOUT
too (told by their votes) instead of waiting in MPI for them. The communicator is broken on
every rank then (the ranks' later calls would no longer pair up): the next call is refused at
once, naming the failure. Rank 0 prints one summary line."""

import logging
import time

from mpi4py import MPI

import ascentrt as art
from ascentrt import hccl

logging.getLogger("ascentrt.hccl").setLevel(logging.CRITICAL)  # (the timeout is expected)
world = MPI.COMM_WORLD
rank, n = world.Get_rank(), world.Get_size()
info = world.bcast(hccl.get_root_info() if rank == 0 else None, root=0)
comm = hccl.comm_init_root_info(n, info, rank)
stream = art.Device(0).create_stream()
buf = art.malloc(4096)
hccl.all_reduce(buf, buf, 16, hccl.HcclDataType.FP32, hccl.HcclReduceOp.SUM, comm, stream)
stream.synchronize()
if rank == n - 1:
    time.sleep(2.5)  # the others wait 1 s for it, then give up
hccl.all_reduce(buf, buf, 16, hccl.HcclDataType.FP32, hccl.HcclReduceOp.SUM, comm, stream)
try:
    stream.synchronize()
    result = "no error"
except art.TaskError as exc:
    text = str(exc.__cause__)
    timed_out = exc.__cause__.code == hccl.HcclResult.E_TIMEOUT
    if rank == n - 1:
        result = timed_out and "gave up waiting for it" in text
    else:
        result = (timed_out and f"rank(s) {n - 1} have not reached it" in text
                  and f"rank {n - 1}: #0" in text)
try:  # every rank: refused at once, nothing queued
    hccl.all_reduce(buf, buf, 16, hccl.HcclDataType.FP32, hccl.HcclReduceOp.SUM, comm, stream)
    result = (result, "accepted")
except hccl.HcclError as exc:
    if not (exc.code == hccl.HcclResult.E_TIMEOUT and "is broken" in str(exc)
            and "all_reduce #1" in str(exc) and comm.group.seq == 2):
        result = (result, str(exc))
stream.synchronize()
buf.free()
results = world.gather(result, root=0)
if rank == 0:
    print("timeouts", results == [True] * n, results)
