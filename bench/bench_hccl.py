"""Collective figures: in-process AllReduce bandwidth on 4 devices against the memory-bound
floor of this machine (a full mesh on the cpu backend, ascentrt/hccl/mesh.py), the bus
bandwidth AllReduce (ring reduce-scatter, all-gather by owner) reaches on `sim` against its
preset's link, and (with the [mpi] extra) AllReduce over MPI against mpi4py's own Allreduce.

Algorithm bandwidth is bytes per rank / time of one AllReduce (all ranks submitted, all
synchronized). The floor is a numpy sum of the same four arrays in one thread (np.add into one
output, three passes): on this machine one thread already saturates memory bandwidth, so it is
what any in-process reduction of the four arrays is measured against. Bus bandwidth is
algorithm bandwidth x 2(n-1)/n, the share of the data each link carries in a ring.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

os.environ.setdefault("ASCENTRT_DEVICES", "4")  # before ascentrt makes its devices

from _common import emit, median, pick  # noqa: E402

import numpy as np  # noqa: E402

import ascentrt as art  # noqa: E402
from ascentrt import hccl  # noqa: E402

N = 4
SIZES = pick([4 << 10, 1 << 20, 16 << 20, 64 << 20], [4 << 10, 1 << 20])
ROUNDS = pick(7, 2)
FP32, SUM = hccl.HcclDataType.FP32, hccl.HcclReduceOp.SUM


def _timed(fns, rounds: int) -> list[float]:
    """Median seconds of each function, run in alternation round by round (the machine's
    noise then falls on all of them alike)."""
    for fn in fns:
        fn()  # warm-up: first touch of every page
    times = [[] for _ in fns]
    for _ in range(rounds):
        for fn, out in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return [median(t) for t in times]


def in_process() -> None:
    """AllReduce on 4 cpu devices against the numpy floor, per size."""
    comms = hccl.comm_init_all(list(range(N)))
    streams = [art.Device(r).create_stream() for r in range(N)]
    rows = []
    for size in SIZES:
        count = size // 4
        sends = [art.malloc(size, device=r) for r in range(N)]
        recvs = [art.malloc(size, device=r) for r in range(N)]
        for r in range(N):
            art.memcpy(sends[r], np.full(count, r, np.float32))
        arrays = [np.full(count, r, np.float32) for r in range(N)]
        out = np.empty(count, np.float32)

        def floor():
            np.add(arrays[0], arrays[1], out=out)
            for a in arrays[2:]:
                np.add(out, a, out=out)

        def all_reduce():
            for r in range(N):
                hccl.all_reduce(sends[r], recvs[r], count, FP32, SUM, comms[r], streams[r])
            for s in streams:
                s.synchronize(60)

        rounds = ROUNDS if size >= 16 << 20 else ROUNDS * 5
        t_all_reduce, t_floor = _timed([all_reduce, floor], rounds)
        rows.append((size, size / t_all_reduce, size / t_floor))
        assert float(recvs[N - 1].numpy(np.float32)[0]) == sum(range(N))
        for b in sends + recvs:
            b.free()
    size, algbw, floor_bw = rows[-1]
    curve = ", ".join(f"{s >> 10} KiB: {a / 1e9:.2f} GB/s vs {f / 1e9:.2f}" for s, a, f in rows)
    emit(f"hccl_allreduce_{size >> 20}MiB_4dev_cpu", algbw / 1e9, "GB/s",
         "numpy sum of the 4 arrays, one thread", floor_bw / 1e9, ">=", 0.5,
         f"in-process AllReduce algorithm bandwidth at {size >> 20} MiB, 4 cpu devices, median "
         f"of {ROUNDS}", note=f"algbw vs floor by size: {curve}")


SIM_CHILD = """
import json, os
import ascentrt as art
from ascentrt import hccl
n, size = 4, {size}
comms = hccl.comm_init_all(list(range(n)))
streams = [art.Device(r).create_stream() for r in range(n)]
bufs = [art.malloc(size, device=r) for r in range(n)]
for s in streams: s.synchronize()
t0 = art.Device(0).now_ns()
for r in range(n):
    hccl.all_reduce(bufs[r], bufs[r], size // 4, 4, 0, comms[r], streams[r])
for s in streams: s.synchronize()
seconds = (art.Device(0).now_ns() - t0) / 1e9
print(json.dumps({{"busbw": size / seconds * 2 * (n - 1) / n,
                  "link": art.Device(0)._backend.preset.peer_link_bandwidth}}))
"""


def on_sim() -> None:
    """AllReduce bus bandwidth on 4 simulated ascend910b devices against the HCCS link."""
    size = pick(64 << 20, 1 << 20)
    env = dict(os.environ, ASCENTRT_BACKEND="sim", ASCENTRT_SIM_PRESET="ascend910b",
               ASCENTRT_DEVICES="4", ASCENTRT_LEAK_CHECK="off")
    proc = subprocess.run([sys.executable, "-c", SIM_CHILD.format(size=size)], env=env,
                          capture_output=True, text=True, timeout=300, check=True)
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    emit(f"hccl_allreduce_busbw_sim_{size >> 20}MiB", got["busbw"] / 1e9, "GB/s",
         "the preset's peer link (ascend910b HCCS)", got["link"] / 1e9, ">=", 0.8,
         "AllReduce on 4 sim devices reaches the link bandwidth (bus bandwidth = "
         "algbw x 2(n-1)/n), virtual time, deterministic")


MPI_CHILD = """
import json, statistics, time
import numpy as np
from mpi4py import MPI
import ascentrt as art
from ascentrt import hccl
world = MPI.COMM_WORLD
rank, n = world.Get_rank(), world.Get_size()
info = world.bcast(hccl.get_root_info() if rank == 0 else None, root=0)
comm = hccl.comm_init_root_info(n, info, rank)
stream = art.Device(0).create_stream()
out = {{}}
for size in {sizes}:
    send, recv = art.malloc(size), art.malloc(size)
    art.memset(send, 1)
    a, b = send.numpy(np.float32), recv.numpy(np.float32)
    def ours():
        hccl.all_reduce(send, recv, size // 4, 4, 0, comm, stream)
        stream.synchronize()
    def theirs():
        world.Allreduce(a, b, op=MPI.SUM)
    times = {{"ours": [], "theirs": []}}
    ours(); theirs()
    for _ in range({rounds}):
        for name, fn in (("ours", ours), ("theirs", theirs)):
            world.Barrier()
            t0 = time.perf_counter(); fn(); times[name].append(time.perf_counter() - t0)
    out[size] = [size / statistics.median(times["ours"]), size / statistics.median(times["theirs"])]
    send.free(); recv.free()
if rank == 0:
    print(json.dumps(out))
"""


def over_mpi() -> None:
    """AllReduce over MPI (2 processes) against mpi4py's own Allreduce on the same buffers."""
    import importlib.util
    import shutil
    if importlib.util.find_spec("mpi4py") is None:
        print("over MPI: skipped (the [mpi] extra, mpi4py, is not installed)")
        return
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    if mpiexec is None:
        print("over MPI: skipped (no mpiexec)")
        return
    sizes = pick([4 << 10, 1 << 20, 64 << 20], [4 << 10])
    code = MPI_CHILD.format(sizes=sizes, rounds=pick(9, 2))
    proc = subprocess.run([mpiexec, "-n", "2", sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=300, check=True,
                          env=dict(os.environ, ASCENTRT_LEAK_CHECK="off", ASCENTRT_DEVICES="1"))
    got = {int(k): v for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}
    size = max(got)
    curve = ", ".join(f"{s >> 10} KiB: {a / 1e9:.3g} vs {b / 1e9:.3g} GB/s" for s, (a, b) in sorted(got.items()))
    label = f"{size >> 20}MiB" if size >= 1 << 20 else f"{size >> 10}KiB"
    emit(f"hccl_allreduce_mpi_{label}_2proc", got[size][0] / 1e9, "GB/s",
         "mpi4py Allreduce of the same buffers", got[size][1] / 1e9, ">=", 0.8,
         f"AllReduce over MPI (2 processes, mpich) at {label}, median of {pick(9, 2)}",
         note=f"by size: {curve}")


def main() -> None:
    """Measure and print the collective figures as JSON lines."""
    in_process()
    on_sim()
    over_mpi()


if __name__ == "__main__":
    main()
