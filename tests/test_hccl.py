"""ascentrt.hccl: every collective against numpy on 2, 3 and 4 ranks, mismatches, timeouts and
deadlocks reported by name, bad input refused with HCCL's codes, peer access, stream order."""

from __future__ import annotations

import os
import textwrap

import pytest

from subprocess_util import run_program

FOUR = {"ASCENTRT_DEVICES": "4"}

PRELUDE = '''
import numpy as np, ascentrt as art, threading
from ascentrt import hccl
D, O, R = hccl.HcclDataType, hccl.HcclReduceOp, hccl.HcclResult
def ranks(n, nbytes):
    """A communicator of devices 0..n-1, and a stream and a buffer of nbytes on each."""
    return (hccl.comm_init_all(list(range(n))), [art.Device(r).create_stream() for r in range(n)],
            [art.malloc(nbytes, device=r) for r in range(n)])
def sync_error(stream):
    try:
        stream.synchronize(timeout=30)
    except art.TaskError as exc:
        return exc
    return None
'''


def run(code: str, env: dict | None = None, timeout: float = 120) -> str:
    return run_program(PRELUDE + textwrap.dedent(code), env={**FOUR, **(env or {})}, timeout=timeout)


MATRIX = '''
rng = np.random.default_rng(0)
def arr(dt, k):
    if dt.kind == "f": return (rng.random(k) * 4 + 0.5).astype(dt)
    if dt.kind == "u": return rng.integers(1, 4, k).astype(dt)
    return rng.integers(-3, 4, k).astype(dt)
bad, total = [], 0
for n in (2, 3, 4):
    comms = hccl.comm_init_all(list(range(n)))
    streams = [art.Device(r).create_stream() for r in range(n)]
    for dname, npdt in hccl.constants.NUMPY_DTYPES.items():
        dt = np.dtype(npdt)
        for count in (0, 1, 7, 1000):
            data = [arr(dt, count * n) for r in range(n)]
            size = max(1, count * n * dt.itemsize)
            sends = [art.malloc(size, device=r) for r in range(n)]
            recvs = [art.malloc(size, device=r) for r in range(n)]
            for r in range(n):
                if count: art.memcpy(sends[r], data[r])
            def sync():
                for s in streams: s.synchronize(timeout=30)
            def check(name, got, exp):
                global total
                total += 1
                # bit for bit, floats too: reductions fold the ranks in rank order on every
                # backend (the sim's ring once summed in ring order: other roundings than cpu's)
                same = np.array_equal(got, exp)
                if not same:
                    bad.append((name, n, dname.name, count))
            for op, uf in hccl.constants.UFUNCS.items():
                for r in range(n):
                    hccl.all_reduce(sends[r], recvs[r], count, dname, op, comms[r], streams[r])
                sync()
                exp = data[0][:count].copy()
                for d in data[1:]: exp = uf(exp, d[:count])
                for r in range(n): check(f"all_reduce {op.name}", recvs[r].numpy(dt)[:count], exp)
                for r in range(n):  # in place
                    if count: art.memcpy(recvs[r], data[r][:count])
                    hccl.all_reduce(recvs[r], recvs[r], count, dname, op, comms[r], streams[r])
                sync()
                for r in range(n): check(f"all_reduce in place {op.name}", recvs[r].numpy(dt)[:count], exp)
                for r in range(n):
                    hccl.reduce_scatter(sends[r], recvs[r], count, dname, op, comms[r], streams[r])
                sync()
                full = data[0].copy()
                for d in data[1:]: full = uf(full, d)
                for r in range(n):
                    check(f"reduce_scatter {op.name}", recvs[r].numpy(dt)[:count], full[r*count:(r+1)*count])
            for r in range(n):
                hccl.all_gather(sends[r], recvs[r], count, dname, comms[r], streams[r])
            sync()
            exp = np.concatenate([d[:count] for d in data])
            for r in range(n): check("all_gather", recvs[r].numpy(dt)[:count*n], exp)
            for r in range(n):
                hccl.all_to_all(sends[r], recvs[r], count, dname, comms[r], streams[r])
            sync()
            for r in range(n):
                exp = np.concatenate([data[q][r*count:(r+1)*count] for q in range(n)])
                check("all_to_all", recvs[r].numpy(dt)[:count*n], exp)
            for r in range(n):
                hccl.broadcast(sends[r], count, dname, n - 1, comms[r], streams[r])
            sync()
            for r in range(n): check("broadcast", sends[r].numpy(dt)[:count], data[n - 1][:count])
            for r in range(n):
                if count: art.memcpy(sends[r], data[r])
            hccl.group_start()
            for r in range(n):
                hccl.send(sends[r], count, dname, (r + 1) % n, comms[r], streams[r])
                hccl.recv(recvs[r], count, dname, (r - 1) % n, comms[r], streams[r])
            hccl.group_end()
            sync()
            for r in range(n): check("send/recv", recvs[r].numpy(dt)[:count], data[(r - 1) % n][:count])
            for r in range(n): hccl.barrier(comms[r], streams[r])
            sync()
            for b in sends + recvs: b.free()
print(total, bad)
'''


def test_every_collective_dtype_and_op_matches_numpy_on_2_3_and_4_ranks():
    out = run(MATRIX)
    total, bad = out.split(" ", 1)
    assert int(total) == 6336 and bad.strip() == "[]"


def test_in_place_all_reduce_and_in_place_all_gather():
    out = run('''
        n, count = 4, 1003
        comms = hccl.comm_init_all([0, 1, 2, 3])
        streams = [art.Device(r).create_stream() for r in range(n)]
        data = [np.arange(count, dtype=np.float64) * (r + 1) for r in range(n)]
        bufs = [art.malloc(count * 8 * n, device=r) for r in range(n)]
        for r in range(n):
            art.memcpy(bufs[r], data[r])
            hccl.all_reduce(bufs[r], bufs[r], count, D.FP64, O.SUM, comms[r], streams[r])
        for s in streams: s.synchronize(timeout=30)
        ok = all(np.array_equal(bufs[r].numpy(np.float64)[:count], sum(data)) for r in range(n))
        # all-gather whose send block is its own slot of the receive buffer
        for r in range(n):
            art.memcpy(bufs[r][r * count * 8:(r + 1) * count * 8], data[r])
            hccl.all_gather(bufs[r][r * count * 8:], bufs[r], count, D.FP64, comms[r], streams[r])
        for s in streams: s.synchronize(timeout=30)
        ok = ok and all(np.array_equal(bufs[r].numpy(np.float64), np.concatenate(data)) for r in range(n))
        print(ok)
    ''')
    assert out.strip() == "True"


