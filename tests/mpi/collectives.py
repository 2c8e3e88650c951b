"""Run under mpiexec -n N: every collective and dtype/op against numpy, one rank per process,
then a mismatch; rank 0 prints one summary line."""

import logging
import sys

import numpy as np
from mpi4py import MPI

import ascentrt as art
from ascentrt import hccl

logging.getLogger("ascentrt.hccl").setLevel(logging.CRITICAL)  # (the mismatch is expected)
world = MPI.COMM_WORLD
rank, n = world.Get_rank(), world.Get_size()
D, O = hccl.HcclDataType, hccl.HcclReduceOp
info = hccl.get_root_info() if rank == 0 else None
info = world.bcast(info, root=0)                  # the root info travels as HCCL's samples do
comm = hccl.comm_init_root_info(n, info, rank)
assert hccl.get_rank_size(comm) == n and hccl.get_rank_id(comm) == rank
stream = art.Device(0).create_stream()
rng = np.random.default_rng(0)                    # the same data on every rank: rank r's is data[r]
bad, total = [], 0


def arr(dt, k):
    if dt.kind == "f":
        return (rng.random(k) * 4 + 0.5).astype(dt)
    if dt.kind == "u":
        return rng.integers(1, 4, k).astype(dt)
    return rng.integers(-3, 4, k).astype(dt)


def check(name, got, exp):
    global total
    total += 1
    same = np.allclose(got, exp, rtol=1e-2) if got.dtype.kind == "f" else np.array_equal(got, exp)
    if not same:
        bad.append((name, str(got.dtype)))


for dname, npdt in hccl.constants.NUMPY_DTYPES.items():
    dt = np.dtype(npdt)
    for count in (1, 1000):
        data = [arr(dt, count * n) for _ in range(n)]
        size = count * n * dt.itemsize
        send, recv = art.malloc(size), art.malloc(size)
        for op, uf in hccl.constants.UFUNCS.items():
            art.memcpy(send, data[rank])
            hccl.all_reduce(send, recv, count, dname, op, comm, stream)
            stream.synchronize()
            exp = data[0][:count].copy()
            for d in data[1:]:
                exp = uf(exp, d[:count])
            check(f"all_reduce {op.name}", recv.numpy(dt)[:count], exp)
            hccl.reduce_scatter(send, recv, count, dname, op, comm, stream)
            stream.synchronize()
            full = data[0].copy()
            for d in data[1:]:
                full = uf(full, d)
            check(f"reduce_scatter {op.name}", recv.numpy(dt)[:count], full[rank * count:(rank + 1) * count])
        art.memcpy(send, data[rank])
        hccl.all_gather(send, recv, count, dname, comm, stream)
        stream.synchronize()
        check("all_gather", recv.numpy(dt)[:count * n], np.concatenate([d[:count] for d in data]))
        hccl.all_to_all(send, recv, count, dname, comm, stream)
        stream.synchronize()
        check("all_to_all", recv.numpy(dt)[:count * n],
              np.concatenate([data[q][rank * count:(rank + 1) * count] for q in range(n)]))
        hccl.broadcast(send, count, dname, n - 1, comm, stream)
        stream.synchronize()
        check("broadcast", send.numpy(dt)[:count], data[n - 1][:count])
        art.memcpy(send, data[rank])
        hccl.group_start()
        hccl.send(send, count, dname, (rank + 1) % n, comm, stream)
        hccl.recv(recv, count, dname, (rank - 1) % n, comm, stream)
        hccl.group_end()
        stream.synchronize()
        check("send/recv", recv.numpy(dt)[:count], data[(rank - 1) % n][:count])
        hccl.barrier(comm, stream)
        stream.synchronize()
        send.free()
        recv.free()

# A mismatch: the last rank passes another count; every rank fails with E_PARA naming it.
buf = art.malloc(4096)
hccl.all_reduce(buf, buf, 1023 if rank == n - 1 else 1024, D.FP32, O.SUM, comm, stream)
try:
    stream.synchronize()
    mismatch = "not reported"
except art.TaskError as exc:
    cause = exc.__cause__
    named = f"rank(s) {n - 1} differ" in str(cause) if n > 2 else "no majority" in str(cause)
    mismatch = cause.code == hccl.HcclResult.E_PARA and named and "count=1023" in str(cause)
buf.free()
results = world.gather((total, bad, mismatch), root=0)
if rank == 0:
    ok = all(not b and m is True for _, b, m in results)
    print(f"ranks {n} checks {sum(t for t, _, _ in results)} ok {ok} {results if not ok else ''}")
sys.stdout.flush()
