"""The full-mesh all-reduce and reduce-scatter of the cpu backend: exact results (the ranks'
arrays folded in rank order, as numpy folds them) for every op and dtype, sizes not divisible
by the ranks, tiny ones and ones longer than a tile, in place and not; the steps on the
lanes with their bytes; stream order; the sanitizer's edges through the collective.

One program on 4 cpu devices runs every case and prints what each test checks."""

from __future__ import annotations

import json

import pytest

from subprocess_util import run_program

PROGRAM = r'''
import json, tempfile, pathlib
import numpy as np, ascentrt as art
from ascentrt import hccl, profiler, sanitizer
from ascentrt.hccl.constants import NUMPY_DTYPES, UFUNCS
from ascentrt.hccl.plan import MESH_TILE
D, O = hccl.HcclDataType, hccl.HcclReduceOp
out = {}
rng = np.random.default_rng(1)

def arr(dt, k):
    if dt.kind == "f": return (rng.random(k) * 4 - 2).astype(dt)
    if dt.kind == "u": return rng.integers(0, 200, k).astype(dt)
    return rng.integers(-100, 100, k).astype(dt)

def fold(uf, arrays):
    exp = arrays[0].copy()
    for a in arrays[1:]: exp = uf(exp, a)
    return exp

def world(n):
    return hccl.comm_init_all(list(range(n))), [art.Device(r).create_stream() for r in range(n)]

def sync(streams):
    for s in streams: s.synchronize(timeout=30)

# every op and dtype, counts 0, 1 (under n) and not divisible by n; in place and not
bad, total = [], 0
for n in (3, 4):
    comms, streams = world(n)
    for dname, npdt in NUMPY_DTYPES.items():
        dt = np.dtype(npdt)
        for count in (0, 1, 5, 1003):
            size = max(1, count * n * dt.itemsize)
            data = [arr(dt, count * n) for r in range(n)]
            sends = [art.malloc(size, device=r) for r in range(n)]
            recvs = [art.malloc(size, device=r) for r in range(n)]
            for op, uf in UFUNCS.items():
                for in_place in (False, True):
                    for r in range(n):
                        if count: art.memcpy(sends[r], data[r])
                    dst = sends if in_place else recvs
                    for r in range(n):
                        hccl.all_reduce(sends[r], dst[r], count, dname, op, comms[r], streams[r])
                    sync(streams)
                    exp = fold(uf, [d[:count] for d in data])
                    for r in range(n):
                        total += 1
                        if not np.array_equal(dst[r].numpy(dt)[:count], exp):
                            bad.append(("all_reduce", n, dname.name, count, op.name, in_place))
                    for r in range(n):
                        if count: art.memcpy(sends[r], data[r])
                    for r in range(n):
                        recv = sends[r][r * count * dt.itemsize:] if in_place else recvs[r]
                        hccl.reduce_scatter(sends[r], recv, count, dname, op, comms[r], streams[r])
                    sync(streams)
                    full = fold(uf, data)
                    for r in range(n):
                        got = sends[r].numpy(dt)[r * count:(r + 1) * count] if in_place \
                            else recvs[r].numpy(dt)[:count]
                        total += 1
                        if not np.array_equal(got, full[r * count:(r + 1) * count]):
                            bad.append(("reduce_scatter", n, dname.name, count, op.name, in_place))
            for b in sends + recvs: b.free()
out["matrix"] = [total, bad]

# chunks longer than a tile: a full tile, then a short one
n = 4
comms, streams = world(n)
wide = []
for npdt, dname in ((np.float32, D.FP32), (np.float16, D.FP16), (np.int8, D.INT8)):
    dt = np.dtype(npdt)
    count = n * (MESH_TILE // dt.itemsize + 3) + 1
    data = [arr(dt, count) for r in range(n)]
    bufs = [art.malloc(count * dt.itemsize, device=r) for r in range(n)]
    for op, uf in ((O.SUM, np.add), (O.MAX, np.maximum)):
        for r in range(n): art.memcpy(bufs[r], data[r])
        for r in range(n):
            hccl.all_reduce(bufs[r], bufs[r], count, dname, op, comms[r], streams[r])
        sync(streams)
        exp = fold(uf, data)
        wide.append(all(np.array_equal(bufs[r].numpy(dt)[:count], exp) for r in range(n)))
    for b in bufs: b.free()
out["wide"] = wide

# stream order: the collective starts after the stream's earlier work, later work waits for
# it, and nothing moves until the last rank calls
count = 4096
send = [art.malloc(count * 4, device=r) for r in range(n)]
recv = [art.malloc(count * 4, device=r) for r in range(n)]
after = [art.malloc(count * 4, device=r) for r in range(n)]
for r in range(n):
    art.memset(recv[r], 0)
for r in range(n - 1):
    art.launch(art.kernels.fill, send[r].view(np.float32), float(r + 1), stream=streams[r])
    hccl.all_reduce(send[r], recv[r], count, D.FP32, O.SUM, comms[r], streams[r])
    art.launch(art.kernels.copy, after[r].view(np.float32), recv[r].view(np.float32), stream=streams[r])
early = [streams[r].query() for r in range(n - 1)]
untouched = all(not recv[r].numpy(np.float32).any() for r in range(n - 1))
art.launch(art.kernels.fill, send[n - 1].view(np.float32), float(n), stream=streams[n - 1])
hccl.all_reduce(send[n - 1], recv[n - 1], count, D.FP32, O.SUM, comms[n - 1], streams[n - 1])
art.launch(art.kernels.copy, after[n - 1].view(np.float32), recv[n - 1].view(np.float32), stream=streams[n - 1])
sync(streams)
out["order"] = [early, untouched, [float(after[r].numpy(np.float32)[-1]) for r in range(n)]]

# the profiler: one mesh step per rank, with the bytes it reads, and the parts' flow
with tempfile.TemporaryDirectory() as tmp:
    with profiler.profile(tmp):
        for r in range(n):
            hccl.all_reduce(send[r], recv[r], count, D.FP32, O.SUM, comms[r], streams[r])
        sync(streams)
    data = json.loads((pathlib.Path(tmp) / "profile.json").read_text())
tasks = [dict(zip(data["tasks"]["columns"], row)) for row in data["tasks"]["rows"]]
steps = [t for t in tasks if "mesh reduce" in t["name"]]
out["profile"] = [sorted(t["device"] for t in steps), sorted({t["nbytes"] for t in steps}),
                  [row[data["collectives"]["columns"].index("state")] for row in data["collectives"]["rows"]]]

# the sanitizer: a reader ordered after rank 2's part is clean; a writer of rank 1's send
# buffer that does not wait for the collective races with the mesh step reading it
other = art.Device(2).create_stream()
with sanitizer.sanitize("log"):
    for r in range(n):
        hccl.all_reduce(send[r], recv[r], count, D.FP32, O.SUM, comms[r], streams[r])
    other.wait(streams[2].record())
    art.launch(art.kernels.copy, after[2].view(np.float32), recv[2].view(np.float32), stream=other)
    sync(streams + [other])
    clean = len(sanitizer.reports())
    writer = art.Device(1).create_stream()
    for r in range(n):
        hccl.all_reduce(send[r], recv[r], count, D.FP32, O.SUM, comms[r], streams[r])
    art.launch(art.kernels.fill, send[1].view(np.float32), 9.0, stream=writer)
    sync(streams + [writer])
    found = [str(x) for x in sanitizer.reports()]
out["sanitizer"] = [clean, len(found) >= 1, any("all_reduce #" in f and "mesh reduce" in f for f in found)]
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def results():
    """What the program found, by case (one run on 4 cpu devices for every test here)."""
    stdout = run_program(PROGRAM, env={"ASCENTRT_DEVICES": "4", "ASCENTRT_BACKEND": "cpu",
                                       "ASCENTRT_LEAK_CHECK": "off"}, timeout=120)
    return json.loads(stdout.strip().splitlines()[-1])


def test_every_op_and_dtype_equals_numpys_rank_order_fold_in_place_or_not(results):
    total, bad = results["matrix"]
    # 11 dtypes x 4 counts x 4 ops x in place or not x 2 collectives x n ranks, for n = 3, 4
    assert total == 11 * 4 * 4 * 2 * 2 * (3 + 4) and bad == []


def test_chunks_longer_than_a_tile_are_exact(results):
    assert results["wide"] == [True] * 6


def test_the_collective_waits_for_every_rank_and_is_ordered_on_each_stream(results):
    early, untouched, after = results["order"]
    assert early == [False, False, False] and untouched  # rank 3 had not called: nothing moved
    assert after == [10.0] * 4                           # 1 + 2 + 3 + 4, read after the collective


def test_the_profiler_shows_one_mesh_step_per_rank_with_the_bytes_it_reads(results):
    devices, nbytes, states = results["profile"]
    assert devices == [0, 1, 2, 3] and nbytes == [4096 * 4] and states == ["done"]


def test_the_sanitizer_orders_through_the_mesh_and_finds_the_unordered_writer(results):
    assert results["sanitizer"] == [0, True, True]