@pytest.mark.cpu_only  # a kernel blocks on a host gate
def test_a_collective_is_ordered_with_the_work_around_it_on_each_stream():
    out = run('''
        gate = threading.Event()
        comms = hccl.comm_init_all([0, 1])
        s = [art.Device(r).create_stream() for r in range(2)]
        send = [art.malloc(4096, device=r) for r in range(2)]
        recv = [art.malloc(4096, device=r) for r in range(2)]
        for r in range(2):
            art.memset(send[r], 0); art.memset(recv[r], 0)
        # rank 1's producer is held back: the collective must wait for it
        art.launch(lambda: gate.wait(20), stream=s[1])
        for r in range(2):
            art.launch(art.kernels.fill, send[r].view(np.float32), float(r + 1), stream=s[r])
            hccl.all_reduce(send[r], recv[r], 1024, D.FP32, O.SUM, comms[r], s[r])
        early = s[0].query()
        gate.set()
        for r in range(2): s[r].synchronize(timeout=20)
        print(early, [float(recv[r].numpy(np.float32)[0]) for r in range(2)])
    ''')
    assert out.split() == ["False", "[3.0,", "3.0]"]


def test_a_buffer_freed_right_after_its_ranks_call_still_feeds_the_collective():
    # (NCCL's usual pattern: the steps on the communicator's lanes found it freed and every
    # rank failed with E_PTR, with a plain free() and with free(stream=s) alike)
    out = run('''
        comms = hccl.comm_init_all([0, 1])
        s = [art.Device(r).create_stream() for r in range(2)]
        for stream_ordered in (False, True):
            send = [art.malloc(4096, device=r) for r in range(2)]
            recv = [art.malloc(4096, device=r) for r in range(2)]
            for r in range(2):
                send[r].numpy(np.float32)[:] = r + 1
                hccl.all_reduce(send[r], recv[r], 1024, D.FP32, O.SUM, comms[r], s[r])
                send[r].free(stream=s[r]) if stream_ordered else send[r].free()
            for r in range(2): s[r].synchronize(timeout=20)
            print([np.unique(recv[r].numpy(np.float32)).tolist() for r in range(2)])
    ''')
    assert out.split("\n")[:2] == ["[[3.0], [3.0]]"] * 2


def test_mismatched_calls_fail_every_rank_with_e_para_naming_each_call_and_site():
    out = run('''
        comms, s, b = ranks(3, 4096)
        hccl.all_reduce(b[0], b[0], 256, D.FP32, O.SUM, comms[0], s[0])
        hccl.all_reduce(b[1], b[1], 512, D.FP32, O.SUM, comms[1], s[1])     # the culprit
        hccl.all_reduce(b[2], b[2], 256, D.FP32, O.SUM, comms[2], s[2])
        errors = [sync_error(x) for x in s]
        causes = [e.__cause__ for e in errors]
        print(all(isinstance(c, hccl.HcclError) and c.code == R.E_PARA for c in causes))
        text = str(causes[0])
        print("sequence number 0" in text, f"communicator {comms[0].group.id}" in text)
        print("rank 1: all_reduce(count=512" in text, "<string>:" in text)
        print(hccl.flight_record(comms[2])[-1].state)
        # the communicator goes on: the next collective works
        for r in range(3):
            art.memset(b[r], 0)
            hccl.all_reduce(b[r], b[r], 256, D.FP32, O.SUM, comms[r], s[r])
        print([sync_error(x) for x in s] == [None] * 3)
    ''', env={"ASCENTRT_LEAK_CHECK": "off"})
    assert out.split() == ["True", "True", "True", "True", "True", "failed", "True"]


def test_a_rank_that_never_arrives_times_out_the_others_naming_it():
    out = run('''
        comms, s, b = ranks(3, 4096)
        for r in range(3):
            hccl.all_reduce(b[r], b[r], 8, D.FP32, O.SUM, comms[r], s[r])   # #0 completes
        for r in (0, 2):                                                    # rank 1 never calls #1
            hccl.all_reduce(b[r], b[r], 8, D.FP32, O.SUM, comms[r], s[r])
        errors = [sync_error(s[r]) for r in (0, 2)]
        cause = errors[0].__cause__
        print(cause.code == R.E_TIMEOUT, errors[1].__cause__.code == R.E_TIMEOUT)
        print("rank(s) 1 have not called it" in str(cause), "rank 1: #0" in str(cause))
        # one meeting's error on every rank: it says where it was noticed, not whose it is
        print(all("(first on rank " in str(e.__cause__) for e in errors))
        print(int(errors[0].code) == int(art.ErrorCode.RT_WAIT_TIMEOUT))
        rec = hccl.flight_record(comms[0])[-1]
        print(rec.seq, rec.state, [c[0] for c in rec.calls])
        try:                                                  # too late: the communicator is broken
            hccl.all_reduce(b[1], b[1], 8, D.FP32, O.SUM, comms[1], s[1])
        except hccl.HcclError as exc:
            print(exc.code == R.E_TIMEOUT and "is broken" in str(exc))
    ''', env={"HCCL_EXEC_TIMEOUT": "0.5", "ASCENTRT_LEAK_CHECK": "off"})
    assert out.split() == ["True", "True", "True", "True", "True", "True", "1", "failed", "[0,",
                           "2]", "True"]


def test_a_rank_no_thread_is_left_to_call_is_a_deadlock_not_a_30_minute_wait():
    # (a single-threaded program that never called rank 1 blocked in an untimed synchronize
    # until HCCL_EXEC_TIMEOUT, 1836 s by default; with a thread left that may call it, it waits)
    out = run('''
        import time
        comms, s, b = ranks(2, 4096)
        late = threading.Thread(target=lambda: (time.sleep(0.3), hccl.all_reduce(
            b[1], b[1], 8, D.FP32, O.SUM, comms[1], s[1])))
        hccl.all_reduce(b[0], b[0], 8, D.FP32, O.SUM, comms[0], s[0])
        late.start()
        s[0].synchronize()  # the thread calls rank 1's part meanwhile
        late.join()
        print("joined")
        hccl.all_reduce(b[0], b[0], 8, D.FP32, O.SUM, comms[0], s[0])  # no thread left for rank 1
        t0 = time.monotonic()
        try:
            s[0].synchronize()
        except art.DeadlockError as exc:
            print("deadlock", "rank(s) 1 have not called it" in str(exc), time.monotonic() - t0 < 20)
    ''', env={"ASCENTRT_LEAK_CHECK": "off"})
    assert out.split() == ["joined", "deadlock", "True", "True"]


