"""Data-parallel steps with one rank per process, the ranks meeting over MPI:

    pip install 'ascentrt[mpi]'          # mpi4py and an MPI (the mpich wheel)
    mpiexec -n 2 python examples/hccl/mpi_data_parallel.py

Rank 0 makes the root info and MPI broadcasts it, as HCCL's samples do; each process then
joins the communicator on its device 0. Each step computes a gradient on the compute stream;
the communication stream waits for it (an event), all-reduces it, and the update waits for
that (an event the other way). Run alone, it is a communicator of one rank.
"""

import zlib

import numpy as np

import ascentrt as art
from ascentrt import hccl

try:
    from mpi4py import MPI
except ImportError:
    print("this example needs mpi4py: pip install 'ascentrt[mpi]', then run it under mpiexec")
    raise SystemExit(0)

world = MPI.COMM_WORLD
rank, ranks = world.Get_rank(), world.Get_size()
info = world.bcast(hccl.get_root_info() if rank == 0 else None, root=0)
comm = hccl.comm_init_root_info(ranks, info, rank)
FP32, SUM = hccl.HcclDataType.FP32, hccl.HcclReduceOp.SUM
SAMPLES, FEATURES, STEPS, LR = 512, 64, 30, 0.1

rng = np.random.default_rng(rank)             # each rank its own shard of the data
true_w = np.linspace(-1, 1, FEATURES).astype(np.float32)
x_host = rng.standard_normal((SAMPLES, FEATURES)).astype(np.float32)
buffers = [art.malloc(n) for n in (x_host.nbytes, SAMPLES * 4, FEATURES * 4, FEATURES * 4, 4)]
x_buf, y_buf, w_buf, g_buf, loss_buf = buffers
art.memcpy(x_buf, x_host)
art.memcpy(y_buf, x_host @ true_w)
art.memset(w_buf, 0)
x, y = x_buf.view(np.float32, (SAMPLES, FEATURES)), y_buf.view(np.float32)
w, g, loss = w_buf.view(np.float32), g_buf.view(np.float32), loss_buf.view(np.float32)


def gradient(x, y, w, g, loss):
    """The shard's mean-squared-error gradient (and loss)."""
    err = x @ w - y
    loss[0] = float(err @ err) / len(y)
    g[:] = 2 * x.T @ err / len(y)


def update(w, g):
    """w -= LR * mean gradient (g holds the ranks' sum)."""
    w -= LR * g / ranks


compute, comm_stream = art.Stream(), art.Stream()
for step in range(STEPS):
    art.launch(gradient, x, y, w, g, loss, stream=compute)
    comm_stream.wait(compute.record())
    hccl.all_reduce(g_buf, g_buf, FEATURES, FP32, SUM, comm, comm_stream)
    compute.wait(comm_stream.record())
    art.launch(update, w, g, stream=compute)
    if step == 0:
        compute.synchronize()
        first = float(loss_buf.numpy(np.float32)[0])
compute.synchronize()
last = float(loss_buf.numpy(np.float32)[0])
digests = world.allgather(zlib.crc32(w_buf.numpy().tobytes()))
if rank == 0:
    print(f"{ranks} ranks over MPI, {STEPS} steps: loss {first:.3f} -> {last:.3f}")
    print(f"replicas identical after every AllReduce: {len(set(digests)) == 1}")
for b in buffers:
    b.free()
hccl.comm_destroy(comm)