def test_a_rank_whose_communicator_is_destroyed_fails_the_others_at_once_naming_it():
    # (they waited out HCCL_EXEC_TIMEOUT, 30 minutes by default, told the rank "has not called it")
    out = run('''
        import time
        comms, s, b = ranks(3, 4096)
        for r in (0, 2):                                     # rank 1 never calls #0 ...
            hccl.all_reduce(b[r], b[r], 8, D.FP32, O.SUM, comms[r], s[r])
        t0 = time.monotonic()
        hccl.comm_destroy(comms[1])                          # ... and is gone
        errors = [sync_error(s[r]) for r in (0, 2)]
        print(time.monotonic() - t0 < 10, [e.__cause__.code == R.E_REMOTE for e in errors])
        print("rank 1's communicator was destroyed" in str(errors[0].__cause__))
        hccl.all_reduce(b[0], b[0], 8, D.FP32, O.SUM, comms[0], s[0])   # a later one: at once too
        print(sync_error(s[0]).__cause__.code == R.E_REMOTE)
    ''', env={"ASCENTRT_LEAK_CHECK": "off"})
    assert out.split() == ["True", "[True,", "True]", "True", "True"]


def test_a_part_failed_by_a_departed_rank_is_a_task_error_with_cann_s_remote_code():
    # (E_REMOTE had no runtime code: the task error said 507000 RT_INTERNAL_ERROR)
    out = run('''
        comms, s, b = ranks(2, 4096)
        hccl.all_reduce(b[0], b[0], 8, D.FP32, O.SUM, comms[0], s[0])   # rank 1 never calls it
        hccl.comm_destroy(comms[1])
        exc = sync_error(s[0])
        print(int(exc.code), exc.__cause__.code == R.E_REMOTE, exc.info.error_code)
    ''', env={"ASCENTRT_LEAK_CHECK": "off"})
    assert out.split() == ["507057", "True", "507057"]


def test_a_wait_cycle_through_a_collective_is_reported_as_a_deadlock():
    out = run('''
        comms = hccl.comm_init_all([0, 1])
        s0, s1 = art.Device(0).create_stream(), art.Device(1).create_stream()
        b0, b1 = art.malloc(4096, device=0), art.malloc(4096, device=1)
        ev = art.Device(0).create_event()
        hccl.all_reduce(b0, b0, 16, D.FP32, O.SUM, comms[0], s0)
        ev.record(s0)                         # recorded after rank 0's all-reduce ...
        s1.wait(ev)                          # ... which rank 1's stream waits for first
        hccl.all_reduce(b1, b1, 16, D.FP32, O.SUM, comms[1], s1)
        try:
            s0.synchronize(timeout=20)
        except art.DeadlockError as exc:
            text = str(exc)
            print("cycle", "all_reduce #0" in text, f"stream {s1.id}" in text)
    ''', env={"ASCENTRT_LEAK_CHECK": "off"})
    assert out.split() == ["cycle", "True", "True"]


def test_sends_and_receives_outside_a_group_deadlock_and_say_so():
    out = run('''
        comms, s, b = ranks(2, 64)
        for r in range(2):                     # each rank sends first, then receives: a cycle
            hccl.send(b[r], 4, D.INT32, 1 - r, comms[r], s[r])
            hccl.recv(b[r], 4, D.INT32, 1 - r, comms[r], s[r])
        try:
            s[0].synchronize(timeout=20)
        except art.DeadlockError as exc:
            print("deadlock", "send #0" in str(exc))
    ''', env={"ASCENTRT_LEAK_CHECK": "off"})
    assert out.split() == ["deadlock", "True"]


BAD_INPUT = '''
comms = hccl.comm_init_all([0, 1])
other = hccl.comm_init_all([2, 3])
s = [art.Device(r).create_stream() for r in range(4)]
b = [art.malloc(4096, device=r) for r in range(4)]
host = art.malloc_host(4096)
seen = []
def expect(code, fn):
    try:
        fn()
    except hccl.HcclError as exc:
        seen.append(exc.code == code or (exc.code, code))
    else:
        seen.append(("accepted", code))
A = lambda *a, **k: hccl.all_reduce(*a, **k)
expect(R.E_PARA, lambda: A(b[0], b[0], 1025, D.FP32, O.SUM, comms[0], s[0]))       # overflows 4096 B
expect(R.E_PARA, lambda: A(b[0].ptr, b[0].ptr, 1025, D.FP32, O.SUM, comms[0], s[0]))
expect(R.E_PARA, lambda: A(b[1], b[1], 16, D.FP32, O.SUM, comms[0], s[0]))         # device 1's buffer
expect(R.E_PARA, lambda: A(host, host, 16, D.FP32, O.SUM, comms[0], s[0]))          # host memory
expect(R.E_PTR, lambda: A(None, b[0], 16, D.FP32, O.SUM, comms[0], s[0]))
expect(R.E_PTR, lambda: A(12345, b[0], 16, D.FP32, O.SUM, comms[0], s[0]))          # not an allocation
expect(R.E_PARA, lambda: A(b[0], b[0], -1, D.FP32, O.SUM, comms[0], s[0]))
expect(R.E_PARA, lambda: A(b[0], b[0], True, D.FP32, O.SUM, comms[0], s[0]))        # a bool is no count
expect(R.E_PARA, lambda: A(b[0], b[0], 16.0, D.FP32, O.SUM, comms[0], s[0]))
expect(R.E_PARA, lambda: A(b[0], b[0], 16, 99, O.SUM, comms[0], s[0]))
expect(R.E_PARA, lambda: A(b[0], b[0], 16, D.FP32, 7, comms[0], s[0]))
expect(R.E_NOT_SUPPORT, lambda: A(b[0], b[0], 16, D.BFP16, O.SUM, comms[0], s[0]))
expect(R.E_PARA, lambda: A(b[0], b[0], 16, D.FP32, O.SUM, comms[0], s[1]))          # stream of device 1
expect(R.E_PARA, lambda: A(b[2], b[2], 16, D.FP32, O.SUM, comms[0], s[2]))          # mixing comms
expect(R.E_PTR, lambda: A(b[0], b[0], 16, D.FP32, O.SUM, "comm", s[0]))
expect(R.E_PARA, lambda: hccl.broadcast(b[0], 16, D.FP32, 2, comms[0], s[0]))       # root out of range
expect(R.E_PARA, lambda: hccl.send(b[0], 16, D.FP32, 5, comms[0], s[0]))
expect(R.E_PARA, lambda: hccl.send(b[0], 16, D.FP32, 0, comms[0], s[0]))            # to itself
expect(R.E_PARA, lambda: hccl.all_gather(b[0], b[0], 600, D.FP32, comms[0], s[0]))  # 2 x 2400 B > 4096
expect(R.E_PARA, lambda: hccl.reduce_scatter(b[0], b[0], 600, D.FP32, O.SUM, comms[0], s[0]))
expect(R.E_PARA, lambda: hccl.comm_init_all([0, 0]))
expect(R.E_PARA, lambda: hccl.comm_init_all([0, 9]))
expect(R.E_PARA, lambda: hccl.group_end())
dead = hccl.comm_init_all([0, 1])
hccl.comm_destroy(dead[0])
expect(R.E_PTR, lambda: A(b[0], b[0], 16, D.FP32, O.SUM, dead[0], s[0]))
expect(R.E_PTR, lambda: hccl.get_rank_size(dead[0]))
print(all(x is True for x in seen), [x for x in seen if x is not True])
print(all(x.pending == 0 for x in s))
# nothing moved and every communicator is still usable
for r in range(2):  # (numpy ints for the count and the root, as the core's counts take them)
    art.memset(b[r], 0)
    hccl.all_reduce(b[r], b[r], np.int64(16), D.FP32, O.SUM, comms[r], s[r])
for r in range(2):
    hccl.broadcast(b[r], np.int64(16), D.FP32, np.int64(1), comms[r], s[r])
print([sync_error(x) for x in s[:2]] == [None, None])
print(hccl.get_rank_size(comms[1]), hccl.get_rank_id(comms[1]), hccl.get_rank_id(other[1]))
'''


def test_bad_input_gets_hccl_codes_queues_nothing_and_leaves_the_communicator_usable():
    out = run(BAD_INPUT, env={"ASCENTRT_LEAK_CHECK": "off"})
    assert out.split("\n")[:4] == ["True []", "True", "True", "2 1 1"]


def test_comm_init_root_info_joins_one_thread_per_rank():
    out = run('''
        import os
        # (4 ranks that all come may take a while to meet on a loaded machine: the short
        # timeout is for the cases below that must time out)
        os.environ["HCCL_CONNECT_TIMEOUT"] = "30"
        info = hccl.get_root_info()
        print(len(bytes(info)) == hccl.ROOT_INFO_BYTES)
        results = {}
        def rank(r):
            art.set_device(r)
            comm = hccl.comm_init_root_info(4, info, r)
            s = art.Device(r).create_stream()
            buf = art.malloc(64, device=r)
            art.memcpy(buf, np.full(16, r + 1, np.int32))
            hccl.all_reduce(buf, buf, 16, D.INT32, O.SUM, comm, s)
            s.synchronize(timeout=20)
            results[r] = (hccl.get_rank_id(comm), int(buf.numpy(np.int32)[0]))
        threads = [threading.Thread(target=rank, args=(r,)) for r in range(4)]
        for t in threads: t.start()
        for t in threads: t.join(30)
        print(sorted(results.values()))
        os.environ["HCCL_CONNECT_TIMEOUT"] = "0.3"
        def expect(code, fn):
            try:
                fn()
            except hccl.HcclError as exc:
                return exc.code == code
            return False
        info2 = hccl.get_root_info()
        print(expect(R.E_PARA, lambda: hccl.comm_init_root_info(2, info2, 2)),
              expect(R.E_PTR, lambda: hccl.comm_init_root_info(2, b"x", 0)),
              expect(R.E_TIMEOUT, lambda: hccl.comm_init_root_info(2, info2, 0)))
        # ranks that disagree on the communicator's size: the second is refused at once
        info3, first = hccl.get_root_info(), []
        t = threading.Thread(target=lambda: first.append(
            expect(R.E_TIMEOUT, lambda: hccl.comm_init_root_info(2, info3, 0))))
        t.start()
        import time; time.sleep(0.05)
        art.set_device(1)
        print(expect(R.E_PARA, lambda: hccl.comm_init_root_info(3, info3, 1)))
        t.join(10)
        print(first == [True])
        # more ranks than devices can never form: refused at once, not after the timeout; and
        # a root info whose ranks all gave up is fresh again (it kept the first nranks)
        import time
        t0 = time.monotonic()
        print(expect(R.E_PARA, lambda: hccl.comm_init_root_info(10 ** 6, info2, 0)),
              time.monotonic() - t0 < 0.2)
        art.set_device(0)
        print(hccl.get_rank_size(hccl.comm_init_root_info(1, info2, 0)))
    ''', env={"HCCL_CONNECT_TIMEOUT": "0.3", "ASCENTRT_LEAK_CHECK": "off"})
    assert out.split("\n")[:7] == ["True", "[(0, 10), (1, 10), (2, 10), (3, 10)]", "True True True",
                                   "True", "True", "True True", "1"]


def test_a_collective_on_a_capturing_stream_is_refused_clearly():
    out = run('''
        comms = hccl.comm_init_all([0, 1])
        s = art.Device(0).create_stream()
        b = art.malloc(64, device=0)
        s.begin_capture()
        try:
            hccl.all_reduce(b, b, 4, D.FP32, O.SUM, comms[0], s)
        except hccl.HcclError as exc:
            print(exc.code == R.E_NOT_SUPPORT, "captured" in str(exc))
        s.end_capture()
    ''', env={"ASCENTRT_LEAK_CHECK": "off"})
    assert out.split() == ["True", "True"]


@pytest.mark.cpu_only  # a kernel blocks on a host gate
def test_peer_access_in_the_core_and_the_acl_facade_agree():
    out = run('''
        import ascentrt.acl as acl
        d0, d1 = art.Device(0), art.Device(1)
        print(d0.can_access_peer(d1), d0.peer_access_enabled(1))
        try:
            d0.enable_peer_access(d0)
        except art.InvalidArgumentError as exc:
            print(int(exc.code))
        acl.rt.set_device(0)
        print(acl.rt.device_enable_peer_access(1, 0), d0.peer_access_enabled(d1),
              acl.rt.device_peer_access_status(0, 1))
        d0.disable_peer_access(d1)
        print(acl.rt.device_peer_access_status(0, 1), acl.rt.device_can_access_peer(0, 1))
        # events cross devices: device 1's stream waits for device 0's record
        gate = threading.Event()
        s0, s1 = d0.create_stream(), d1.create_stream()
        a, b = art.malloc(64, device=0), art.malloc(64, device=1)
        art.memset(b, 0)
        art.launch(lambda: gate.wait(20), stream=s0)
        art.launch(art.kernels.fill, a.view(np.int32), 5, stream=s0)
        ev = d0.create_event(); ev.record(s0)
        s1.wait(ev)
        d1.enable_peer_access(d0)
        art.memcpy_async(b, a, stream=s1)
        gate.set(); s1.synchronize(timeout=20)
        print(int(b.numpy(np.int32)[0]))
    ''', env={"ASCENTRT_LEAK_CHECK": "off"})
    assert out.split("\n")[:5] == ["True False", "100000", "0 True (1, 0)", "(0, 0) (1, 0)", "5"]


def test_the_profiler_shows_each_ranks_part_with_its_bytes_and_a_forward_flow_between_ranks(tmp_path):
    import json
    from test_profiler_trace import validate_trace
    run(f'''
        from ascentrt import profiler
        comms, s, b = ranks(3, 1 << 16)
        with profiler.profile({str(tmp_path / "p")!r}):
            for r in range(3):
                art.launch(art.kernels.fill, b[r].view(np.float32), 1.0, stream=s[r])
                hccl.all_reduce(b[r], b[r], 1 << 14, D.FP32, O.SUM, comms[r], s[r])
            for x in s: x.synchronize()
    ''', env={"ASCENTRT_LEAK_CHECK": "off"})
    data = json.loads((tmp_path / "p" / "profile.json").read_text())
    (coll,) = [dict(zip(data["collectives"]["columns"], row)) for row in data["collectives"]["rows"]]
    assert coll["op"] == "all_reduce" and coll["state"] == "done" and coll["nbytes"] == 1 << 16
    assert sorted(p[0] for p in coll["parts"]) == [0, 1, 2] and len(coll["sites"]) == 3
    tasks = [dict(zip(data["tasks"]["columns"], row)) for row in data["tasks"]["rows"]]
    parts = {(p[1], p[2], p[3]) for p in coll["parts"]}
    mine = [t for t in tasks if (t["device"], t["stream"], t["task_id"]) in parts]
    assert len(mine) == 3 and all(t["nbytes"] == 1 << 16 and "all_reduce #0" in t["name"] for t in mine)
    lane_steps = [t for t in tasks if any(w in t["name"] for w in ("rs", "ag pull", "mesh reduce"))]
    assert {t["device"] for t in lane_steps} == {0, 1, 2}    # the steps show, on each device
    doc = json.loads((tmp_path / "p" / "trace.json").read_text())
    validate_trace(doc)                                      # every flow forward in time
    assert sum(e.get("cat") == "collective" and e["ph"] == "s" for e in doc["traceEvents"]) == 2
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert any("hccl lane: communicator" in n for n in names)
    lasts = {e["args"]["last to arrive"] for e in doc["traceEvents"] if e.get("cat") == "collective"
             and e["ph"] == "X"}  # (it named a stream alone: which rank is that?)
    (last,) = lasts
    assert last.startswith("rank ") and "(device " in last and ", stream " in last


@pytest.mark.skipif(os.environ.get("ASCENTRT_BACKEND") == "sim",
                    reason="runs once, in the cpu session: it picks the sim backend itself")
def test_on_sim_a_peer_copy_takes_the_link_time_and_all_reduce_reaches_the_link():
    out = run('''
        P = art.Device(0)._backend.preset
        d0, d1 = art.Device(0), art.Device(1)
        s = d1.create_stream()
        a, b = art.malloc(8 << 20, device=0), art.malloc(8 << 20, device=1)
        d1.enable_peer_access(d0)
        s.synchronize()
        e0, e1 = d1.create_event(timing=True), d1.create_event(timing=True)
        e0.record(s); art.memcpy_async(b, a, stream=s); e1.record(s)
        s.synchronize()
        link = (P.peer_link_latency_ns + (8 << 20) / P.peer_link_bandwidth * 1e9) / 1e6
        print(abs(art.elapsed_time(e0, e1) - link) / link < 0.05)
        n, size = 4, 64 << 20
        comms = hccl.comm_init_all(list(range(n)))
        st = [art.Device(r).create_stream() for r in range(n)]
        bufs = [art.malloc(size, device=r) for r in range(n)]
        times = []
        for _ in range(2):
            for x in st: x.synchronize()
            t0 = d0.now_ns()
            for r in range(n):
                hccl.all_reduce(bufs[r], bufs[r], size // 4, D.FP32, O.SUM, comms[r], st[r])
            for x in st: x.synchronize()
            times.append(d0.now_ns() - t0)
        busbw = size / (times[0] / 1e9) * 2 * (n - 1) / n
        print(0.8 < busbw / P.peer_link_bandwidth <= 1.0, times[0] == times[1])
    ''', env={"ASCENTRT_LEAK_CHECK": "off", "ASCENTRT_BACKEND": "sim"})
    assert out.split() == ["True", "True", "True"]


def test_the_sanitizer_orders_through_collectives_and_finds_the_missing_wait():
    out = run('''
        from ascentrt import sanitizer
        comms = hccl.comm_init_all([0, 1])
        s = [art.Device(r).create_stream() for r in range(2)]
        other = art.Device(0).create_stream()
        b = [art.malloc(4096, device=r) for r in range(2)]
        out = art.malloc(4096, device=0)
        def reduce_all():
            for r in range(2):
                art.launch(art.kernels.fill, b[r].view(np.float32), 1.0, stream=s[r])
                hccl.all_reduce(b[r], b[r], 1024, D.FP32, O.SUM, comms[r], s[r])
        with sanitizer.sanitize("log") as found:
            reduce_all()
            ev = s[0].record()                       # right: the reader waits for the collective
            other.wait(ev)
            art.launch(art.kernels.copy, out.view(np.float32), b[0].view(np.float32), stream=other)
            other.synchronize(); s[1].synchronize()
            print(len(sanitizer.reports()))
            reduce_all()                             # wrong: no wait before reading rank 0's result
            art.launch(art.kernels.copy, out.view(np.float32), b[0].view(np.float32), stream=other)
            for x in s + [other]: x.synchronize()
            found = sanitizer.reports()
            print(len(found) >= 1, any("all_reduce #1" in str(r) for r in found))
    ''', env={"ASCENTRT_LEAK_CHECK": "off"})
    assert out.split() == ["0", "True", "True"]


def test_in_place_reduce_scatter_and_all_to_all_and_other_overlaps_refused():
    out = run('''
        n, count = 4, 257
        comms = hccl.comm_init_all(list(range(n)))
        streams = [art.Device(r).create_stream() for r in range(n)]
        data = [np.arange(count * n, dtype=np.float64) + 1000 * r for r in range(n)]
        bufs = [art.malloc(count * n * 8, device=r) for r in range(n)]
        for r in range(n):
            art.memcpy(bufs[r], data[r])   # reduce_scatter in place: recv is block r of send
            hccl.reduce_scatter(bufs[r], bufs[r][r * count * 8:], count, D.FP64, O.SUM, comms[r],
                                streams[r])
        for s in streams: s.synchronize(timeout=30)
        full = sum(data)
        ok = all(np.array_equal(bufs[r].numpy(np.float64)[r * count:(r + 1) * count],
                                full[r * count:(r + 1) * count]) for r in range(n))
        for r in range(n):
            art.memcpy(bufs[r], data[r])
            hccl.all_to_all(bufs[r], bufs[r], count, D.FP64, comms[r], streams[r])
        for s in streams: s.synchronize(timeout=30)
        ok = ok and all(np.array_equal(bufs[r].numpy(np.float64), np.concatenate(
            [data[q][r * count:(r + 1) * count] for q in range(n)])) for r in range(n))
        print(ok)
        try:   # recv overlaps send but is not block r of it
            hccl.reduce_scatter(bufs[1], bufs[1][8:], count, D.FP64, O.SUM, comms[1], streams[1])
        except hccl.HcclError as exc:
            print(exc.code == R.E_PARA and "overlap" in str(exc), streams[1].pending)
    ''', env={"ASCENTRT_LEAK_CHECK": "off"})
    assert out.split() == ["True", "True", "0"]


def test_sends_and_collectives_mixed_complete_in_each_ranks_call_order():
    out = run('''
        comms, s, b = ranks(3, 64)
        p = [art.malloc(64, device=r) for r in range(3)]
        art.memcpy(p[0], np.arange(16, dtype=np.float32))
        art.memcpy(p[2], np.arange(16, dtype=np.float32) * 2)
        for r in range(3): art.memset(b[r], 0)
        # rank 0: all_reduce, send to 1; rank 1: all_reduce, recv from 0, recv from 2; rank 2:
        # all_reduce, send to 1, called last: the send 0 -> 1 meets before the all_reduce does
        hccl.all_reduce(b[0], b[0], 16, D.FP32, O.SUM, comms[0], s[0])
        hccl.send(p[0], 16, D.FP32, 1, comms[0], s[0])
        hccl.all_reduce(b[1], b[1], 16, D.FP32, O.SUM, comms[1], s[1])
        got = [art.malloc(64, device=1) for _ in range(2)]
        hccl.recv(got[0], 16, D.FP32, 0, comms[1], s[1])
        hccl.recv(got[1], 16, D.FP32, 2, comms[1], s[1])
        hccl.all_reduce(b[2], b[2], 16, D.FP32, O.SUM, comms[2], s[2])
        hccl.send(p[2], 16, D.FP32, 1, comms[2], s[2])
        print([sync_error(x) for x in s] == [None] * 3)
        print(float(got[0].numpy(np.float32)[3]), float(got[1].numpy(np.float32)[3]))
    ''', env={"ASCENTRT_LEAK_CHECK": "off", "HCCL_EXEC_TIMEOUT": "10"})
    assert out.split() == ["True", "3.0", "6.0"]


def test_a_refused_group_withdraws_every_part_and_the_communicator_goes_on():
    out = run('''
        comms = hccl.comm_init_all([0, 1])
        s0, s1 = art.Device(0).create_stream(), art.Device(1).create_stream(stop_on_failure=True)
        b = [art.malloc(4096, device=r) for r in range(2)]
        def boom(): raise RuntimeError("stop")
        art.launch(boom, stream=s1)
        try: s1.synchronize()
        except art.TaskError: pass
        hccl.group_start()
        hccl.all_reduce(b[0], b[0], 16, D.FP32, O.SUM, comms[0], s0)
        hccl.all_reduce(b[1], b[1], 16, D.FP32, O.SUM, comms[1], s1)
        try:
            hccl.group_end()
        except hccl.HcclError as exc:
            print(exc.code == R.E_RUNTIME, s0.pending)
        print(len(hccl.flight_record(comms[0])))            # the withdrawn calls never were
        s1b = art.Device(1).create_stream()
        for r, x in ((0, s0), (1, s1b)):
            hccl.all_reduce(b[r], b[r], 16, D.FP32, O.SUM, comms[r], x)
        print(sync_error(s0), sync_error(s1b))
        # destroying a rank right after its call does not fail the collective
        hccl.all_reduce(b[0], b[0], 16, D.FP32, O.SUM, comms[0], s0)
        hccl.comm_destroy(comms[0])
        hccl.all_reduce(b[1], b[1], 16, D.FP32, O.SUM, comms[1], s1b)
        print(sync_error(s0), sync_error(s1b))
    ''', env={"ASCENTRT_LEAK_CHECK": "off", "HCCL_EXEC_TIMEOUT": "10"})
    assert out.split() == ["True", "0", "0", "None", "None", "None", "None"]


def test_one_thread_per_rank_runs_clean_under_the_sanitizer():
    out = run('''
        import time
        info = hccl.get_root_info()
        results = {}
        def rank(r):
            art.set_device(r)
            comm = hccl.comm_init_root_info(2, info, r)
            s = art.Device(r).create_stream()
            x = art.malloc(4096, device=r)
            if r: time.sleep(0.3)                       # rank 1 calls later: rank 0's stream is held
            for _ in range(3):
                hccl.all_reduce(x, x, 1024, D.FP32, O.SUM, comm, s)
                art.launch(art.kernels.fill, x.view(np.float32), 1.0, stream=s)
                s.synchronize()
                results[r] = float(x.numpy(np.float32)[0])  # after the synchronize: no race
        threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
        for t in threads: t.start()
        for t in threads: t.join(30)
        print(results == {0: 1.0, 1: 1.0}, len(art.sanitizer.reports()))
    ''', env={"ASCENTRT_LEAK_CHECK": "off", "ASCENTRT_SANITIZE": "raise"})
    assert out.split() == ["True", "0"]


@pytest.mark.parametrize("kind", ["collective", "send/recv"])
def test_meetings_start_in_sequence_order_whatever_order_they_complete_in(kind):
    out = run(f'''
        comms = hccl.comm_init_all([0, 1])
        b = [[art.malloc(64, device=r) for _ in range(2)] for r in range(2)]
        s = [art.Device(r).create_stream() for r in range(2)]
        def ar(r, k): hccl.all_reduce(b[r][k], b[r][k], 16, D.FP32, O.SUM, comms[r], s[r])
        # rank 0's #0 alone, then one group with rank 0's #1 and rank 1's #0 and #1: #1 is
        # complete before #0 is in the group's order
        if {kind!r} == "collective":
            ar(0, 0)
            hccl.group_start(); ar(0, 1); ar(1, 0); ar(1, 1); hccl.group_end()
        else:
            hccl.send(b[0][0], 16, D.FP32, 1, comms[0], s[0])
            hccl.group_start()
            hccl.send(b[0][1], 16, D.FP32, 1, comms[0], s[0])
            hccl.recv(b[1][0], 16, D.FP32, 0, comms[1], s[1])
            hccl.recv(b[1][1], 16, D.FP32, 0, comms[1], s[1])
            hccl.group_end()
        print([sync_error(x) for x in s] == [None, None])
    ''', env={"ASCENTRT_LEAK_CHECK": "off", "HCCL_EXEC_TIMEOUT": "10"})
    assert out.split() == ["True"]


@pytest.mark.cpu_only  # a kernel sleeps in real time before it fails
def test_a_part_its_stream_drops_unrun_fails_the_collective_on_every_rank():
    out = run('''
        import time
        comms = hccl.comm_init_all([0, 1])
        s0, s1 = art.Device(0).create_stream(), art.Device(1).create_stream(stop_on_failure=True)
        b = [art.malloc(64, device=r) for r in range(2)]
        for r in range(2): art.memcpy(b[r], np.full(16, r + 1, np.float32))
        def boom(): time.sleep(0.3); raise RuntimeError("stop")
        art.launch(boom, stream=s1)         # rank 1's part is queued behind it, then dropped
        hccl.all_reduce(b[1], b[1], 16, D.FP32, O.SUM, comms[1], s1)
        hccl.all_reduce(b[0], b[0], 16, D.FP32, O.SUM, comms[0], s0)
        e0 = sync_error(s0).__cause__
        print(e0.code == R.E_RUNTIME, "dropped its part" in str(e0), float(b[1].numpy(np.float32)[0]))
        s1b = art.Device(1).create_stream()
        for r, x in ((0, s0), (1, s1b)):
            hccl.all_reduce(b[r], b[r], 16, D.FP32, O.SUM, comms[r], x)
        print(sync_error(s0), sync_error(s1b))
    ''', env={"ASCENTRT_LEAK_CHECK": "off", "HCCL_EXEC_TIMEOUT": "10"})
    assert out.split() == ["True", "True", "2.0", "None", "None"]


def test_an_array_where_a_device_buffer_goes_is_refused_with_an_hccl_code():
    # (`x == 0` of a numpy array is an array: it raised "truth value is ambiguous")
    out = run_program("""
        import numpy as np, ascentrt as art
        from ascentrt import hccl
        comms = hccl.comm_init_all([0])
        buf, s = art.malloc(16), art.Stream()
        for send in (np.zeros(4, np.float32), np.zeros(1, np.float32)):
            try:
                hccl.all_reduce(send, buf, 4, hccl.HcclDataType.FP32, hccl.HcclReduceOp.SUM,
                                comms[0], s)
            except hccl.HcclError as e:
                print(int(e.code), "null" in str(e))
    """)
    assert out.split() == ["2", "False", "2", "False"]  # E_PTR, and not called null


def test_a_rank_may_reuse_its_send_buffer_once_its_reduce_scatter_part_ended():
    # (on sim every rank's last ring step reads every rank's send; a part that ended after its
    # successor's step only let a write to the send buffer race the others' reads)
    out = run('''
        n, count = 4, 1 << 12
        comms, streams, _ = ranks(n, 4)
        sends = [art.malloc(count * n * 4, device=r) for r in range(n)]
        recvs = [art.malloc(count * 4, device=r) for r in range(n)]
        for r in range(n):
            art.memcpy(sends[r], np.full(count * n, 1.0, np.float32))
        with art.sanitize("warn") as reports:
            for r in range(n):
                hccl.reduce_scatter(sends[r], recvs[r], count, D.FP32, O.SUM, comms[r], streams[r])
            art.memset_async(sends[0], 0, stream=streams[0])  # after rank 0's part
            for s in streams:
                s.synchronize(timeout=30)
        print(len(reports), sorted({float(x) for r in range(n) for x in recvs[r].numpy(np.float32)}))
    ''', env={"ASCENTRT_LEAK_CHECK": "off"})
    assert out.split("\n")[0] == "0 [4.0]"


@pytest.mark.cpu_only  # (its own sim process: once, in the cpu session)
def test_on_sim_a_collective_s_reduce_steps_leave_the_host_to_device_engine_alone():
    # (its steps between devices took the first free engine of any direction, the H2D one:
    # a host-to-device copy on a rank's device waited for the reduce)
    out = run("""
        import sys
        n = 2
        comms, streams, bufs = ranks(n, 64 << 20)
        side = art.Device(1).create_stream()
        h, d = art.malloc_host(1 << 20), art.malloc(1 << 20, device=1)
        took = []
        for during in (False, True):
            for s in streams:
                s.synchronize()
            if during:
                for r in range(n):
                    hccl.all_reduce(bufs[r], bufs[r], (64 << 20) // 4, hccl.HcclDataType.FP32,
                                    hccl.HcclReduceOp.SUM, comms[r], streams[r])
            a, b = art.Event(art.Device(1), timing=True), art.Event(art.Device(1), timing=True)
            a.record(side)
            art.memcpy_async(d, h, stream=side)
            b.record(side)
            side.synchronize()
            took.append(art.elapsed_time(a, b))
        for s in streams:
            s.synchronize()
        print(took[1] / took[0])
    """, env={"ASCENTRT_BACKEND": "sim", "ASCENTRT_DEVICES": "2"})
    assert float(out.split()[-1]) < 1.05


def test_a_lane_step_that_fails_fails_its_collective_on_every_rank_of_every_algorithm():
    out = run('''
        from ascentrt.hccl import plan as P
        real, armed = P.Plan._alive, []
        def _alive(self, *slices):  # the first step that runs once armed fails
            if armed:
                armed.clear()
                raise RuntimeError("injected step failure")
            return real(self, *slices)
        P.Plan._alive = _alive
        comms, s, b = ranks(3, 4 * 12)
        out = [art.malloc(4 * 12, device=r) for r in range(3)]
        calls = {
            "all_reduce": lambda r: hccl.all_reduce(b[r], out[r], 12, D.FP32, O.SUM, comms[r], s[r]),
            "reduce_scatter": lambda r: hccl.reduce_scatter(b[r], out[r], 4, D.FP32, O.SUM, comms[r], s[r]),
            "all_gather": lambda r: hccl.all_gather(b[r], out[r], 4, D.FP32, comms[r], s[r]),
            "broadcast": lambda r: hccl.broadcast(b[r], 12, D.FP32, 0, comms[r], s[r]),
            "all_to_all": lambda r: hccl.all_to_all(b[r], out[r], 4, D.FP32, comms[r], s[r]),
            "send_recv": lambda r: (hccl.send(b[0], 12, D.FP32, 1, comms[0], s[0]) if r == 0 else
                                    hccl.recv(out[1], 12, D.FP32, 0, comms[1], s[1]) if r == 1 else None),
        }
        for op, call in calls.items():
            involved = (0, 1) if op == "send_recv" else (0, 1, 2)
            armed.append(True)
            for r in involved: call(r)
            errors = [sync_error(s[r]) for r in involved]
            print(op, all(e is not None and "injected step failure" in str(e.__cause__) and
                          e.__cause__.code == R.E_INTERNAL for e in errors),
                  hccl.flight_record(comms[0])[-1].state if op != "send_recv" else "failed")
            for r in involved: call(r)  # the communicator goes on: the next one works
            print(op, [sync_error(s[r]) for r in involved] == [None] * len(involved))
    ''', env={"ASCENTRT_LEAK_CHECK": "off", "HCCL_EXEC_TIMEOUT": "10"})
    ops = ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all", "send_recv"]
    assert out.split() == [w for op in ops for w in (op, "True", "failed", op, "True")], out


def test_a_reduction_that_overflows_gives_inf_without_a_warning_or_an_error():
    out = run('''
        import warnings
        warnings.simplefilter("error")      # as pytest's filterwarnings=error
        np.seterr(all="raise")              # as much scientific code does
        comms, s, b = ranks(3, 2 * 16)
        for r in range(3): art.memcpy(b[r], np.full(16, 30000, np.float16))
        for r in range(3): hccl.all_reduce(b[r], b[r], 16, D.FP16, O.SUM, comms[r], s[r])
        print([sync_error(x) for x in s] == [None] * 3, art.get_last_error())
        print(all(np.isinf(b[r].numpy(np.float16)).all() for r in range(3)))
    ''', env={"ASCENTRT_LEAK_CHECK": "off"})
    assert out.split() == ["True", "0", "True"], out


def test_pyacl_stream_handles_pointers_and_typed_views_are_taken_as_in_cann():
    out = run('''
        import ascentrt.acl as acl
        acl.init()
        comms = hccl.comm_init_all([0, 1])
        handles, ptrs = [], []
        for r in range(2):
            acl.rt.set_device(r)
            st, ret = acl.rt.create_stream()
            p, ret2 = acl.rt.malloc(64, 0)
            handles.append(st); ptrs.append(p)
            data = np.full(16, r + 1, np.float32).tobytes()
            acl.rt.memcpy(p, 64, acl.util.bytes_to_ptr(data), 64, acl.constants.ACL_MEMCPY_HOST_TO_DEVICE)
        for r in range(2):
            acl.rt.set_device(r)
            hccl.all_reduce(ptrs[r], ptrs[r], 16, D.FP32, O.SUM, comms[r], handles[r])
        for r in range(2):
            acl.rt.set_device(r)
            print(acl.rt.synchronize_stream(handles[r]))
        host = bytes(64)
        acl.rt.memcpy(acl.util.bytes_to_ptr(host), 64, ptrs[1], 64, acl.constants.ACL_MEMCPY_DEVICE_TO_HOST)
        print(float(np.frombuffer(host, np.float32)[0]))
        try:
            hccl.all_reduce(ptrs[1], ptrs[1], 16, D.FP32, O.SUM, comms[1], 0x7777)
        except hccl.HcclError as exc:
            print(exc.code == R.E_PTR)
        s = [art.Device(r).create_stream() for r in range(2)]
        b = [art.malloc(64, device=r) for r in range(2)]
        for r in range(2): art.memcpy(b[r], np.full(16, r + 1, np.float32))
        for r in range(2):
            hccl.all_reduce(b[r].view(np.float32), b[r].view(np.float32), 16, D.FP32, O.SUM, comms[r], s[r])
        print([sync_error(x) for x in s] == [None, None], float(b[0].numpy(np.float32)[15]))
    ''', env={"ASCENTRT_LEAK_CHECK": "off"})
    assert out.split() == ["0", "0", "3.0", "True", "True", "3.0"], out


def test_a_rank_joining_with_another_nranks_is_told_the_group_is_still_forming():
    out = run('''
        import time
        from ascentrt.hccl import comm as C
        info = hccl.get_root_info()
        first = []
        def join():
            art.set_device(0)
            try:
                hccl.comm_init_root_info(3, info, 0)
            except hccl.HcclError as exc:
                first.append(exc.code)
        t = threading.Thread(target=join)
        t.start()
        deadline = time.monotonic() + 30
        while info.internal not in C._forming and time.monotonic() < deadline:
            time.sleep(0.001)
        art.set_device(1)
        try:
            hccl.comm_init_root_info(2, info, 1)
        except hccl.HcclError as exc:
            print(exc.code == R.E_PARA, "is forming with nranks=3" in str(exc), "was formed" in str(exc))
        t.join(30)
        print(first == [R.E_TIMEOUT])
    ''', env={"HCCL_CONNECT_TIMEOUT": "0.5"})
    assert out.split() == ["True", "True", "False", "True"], out


def test_a_send_and_its_recv_are_each_named_after_their_own_call():
    # (the pair was named after whichever rank called first: a send was reported as 'recv #0')
    out = run('''
        comms, s, b = ranks(2, 256)
        # both ranks send first, then receive, outside a group: a wait cycle
        hccl.send(b[0], 64, D.FP32, 1, comms[0], s[0]); hccl.recv(b[0], 64, D.FP32, 1, comms[0], s[0])
        hccl.send(b[1], 64, D.FP32, 0, comms[1], s[1]); hccl.recv(b[1], 64, D.FP32, 0, comms[1], s[1])
        try:
            s[1].synchronize(timeout=10)
        except art.DeadlockError as exc:
            text = str(exc)
            print("stream %d (device 1) waits at task 2 (send #0 to rank 0 of" % s[1].id in text,
                  "(device 0) waits at task 2 (send #0 to rank 1 of" in text,
                  "recv #0 from rank 1 of communicator" in text, "recv #0 from rank 0 of" in text)
        print([r.op for r in hccl.flight_record(comms[1])])
    ''', env={"HCCL_EXEC_TIMEOUT": "30", "ASCENTRT_LEAK_CHECK": "off"})
    assert out.split() == ["True", "True", "True", "True", "['send/recv", "0->1',", "'send/recv", "1->0']"], out


def test_hccl_exec_timeout_0_means_never_time_out():
    # (0 was refused, and every program failed as its first device was made; CANN's range on
    # Atlas A2/A3 is [0, 2147483647], 0 never times out)
    out = run('''
        comms, s, b = ranks(2, 64)
        for r in range(2):
            hccl.all_reduce(b[r], b[r], 16, D.FP32, O.SUM, comms[r], s[r])
        print([sync_error(st) for st in s], comms[0].group.flight.records()[-1].state)
        print([c.task.timeout for c in comms[0].group.flight._meetings[-1].calls.values()])
    ''', env={"HCCL_EXEC_TIMEOUT": "0"})
    assert out.split() == ["[None,", "None]", "done", "[None,", "None]"], out


@pytest.mark.parametrize("setting, value", [("HCCL_EXEC_TIMEOUT", "-1"), ("HCCL_EXEC_TIMEOUT", "abc"),
                                            ("HCCL_CONNECT_TIMEOUT", "0"),
                                            ("ASCENTRT_HCCL_TRANSPORT", "carrier-pigeon")])
def test_a_bad_hccl_setting_fails_the_hccl_call_that_reads_it_not_the_program(setting, value):
    # (it failed every program as its first device was made, hccl or not)
    out = run('''
        import os
        x = art.malloc(64)                     # the runtime starts: the setting is hccl's
        art.memset(x, 64, 1)
        print("started")
        try:
            if os.environ.get("HCCL_EXEC_TIMEOUT"):
                comms = hccl.comm_init_all([0, 1])
                hccl.all_reduce(x, x, 16, D.FP32, O.SUM, comms[0], art.Device(0).create_stream())
            else:
                hccl.comm_init_root_info(1, hccl.get_root_info(), 0)
            print("accepted")
        except hccl.HcclError as exc:
            print(exc.code == R.E_PARA, os.environ["SETTING"] in str(exc))
    ''', env={setting: value, "SETTING": setting})
    assert out.split() == ["started", "True", "True"], out

